"""The solver's tensor-core order across Hopper consumer groups (tensor-core turns).

A consumer group issues its wgmma as soon as its operands are ready and the tensor core serves MMAs first come
first served. Where the solver's schedule starts an MMA X of one group after an MMA P of another group of the
same iteration although X is ready before P starts (`partition.streams.tensor_core_order`), X would take P's
turn: linear_attention's state MMA (consumer1) issued ~770 cycles before its planned start, ahead of the
other group's q·S and q·kᵀ, whose chain then queued behind it every iteration. Here X's group waits for P's
issue: P's group arrives on a named barrier right after issuing P, X's group syncs on it right before X.

A turn is kept only where it cannot hang or drift: the schedules with the turn still fit together
(`pipeline.depths.global_conflict`: no group waits, through the turn, on work that waits for it), and P's
group cannot arrive for the next iteration before X's group has synced for this one (a dependence path from
X's sync of iteration j to P's arrive of iteration j + 1): a named barrier counts arrivals, so a second
arrival of P's group would complete the barrier without X's group and pair every later sync with the wrong
iteration.
"""
from __future__ import annotations

from dataclasses import replace

from aref.ir import NamedBarrierAttrs, Op, OpKind
from aref.ir.ws import NamedBarrier, WSKernel
from aref.target import target_of
from pipeline.depths import global_conflict, global_edges
from pipeline.schedule import GroupSchedule


def tensor_core_turns(kernel: WSKernel, schedules: dict[int, GroupSchedule], anchors: dict | None) -> int:
    """Insert the turns the solver's anchors ask for ("tc_after" entries) into the groups' loop bodies and
    schedules (before expansion, so every pipeline step's copy of X and P takes its turn under the same
    guard); returns how many were kept."""
    if not anchors or target_of(kernel.arch).mma != "wgmma":
        return 0
    pairs = sorted((k[1], v) for k, v in anchors.items() if isinstance(k, tuple) and k[0] == "tc_after")
    kept = 0
    marked: set[int] = set()
    held: list = []                 # the kept turns' (arrive, sync, 0) dependences ...
    inserted: list = []             # ... and their ops, in the schedules until every pair is checked
    next_id = max((nb.id for nb in kernel.named_barriers), default=0) + 1
    for ix, ip in pairs:
        x_at, p_at = _mma_of(kernel, ix), _mma_of(kernel, ip)
        if x_at is None or p_at is None or x_at[0] is p_at[0]:
            continue
        (ga, x), (gb, p) = x_at, p_at
        threads = ga.group.threads + gb.group.threads
        sync = Op(OpKind.NAMED_BAR_SYNC, (), (), NamedBarrierAttrs(next_id, threads), x.loc)
        arrive = Op(OpKind.NAMED_BAR_ARRIVE, (), (), NamedBarrierAttrs(next_id, threads), p.loc)
        sa, sb = schedules[ga.group.id], schedules[gb.group.id]
        _insert(ga, sa, sync, x, before=True)
        _insert(gb, sb, arrive, p, before=False)
        # (with the turns kept so far in place: together they must not make a cycle either)
        fits = global_conflict(kernel, schedules, held + [(arrive, sync, 0)]) is None and _paced(
            kernel, schedules, sync, arrive)
        if not fits:
            _remove(ga, sa, sync)
            _remove(gb, sb, arrive)
        else:
            inserted += [(ga, sa, sync), (gb, sb, arrive)]
            held.append((arrive, sync, 0))
            # the barrier ops are Barrier IR: the lowering places them (`aref.lower.hopper.place_turns`) beside every pipeline
            # step's copy of X and P, which share the op's attrs (a fresh marker per op here, made once: an
            # MMA in two turns, X of one and P of another, keeps the marker the first one recorded)
            for op in (x, p):
                if id(op) not in marked:
                    op.attrs = replace(op.attrs)
                    marked.add(id(op))
            kernel.named_barriers = list(kernel.named_barriers) + [
                NamedBarrier(next_id, threads, f"tensor-core turn: {ga.group.name} after {gb.group.name}'s MMA "
                                               f"(line {p.loc.line})")]
            kernel.tc_turns = list(kernel.tc_turns) + [(ga.group.id, x.attrs, gb.group.id, p.attrs, next_id, threads)]
            next_id += 1
            kept += 1
    for gp, sched, op in inserted:
        _remove(gp, sched, op)
    return kept


def _mma_of(kernel: WSKernel, index: int):
    """(group, loop op) of the MMA cloned from Tile IR op `index`, or None."""
    for gp in kernel.groups:
        if gp.loop is None:
            continue
        for op in gp.loop.body.ops:
            if op.kind is OpKind.MMA and gp.origin.get(op) == index:
                return gp, op
    return None


def _insert(gp, sched: GroupSchedule, new: Op, at: Op, before: bool) -> None:
    ops = gp.loop.body.ops
    ops.insert(ops.index(at) + (0 if before else 1), new)
    sched.order.insert(sched.order.index(at) + (0 if before else 1), new)
    sched.stage[new] = sched.stage[at]


def _remove(gp, sched: GroupSchedule, op: Op) -> None:
    gp.loop.body.ops.remove(op)
    sched.order.remove(op)
    del sched.stage[op]


def _paced(kernel: WSKernel, schedules: dict[int, GroupSchedule], sync: Op, arrive: Op) -> bool:
    """Does the arrive of iteration j + 1 depend on the sync of iteration j (a path of total distance ≤ 1)?
    Bellman-Ford over the groups' dependences (a program-order edge across steps may step back iterations)."""
    nodes, _, edges = global_edges(kernel, schedules)
    inf = float("inf")
    dist = {op: inf for op in nodes}
    dist[sync] = 0
    for _ in range(len(nodes)):
        changed = False
        for u, v, d in edges:
            if dist[u] + d < dist[v]:
                dist[v] = dist[u] + d
                changed = True
        if not changed:
            break
    return dist[arrive] <= 1
