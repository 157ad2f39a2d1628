"""What the aref lowering does on every architecture: channels become rings of slots with full / empty
mbarriers (`_Lowering`: put, get and consumed per channel, see `aref.lower`), the shared-memory and register
budgets of the lowered kernel, and the launch's thread and register counts."""
from __future__ import annotations

from dataclasses import replace

from aref import resources
from aref.errors import CompilerBugError
from aref.ir import (BarrierAttrs, BarrierType, ConstAttrs, DType, ExpectTxAttrs, FnAttrs, MmaAttrs, NoAttrs, Op,
                     OpKind, RingType, ScalarType, SetMaxNRegAttrs, SlotAttrs, Space, Value)
from aref.ops import VIEWS
from aref.ir.ws import Channel, GroupProgram, WSKernel
from aref.target import target_of

I32 = ScalarType(DType.int32)




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


def _shared_memory(kernel: WSKernel) -> None:
    """The resource model's shared-memory layout (`aref.resources.memory`, the one the backend allocates) fits
    the SM: if not, the refusal is recorded in `kernel.resource_error`, as a register refusal is (on both
    architectures: Blackwell's zero tile, MMA barriers and tensor-memory address slot are in the model)."""
    if kernel.resource_error is not None:
        return
    from aref.resources.memory import smem_plan, unrolled_rings
    plan = smem_plan(kernel)
    problem = plan.problem()
    if problem is not None:
        loc, hint = kernel.loc, "lower a channel depth or the tile sizes"
        unrolled = unrolled_rings(plan, kernel)
        if unrolled is not None:
            # the tiles of a Python `for` loop's trips each hold a ring: the loop is the pipelined loop unrolled
            loc, n, nbytes = unrolled
            problem += (f"; {n} of the rings ({nbytes} B) hold the tiles loaded in the Python `for` loop on line "
                        f"{loc.line}, one per trip: Python runs the loop while the kernel is traced")
            hint = ("use aref.range(...) for the pipelined loop (`for k in aref.range(n):`), with the tiles it loads "
                    "put into an aref channel (see the README's gemm)")
        kernel.resource_error = resources.ResourceError(problem, loc, hint=hint,
                                                        smem_excess=plan.total - plan.limit)


def launch_threads(kernel: WSKernel) -> int:
    """Threads a CTA of the kernel launches: its groups' (with tcgen05 padded to whole warp groups, as the
    backend lays the one-warp roles — load, MMA issue — out together and setmaxnreg acts on warp groups)."""
    threads = kernel.total_threads
    return -(-threads // 128) * 128 if target_of(kernel.arch).mma == "tcgen05" else threads


def launch_registers(kernel: WSKernel) -> int:
    """Registers per thread at launch (before setmaxnreg): the file split evenly, a multiple of 8."""
    return resources.launch_registers(launch_threads(kernel))


def assign_register_budgets(kernel: WSKernel) -> None:
    """Register budgets follow liveness (the resource model): every group gets what its tiles need at their
    peak plus its role's own state, the rest of the pool is shared. Budgets the model refuses are recorded in
    `kernel.resource_error` (see `aref.search`). (The Hopper lowering's rule; Blackwell's is
    `aref.lower.sm100.register_budgets`.)"""
    demands = {gp.group.id: resources.register_demand(gp, kernel.arch) for gp in kernel.groups}
    try:
        budget = resources.assign_budgets([gp.group for gp in kernel.groups], demands, kernel.loc)
    except resources.ResourceError as refusal:
        # the groups keep the partition's budgets: the kernel still simulates, the backend refuses it
        kernel.resource_error = refusal
        budget = {gp.group.id: gp.group.regs for gp in kernel.groups}
    for gp in kernel.groups:
        gp.group = replace(gp.group, regs=budget[gp.group.id])


def _registers(kernel: WSKernel) -> None:
    """Each group's setmaxnreg moves it from the launch allocation to the budget its arch's lowering gave it."""
    base = launch_registers(kernel)
    for gp in kernel.groups:
        regs = gp.group.regs
        if regs != base:
            gp.pre.ops.insert(0, Op(OpKind.SETMAXNREG, (), (), SetMaxNRegAttrs(regs, regs > base), kernel.loc))
