"""Blackwell (sm_100a) rules of the pipeline: the tensor-core group's stages and issue order, and the depth of
tensor-memory rings.

On Blackwell one warp issues every MMA and never waits for them: an MMA's completion reaches other groups
through `tcgen05.commit` (the lowering's `mma_commit`), and a slot an MMA reads is released by a commit too.
So the MMA group needs no issue depth (its releases stay in the MMAs' step), and it runs FlashAttention-4's
two-stage order instead of Hopper's T/C/U inside one warp group:

  * stage 0 (T): MMAs that depend on no CUDA-core work of the iteration (S = Q·Kᵀ);
  * stage 1 (U): MMAs that read what another group computed from this iteration's T results (O += P·V, with
    P from the softmax group and O rescaled by the correction group).

Within a step, when P reaches the MMAs in tensor memory, the group issues per independent sub-tile U of the
previous iteration before T of this one (PV₀(j−1), QK₀(j), PV₁(j−1), QK₁(j)): each softmax group gets its
next S as soon as its P has been consumed, and S may be written over P (the tensor core executes one
thread's MMAs in issue order). When P comes through shared memory nothing is written over it, and every T
goes first (QK₀(j), QK₁(j), PV₀(j−1), PV₁(j−1)): the softmax groups have their next S while the MMA warp
waits for P.

Tensor-memory rings hold one item: a tile lives in one place of the 512 columns, written in place by the
MMAs that accumulate into it and read back by `tcgen05.ld`.
"""
from __future__ import annotations

from aref.ir import Op, OpKind, Space
from aref.ops import CUDA_CORE_KINDS, SCALARS, VIEWS
from aref.ir.ws import WSKernel
from aref.ir.unionfind import UnionFind
from aref.target import target_of



def is_blackwell_mma_group(gp, kernel: WSKernel) -> bool:
    """A Blackwell group whose loop issues MMAs and does no CUDA-core work (FA4's MMA warp)."""
    if target_of(kernel.arch).mma != "tcgen05" or gp.loop is None:
        return False
    kinds = {op.kind for op in gp.loop.body.ops}
    return OpKind.MMA in kinds and not kinds & CUDA_CORE_KINDS


def tensor_core_stages(gp, kernel: WSKernel, ops: list[Op], edges) -> dict[Op, int] | None:
    """FA4's stages for the MMA group: MMAs fed (through views) by a channel another group fills with CUDA-core
    results go one stage later than the rest; None when the group has not both kinds."""
    by_value = {id(c.value): c for c in kernel.channels}
    fed: set[Op] = set()
    for op in ops:
        if op.kind is OpKind.GET:
            ch = by_value.get(id(op.operands[0]))
            if ch is not None and ch.kind == "store" and ch.producer != gp.group.id:
                fed.add(op)
    if not fed:
        return None
    succ: dict[Op, list[Op]] = {}
    for u, v, d in edges:
        if d == 0:
            succ.setdefault(u, []).append(v)
    late, stack = set(), list(fed)
    while stack:
        u = stack.pop()
        for v in succ.get(u, []):
            if v not in late:
                late.add(v)
                stack.append(v)
    mmas = [op for op in ops if op.kind is OpKind.MMA]
    u_stage = [op for op in mmas if op in late]
    if not u_stage or len(u_stage) == len(mmas):
        return None
    stage = {op: 0 for op in ops}
    for op in u_stage:
        stage[op] = 1
    return stage


def subtile_priority(gp, kernel: WSKernel, ops: list[Op], stage: dict[Op, int], edges,
                     residue: dict[Op, int | None] | None = None):
    """Step-order key of the MMA group. When a later-stage MMA takes its A operand from tensor memory that
    another group wrote (P, which may then lie over S): the independent sub-tile an op works for (in order of
    first appearance), then the later stage first (U before T), then program order — FA4's order, in which
    P is consumed before S is written over it. Otherwise (P in shared memory) nothing lies over S, and every
    sub-tile's T goes first: each softmax group has its next S while the MMA warp waits for P. Ops shared by
    the sub-tiles (a loaded K or V tile, its release) go with the first sub-tile that uses them, and a release
    with the last sub-tile that read the slot, before the step's next MMA after its last reader there (its
    commit waits for every MMA issued before it).
    `residue` (a solver's schedule: each anchored op's start cycle modulo II): a sub-tile whose U is one stage
    after its T and starts later in the step than T goes T first, as the solver has it: the schedule writes
    the next S while P waits for its MMA, which FA4's order would hold back until P was read — with one
    sub-tile that runs the tensor core and the softmax one after the other. P then takes columns of its own:
    only where every tensor-memory ring fits the columns in its own place."""
    comp = subtiles(kernel)
    index = {op: i for i, op in enumerate(ops)}
    members: dict[object, int] = {}
    for op in ops:
        members[comp.find(op)] = members.get(comp.find(op), 0) + 1
    rank: dict[Op, float] = {}
    order: dict[object, int] = {}
    for op in ops:
        root = comp.find(op)
        if members[root] > 1:
            rank[op] = order.setdefault(root, len(order))
    succ: dict[Op, list[Op]] = {}
    pred: dict[Op, list[Op]] = {}
    for u, v, d in edges:
        if stage[u] == stage[v] + d and u is not v:
            succ.setdefault(u, []).append(v)
            pred.setdefault(v, []).append(u)

    def shared(op, seen=()):
        if op in rank:
            return rank[op]
        if op.kind is OpKind.CONSUMED:
            ranks = [shared(p, seen + (op,)) for p in pred.get(op, []) if p not in seen]
            return max(ranks, default=len(ops))
        ranks = [shared(s, seen + (op,)) for s in succ.get(op, []) if s not in seen]
        return min(ranks, default=len(ops))

    # a release's commit signals once every MMA issued before it is done: it goes before the step's next MMA
    # after the slot's last reader, not behind MMAs that do not read the slot (attention_bwd's Q/dO slot
    # waited for dQ's MMA, 128 cycles, on a ring whose round trip bounds the loop)
    at = dict(index)
    for op in ops:
        if op.kind is OpKind.CONSUMED:
            last = max((index[p] for p in pred.get(op, []) if p.kind is not OpKind.GET), default=None)
            later = [index[m] for m in ops if m.kind is OpKind.MMA and stage[m] == stage[op]
                     and last is not None and last < index[m] < index[op]]
            if later:
                at[op] = min(later) - 0.5
    if not operand_from_tensor_memory(gp, kernel, ops, stage):
        return lambda op: (stage[op], shared(op), at[op])
    t_first = _t_first_subtiles(gp, kernel, ops, stage, residue, rank) if residue else set()
    return lambda op: (shared(op), stage[op] if shared(op) in t_first else -stage[op], at[op])


def one_subtile(gp, kernel: WSKernel, ops: list[Op]) -> bool:
    """Do the MMA group's MMAs all work for one sub-tile (`subtiles`)? Then FA4's order has no sub-tiles to
    interleave and would only issue them in program order."""
    comp = subtiles(kernel)
    return len({comp.find(op) for op in ops if op.kind is OpKind.MMA}) <= 1


def _t_first_subtiles(gp, kernel: WSKernel, ops: list[Op], stage: dict[Op, int], residue: dict, rank: dict) -> set:
    """Ranks of the sub-tiles whose U (an MMA reading its A operand from a tensor-memory channel another group
    fills) the solver starts one stage after, and later in the step than, a T (an MMA of the sub-tile that
    does not)."""
    from aref.target.machine import tmem_tile_columns
    rings = [c for c in kernel.channels if any(t.space is Space.TMEM for t in c.payload)]
    # each loop ring in its own columns, but a tile an MMA accumulates on in place shares its MMA's result's
    homes = [c for c in rings if c.region == "loop" and not _accumulates_on(gp, c)]
    if sum(tmem_tile_columns(t) * c.depth for c in homes for t in c.payload if t.space is Space.TMEM) \
            > target_of(kernel.arch).tmem_columns:
        return set()                # P must lie over S
    computed = {id(c.value) for c in rings if c.producer != gp.group.id}
    from_tmem = _taken_from(ops, computed)
    mmas = [op for op in ops if op.kind is OpKind.MMA and op in rank and residue.get(op) is not None]
    us = [op for op in mmas if id(op.operands[0]) in from_tmem]
    ts = [op for op in mmas if id(op.operands[0]) not in from_tmem]
    return {rank[u] for u in us for t in ts
            if rank[t] == rank[u] and stage[u] == stage[t] + 1 and residue[t] < residue[u]}


def operand_from_tensor_memory(gp, kernel: WSKernel, ops: list[Op], stage: dict[Op, int]) -> bool:
    """Does an MMA of the group's latest stage read its A operand (through views) from a tensor-memory channel
    that another group fills?"""
    computed = {id(c.value) for c in kernel.channels
                if c.producer != gp.group.id and any(t.space is Space.TMEM for t in c.payload)}
    from_tmem = _taken_from(ops, computed)
    last = max(stage.values(), default=0)
    return any(op.kind is OpKind.MMA and stage[op] == last and id(op.operands[0]) in from_tmem for op in ops)


def subtiles(kernel: WSKernel) -> UnionFind:
    """Ops of every group's loop body joined by the data they exchange within an iteration: data flow inside a
    group and items of compiler channels of computed tiles between groups. Loaded tiles (TMA channels) and
    index math are shared by all sub-tiles, so they link nothing."""
    sets = UnionFind()
    tma = {id(c.value) for c in kernel.channels if c.kind == "tma"}
    puts: dict[int, list[Op]] = {}
    gets: dict[int, list[Op]] = {}
    for gp in kernel.groups:
        if gp.loop is None:
            continue
        body = gp.loop.body.ops
        prod = {id(r): op for op in body for r in op.results}
        carried = {id(c): y for c, y in zip(gp.loop.carried, gp.loop.yields)}
        loaded: set[int] = set()        # a loaded tile and its views (one k.T may serve every sub-tile)
        for op in body:
            sets.find(op)
            if op.kind in (OpKind.PUT, OpKind.GET) and id(op.operands[0]) not in tma:
                (puts if op.kind is OpKind.PUT else gets).setdefault(id(op.operands[0]), []).append(op)
            if op.kind is OpKind.GET and id(op.operands[0]) in tma:
                loaded.update(id(r) for r in op.results)
                continue
            if op.kind in VIEWS and id(op.operands[0]) in loaded:
                loaded.update(id(r) for r in op.results)
                continue
            for v in op.operands:
                if id(v) in loaded:
                    continue
                src = prod.get(id(v)) or prod.get(id(carried.get(id(v), v)))
                if src is None or src.kind in SCALARS:
                    continue
                sets.union(src, op)
    for ch, ps in puts.items():
        for g in gets.get(ch, []):
            for p in ps:
                sets.union(p, g)
    return sets


def tmem_ring_depth(ch, kernel: WSKernel) -> int | None:
    """The depth of a compiler channel in tensor memory on Blackwell (one item), else None."""
    if target_of(kernel.arch).has_tensor_memory and not ch.user and any(t.space is Space.TMEM for t in ch.payload):
        return 1
    return None


def deepen_tmem_rings(kernel: WSKernel, need: dict[str, int]) -> bool:
    """When one item per tensor-memory ring does not fit the groups' schedules, give the rings CUDA cores fill
    (tcgen05.st: P, a rescaled accumulator's copy) the depth the schedule needs; rings MMAs write in place keep
    one item (an accumulator has one home). Returns whether any depth changed."""
    changed = False
    for ch in kernel.channels:
        if tmem_ring_depth(ch, kernel) is None or is_blackwell_mma_group(kernel.groups[ch.producer], kernel):
            continue
        if any(op.kind is OpKind.MMA for op in kernel.groups[ch.producer].all_ops()):
            continue
        if any(_accumulates_on(kernel.groups[g], ch) for g in ch.consumers):
            continue
        if need.get(ch.name, 1) > ch.depth:
            ch.depth = need[ch.name]
            changed = True
    return changed


def _accumulates_on(gp, ch) -> bool:
    """Does an MMA of `gp` accumulate in place on a tile it takes from `ch`?"""
    got = _taken_from(list(gp.all_ops()), {id(ch.value)})
    return any(op.kind is OpKind.MMA and len(op.operands) > 2 and id(op.operands[2]) in got for op in gp.all_ops())


def _taken_from(ops: list[Op], channels: set[int]) -> set[int]:
    """Values (ids) of `ops` that are items got from the channels (ids of their values), or views of them."""
    got: set[int] = set()
    for op in ops:
        if op.kind is OpKind.GET and id(op.operands[0]) in channels:
            got |= {id(r) for r in op.results}
        elif op.kind in VIEWS and id(op.operands[0]) in got:
            got.add(id(op.result))
    return got
