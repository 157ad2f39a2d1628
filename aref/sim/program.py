"""A barrier-level `WSKernel` prepared for execution: flat instruction lists and resolved resources.

Each group's regions (pre, prologue, loop, epilogue, post) become one flat list of `Instr`; the loop is two
marker instructions (`LOOP_ENTER` before the body, `LOOP_END` after it), so a group's control state is just
(pc, loop counter). Barrier, ring and channel operands are kernel-level values; they are resolved here once
to indices into the CTA state, and malformed uses (an mbarrier op on a value that is not a channel's barrier,
attrs naming another channel) are reported before anything runs.
"""
from __future__ import annotations

from aref.ir import OpKind, RingType, Space, TileType
from aref.ops import CHANNEL_KINDS, CROSS_GROUP_KINDS, MMA_KINDS, VIEWS
from aref.ir.printer import Namer, format_op
from aref.sim.tensor_memory import TensorMemory
from aref.ir.ws import WSKernel
from aref.target import target_of

LOOP_ENTER = "loop_enter"
LOOP_END = "loop_end"

# Ops whose effect other groups or async units can observe (or that can block): each is a scheduling point.
# Everything else is local to its group and runs atomically up to the next one.
# Two of them never block and commute with what other groups can do meanwhile, so they run with the ops
# before them instead of being scheduling points of their own (halving the states exploration visits):
# a slot_read (the item stays in the slot until this very group releases it) and an mma_commit (its
# arrival waits for the group's MMAs anyway, and an earlier release only lets a producer go sooner).
EAGER = frozenset({OpKind.SLOT_READ, OpKind.MMA_COMMIT})
# the scheduling points: ops on state other warp groups observe (the registry's cross-group kinds); every
# other Barrier IR op (all but the aref protocol's, lowered away) is computed by its group alone
VISIBLE = CROSS_GROUP_KINDS
COMPUTE = frozenset(OpKind) - VISIBLE - CHANNEL_KINDS


class MalformedIR(ValueError):
    """The kernel is not Barrier IR the simulator can execute (a compiler bug, not a schedule bug)."""


class Instr:
    """One step of a group program: an op (kind, operand/result ids, predicate) or a loop marker."""

    __slots__ = ("op", "kind", "args", "res", "pred", "visible", "bar", "ring", "loop", "target", "tile_out",
                 "tensor_pipe", "tmem_ld_bytes", "tmem_st_bytes", "to_registers")

    def __init__(self, op=None, kind=None, loop=None):
        self.op = op
        self.kind = kind if op is None else op.kind
        self.args = tuple(id(v) for v in op.operands) if op is not None else ()
        self.res = tuple(id(v) for v in op.results) if op is not None else ()
        self.pred = id(op.pred) if op is not None and op.pred is not None else None
        self.visible = op is not None and op.kind in VISIBLE and op.kind not in EAGER
        self.tile_out = op is not None and bool(op.results) and isinstance(op.results[0].type, TileType)
        self.bar = None      # barrier index base info: (chan, which) for mbarrier ops and tma_load
        self.ring = None     # (chan, ring index) for slot ops and tma_load
        self.loop = loop
        self.target = 0      # LOOP_ENTER: pc after LOOP_END; LOOP_END: pc of the body's first op
        self.tensor_pipe = False   # slot_store published by mma_commit (the tensor core wrote the slot), or
        #                            slot_read that only MMAs use (the tensor core reads the slot)
        self.tmem_ld_bytes = 0     # Blackwell: the group's own MMA results this op reads (tcgen05.ld first)
        self.tmem_st_bytes = 0     # Blackwell: the result written back for the group's own MMA (tcgen05.st)
        self.to_registers = False  # Blackwell: a slot_read of tensor memory loaded whole into registers
        #                            (`aref.lower.sm100.loaded_to_registers`): its uses read the copy


class Prog:
    """Everything static about a kernel the engine needs, computed once per simulate/explore call."""

    def __init__(self, kernel: WSKernel):
        if kernel.level != "barrier":
            raise MalformedIR(f"the simulator executes Barrier IR; kernel {kernel.name} is at level {kernel.level}")
        self.kernel = kernel
        self.chans = list(kernel.channels)
        self.groups = [gp.group for gp in kernel.groups]
        self.ngroups = len(self.groups)
        # barrier state layout: channel c's full slots at bar_base[c][0], empty slots at bar_base[c][1]
        self.bar_base, self.bar_init, self.bar_where = [], [], []
        self.slot_base, self.nrings, self.empty_count = [], [], []
        self.globals: dict[int, object] = {}
        bar_ids, ring_ids = {}, {}
        nbar = nslot = 0
        for c, ch in enumerate(self.chans):
            if ch.full is None or ch.empty is None or not ch.rings:
                raise MalformedIR(f"channel {ch.name} has no mbarriers or rings (not lowered)")
            bases = []
            for which, bar, count in (("full", ch.full, ch.full_count), ("empty", ch.empty, ch.empty_count)):
                if count <= 0:
                    raise MalformedIR(f"channel {ch.name}: {which} barrier has arrival count {count}")
                bar_ids[id(bar)] = (c, which)
                bases.append(nbar)
                for s in range(ch.depth):
                    self.bar_init.append(count)
                    self.bar_where.append((c, which, s))
                nbar += ch.depth
            self.bar_base.append(tuple(bases))
            self.slot_base.append(nslot)
            nslot += ch.depth
            self.nrings.append(len(ch.rings))
            self.empty_count.append(ch.empty_count)
            for r, ring in enumerate(ch.rings):
                if not isinstance(ring.type, RingType) or ring.type.depth != ch.depth:
                    raise MalformedIR(f"channel {ch.name}: ring {r} has type {ring.type}, expected depth {ch.depth}")
                ring_ids[id(ring)] = (c, r)
            for v in (ch.value, ch.full, ch.empty, *ch.rings):
                self.globals[id(v)] = v
        self.nbars, self.nslots = nbar, nslot
        self.tmem = TensorMemory(kernel, self.chans)
        self.param_ids = {p.name: id(p.value) for p in kernel.params}
        self.programs = [self._flatten(gp, bar_ids, ring_ids) for gp in kernel.groups]
        # which groups can complete a phase of each barrier array / take part in each named barrier
        self.arrivers: dict[tuple, set] = {}
        self.nb_users: dict[int, set] = {}
        for g, prog in enumerate(self.programs):
            for ins in prog:
                if ins.kind in (OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX, OpKind.TMA_LOAD, OpKind.MMA_COMMIT):
                    self.arrivers.setdefault(ins.bar, set()).add(g)
                elif ins.kind in (OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE):
                    self.nb_users.setdefault(ins.op.attrs.id, set()).add(g)
        self._texts = None

    def _flatten(self, gp, bar_ids, ring_ids) -> list[Instr]:
        out: list[Instr] = []
        for region, block in gp.regions():
            if region == "loop":
                enter = Instr(kind=LOOP_ENTER, loop=gp.loop)
                out.append(enter)
                body_start = len(out)
                out.extend(self._instr(op, bar_ids, ring_ids) for op in block.ops)
                end = Instr(kind=LOOP_END, loop=gp.loop)
                end.target = body_start
                out.append(end)
                enter.target = len(out)
            else:
                out.extend(self._instr(op, bar_ids, ring_ids) for op in block.ops)
        _mark_tensor_pipe(gp, out)
        if target_of(self.kernel.arch).has_tensor_memory:
            _mark_own_accumulators(gp, out)
        return out

    def _instr(self, op, bar_ids, ring_ids) -> Instr:
        ins = Instr(op)
        k = op.kind
        if k not in VISIBLE and k not in COMPUTE:
            raise MalformedIR(f"{k.value} at {op.loc.short()} is not a Barrier IR op")

        def resolve(v, table, what):
            if id(v) not in table:
                raise MalformedIR(f"{k.value} at {op.loc.short()}: operand {v!r} is not a channel {what}")
            return table[id(v)]

        if k in (OpKind.MBAR_WAIT, OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX, OpKind.MMA_COMMIT):
            ins.bar = resolve(op.operands[0], bar_ids, "mbarrier")
            c, which = ins.bar
            if op.attrs.channel != self.chans[c].name or getattr(op.attrs, "which", which) != which:
                raise MalformedIR(f"{k.value} at {op.loc.short()}: attrs name {op.attrs} but the barrier operand "
                                  f"is {which} of channel {self.chans[c].name}")
        elif k is OpKind.TMA_LOAD:
            ins.ring = resolve(op.operands[-4], ring_ids, "ring")
            ins.bar = resolve(op.operands[-2], bar_ids, "mbarrier")
            if ins.bar != (ins.ring[0], "full"):
                raise MalformedIR(f"tma_load at {op.loc.short()} completes on a barrier other than its channel's full")
        elif k in (OpKind.SLOT_STORE, OpKind.SLOT_READ):
            ins.ring = resolve(op.operands[0], ring_ids, "ring")
        return ins

    def op_text(self, op) -> str:
        """`op` as `aref.ir.ws.print_ws` prints it (same value names)."""
        if op is None:
            return ""
        if self._texts is None:
            self._texts = _op_texts(self.kernel)
        return self._texts.get(id(op)) or format_op(op, Namer())


def _op_texts(kernel: WSKernel) -> dict[int, str]:
    """Replays `print_ws`'s naming order (params, channels, then each group's ops) to name values alike."""
    name = Namer()
    for p in kernel.params:
        name(p.value)
    for ch in kernel.channels:
        name(ch.value)
        if ch.full is not None:
            name(ch.full), name(ch.empty)
            for r in ch.rings:
                name(r)
    texts = {}

    def text(op):
        parts = []
        if op.stage is not None:
            parts.append(f"[stage {op.stage}]")
        if op.pred is not None:
            parts.append(f"if {name(op.pred)}")
        texts[id(op)] = format_op(op, name, " ".join(parts))

    for gp in kernel.groups:
        for region, block in gp.regions():
            if region == "loop":
                for c, i in zip(gp.loop.carried, gp.loop.inits):
                    name(c), name(i)
                name(gp.loop.iv), name(gp.loop.trip_count)
            for op in block.ops:
                text(op)
            if region == "loop":
                for v in (*gp.loop.yields, *gp.loop.results):
                    name(v)
    return texts


def _mark_own_accumulators(gp, prog: list) -> None:
    """Blackwell: a tcgen05 MMA's result lies in tensor memory, also for the group that issued it. CUDA-core
    work of that group on such a tile (typed in tensor memory, not taken from a channel slot, whose slot_read
    is the load) first moves it into registers by a tcgen05.ld, once per value: the first reader pays. A tile
    it computes as the accumulator of its own next MMA (FA's O rescaled in place) goes back by a tcgen05.st.
    The solver's graph charges both (`partition.optimal`: a cluster's tensor-memory traffic), whichever
    group runs the MMA; so does the timing model, on the tensor memory's load and store paths."""
    from aref import ops as ops_registry
    from aref.lower.sm100 import tensor_core_group
    if not tensor_core_group(gp):
        return
    cuda_core = ops_registry.kinds_with(ops_registry.CUDA_CORE)
    prod = {id(r): op for op in gp.all_ops() for r in op.results}

    def from_slot(v, depth=0) -> bool:
        op = prod.get(id(v))
        if op is None or depth > 16:
            return False
        if op.kind in VIEWS:
            return from_slot(op.operands[0], depth + 1)
        return op.kind is OpKind.SLOT_READ

    accumulators = {id(op.operands[2]) for op in gp.all_ops()
                    if op.kind in MMA_KINDS and len(op.operands) > 2}
    read: set[int] = set()
    for ins in prog:
        op = ins.op
        if op is None or op.kind not in cuda_core:
            continue
        for v in op.operands:
            if (id(v) not in read and isinstance(v.type, TileType) and v.type.space is Space.TMEM
                    and not from_slot(v)):
                read.add(id(v))
                ins.tmem_ld_bytes += v.type.nbytes
        ins.tmem_st_bytes = sum(r.type.nbytes for r in op.results if id(r) in accumulators)


def _mark_tensor_pipe(gp, prog: list) -> None:
    """A slot_store into a tensor-memory ring of an MMA result (or a constant) by the group that issues the
    MMAs is written by the tensor core in place (`aref.ir.ws`), not by tcgen05.st: no data moves, and only an
    mma_commit publishes it. A slot_read of tensor memory that only the group's MMAs use moves no data either
    (the timing model charges it nothing). A slot_read of tensor memory that only CUDA cores use is a register
    copy (`Instr.to_registers`)."""
    from aref.lower.sm100 import from_mma, loaded_to_registers, read_by_tensor_core, tensor_core_group
    mma_group = tensor_core_group(gp)
    for ins in prog:
        if ins.kind is OpKind.SLOT_STORE and mma_group and ins.op.operands[0].type.tile.space.value == "tmem":
            ins.tensor_pipe = from_mma(ins.op.operands[3], gp)
        elif ins.kind is OpKind.SLOT_READ and ins.op.operands[0].type.tile.space.value == "tmem":
            ins.tensor_pipe = mma_group and read_by_tensor_core(ins.op.result, gp)
            ins.to_registers = loaded_to_registers(ins.op.result, gp)     # any group: tcgen05.ld
