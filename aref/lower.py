"""Aref lowering: the pipelined level → Barrier IR (explicit mbarriers with phase parity).

Per channel: a ring of `depth` slots, each with a buffer per payload tile (`rings`) and two mbarriers,
`full[slot]` and `empty[slot]`. Item k uses slot k mod depth; a waiter passes the phase bit
(k div depth) mod 2, and producers wait on `empty` with the opposite bit so the first pass does not block.

  put(k)       wait empty[slot] (parity ^ 1), then
                 TMA payload:      arrive.expect_tx(full[slot], bytes) and the TMA loads into the slot
                                   (they complete the transaction bytes);
                 register payload: store the tiles into the slot, fence.proxy.async when an async-proxy
                                   reader (an MMA) consumes it, arrive on full[slot] with every producer thread
                 (tensor-memory rings on Blackwell complete their stores with tmem_store_fence first)
  get(k)       wait full[slot] (parity), read the slot's tiles
  consumed(k)  arrive on empty[slot] (one elected thread per consumer group)

MMAs become asynchronous (`mma_async`); `mma_wait(n)` is placed before any read of an MMA result by other
work and before releasing a slot an MMA still reads, with n the exact number of later MMAs in the steady
state (0 in prologue and epilogue). Ping-pong consumers take turns on the tensor core through named
barriers; each group's register budget is set with setmaxnreg at its start.
"""
from __future__ import annotations

import copy
from dataclasses import replace

from aref import resources
from aref.errors import CompilerBugError, UNKNOWN_LOC
from aref.ir import (BarrierAttrs, BarrierType, ConstAttrs, DType, ExpectTxAttrs, FnAttrs, MmaAttrs, MmaWaitAttrs,
                     NamedBarrierAttrs, NoAttrs, Op, OpKind, RingType, ScalarType, SetMaxNRegAttrs, SlotAttrs,
                     Space, Value)
from aref.ws import Channel, GroupProgram, NamedBarrier, WSKernel

I32 = ScalarType(DType.int32)
VIEWS = (OpKind.TRANSPOSE, OpKind.EXPAND_DIMS, OpKind.SLICE)


def lower(kernel: WSKernel) -> WSKernel:
    """The Barrier IR of a pipelined kernel (a new kernel; the input is left as it was)."""
    out = copy.deepcopy(kernel)
    for ch in out.channels:
        _resources(ch, out)
    if out.arch == "sm_100a":
        from aref.lower_sm100 import lower_blackwell
        lower_blackwell(out)
    else:
        from pipeline.order import place_turns
        place_turns(out)
        for gp in out.groups:
            _Lowering(out, gp).run()
            _insert_mma_waits(gp)
        _pingpong(out)
    _registers(out)
    _shared_memory(out)
    out.level = "barrier"
    return out


def _resources(ch: Channel, kernel: WSKernel) -> None:
    ch.full = Value(BarrierType(ch.depth), f"{ch.name}.full")
    ch.empty = Value(BarrierType(ch.depth), f"{ch.name}.empty")
    ch.rings = tuple(Value(RingType(t, ch.depth), f"{ch.name}.ring{j}") for j, t in enumerate(ch.payload))
    producer = next(g.group for g in kernel.groups if g.group.id == ch.producer)
    ch.full_count = 1 if ch.kind == "tma" else producer.threads
    ch.empty_count = len(ch.consumers)
    ch.tx_bytes = ch.slot_bytes if ch.kind == "tma" else 0
    ch.async_read = any(_feeds_mma(gp, ch) for gp in kernel.groups if gp.group.id in ch.consumers)


def _feeds_mma(gp: GroupProgram, ch: Channel) -> bool:
    got: set[int] = set()
    for op in gp.all_ops():
        if op.kind is OpKind.GET and op.operands[0] is ch.value:
            got |= {id(r) for r in op.results}
        elif op.kind in VIEWS and id(op.operands[0]) in got:
            got.add(id(op.result))
        elif op.kind is OpKind.MMA and any(id(v) in got for v in op.operands):
            return True
    # values got in one block may be read through loop-carried chains: follow block arguments
    if gp.loop is not None:
        for init, c in zip(gp.loop.inits, gp.loop.carried):
            if id(init) in got:
                got.add(id(c))
        for op in gp.loop.body.ops:
            if op.kind is OpKind.MMA and any(id(v) in got for v in op.operands):
                return True
    return False


class _Lowering:
    def __init__(self, kernel: WSKernel, gp: GroupProgram):
        self.kernel, self.gp = kernel, gp
        self.chans = {id(c.value): c for c in kernel.channels}
        self.loads: dict[int, Op] = {}
        self.cache: dict[tuple, Value] = {}
        self.consts: dict[int, int] = {}          # value id -> integer, for constant items
        # value id -> the predicate its op runs under: slot and phase math on an item that a pipeline step
        # computes only when its stage runs inherits that predicate (else it would read an undefined value)
        self.pred_of: dict[int, Value | None] = {}

    def run(self) -> None:
        gp = self.gp
        for _, block in gp.regions():
            for op in block.ops:
                for r in op.results:
                    if op.kind is OpKind.LOAD:
                        self.loads[id(r)] = op
                if op.kind is OpKind.CONST and op.results[0].type == I32:
                    self.consts[id(op.result)] = int(op.attrs.value)
                for r in op.results:
                    self.pred_of[id(r)] = op.pred
        for _, block in gp.regions():
            block.ops = self.block(block.ops)

    def const(self, x: int, out: list[Op], loc) -> Value:
        key = (id(out), "const", x)
        if key not in self.cache:
            v = Value(I32)
            out.append(Op(OpKind.CONST, (), (v,), ConstAttrs(x), loc))
            self.cache[key] = v
        return self.cache[key]

    def scalar(self, fn: str, a: Value, b: int, out: list[Op], loc, name=None) -> Value:
        """`a fn b` — computed once per block and name, so each channel's slot and phase read as its own."""
        if id(a) in self.consts:                     # fold index math on constant items (prologue, pre, post)
            x = self.consts[id(a)]
            v = self.const({"mod": x % b, "floordiv": x // b}[fn], out, loc)
            self.consts[id(v)] = self.consts.get(id(v), {"mod": x % b, "floordiv": x // b}[fn])
            return v
        key = (id(out), fn, id(a), b, name)
        if key not in self.cache:
            v = Value(I32, name)
            pred = self.pred_of.get(id(a))
            out.append(Op(OpKind.SCALAR_BINARY, (a, self.const(b, out, loc)), (v,), FnAttrs(fn), loc, pred=pred))
            self.pred_of[id(v)] = pred
            self.cache[key] = v
        return self.cache[key]

    def slot(self, ch: Channel, item: Value, out: list[Op], loc) -> Value:
        """slot = item mod depth."""
        return self.scalar("mod", item, ch.depth, out, loc, f"{ch.name}.slot")

    def phase(self, ch: Channel, item: Value, out: list[Op], loc) -> Value:
        """The waiter's parity: (item div depth) mod 2."""
        return self.scalar("mod", self.scalar("floordiv", item, ch.depth, out, loc), 2, out, loc,
                           f"{ch.name}.phase")

    def flipped(self, phase: Value, out: list[Op], loc) -> Value:
        """The producer's parity on `empty`: 1 − phase."""
        if id(phase) in self.consts:
            v = self.const(1 - self.consts[id(phase)], out, loc)
            self.consts[id(v)] = 1 - self.consts[id(phase)]
            return v
        key = (id(out), "flip", id(phase))
        if key not in self.cache:
            flip = Value(I32, (phase.name or "phase") + "^1")
            pred = self.pred_of.get(id(phase))
            out.append(Op(OpKind.SCALAR_BINARY, (self.const(1, out, loc), phase), (flip,), FnAttrs("sub"), loc,
                          pred=pred))
            self.pred_of[id(flip)] = pred
            self.cache[key] = flip
        return self.cache[key]

    def block(self, ops: list[Op]) -> list[Op]:
        out: list[Op] = []
        uses: dict[int, int] = {}
        for op in ops:
            for v in op.operands:
                uses[id(v)] = uses.get(id(v), 0) + 1
        for op in ops:
            k = op.kind
            if k is OpKind.LOAD:
                continue                      # issued as a TMA copy by the put that publishes it
            if k is OpKind.PUT:
                self.put(op, out)
            elif k is OpKind.GET:
                self.get(op, out)
            elif k is OpKind.CONSUMED:
                self.consumed(op, out)
            elif k is OpKind.MMA:
                self.emit(out, op, OpKind.MMA_ASYNC, op.operands, op.results, MmaAttrs())
            else:
                out.append(op)
        return out

    def emit(self, out, like: Op, kind, operands, results, attrs) -> Op:
        new = Op(kind, tuple(operands), tuple(results), attrs, like.loc, pred=like.pred, stage=like.stage)
        out.append(new)
        return new

    def consumed(self, op: Op, out: list[Op]) -> None:
        ch = self.chans[id(op.operands[0])]
        slot = self.slot(ch, op.operands[1], out, op.loc)
        self.emit(out, op, OpKind.MBAR_ARRIVE, (ch.empty, slot, op.operands[1]), (), BarrierAttrs(ch.name, "empty", 1))

    def put(self, op: Op, out: list[Op]) -> None:
        ch = self.chans[id(op.operands[0])]
        item, tiles = op.operands[1], op.operands[2:]
        slot = self.slot(ch, item, out, op.loc)
        flip = self.flipped(self.phase(ch, item, out, op.loc), out, op.loc)
        self.emit(out, op, OpKind.MBAR_WAIT, (ch.empty, slot, flip), (), BarrierAttrs(ch.name, "empty"))
        if ch.kind == "tma":
            self.emit(out, op, OpKind.MBAR_EXPECT_TX, (ch.full, slot), (), ExpectTxAttrs(ch.name, ch.tx_bytes))
            for j, t in enumerate(tiles):
                load = self.loads.get(id(t))
                if load is None:
                    raise CompilerBugError(f"TMA channel '{ch.name}' publishes a tile that is not a load", op.loc,
                                           pass_name="aref lowering")
                self.emit(out, load, OpKind.TMA_LOAD, (*load.operands, ch.rings[j], slot, ch.full, item), (),
                          SlotAttrs(ch.name, j, load.attrs.tile_shape)).pred = op.pred
        else:
            for j, t in enumerate(tiles):
                self.emit(out, op, OpKind.SLOT_STORE, (ch.rings[j], slot, item, t), (), SlotAttrs(ch.name, j))
            if any(t.space is Space.TMEM for t in ch.payload):
                self.emit(out, op, OpKind.TMEM_STORE_FENCE, (), (), NoAttrs())
            if ch.async_read and any(t.space is not Space.TMEM for t in ch.payload):
                self.emit(out, op, OpKind.FENCE_PROXY_ASYNC, (), (), NoAttrs())
            self.emit(out, op, OpKind.MBAR_ARRIVE, (ch.full, slot, item), (),
                      BarrierAttrs(ch.name, "full", ch.full_count))

    def get(self, op: Op, out: list[Op]) -> None:
        ch = self.chans[id(op.operands[0])]
        item = op.operands[1]
        slot, phase = self.slot(ch, item, out, op.loc), self.phase(ch, item, out, op.loc)
        self.emit(out, op, OpKind.MBAR_WAIT, (ch.full, slot, phase), (), BarrierAttrs(ch.name, "full"))
        for j, r in enumerate(op.results):
            self.emit(out, op, OpKind.SLOT_READ, (ch.rings[j], slot, item), (r,), SlotAttrs(ch.name, j))


# ------------------------------------------------------------------------------------- MMA waits
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
                elif op.kind in VIEWS + (OpKind.SELECT,):
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


def _mma_origin(v: Value, prod: dict[int, Op], depth: int = 0) -> bool:
    op = prod.get(id(v))
    if op is None or depth > 64:
        return False
    if op.kind is OpKind.MMA_ASYNC:
        return True
    if op.kind in VIEWS:
        return _mma_origin(op.operands[0], prod, depth + 1)
    if op.kind is OpKind.SELECT:
        return any(_mma_origin(x, prod, depth + 1) for x in op.operands[1:])
    return False


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
            if op.kind in VIEWS + (OpKind.SELECT,):
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


def turn_once(kernel: WSKernel, op: Op, region: str) -> str | None:
    """Which tile of a persistent CTA runs ping-pong turn op `op` (in `region` of its group): "first" for the
    turn the last group hands the first before the loop, "last" for the first group's balancing turn after
    it, None for a turn taken on every tile. Across a CTA's tiles the turns go on round-robin; run per tile,
    the last group's hand-over for its next tile could arrive before the first group's balancing sync of
    the tile before and complete the barrier's generation alone (both groups would then wait for each
    other). The backend emits these conditions and the simulator's persistent launch runs them."""
    if op.kind not in (OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE):
        return None
    turns = {nb.id for nb in kernel.named_barriers if nb.purpose.startswith("tensor-core turn")}
    if op.attrs.id not in turns:
        return None
    if region == "pre" and op.kind is OpKind.NAMED_BAR_ARRIVE:
        return "first"
    if region == "post" and op.kind is OpKind.NAMED_BAR_SYNC:
        return "last"
    return None


def _shared_memory(kernel: WSKernel) -> None:
    """The resource model's shared-memory layout (`aref.resources.memory`, the one the backend allocates) fits
    the SM: if not, the refusal is recorded in `kernel.resource_error`, as a register refusal is (on both
    architectures: Blackwell's zero tile, MMA barriers and tensor-memory address slot are in the model)."""
    if kernel.resource_error is not None:
        return
    from aref.resources.memory import smem_plan
    plan = smem_plan(kernel)
    problem = plan.problem()
    if problem is not None:
        kernel.resource_error = resources.ResourceError(
            problem, kernel.loc, hint="lower a channel depth or the tile sizes", smem_excess=plan.total - plan.limit)


def launch_threads(kernel: WSKernel) -> int:
    """Threads a CTA of the kernel launches: its groups' (on Blackwell padded to whole warp groups, as the
    backend lays one-warp roles out together and setmaxnreg acts on warp groups)."""
    threads = kernel.total_threads
    return -(-threads // 128) * 128 if kernel.arch == "sm_100a" else threads


def launch_registers(kernel: WSKernel) -> int:
    """Registers per thread at launch (before setmaxnreg): the file split evenly, a multiple of 8."""
    return resources.launch_registers(launch_threads(kernel))


def _registers(kernel: WSKernel) -> None:
    """Register budgets follow liveness (the resource model): every Hopper group gets what its tiles need at
    their peak plus its role's own state, the rest of the pool is shared; each group's setmaxnreg moves it
    there from the launch allocation. (Blackwell groups keep the partition's budgets.) Budgets the model
    refuses are recorded in `kernel.resource_error` (see `aref.compiler.lower_to`)."""
    if kernel.arch == "sm_90a":
        demands = {gp.group.id: resources.register_demand(gp, kernel.arch) for gp in kernel.groups}
        try:
            budget = resources.assign_budgets([gp.group for gp in kernel.groups], demands, kernel.loc)
        except resources.ResourceError as refusal:
            # the groups keep the partition's budgets: the kernel still simulates, the backend refuses it
            kernel.resource_error = refusal
            budget = {gp.group.id: gp.group.regs for gp in kernel.groups}
        for gp in kernel.groups:
            gp.group = replace(gp.group, regs=budget[gp.group.id])
    base = launch_registers(kernel)
    for gp in kernel.groups:
        regs = gp.group.regs
        if regs != base:
            gp.pre.ops.insert(0, Op(OpKind.SETMAXNREG, (), (), SetMaxNRegAttrs(regs, regs > base), kernel.loc))


__all__ = ["lower", "launch_registers", "launch_threads"]
