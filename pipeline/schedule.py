"""Stage assignment for each warp group's loop, and channel depths.

A schedule gives every op of a group's loop body a stage: the op of iteration i runs in pipeline step
i + stage. Step order within a step (`order`) respects same-step dependences. Two sources:

* `heuristic_schedule`: Tawa's multi-granularity pipelining.
  - coarse (T/C/U): when a group's MMAs feed CUDA-core work (softmax), the tensor-core stage T (MMAs that
    depend on no CUDA-core work of the iteration) runs one step ahead of the CUDA-core stage C and the second
    tensor-core stage U, so T of iteration j overlaps C/U of iteration j−1 (FA3's intra-warpgroup overlap);
  - fine (MMA issue depth P): a channel slot read by MMAs is released P steps after the last MMA reading it,
    so up to P MMA groups stay in flight (wgmma wait_group semantics); the lowering inserts the exact waits.
  - step order: MMAs and what feeds them first, then the hand-off to another group that needs the least of
    the group's own work (`handoff_rank`), then program order.
* `from_modulo_schedule`: a solver's start cycles and II (stage = cycle // II, order by cycle % II).

`choose_depths` sizes every channel from the schedule: at least the number of steps a consumer holds a slot,
plus one; a user's depth that is too small is an error naming the channel.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from aref import ops as ops_registry
from aref.errors import ArefError, ChannelError, CompilerBugError
from aref.ir import Op, OpKind, index_math
from aref.ops import VIEWS
from aref.ir.ws import GroupProgram, WSKernel
from aref.target import target_of
from pipeline import sm100

CUDA_CORE = ops_registry.kinds_with(ops_registry.CUDA_CORE)      # the op registry's CUDA-core kinds


@dataclass(frozen=True)
class PipelineOptions:
    """`mma_depth`: MMA groups kept in flight (None: 1, limited by user channel depths);
    `coarse`: T/C/U pipelining of groups whose MMAs feed CUDA-core work;
    `tensor_core_first`: within a step, issue MMAs (and what feeds them) before other work."""

    mma_depth: int | None = None
    coarse: bool = True
    tensor_core_first: bool = True


@dataclass
class GroupSchedule:
    stage: dict[Op, int] = field(default_factory=dict)
    order: list[Op] = field(default_factory=list)
    mma_depth: int = 0

    @property
    def stages(self) -> int:
        return max(self.stage.values(), default=0)


# --------------------------------------------------------------------------------------- dependences
def body_edges(gp: GroupProgram) -> list[tuple[Op, Op, int]]:
    """(u, v, distance) for the group's loop body: data edges, loop-carried edges, and the releases of a
    channel slot after every use of the tiles it handed out."""
    lp = gp.loop
    prod = {id(r): op for op in lp.body.ops for r in op.results}
    carried_src = {}
    for c, y in zip(lp.carried, lp.yields):
        if id(y) in prod:
            carried_src[id(c)] = prod[id(y)]
    edges = []
    got_users: dict[tuple[int, int], list[Op]] = {}
    derived: dict[int, Op] = {}        # value id -> the GET it borrows from (through views)
    for op in lp.body.ops:
        for v in (*op.operands, *([op.pred] if op.pred is not None else [])):   # (a predicate is read too)
            if id(v) in prod:
                edges.append((prod[id(v)], op, 0))
            elif id(v) in carried_src:
                edges.append((carried_src[id(v)], op, 1))
            if id(v) in derived:
                got_users.setdefault(id(derived[id(v)]), []).append(op)
        if op.kind is OpKind.GET:
            for r in op.results:
                derived[id(r)] = op
        elif op.kind in VIEWS and id(op.operands[0]) in derived:
            derived[id(op.result)] = derived[id(op.operands[0])]
    gets = {}
    for op in lp.body.ops:
        key = (id(op.operands[0]),) if op.kind in (OpKind.GET, OpKind.CONSUMED) else None
        if op.kind is OpKind.GET:
            gets.setdefault(key, []).append(op)
        elif op.kind is OpKind.CONSUMED:
            pending = gets.get(key, [])
            if pending:
                get = pending.pop(0)
                for user in got_users.get(id(get), []):
                    edges.append((user, op, 0))
                edges.append((get, op, 0))
    return edges


def _reaches(edges, sources: set[Op]) -> set[Op]:
    """Ops reachable from `sources` by same-iteration edges."""
    succ: dict[Op, list[Op]] = {}
    for u, v, d in edges:
        if d == 0:
            succ.setdefault(u, []).append(v)
    seen, stack = set(), list(sources)
    while stack:
        u = stack.pop()
        for v in succ.get(u, []):
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen


def step_order(ops: list[Op], stage: dict[Op, int], edges, priority=None) -> list[Op]:
    """Topological order of one pipeline step: u before v when both run in the same step; otherwise
    by `priority` (default: earlier stages first, then program order, so the tensor-core stage of the next
    iteration issues first)."""
    index = {op: i for i, op in enumerate(ops)}
    key = priority or (lambda op: (stage[op], index[op]))
    succ: dict[Op, list[Op]] = {op: [] for op in ops}
    indeg = {op: 0 for op in ops}
    for u, v, d in edges:
        if stage[u] == stage[v] + d:
            succ[u].append(v)
            indeg[v] += 1
    heap = [(key(op), index[op]) for op in ops if indeg[op] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, i = heapq.heappop(heap)
        op = ops[i]
        out.append(op)
        for v in succ[op]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (key(v), index[v]))
    if len(out) != len(ops):
        raise CompilerBugError("a pipeline step's same-step dependences form a cycle", ops[0].loc if ops else None,
                               pass_name="pipelining")
    return out


def validate(gp: GroupProgram, sched: GroupSchedule) -> None:
    """Every dependence is honoured: u of iteration i runs no later than v of iteration i+distance."""
    pos = {op: i for i, op in enumerate(sched.order)}
    for u, v, d in body_edges(gp):
        su, sv = sched.stage[u], sched.stage[v]
        if su > sv + d or (su == sv + d and pos[u] > pos[v]):
            raise ArefError(f"schedule of group {gp.group.name} runs {v.kind.value} (stage {sv}) before the "
                            f"{u.kind.value} it depends on (stage {su}, distance {d})", v.loc)


# ------------------------------------------------------------------------------------ heuristic (Tawa)
def heuristic_schedule(gp: GroupProgram, kernel: WSKernel, options: PipelineOptions) -> GroupSchedule:
    """T/C/U stages plus MMA issue depth P, shrunk (P first, then the coarse stages) until every user
    channel's slots fit its depth; an explicit `mma_depth` that cannot fit is an error."""
    ops = list(gp.loop.body.ops)
    edges = body_edges(gp)
    index = index_math(gp.all_ops())
    explicit = options.mma_depth is not None
    # Blackwell releases the slots its MMAs read with tcgen05.commit, which never blocks: no issue depth
    depth = options.mma_depth if explicit else (0 if target_of(kernel.arch).mma == "tcgen05" else 1)
    tensor_core = sm100.is_blackwell_mma_group(gp, kernel)
    for coarse in ((True, False) if options.coarse else (False,)):
        tc_stage = sm100.tensor_core_stages(gp, kernel, ops, edges) if coarse and tensor_core else None
        stage = tc_stage or (_coarse_stages(ops, edges, index) if coarse else {op: 0 for op in ops})
        span = _held_span(gp, kernel, edges, stage)
        fit = min((slack_steps(ch) - held for ch, held in span), default=depth)
        if fit >= depth or (fit >= 0 and not explicit):
            depth = max(0, min(depth, fit))
            break
    else:
        ch, held = min(span, key=lambda x: slack_steps(x[0]) - x[1])
        need = (held + depth + 1) * max(ch.items_per_iter, 1)
        raise ChannelError(
            f"channel '{ch.name}' (depth {ch.depth}) is too shallow for this schedule: its slots are held "
            f"{held} step(s) by the pipeline plus {depth} for MMAs in flight, which needs depth ≥ {need}",
            ch.loc, hint=f"deepen it (aref.channel(depth={need})) or lower mma_depth")
    _place_channel_ops(gp, edges, stage, depth)
    _propagate(edges, stage, index)
    if tensor_core and options.tensor_core_first:
        priority = sm100.subtile_priority(gp, kernel, ops, stage, edges)
    else:
        priority = tensor_core_first(ops, stage, edges, handoff_rank(ops, stage, edges, kernel.arch)) \
            if options.tensor_core_first else None
    order = step_order(ops, stage, edges, priority)
    sched = GroupSchedule(stage, order, depth if any(op.kind is OpKind.MMA for op in ops) else 0)
    validate(gp, sched)
    return sched


def _coarse_stages(ops: list[Op], edges, index) -> dict[Op, int]:
    """FA3's intra-warpgroup overlap: T (MMAs that depend on no CUDA-core work of the iteration) and C (the
    CUDA-core work on their results: softmax, the accumulator rescale) run in one step; U (MMAs that consume
    C, e.g. P·V) runs one step later. Each step then issues T(j) and U(j−1) back to back and computes C(j)
    while they run. Groups without such U work keep one stage."""
    stage = {op: 0 for op in ops}
    mmas = [op for op in ops if op.kind is OpKind.MMA]
    compute = {op for op in ops if op.kind in CUDA_CORE}
    if mmas and compute:
        after_compute = _reaches(edges, compute)
        u_stage = {op for op in mmas if op in after_compute}
        if u_stage and any(op in compute for op in _reaches(edges, set(mmas) - u_stage)):
            for op in u_stage:
                stage[op] = 1
    _propagate(edges, stage, index)
    return stage


def tensor_core_first(ops: list[Op], stage: dict[Op, int], edges, rank: dict[Op, int] | None = None):
    """Step-order priority: MMAs and what feeds them within the step issue first (keeping the tensor core
    busy while the CUDA-core work of the step runs), then by stage, `rank` (`handoff_rank`) and program
    order."""
    index = {op: i for i, op in enumerate(ops)}
    feeds = {op for op in ops if op.kind is OpKind.MMA}
    changed = True
    while changed:
        changed = False
        for u, v, d in edges:
            if d == 0 and v in feeds and u not in feeds and stage[u] == stage[v]:
                feeds.add(u)
                changed = True
    rank = rank or {}
    return lambda op: (0 if op in feeds else 1, stage[op], rank.get(op, 0), index[op])


def handoff_rank(ops: list[Op], stage: dict[Op, int], edges, arch: str) -> dict[Op, int]:
    """Cheapest hand-off first: each put of the step (a value another group waits for) ranks by the cycles of
    the group's own work it needs within the step (its same-step ancestors, `aref.target.machine.op_cost`); an op
    takes the rank of the cheapest put it feeds, and one that feeds none (a release, a carried state update)
    the rank of the put that follows it in program order, so it keeps its place beside that put. A group
    runs its ops one after another, so a hand-off behind unrelated work waits for all of it: FA4's softmax
    sends the rescale factor to the correction warps before its exponential (4 cycles of MUFU against 256),
    where program order (the exponential first) held the O rescale, and the MMA warp's P·V behind it, ~250
    cycles every iteration (860 cycles per iteration against the solver's II of 800; 804 so)."""
    from aref.target.machine import machine_for, op_cost
    m = machine_for(arch)
    preds: dict[Op, list[Op]] = {}
    for u, v, d in edges:
        if u in stage and v in stage and stage[u] == stage[v] + d:
            preds.setdefault(v, []).append(u)

    def cost(op):
        try:
            unit, cycles = op_cost(op, m)
        except ValueError:
            return 0
        return 0 if unit in ("tc", "tma") else cycles       # (asynchronous: the group only issues them)
    cones = []
    for i, put in enumerate(ops):
        if put.kind is not OpKind.PUT:
            continue
        cone, stack = {put}, [put]
        while stack:
            for u in preds.get(stack.pop(), []):
                if u not in cone:
                    cone.add(u)
                    stack.append(u)
        cones.append((sum(cost(op) for op in cone), i, cone))
    rank: dict[Op, int] = {}
    for r, (_, _, cone) in enumerate(sorted(cones, key=lambda c: c[:2])):
        for op in cone:
            rank.setdefault(op, r)
    # the rest stays beside the hand-off that follows it in program order (or after all of them)
    following = len(cones)
    for op in reversed(ops):
        if op.kind is OpKind.PUT:
            following = rank[op]
        rank.setdefault(op, following)
    return rank


def slack_steps(ch) -> int:
    """Pipeline steps a slot may stay held after the step that fills it before the producer needs it again:
    with m items per iteration in a ring of `depth`, an item's slot is refilled `depth // m` iterations later
    (at the earliest), so a release may trail its put by `depth // m − 1` steps."""
    return ch.depth // max(ch.items_per_iter, 1) - 1


def _held_span(gp, kernel, edges, stage) -> list[tuple]:
    """(user channel, steps between its get and its last non-release use) for channels this group reads."""
    out = []
    for ch in kernel.channels:
        if not ch.user or gp.group.id not in ch.consumers:
            continue
        gets = [op for op in gp.loop.body.ops if op.kind is OpKind.GET and op.operands[0] is ch.value]
        users = [v for g in gets for v in _users_of_get(edges, g)]
        if users:
            out.append((ch, max(stage[u] for u in users) - min(stage[u] for u in users)))
    return out


def _users_of_get(edges, op: Op) -> list[Op]:
    """Ops that read what `op` (a get) handed out, through views (not the release itself)."""
    direct = [v for u, v, d in edges if u is op and d == 0 and v.kind is not OpKind.CONSUMED]
    out = []
    for v in direct:
        if v.kind in VIEWS:
            out.extend(_users_of_get(edges, v))
        else:
            out.append(v)
    return out


def _retired_in_own_step(edges, stage) -> set[Op]:
    """MMAs whose result a non-MMA op reads in the same pipeline step (so a wait retires them there)."""
    return {u for u, v, d in edges if u.kind is OpKind.MMA and v.kind not in (OpKind.MMA, OpKind.CONSUMED)
            and stage[v] + d == stage[u]}


def own_releases(gp: GroupProgram, ops: list[Op], edges, stage, anchors: dict, anchor: dict) -> None:
    """A release the solver pins where the slot's last reader ends (`partition.streams.release_anchors`) is
    this group's arrival on the slot's empty barrier: the slot is free once every consumer group has arrived,
    so a group may arrive when its own readers end (the solver's ("end", op) anchors), not when another
    group's do — where that costs the group nothing: its own readers end in the release's step and the
    group waits for their MMAs there anyway (it reads their results in that step). Holding it to the last
    reader of any group kept linear_attention's state-MMA group on its qkv slot through the state's cast and
    hand-off, ~500 cycles past the solver's free time on a ring of 2; moving a release before an MMA the
    group does not wait for (attention_bwd's dV accumulation) would make it wait there (1804 cycles per
    iteration instead of 1788)."""
    retired = _retired_in_own_step(edges, stage)
    for op in ops:
        if op.kind is not OpKind.CONSUMED or op not in anchor:
            continue
        readers = [u for u, v, d in edges if v is op and d == 0 and u.kind is not OpKind.GET]
        ends = [anchors[("end", gp.origin[u])] for u in readers if ("end", gp.origin.get(u)) in anchors]
        if ends and all(u in retired for u in readers if u.kind is OpKind.MMA) and \
                all(s == stage[op] for s, _ in ends):
            anchor[op] = (stage[op], max(r for _, r in ends))


def _place_channel_ops(gp, edges, stage, depth, pinned=frozenset()) -> None:
    """Gets as late as their users; releases after the slot's last use (P steps after an MMA reading it),
    or, for the `pinned` releases of a solver's schedule, in the step the solver frees the slot."""
    preds: dict[Op, list[Op]] = {}
    for u, v, d in edges:
        if d == 0:
            preds.setdefault(v, []).append(u)
    by_channel: dict[int, list[Op]] = {}
    for op in gp.loop.body.ops:
        if op.kind is OpKind.GET:
            users = _users_of_get(edges, op)
            stage[op] = min((stage[u] for u in users), default=0)
            by_channel.setdefault(id(op.operands[0]), []).append(op)
    for gets in by_channel.values():             # one stage per channel and kind keeps items in order
        s = min(stage[g] for g in gets)
        for g in gets:
            stage[g] = s
    retired_in_step = _retired_in_own_step(edges, stage)
    for op in gp.loop.body.ops:
        if op.kind is OpKind.CONSUMED:
            users = [u for u in preds.get(op, []) if u.kind is not OpKind.GET]
            mma_users = [u for u in users if u.kind is OpKind.MMA]
            last_other = max((stage[u] for u in users if u.kind is not OpKind.MMA), default=0)
            gets = [u for u in preds.get(op, []) if u.kind is OpKind.GET]
            base = max([last_other] + [stage[g] for g in gets])
            # release P steps after the last MMA reading the slot — or in that MMA's own step when the step
            # must wait for the MMA anyway (its result is read there), which frees the slot soonest
            mma_stage = max((stage[u] + (0 if u in retired_in_step else depth) for u in mma_users), default=None)
            if op in pinned:
                mma_stage = max([stage[op]] + [stage[u] for u in mma_users])
            stage[op] = base if mma_stage is None else max(base, mma_stage)


def _propagate(edges, stage, index=frozenset()) -> None:
    """Everything else runs as early as its operands allow (ASAP over same-iteration edges) — but index math
    (`aref.ir.index_math`: masks and index tiles from `arange`, program ids, the loop index) as late as its
    users allow: recomputed in the step that reads it, it is never carried to a later step in registers (a
    128×128 mask would hold 128 registers per thread across the step boundary). `index`: the group's index
    math (`aref.ir.index_math` over all of its ops: a mask may read index tiles computed before the loop)."""
    changed = True
    while changed:
        changed = False
        for u, v, d in edges:
            need = stage[u] - d
            if need > stage[v]:
                stage[v] = need
                changed = True
    users: dict[Op, list[tuple[Op, int]]] = {}
    for u, v, d in edges:
        users.setdefault(u, []).append((v, d))
    for op in reversed(list(stage)):             # users first: a chain of index math sinks as a whole
        if op in index and users.get(op):
            stage[op] = max(stage[op], min(stage[v] + d for v, d in users[op]))


# ------------------------------------------------------------------------------------ from a solver
def anchored_schedule(gp: GroupProgram, kernel: WSKernel, anchors: dict[int, tuple[int, int]],
                      options: PipelineOptions) -> GroupSchedule:
    """A solver's modulo schedule for this group: ops of its graph nodes take the node's stage and
    issue in order of the node's residue (start cycle mod II); channel ops, index math and views are placed
    around them as in the heuristic (gets as late as their users, releases after the last MMA + P)."""
    ops = list(gp.loop.body.ops)
    edges = body_edges(gp)
    anchor = {op: anchors[gp.origin[op]] for op in ops if gp.origin.get(op) in anchors}
    stage = {op: anchor.get(op, (0, 0))[0] for op in ops}
    base = min(stage.values(), default=0)
    stage = {op: s - base for op, s in stage.items()}
    index = index_math(gp.all_ops())
    _propagate(edges, stage, index)
    explicit = options.mma_depth is not None
    depth = options.mma_depth if explicit else (0 if target_of(kernel.arch).mma == "tcgen05" else 1)
    span = _held_span(gp, kernel, edges, stage)
    fit = min((slack_steps(ch) - held for ch, held in span), default=depth)
    if fit < 0 or (explicit and fit < depth):
        ch, held = min(span, key=lambda x: slack_steps(x[0]) - x[1])
        raise ChannelError(f"channel '{ch.name}' (depth {ch.depth}) is too shallow for the solver's schedule, "
                           f"which holds its slots {held} step(s)", ch.loc,
                           hint=f"use aref.channel(depth={(held + depth + 1) * max(ch.items_per_iter, 1)})")
    depth = max(0, min(depth, fit))
    _place_channel_ops(gp, edges, stage, depth, {op for op in anchor if op.kind is OpKind.CONSUMED})
    _propagate(edges, stage, index)
    index = {op: i for i, op in enumerate(ops)}
    own_releases(gp, ops, edges, stage, anchors, anchor)
    residue = {op: anchor[op][1] if op in anchor else None for op in ops}
    if target_of(kernel.arch).mma == "wgmma":
        _mmas_in_reading_order(edges, stage, residue, index)
    late = float("inf")

    release_at = _release_residues(ops, edges, stage, residue)
    # the copies of a ring item land after a memory latency the solver plans at its mean (they may land later);
    # a hand-off from another group, which an op reads beside the item, is waited for first: a wait returns
    # sync_cycles after it may proceed, so the op issues that much sooner after a late item lands
    # (linear_attention on sm_90a: q·S waited for the state's hand-off after its qkv item, 36 cycles on the
    # ring's round trip; 1981 cycles per iteration at the mean latency, 1962 so, II 1952)
    copied = {op for op in ops if op.kind is OpKind.GET and any(
        ch.kind == "tma" and op.operands[0] is ch.value for ch in kernel.channels)}
    busy_until = _busy_until(ops, anchor, kernel.arch)

    def priority(op):
        # within a step, ops issue in the order of their start cycle modulo II (the solver's time); a release
        # follows the op of its step that retires the MMAs reading its slot, so the producer refills it soon.
        # A group runs its ops one after another, so synchronous work (a CUDA-core cluster) that the solver
        # lets run across an MMA's start sorts by when it ends: the MMA, whose issue costs the group a few
        # cycles, goes first instead of waiting for the whole cluster
        if op.kind is OpKind.CONSUMED:
            r = release_at.get(op, late) if residue[op] is None else residue[op]
        elif op in busy_until and any(residue[o] is not None and residue[op] < residue[o] < busy_until[op]
                                      for o in ops if o.kind is OpKind.MMA and stage[o] == stage[op]):
            r = busy_until[op]
        else:
            r = residue[op] if residue[op] is not None else _near_residue(op, edges, residue, stage)
        return (r, stage[op], index[op])

    # a loaded ring the group holds across steps with no slot to spare: the producer refills a slot only once
    # the previous step's U has released it, so U must not wait behind T for the next item
    starved = any(held and slack_steps(ch) == held for ch, held in span)
    # With one sub-tile there is nothing to interleave: the solver's order stands (linear_attention: q·S, q·Kᵀ,
    # then S += Kᵀ·V before the O MMA, whose wait for the scores and the rescaled q·S would otherwise hold
    # back the state, and with it the next iteration's cast: 1599 cycles per iteration, 2261 in program order)
    if sm100.is_blackwell_mma_group(gp, kernel) and not (
            starved and not sm100.operand_from_tensor_memory(gp, kernel, ops, stage)) and not (
            sm100.one_subtile(gp, kernel, ops) and not sm100.operand_from_tensor_memory(gp, kernel, ops, stage)):
        # the stages are the solver's; within a step FA4's order lets S be written over P (see pipeline.sm100).
        # Where P comes through shared memory nothing lies over S and the order only decides who waits: with a
        # starved ring the solver's own order stands, which issues the previous step's U first (it releases
        # the loaded slot before the MMA warp waits for the next item: linear_attention's depth-2 ring, whose
        # V the late U holds, ran at 2475 cycles per iteration behind T's wait for the copies, 1627 so)
        priority = sm100.subtile_priority(gp, kernel, ops, stage, edges, residue)
    if copied:
        priority = _copies_waited_last(ops, priority, copied, edges)
    order = step_order(ops, stage, edges, priority=priority)
    sched = GroupSchedule(stage, order, depth if any(op.kind is OpKind.MMA for op in ops) else 0)
    validate(gp, sched)
    return sched


def _mmas_in_reading_order(edges, stage, residue: dict, index: dict) -> None:
    """Same-step MMAs whose results one node of the solver's graph reads first (a CUDA-core cluster, which the
    solver starts once all of them are done, so it leaves their order open) take their residues in the order
    the cluster's ops read them. A wgmma wait is in order (wait_group N: all but the N newest groups), so the
    result read first then waits only for its own MMA, and the work on it overlaps the MMAs issued after it;
    in the other order it waits for all of them (attention_bwd on sm_90a: the solver put dP's MMA before S's,
    exp2(S) waited for both with the tensor core's other work queued in front: 1957 cycles per iteration for
    II 1824; 1788 with S first). The tensor core's work and its order relative to other groups are unchanged:
    the MMAs keep the residues (their places among the step's other ops), only which MMA takes which."""
    first_read: dict = {}
    for u, v, d in edges:
        if d or u.kind is not OpKind.MMA or v.kind is OpKind.MMA or residue.get(u) is None \
                or residue.get(v) is None or stage[u] != stage[v]:
            continue
        if u not in first_read or index[v] < index[first_read[u]]:
            first_read[u] = v
    readers: dict[tuple, list[Op]] = {}
    for mma, reader in first_read.items():
        readers.setdefault((stage[reader], residue[reader]), []).append(mma)
    for mmas in readers.values():
        if len(mmas) > 1:
            slots = sorted(residue[m] for m in mmas)
            for m, r in zip(sorted(mmas, key=lambda m: (index[first_read[m]], index[m])), slots):
                residue[m] = r


def _copies_waited_last(ops, priority, copied: set, edges):
    """`priority` with each get of a TMA-filled ring (`copied`) after the other gets that issue at its place
    (same residue and stage) for the same first user."""
    key = {op: priority(op) for op in ops}

    def first_user(get):
        return min(_users_of_get(edges, get), key=key.get, default=None)
    for g in copied:
        r, s, i = key[g]
        user = first_user(g)
        later = [key[o][2] for o in ops if o.kind is OpKind.GET and o not in copied and key[o][:2] == (r, s)
                 and key[o][2] > i and user is not None and first_user(o) is user]
        if later:
            key[g] = (r, s, max(later) + 0.5)
    return key.__getitem__


def _busy_until(ops, anchor: dict, arch: str) -> dict[Op, float]:
    """For each anchored synchronous op: its node's residue plus the cycles the node's ops keep the group
    busy (`aref.target.machine.op_cost`, the figures the solver's graph was built from)."""
    from aref.target.machine import ISSUE, machine_for, op_cost
    m = machine_for(arch)
    work: dict[tuple, float] = {}
    for op in ops:
        if op in anchor and op.kind is not OpKind.MMA:
            try:
                unit, cycles = op_cost(op, m)
            except ValueError:
                continue
            if unit not in (ISSUE, "tc", "tma"):
                work[anchor[op]] = work.get(anchor[op], 0) + cycles
    return {op: anchor[op][1] + work[anchor[op]] for op in ops if op in anchor and anchor[op] in work}


def _release_residues(ops, edges, stage, residue) -> dict[Op, float]:
    """For each release: just after the latest same-step op it must follow (the slot's readers, and the
    readers that retire the MMAs among them)."""
    preds: dict[Op, list[tuple[Op, int]]] = {}
    readers: dict[Op, list[tuple[Op, int]]] = {}
    for u, v, d in edges:
        preds.setdefault(v, []).append((u, d))
        if u.kind is OpKind.MMA and v.kind not in (OpKind.MMA, OpKind.CONSUMED):
            readers.setdefault(u, []).append((v, d))
    out = {}
    for op in ops:
        if op.kind is not OpKind.CONSUMED:
            continue
        after = []
        for u, d in preds.get(op, []):
            if stage[u] == stage[op] + d and residue.get(u) is not None:
                after.append(residue[u])
            if u.kind is OpKind.MMA:
                after += [residue[x] for x, dx in readers.get(u, [])
                          if residue.get(x) is not None and stage[x] + dx == stage[op] + d]
        if after:
            out[op] = max(after) + 0.5
    return out


def _near_residue(op: Op, edges, residue, stage=None) -> int:
    """An unanchored op (get, view, index math) issues with the earliest anchored op it feeds, directly or
    through other unanchored ops (a get read through a view issues with the view's anchored user, not at the
    top of the step where it would wait for a producer that the solver lets run later). A release does not
    count: a get's own release runs in a later step (it frees the slot after the get's users), and a get
    sorted by that release's residue would make the step release the previous item only after this item
    arrived — holding a ring slot a whole copy latency longer than the solver's schedule does.
    `stage`: only anchored ops of the op's own stage count where there are any: one a stage later works for an
    older iteration in this step (a ring item's last reader, whose copy of the item was got a step before),
    and a get sorted by it would wait for the next item before that reader releases the previous one."""
    succ: dict[Op, list[Op]] = {}
    for u, v, d in edges:
        if d == 0 and v.kind is not OpKind.CONSUMED:
            succ.setdefault(u, []).append(v)
    fed, seen, stack = [], {op}, [op]
    while stack:
        for v in succ.get(stack.pop(), []):
            if v in seen:
                continue
            seen.add(v)
            if residue.get(v) is not None:
                fed.append((residue[v], stage is None or stage[v] == stage[op]))
            else:
                stack.append(v)
    own = [r for r, same in fed if same]
    return min(own or [r for r, _ in fed], default=0)


# ------------------------------------------------------------------------------------- channel depth
