"""The Hopper (sm_90a) steps of the aref lowering: wgmma waits placed before every read of an MMA result
and every release of a slot an MMA still reads, ping-pong consumers' turns on the tensor core, and the
solver's tensor-core turns (`pipeline.order`) as named-barrier syncs and arrives."""
from __future__ import annotations

from aref.errors import UNKNOWN_LOC
from aref.ir import MmaWaitAttrs, NamedBarrierAttrs, Op, OpKind, Value
from aref.ir.ws import GroupProgram, NamedBarrier, WSKernel
from aref.lower.common import _Lowering, _mma_origin, assign_register_budgets
from aref.ops import VIEWS


def lower_kernel(kernel: WSKernel) -> None:
    """The lowering of `aref.target.SM_90A` (its `lowering` module's entry), in place: the Hopper steps, then
    register budgets from liveness (setmaxnreg moves each group there)."""
    lower_hopper(kernel)
    assign_register_budgets(kernel)


def lower_hopper(kernel: WSKernel) -> None:
    """The Hopper steps, in place: the solver's turns, each group's channel ops, its wgmma waits, ping-pong."""
    place_turns(kernel)
    for gp in kernel.groups:
        _Lowering(kernel, gp).run()
        _insert_mma_waits(gp)
    _pingpong(kernel)


def _insert_mma_waits(gp: GroupProgram) -> None:
    """Straight-line code (pre, prologue, epilogue, post) waits for everything (its MMAs may be predicated
    off, so counts are unknown); the steady state gets exact counts; nothing is in flight entering it."""
    if not any(op.kind is OpKind.MMA_ASYNC for op in gp.all_ops()):
        return
    slot_readers = _slot_mma_readers(gp)
    prod = gp.producers()
    issued = False
    for region, block in gp.regions():
        if region == "loop":
            gp.loop.body.ops = _steady_waits(gp, slot_readers)
            issued = issued or any(op.kind is OpKind.MMA_ASYNC for op in gp.loop.body.ops)
            continue
        out: list[Op] = []
        for op in block.ops:
            if issued and _needs_retired(op, prod, slot_readers):
                out.append(_wait(0, op.loc))
                issued = False
            out.append(op)
            issued = issued or op.kind is OpKind.MMA_ASYNC
        if issued and (region == "post" or (region == "prologue" and gp.loop is not None)):
            out.append(_wait(0, gp.loop.loc if gp.loop is not None else None))
            issued = False
        block.ops = out


def _wait(n: int, loc) -> Op:
    return Op(OpKind.MMA_WAIT, (), (), MmaWaitAttrs(n), loc or UNKNOWN_LOC)


def _slot_mma_readers(gp: GroupProgram) -> dict[str, list[Op]]:
    """Channel name → MMA ops that read its slots (through views and loop-carried chains)."""
    src: dict[int, str] = {}
    readers: dict[str, list[Op]] = {}
    changed = True
    while changed:
        changed = False
        for _, block in gp.regions():
            for op in block.ops:
                if op.kind is OpKind.SLOT_READ:
                    for r in op.results:
                        if id(r) not in src:
                            src[id(r)] = op.attrs.channel
                            changed = True
                elif op.kind in VIEWS | {OpKind.SELECT}:
                    for v in op.operands:
                        if id(v) in src and id(op.result) not in src:
                            src[id(op.result)] = src[id(v)]
                            changed = True
                elif op.kind is OpKind.MMA_ASYNC:
                    for v in op.operands:            # A, B and an accumulator read from a slot
                        if id(v) in src and op not in readers.setdefault(src[id(v)], []):
                            readers[src[id(v)]].append(op)
        if gp.loop is not None:
            for a, b in list(zip(gp.loop.inits, gp.loop.carried)) + list(zip(gp.loop.yields, gp.loop.carried)):
                if id(a) in src and id(b) not in src:
                    src[id(b)] = src[id(a)]
                    changed = True
    return readers


def _needs_retired(op: Op, prod: dict[int, Op], slot_readers) -> bool:
    """Does `op` read an MMA result with non-MMA work, or release a slot an MMA reads?"""
    if op.kind is OpKind.MBAR_ARRIVE and op.attrs.which == "empty":
        return bool(slot_readers.get(op.attrs.channel))
    if op.kind in (OpKind.MMA_ASYNC, OpKind.MMA_WAIT):
        return False
    return any(_mma_origin(v, prod) for v in op.operands)


def _steady_waits(gp: GroupProgram, slot_readers) -> list[Op]:
    """Exact wait counts in the steady-state body: the number of MMAs issued after the one that must
    retire, counting around the loop for values and slots from earlier iterations."""
    body = gp.loop.body.ops
    pos = {op: i for i, op in enumerate(body)}
    mma_at = [i for i, op in enumerate(body) if op.kind is OpKind.MMA_ASYNC]
    total = len(mma_at)
    carried_from = {}
    for c, y in zip(gp.loop.carried, gp.loop.yields):
        carried_from[id(c)] = y
    prod = {id(r): op for op in body for r in op.results}

    def origins(v: Value, dist: int, seen=0):
        """(MMA op, how many steps ago) for every MMA result `v` may be."""
        if seen > 64:
            return []
        if id(v) in prod:
            op = prod[id(v)]
            if op.kind is OpKind.MMA_ASYNC:
                return [(op, dist)]
            if op.kind in VIEWS | {OpKind.SELECT}:
                return [o for x in op.operands for o in origins(x, dist, seen + 1)]
            return []
        if id(v) in carried_from:
            return origins(carried_from[id(v)], dist + 1, seen + 1)
        return []

    def later(m: Op, dist: int, at: int) -> int:
        if dist == 0:
            return sum(1 for i in mma_at if pos[m] < i < at)
        return sum(1 for i in mma_at if i > pos[m]) + (dist - 1) * total + sum(1 for i in mma_at if i < at)

    out: list[Op] = []
    last_wait = None            # pending bound established by the last wait, if no MMA issued since
    for at, op in enumerate(body):
        need = None
        if op.kind is OpKind.MBAR_ARRIVE and op.attrs.which == "empty" and slot_readers.get(op.attrs.channel):
            for m in slot_readers[op.attrs.channel]:
                if m in pos:           # readers outside the body were retired before the steady state
                    dist = max(0, (op.stage or 0) - (m.stage or 0))
                    n = later(m, dist, at)
                    need = n if need is None else min(need, n)
        elif op.kind is not OpKind.MMA_ASYNC:
            for v in op.operands:
                for m, dist in origins(v, 0):
                    n = later(m, dist, at)
                    need = n if need is None else min(need, n)
        if need is not None and (last_wait is None or need < last_wait):
            out.append(_wait(need, op.loc))
            last_wait = need
        out.append(op)
        if op.kind is OpKind.MMA_ASYNC:
            last_wait = None if last_wait is None else last_wait + 1
    return out


# ------------------------------------------------------------------------------ ping-pong, registers


def _turns(gp: GroupProgram) -> tuple:
    """What decides how many tensor-core turns a group takes at trip count N: one per region holding MMAs
    (per iteration in the loop, whose steady state runs N − stages times)."""
    return gp.stages, tuple(region for region, block in gp.regions()
                            if any(op.kind is OpKind.MMA_ASYNC for op in block.ops))


def _pingpong(kernel: WSKernel) -> None:
    """Ping-pong consumers take turns on the tensor core: each waits for its turn (named barrier) before
    its first MMA of a section and passes the turn on after its last MMA issue.

    Turns pass round-robin, so every group must take as many turns as the others at every trip count (the
    same pipeline depth and MMAs in the same regions), and no group may wait for data from another ping-pong
    group (which may be waiting for its turn). Otherwise the ordering — a performance hint, not needed for
    correctness — is left out rather than emitted to deadlock."""
    order = list(kernel.pingpong)
    if len(order) < 2:
        return
    groups = {gp.group.id: gp for gp in kernel.groups}
    feeds = any(ch.producer in order and set(ch.consumers) & (set(order) - {ch.producer}) for ch in kernel.channels)
    if len({_turns(groups[g]) for g in order}) > 1 or feeds or kernel.named_barriers:
        kernel.pingpong = ()                # unbalanced turns, or a group waiting on data of the group whose
        return                              # turn it holds: either deadlocks (or the pipeline already orders
        #                                     the groups' MMAs by the solver's schedule: `pipeline.order`)
    threads = 2 * groups[order[0]].group.threads
    ids = {g: i + 1 for i, g in enumerate(order)}
    kernel.named_barriers = [NamedBarrier(ids[g], threads, f"tensor-core turn of {groups[g].group.name}")
                             for g in order]
    for k, g in enumerate(order):
        gp = groups[g]
        mine, nxt = ids[g], ids[order[(k + 1) % len(order)]]
        for _, block in gp.regions():
            mmas = [i for i, op in enumerate(block.ops) if op.kind is OpKind.MMA_ASYNC]
            if not mmas:
                continue
            ops = block.ops
            loc = ops[mmas[0]].loc
            ops.insert(mmas[-1] + 1, Op(OpKind.NAMED_BAR_ARRIVE, (), (), NamedBarrierAttrs(nxt, threads), loc))
            ops.insert(mmas[0], Op(OpKind.NAMED_BAR_SYNC, (), (), NamedBarrierAttrs(mine, threads), loc))
        if k == len(order) - 1:       # the last group hands the first its first turn ...
            gp.pre.ops.append(Op(OpKind.NAMED_BAR_ARRIVE, (), (), NamedBarrierAttrs(ids[order[0]], threads),
                                 kernel.loc))
        if k == 0:                    # ... so the first takes one turn more at the end, balancing the barrier
            gp.post.ops.append(Op(OpKind.NAMED_BAR_SYNC, (), (), NamedBarrierAttrs(mine, threads), kernel.loc))


def place_turns(kernel: WSKernel) -> None:
    """Barrier IR of the turns (`tensor_core_turns`): a named-barrier sync right before every copy of X in its
    group and an arrive right after every copy of P in its, each under its MMA's predicate (a prologue or
    epilogue step that skips the MMA skips its turn too, so both sides count the same iterations)."""
    groups = {gp.group.id: gp for gp in kernel.groups}
    for ga, xa, gb, pa, bar, threads in kernel.tc_turns:
        for gid, marker, kind, after in ((ga, xa, OpKind.NAMED_BAR_SYNC, 0), (gb, pa, OpKind.NAMED_BAR_ARRIVE, 1)):
            for _, block in groups[gid].regions():
                out = []
                for op in block.ops:
                    turn = (Op(kind, (), (), NamedBarrierAttrs(bar, threads), op.loc, pred=op.pred, stage=op.stage)
                            if op.kind is OpKind.MMA and op.attrs is marker else None)
                    out += [op, turn] if turn and after else [turn, op] if turn else [op]
                block.ops = out
