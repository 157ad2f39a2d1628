"""A barrier-level `WSKernel` prepared for execution: flat instruction lists and resolved resources.

Each group's regions (pre, prologue, loop, epilogue, post) become one flat list of `Instr`; the loop is two
marker instructions (`LOOP_ENTER` before the body, `LOOP_END` after it), so a group's control state is just
(pc, loop counter). Barrier, ring and channel operands are kernel-level values; they are resolved here once
to indices into the CTA state, and malformed uses (an mbarrier op on a value that is not a channel's barrier,
attrs naming another channel) are reported before anything runs.
"""
from __future__ import annotations

import dataclasses

from aref.ir import DType, NamedBarrierAttrs, Op, OpKind, RingType, ScalarType, Space, TileType, Value
from aref.ops import CHANNEL_KINDS, CROSS_GROUP_KINDS, MMA_KINDS, VIEWS
from aref.ir.printer import Namer, format_op
from aref.lower.hopper import turn_once
from aref.sim.launch import (TURN_CONDITIONS, TURNS, Launch, LaunchError, doubled_accumulators, doubled_plan,
                             overlap_consumer, shared_loads)
from aref.sim.tensor_memory import TensorMemory
from aref.ir.ws import WSKernel
from aref.target import target_of

LOOP_ENTER = "loop_enter"
LOOP_END = "loop_end"
# a persistent launch's ring position (`aref.sim.launch`): the op after it uses the shifted slot, parity, item
RING_POS = "ring_pos"

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


__all__ = ["MalformedIR", "LaunchError", "Prog", "Instr"]




class Instr:
    """One step of a group program: an op (kind, operand/result ids, predicate) or a loop marker."""

    __slots__ = ("op", "kind", "args", "res", "pred", "visible", "bar", "ring", "loop", "target", "tile_out",
                 "tensor_pipe", "tmem_ld_bytes", "tmem_st_bytes", "to_registers", "reg_select", "region", "once",
                 "rule", "multicast", "remote")

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
        # the registry's value rule of a compute op (`aref.interp.tile.evaluate` without the look-up per run)
        self.rule = _rule(op) if op is not None and op.kind in COMPUTE else None
        self.region = ""           # the group program's region the op is in (pre, prologue, loop, ...)
        self.multicast = False     # a cluster: a tma_load of a tile both CTAs load (half each, into both)
        self.remote = False        # a cluster: a release of a multicast ring (arrives in both CTAs)
        self.once = None           # a persistent launch runs it on the CTA's "first" or "last" tile only
        # a select of register tiles: it reads both operands (in tensor memory a select renames columns)
        self.reg_select = (op is not None and op.kind is OpKind.SELECT and self.tile_out
                           and op.results[0].type.space is Space.RMEM)


class Prog:
    """Everything static about a kernel the engine needs, computed once per simulate/explore call, for one
    `Launch` (default: one tile per CTA)."""

    def __init__(self, kernel: WSKernel, launch: Launch | None = None):
        if kernel.level != "barrier":
            raise MalformedIR(f"the simulator executes Barrier IR; kernel {kernel.name} is at level {kernel.level}")
        self.kernel = kernel
        self.launch = launch = launch or Launch()
        # a persistent Blackwell launch doubles the accumulators published once per tile (`aref.sim.launch`)
        self.doubled = doubled_accumulators(kernel, launch.persistent)
        base = [dataclasses.replace(ch, depth=2) if ch.name in self.doubled else ch for ch in kernel.channels]
        # a cluster launch: both CTAs' groups and channels, CTA rank 1's after rank 0's (`aref.sim.launch`)
        self.ranks = 2 if launch.clustered else 1
        self.shared: set = set()              # ids of the multicast tma_load ops
        if launch.clustered:
            from aref.target import target_of
            if target_of(kernel.arch).mma != "wgmma":     # the backend's clusters multicast wgmma operands
                raise LaunchError(f"cluster launches are Hopper's (sm_90a); this kernel is for {kernel.arch}")
            self.shared = shared_loads(kernel, launch.axis)
            if not self.shared:
                raise LaunchError(f"no loaded tile is the same in both CTAs of a cluster along grid axis "
                                  f"{launch.axis} (the backend refuses the launch too)")
            names = {op.attrs.channel for gp in kernel.groups for op in gp.all_ops() if id(op) in self.shared}
            base = [dataclasses.replace(ch, empty_count=2 * ch.empty_count) if ch.name in names else ch
                    for ch in base]
        self.nbase = len(base)
        self.chans = base * self.ranks
        self.groups = [gp.group for gp in kernel.groups]
        self.ngroups = len(self.groups)
        # barrier state layout: channel c's full slots at bar_base[c][0], empty slots at bar_base[c][1]
        self.bar_base, self.bar_init, self.bar_where = [], [], []
        self.slot_base, self.nrings, self.empty_count = [], [], []
        self.globals: dict[int, object] = {}
        bar_ids, ring_ids = {}, {}
        nbar = nslot = 0
        # a multicast ring's payload lands in halves, one from each CTA: the half of rank 1 is a payload of its own
        self.half: dict[tuple, int] = {}
        for gp in kernel.groups:
            for op in gp.all_ops():
                if id(op) in self.shared:
                    c = next(i for i, ch in enumerate(base) if ch.name == op.attrs.channel)
                    r = next(i for i, ring in enumerate(base[c].rings) if ring is op.operands[-4])
                    if (c, r) not in self.half:
                        self.half[(c, r)] = len(base[c].rings) + sum(k[0] == c for k in self.half)
        for (c, r), h in list(self.half.items()):
            self.half[(c + self.nbase, r)] = h
        for c, ch in enumerate(self.chans):
            if ch.full is None or ch.empty is None or not ch.rings:
                raise MalformedIR(f"channel {ch.name} has no mbarriers or rings (not lowered)")
            bases = []
            for which, bar, count in (("full", ch.full, ch.full_count), ("empty", ch.empty, ch.empty_count)):
                if count <= 0:
                    raise MalformedIR(f"channel {ch.name}: {which} barrier has arrival count {count}")
                if c < self.nbase:
                    bar_ids[id(bar)] = (c, which)
                bases.append(nbar)
                for s in range(ch.depth):
                    self.bar_init.append(count)
                    self.bar_where.append((c, which, s))
                nbar += ch.depth
            self.bar_base.append(tuple(bases))
            self.slot_base.append(nslot)
            nslot += ch.depth
            self.nrings.append(len(ch.rings) + sum(k[0] == c for k in self.half))
            self.empty_count.append(ch.empty_count)
            for r, ring in enumerate(ch.rings):
                if not isinstance(ring.type, RingType) or ring.type.depth != kernel.channel(ch.name).depth:
                    raise MalformedIR(f"channel {ch.name}: ring {r} has type {ring.type}, expected depth {ch.depth}")
                if c < self.nbase:
                    ring_ids[id(ring)] = (c, r)
            for v in (ch.value, ch.full, ch.empty, *ch.rings):
                self.globals[id(v)] = v
        self.nbars, self.nslots = nbar, nslot
        self.tmem = TensorMemory(kernel, self.chans, doubled_plan(kernel.tmem, self.doubled), self.doubled)
        self.param_ids = {p.name: id(p.value) for p in kernel.params}
        self.programs = [self._flatten(gp, bar_ids, ring_ids) for gp in kernel.groups]
        self.rank_of = [0] * self.ngroups
        self.source = list(range(self.ngroups))    # the kernel group each simulated group runs
        if launch.clustered:
            self._cluster()
        # per group: the channel positions (`ring base` values) and turn conditions of its current tile, set by
        # the engine at each tile's start; the Tile IR loop's trip count (a tile's items follow it)
        self.synthetic: list[Value] = []
        self.bases = [self._new_value() for _ in self.chans]
        self.conditions = {c: self._new_value() for c in TURN_CONDITIONS}
        # a group not pipelined runs the Tile IR loop's count itself
        self.trip_count_ids = [id(gp.trip_count) if gp.trip_count is not None else
                               id(gp.loop.trip_count) if gp.loop is not None and not gp.stages else None
                               for gp in (kernel.groups[i] for i in self.source)]
        self.copy_of: dict[int, tuple[int, int]] = {}      # group index -> (copied group, copy number)
        self.tile_consts: dict[int, dict] = {}                # group -> {value id: constant} set at each tile
        self._texts = None
        self._texts_extra: dict[int, str] = {}
        if launch.persistent:
            self.programs = [self._shift_rings(self._persistent(gi, code)) for gi, code in enumerate(self.programs)]
        if launch.epilogue_overlap:
            self._overlap_copies()
        self._derive_users()

    def _derive_users(self) -> None:
        """Which groups can complete a phase of each barrier array / take part in each named barrier."""
        self.arrivers: dict[tuple, set] = {}
        self.nb_users: dict[int, set] = {}
        for g, prog in enumerate(self.programs):
            for ins in prog:
                if ins.kind in (OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX, OpKind.TMA_LOAD, OpKind.MMA_COMMIT):
                    self.arrivers.setdefault(ins.bar, set()).add(g)
                    if ins.remote or ins.multicast:     # a cluster's remote release or multicast copy
                        self.arrivers.setdefault((self.peer(ins.bar[0]), ins.bar[1]), set()).add(g)
                elif ins.kind in (OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE):
                    self.nb_users.setdefault(self.nb_key(g, ins.op.attrs.id), set()).add(g)

    def _cluster(self) -> None:
        """Both CTAs of a cluster: rank 1's groups run rank 0's programs on rank 1's channels; a shared load
        multicasts, a release of a multicast ring arrives in both CTAs (`aref.sim.launch`)."""
        shared_chans = {c for c, _ in self.half}
        for code in self.programs:
            for ins in code:
                if id(ins.op) in self.shared:
                    ins.multicast = True
                elif ins.kind is OpKind.MBAR_ARRIVE and ins.bar[1] == "empty" and ins.bar[0] in shared_chans:
                    ins.remote = True
        n = self.nbase
        peer = []
        for code in self.programs:
            out = []
            for ins in code:
                ins = _clone(ins)
                if ins.bar is not None:
                    ins.bar = (ins.bar[0] + n, ins.bar[1])
                if ins.ring is not None:
                    ins.ring = (ins.ring[0] + n, ins.ring[1])
                out.append(ins)
            peer.append(_retarget(out))
        self.programs += peer
        self.groups += [dataclasses.replace(g, name=f"{g.name}@1") for g in self.groups]
        self.rank_of = [0] * self.ngroups + [1] * self.ngroups
        self.source = self.source * 2
        self.ngroups = len(self.groups)

    NB_RANK = 1000

    def nb_key(self, g: int, nb: int) -> int:
        """The state key of named barrier `nb` as group g sees it (each CTA of a cluster has its own)."""
        return nb + self.NB_RANK * self.rank_of[g]

    def peer(self, c: int) -> int:
        """The same channel in the other CTA of the cluster."""
        return c + self.nbase if c < self.nbase else c - self.nbase

    def ring_mask(self, c: int, r: int) -> int:
        """The payload bits a slot_read of ring r of channel c needs landed (both halves of a multicast)."""
        h = self.half.get((c, r))
        return 1 << r if h is None else 1 << r | 1 << h

    def _new_value(self) -> Value:
        v = Value(ScalarType(DType.int32), "sim")
        self.synthetic.append(v)            # kept alive: instructions refer to values by id
        return v

    # ------------------------------------------------------------------------------------ launches
    def _persistent(self, gi: int, code: list) -> list:
        """A group's program as a persistent launch runs it for each tile (`aref.sim.launch`): setmaxnreg before
        the first tile only, the ping-pong turns the loop starts and ends with once per CTA
        (`aref.lower.turn_once`); on Blackwell, what guards the release of tensor memory after the last tile
        only, and the MMA group acquiring the tensor-memory rings it publishes after its loop at each tile's
        start (`aref.backend.cute.sm100.persistent`)."""
        kernel = self.kernel
        loop_chans = {c for c, ch in enumerate(self.chans) if ch.region == "loop"}
        if self.trip_count_ids[gi] is None and any((ins.bar or ins.ring or (None,))[0] in loop_chans
                                                    for ins in code):
            raise LaunchError(f"group {kernel.groups[gi].group.name} uses a loop channel but does not compute the "
                              f"loop's trip count: a persistent launch cannot place its next tile's items")
        from aref.target import target_of
        sm100 = target_of(kernel.arch).has_tensor_memory and kernel.tmem is not None
        one_warp = kernel.groups[gi].group.warps == 1
        out, after = [], []
        for ins in code:
            if ins.kind is OpKind.SETMAXNREG:
                ins.once = "first"
            elif ins.kind in (OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE):
                ins.once = turn_once(kernel, ins.op, ins.region)
            if sm100 and (ins.kind is OpKind.TMEM_DEALLOC
                          or ins.kind in (OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE)
                          and ins.op.attrs.id == kernel.tmem.dealloc_barrier
                          or ins.kind is OpKind.MMA_WAIT and ins.region == "post" and one_warp):
                ins = _clone(ins)
                ins.once = "last"
                after.append(ins)
                continue
            out.append(ins)
        if sm100 and any(ins.kind is OpKind.MMA_ASYNC for ins in code):
            at = next((i for i, ins in enumerate(out) if ins.region != "pre" or ins.kind is OpKind.MMA_ASYNC),
                      len(out))
            out[at:at] = self._acquire(gi, out)
        return out + after

    def _acquire(self, gi: int, code: list) -> list:
        """Blackwell persistent: the MMA group's waits, at each tile's start, on the `empty` barriers of the
        tensor-memory rings it publishes after its loop (the slot and phase of those waits, constants), so
        that the tile's MMAs write their columns only after the previous tile's readers released them."""
        prod = {id(r): op for op in self.kernel.groups[gi].all_ops() for r in op.results}
        out = []
        for ins in code:
            if not (ins.kind is OpKind.MBAR_WAIT and ins.region in ("epilogue", "post") and ins.bar[1] == "empty"
                    and ins.bar[0] in self.tmem.of_chan):
                continue
            consts = [prod.get(id(v)) for v in ins.op.operands[1:3]]
            if ins.pred is not None or any(c is None or c.kind is not OpKind.CONST for c in consts):
                raise LaunchError(f"a persistent kernel whose tensor-memory ring {ins.op.attrs.channel} is "
                                  f"acquired at a slot known only after the loop (the Blackwell templates refuse "
                                  f"it: compile without --persistent)")
            wait = _clone(ins)
            args = list(ins.args)
            for i, c in zip((1, 2), consts):
                v = self._new_value()
                self.tile_consts.setdefault(gi, {})[id(v)] = c.attrs.value
                args[i] = id(v)
            wait.args = tuple(args)
            out.append(wait)
        return out

    def _shift_rings(self, code: list) -> list:
        """Every ring access of a persistent launch at the ring's position (`aref.sim.launch`): before each op
        on a channel a RING_POS instruction computes the shifted slot (and wait parity, and item), which the
        op then uses, as the backend's `<ring>_base` arithmetic does."""
        out = []
        for ins in code:
            where = _ring_operands(ins)
            if where is None:
                out.append(ins)
                continue
            c = ins.bar[0] if ins.bar is not None else ins.ring[0]
            pos = Instr(kind=RING_POS)
            pos.pred, pos.ring = ins.pred, (c, ins.bar[1] if ins.bar is not None else "full")
            pos.args = tuple(ins.args[i] if i is not None else None for i in where)
            pos.res = tuple(id(self._new_value()) if i is not None else None for i in where)
            pos.op = ins.op
            shifted = _clone(ins)
            args = list(ins.args)
            for i, r in zip(where, pos.res):
                if i is not None:
                    args[i] = r
            shifted.args = tuple(args)
            out += [pos, shifted]
        for i, ins in enumerate(out):      # loop markers jump by position
            if ins.kind == LOOP_ENTER:
                end = next(j for j in range(i + 1, len(out)) if out[j].kind == LOOP_END and out[j].loop is ins.loop)
                ins.target, out[end].target = end + 1, i + 1
        return out

    def _overlap_copies(self) -> None:
        """Epilogue overlap: a second copy of the consumer, and in both copies the turn hand-overs before and
        after the main loop (every ring access) and the epilogue (what follows it)."""
        try:
            g = overlap_consumer(self.kernel)
        except ValueError as exc:
            raise LaunchError(str(exc)) from None
        code = [ins for ins in self.programs[g] if ins.kind is not OpKind.SETMAXNREG]
        last = max((i for i, ins in enumerate(code) if ins.bar is not None), default=None)
        if last is None:
            raise LaunchError("epilogue overlap: the consumer accesses no ring")
        end = last + 1
        loop_end = next((i for i, ins in enumerate(code) if ins.kind == LOOP_END), None)
        enter = next((i for i, ins in enumerate(code) if ins.kind == LOOP_ENTER), None)
        if enter is not None and enter < last < loop_end:
            end = loop_end + 1                 # the last access is in the loop: the main loop ends after it
        first = max((nb.id for nb in self.kernel.named_barriers), default=0) + 1
        order = (first, first + 1)             # copy c syncs on order[c], arrives on the other's
        group = self.groups[g]
        self.groups.append(dataclasses.replace(group, id=max(x.id for x in self.groups) + 1,
                                               name=group.name + "_1"))
        copies = []
        for c in (0, 1):
            def turn(point, action):
                bar = order[c] if action == "wait" else order[1 - c]
                kind = OpKind.NAMED_BAR_SYNC if action == "wait" else OpKind.NAMED_BAR_ARRIVE
                op = Op(kind, (), (), NamedBarrierAttrs(bar, 2 * group.threads), self.kernel.loc)
                ins = Instr(op)
                cond = TURNS[(c, point, action)]
                ins.pred = None if cond == "True" else id(self.conditions[cond])
                self._texts_extra[id(op)] = (f"named_barrier_{'sync' if action == 'wait' else 'arrive'} {bar} "
                                             f"(epilogue overlap: copy {c} {action}s its {point} turn "
                                             f"if {cond})")
                return ins
            body = ([turn("main", "wait")] + code[:end] + [turn("main", "pass"), turn("epilogue", "wait")]
                    + code[end:] + [turn("epilogue", "pass")])
            copies.append(_retarget(body))
        self.programs[g] = copies[0]
        self.programs.append(copies[1])
        self.copy_of = {g: (g, 0), len(self.programs) - 1: (g, 1)}
        self.trip_count_ids.append(self.trip_count_ids[g])
        self.source.append(g)
        self.rank_of.append(0)
        self.ngroups = len(self.groups)
        self._derive_users()

    def _flatten(self, gp, bar_ids, ring_ids) -> list[Instr]:
        out: list[Instr] = []
        for region, block in gp.regions():
            start = len(out)
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
            for ins in out[start:]:
                ins.region = region
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
        return self._texts.get(id(op)) or self._texts_extra.get(id(op)) or format_op(op, Namer())


def _rule(op):
    from aref import ops as ops_registry
    try:
        return ops_registry.entry(op).interpret
    except KeyError:
        return None


def _ring_operands(ins) -> tuple | None:
    """Operand positions of (slot, wait parity, item) of a channel op (None where it has none), or None."""
    k, n = ins.kind, len(ins.args)
    if k is OpKind.MBAR_WAIT:
        return (1, 2, None)
    if k in (OpKind.MBAR_ARRIVE, OpKind.MMA_COMMIT):
        return (1, None, 2 if n > 2 else None)
    if k is OpKind.MBAR_EXPECT_TX:
        return (1, None, None)
    if k is OpKind.TMA_LOAD:
        return (n - 3, None, n - 1)
    if k in (OpKind.SLOT_STORE, OpKind.SLOT_READ):
        return (1, None, 2)
    return None


def _clone(ins: Instr) -> Instr:
    out = Instr.__new__(Instr)
    for name in Instr.__slots__:
        setattr(out, name, getattr(ins, name))
    return out


def _retarget(code: list) -> list:
    """Fresh copies of the loop markers of `code` pointing at their new positions (the copies of a group
    share every other instruction)."""
    out = list(code)
    for i, ins in enumerate(out):
        if ins.kind == LOOP_ENTER:
            end = next(j for j in range(i + 1, len(out)) if out[j].kind == LOOP_END and out[j].loop is ins.loop)
            out[i], out[end] = _clone(ins), _clone(out[end])
            out[i].target, out[end].target = end + 1, i + 1
    return out


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
