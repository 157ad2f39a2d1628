"""One warp group of sm_100a Barrier IR → one role function of CuTe DSL source.

The synchronisation skeleton is the Barrier IR's, op for op and under `# aref-ir[...]` tags, as on Hopper
(`aref.backend.cute.role`, whose scalar, barrier, TMA, loop and tag machinery this emitter inherits). What
Blackwell changes is filled in here:

  * MMAs are tcgen05: one elected thread issues them into the tensor-memory buffer the IR names
    (`mma_async … -> tmem O`), operands from shared-memory descriptors or (A) tensor memory; an
    accumulator that starts at zero is issued without accumulation (a run-time flag when the first
    iteration is not peeled); `mma_commit` is `tcgen05.commit` to the mbarrier;
  * publishing an MMA result is free (it is in place); publishing a zero accumulator from the MMA warp is
    a zero MMA into it;
  * compute groups load tensor memory with tcgen05.ld and write it back with tcgen05.st in the row layout
    (`sm100.support`), and do their math there: elementwise chains per thread, row reductions thread-local;
    index tiles and vectors along the columns take the column of each register element of the thread's row;
  * epilogues store tiles (and row vectors) from shared memory with one TMA store (the epilogue warp), or
    stage registers in shared memory first (a compute group);
  * pipeline steps guarded by a run-time predicate are the Hopper emitter's; a tensor-memory tile stays
    there across the guard (a run-time select between its states is the buffer itself).
"""
from __future__ import annotations

from dataclasses import dataclass

from aref.backend.cute.analysis import CUTLASS_DTYPE, BackendError, ident
from aref.backend.cute.render import Ctx, Nest
from aref.backend.cute.role import TAGGED, RoleEmitter
from aref.backend.cute.sm100.persistent import PersistentRole
from aref.resources.tensor_core import unwritten_when
from aref.backend.cute.sm100.rows import RowLayout
from aref.backend.cute.source import Lines
from aref.backend.cute.values import Buffer, Reg, SmemTile, Zero, coordinate, paren, strip_parens
from aref.ir import Op, OpKind, Space, TileType, Value
from aref.resources.layout import ACC, COL, tile_layout

SM100_TAGGED = tuple(TAGGED) + (OpKind.MMA_COMMIT, OpKind.TMEM_ALLOC, OpKind.TMEM_DEALLOC, OpKind.TMEM_STORE_FENCE)


@dataclass(frozen=True)
class TmemTile:
    """A tile in tensor memory: `buffer` of the plan (slot `slot` of a ring), `started` the run-time flag set
    once an MMA has written an accumulator that began as zero (None: always written)."""

    buffer: str
    slot: str = "0"
    started: str | None = None


class Sm100RoleEmitter(PersistentRole, RowLayout, RoleEmitter):
    tagged = SM100_TAGGED
    templates = "Blackwell templates"

    def __init__(self, plan, g):
        super().__init__(plan, g)
        self.producer = False                 # one-warp load group: no inner warp selection
        self.mixed = g.issues_mma and g.gp.group.warps == 4
        self.pending_direct: dict[str, str] = {}     # channel -> TMA store reading its slot, not yet waited
        self.nest_rows: int | None = None             # rows of the 2-D tile the current element loop visits
        self._col_rows: list[int] | None = None
        self.after_tiles = Lines()                     # persistent: code after the last tile (`PersistentRole`)

    # ---------------------------------------------------------------------------------------- helpers
    def thr(self, mma: str) -> str:
        return self.local(("thr", mma), f"thr_{mma}", f"{self.arg(mma)}.get_slice(0)")

    def tmem(self) -> str:
        return self.local(("tmem",), "tmem", f"cute.arch.retrieve_tmem_ptr(cutlass.Float32, alignment=16, "
                                             f"ptr_to_buffer_holding_addr={self.arg('tmem_holder')})")

    def tbuf(self, name: str):
        return self.plan.tmem.buffer(name)

    def tmem_view(self, buffer: str, slot: str = "0", packed: bool = False) -> str:
        """The (rows, cols) 32-bit view of a buffer (slot) for tcgen05.ld / st."""
        b = self.tbuf(buffer)
        per_slot = b.cols // b.depth
        col = f"{b.col}" if slot == "0" or b.depth == 1 else f"{b.col} + {per_slot} * ({slot})"
        code = f"sm100.tmem_tile({self.tmem()}, {col}, {b.rows}, {per_slot})"
        if slot == "0" or b.depth == 1:
            return self.local(("tview", buffer), f"t_{ident(buffer)}", code)
        name = self.names(f"t_{ident(buffer)}")
        self.out(f"{name} = {code}")
        return name

    def acc_tensor(self, buffer: str, mma: str, cfg) -> str:
        return self.mma_target(("acc", buffer, mma), f"acc_{ident(buffer)}", buffer, self.arg(mma), cfg.m, cfg.n)

    def issue(self, line: str) -> None:
        """A tensor-core instruction: one warp issues it (in a warp group, the group's first warp)."""
        if self.mixed:
            with self.out.block("if warp_in_group == 0:"):
                self.out(line)
        else:
            self.out(line)

    # ------------------------------------------------------------------ tensor memory → registers
    def materialize(self, v: Value) -> Buffer:
        c = self.env[id(v)]
        if isinstance(c, SmemTile) and tile_layout(v.type) == ACC:      # vectors: read per row (`smem_element`)
            buf = self.new_buffer(v)
            self.out(f"sm100.copy_rows({self.smem_view(c)}, {buf.name})")
            self.env[id(v)] = Reg(buf)
            return buf
        if isinstance(c, TmemTile):         # CUDA cores read an MMA result (its mma_wait came before)
            t = v.type
            if t.dtype.bits != 32:
                raise BackendError(f"CUDA cores read a {t.dtype.value} tile from tensor memory", self.loc)
            self.check_rows(t)
            buf = self.new_buffer(v)
            self.out(f"sm100.tmem_load({self.tmem_view(c.buffer, c.slot)}, {buf.name}, {t.shape[0]}, {t.shape[1]}, "
                     f"tidx)  # tcgen05.ld + wait::ld")
            self.zero_if_unwritten(v, lambda: self.out(f"{buf.name}.fill(0.0)"))
            self.env[id(v)] = Reg(buf)
            return buf
        return super().materialize(v)

    def elementwise(self, v: Value, op: Op) -> Buffer:
        for o in self.leaves(op):           # tensor-memory inputs come to registers first (then reusable)
            if isinstance(self.env.get(id(o)), TmemTile):
                self.materialize(o)
        return super().elementwise(v, op)

    def leaf(self, v: Value, c, ctx: Ctx, nest: Nest) -> str:
        if isinstance(c, TmemTile):         # an MMA result read by CUDA cores: tcgen05.ld first
            c = Reg(self.materialize(v))
        return super().leaf(v, c, ctx, nest)

    # ------------------------------------------------------------------------------- slots, TMEM
    def op_slot_read(self, op: Op) -> None:
        ring_t = op.operands[0].type.tile
        if ring_t.space is not Space.TMEM:
            super().op_slot_read(op)
            return
        a = op.attrs
        buffer = self.plan.tmem.ring_buffer[a.channel]
        slot = strip_parens(self.slot_of(a.channel, self.scalar(op.operands[1])).expr)
        users = [u for _, u in self.use_at.get(id(op.result), [])]
        if not self._cuda_core_use(op.result) or users and all(
                u is not None and u.kind is OpKind.SLICE for u in users):
            # an MMA operand / accumulator, or read by column chunks (each loaded where it is sliced)
            self.env[id(op.result)] = TmemTile(buffer, slot)
            return
        t = op.result.type
        if t.dtype.bits != 32:
            raise BackendError(f"CUDA cores read a {t.dtype.value} tile from tensor memory; the templates load "
                               f"32-bit tiles", op.loc)
        self.check_rows(t)
        buf = self.new_buffer(op.result)
        self.env[id(op.result)] = Reg(buf)
        self.out(f"sm100.tmem_load({self.tmem_view(buffer, slot)}, {buf.name}, {t.shape[0]}, {t.shape[1]}, tidx)"
                 f"  # tcgen05.ld + wait::ld")

    def _cuda_core_use(self, v: Value, depth: int = 0) -> bool:
        for _, user in self.use_at.get(id(v), []):
            if user is None:
                return True
            if user.kind in (OpKind.TRANSPOSE, OpKind.SLICE, OpKind.SELECT):
                if depth < 16 and self._cuda_core_use(user.result, depth + 1):
                    return True
            elif user.kind is not OpKind.MMA_ASYNC and not (
                    user.kind is OpKind.SLOT_STORE and user.operands[0].type.tile.space is Space.TMEM
                    and self.g.issues_mma):
                return True
        return False

    def op_slot_store(self, op: Op) -> None:
        a = op.attrs
        cp = self.plan.channel(a.channel)
        v = op.operands[3]
        t = v.type
        slot = strip_parens(self.slot_of(a.channel, self.scalar(op.operands[1])).expr)
        if op.operands[0].type.tile.space is Space.TMEM:
            buffer = self.plan.tmem.ring_buffer[a.channel]
            c = self.env.get(id(v))
            if isinstance(c, TmemTile):
                self.out(f"# in place: the MMA wrote {buffer} (tensor memory), which holds {cp.ch.name}")
                self.zero_if_unwritten(v, lambda: self.zero_fill(c.buffer, t))
                return
            if isinstance(c, Zero) and self.g.issues_mma and not self._cuda_core_writer():
                self.zero_fill(buffer, t)
                self.env[id(v)] = TmemTile(buffer)         # the zeros are there now: MMAs accumulate on them
                return
            buf = self.materialize(v)
            self.check_rows(t)
            if a.cols:
                # a column chunk (`aref.lower.chunk_sm100`): tcgen05.st into its columns of the slot
                if t.dtype.bits != 32:
                    raise BackendError("internal: a column chunk of a 16-bit tile stored to tensor memory", op.loc)
                b = self.tbuf(buffer)
                col = f"{b.col + a.cols[0]}" + ("" if slot == "0" or b.depth == 1 else
                                                f" + {b.cols // b.depth} * ({slot})")
                self.out(f"sm100.tmem_store(sm100.tmem_tile({self.tmem()}, {col}, {t.shape[0]}, {t.shape[1]}), "
                         f"{buf.name}, {t.shape[0]}, {t.shape[1]}, tidx)  # tcgen05.st: columns "
                         f"{a.cols[0]}..{a.cols[0] + a.cols[1] - 1} of {buffer}")
                return
            if t.dtype.bits == 16:
                if t.shape[0] != 128:
                    raise BackendError("a 16-bit tile written to tensor memory must have 128 rows", op.loc)
                self.out(f"sm100.tmem_store_packed({self.tmem_view(buffer, slot)}, {buf.name}, {t.shape[0]}, "
                         f"{t.shape[1]}, tidx)  # tcgen05.st, two 16-bit elements per column")
            else:
                self.out(f"sm100.tmem_store({self.tmem_view(buffer, slot)}, {buf.name}, {t.shape[0]}, {t.shape[1]}, "
                         f"tidx)  # tcgen05.st")
            return
        ring = cp.buffers[a.index]
        if a.cols:
            # a column chunk (`aref.lower.chunk_sm100`): this thread's row of those columns of the slot
            buf = self.materialize(v)
            if buf.layout != "acc" or a.cols[0] % a.cols[1]:
                raise BackendError("internal: a column chunk of a shared-memory slot that is not a row-layout "
                                   "tile at a multiple of its width", op.loc)
            rows, width = t.shape
            tile = f"cute.local_tile({self.arg(ring.name)}[None, None, {slot}], ({rows}, {width}), " \
                   f"(0, {a.cols[0] // width}))"
            self.out(f"sm100.copy_rows({buf.name}, sm100.smem_rows({tile}, {rows}, {width}, tidx))  # columns "
                     f"{a.cols[0]}..{a.cols[0] + width - 1}")
        else:
            self.write_slot(ring, slot, self.materialize(v), t)
        if ring.name in self.plan.direct_stores.values() and not cp.ch.async_read:
            # a TMA store reads the slot straight (the async proxy): these generic-proxy writes are fenced
            # before the arrive that lets the storing warp go (the IR fences only slots MMAs read)
            self.out('cute.arch.fence_proxy("async.shared", space="cta")  # the slot is TMA-stored')

    def write_slot(self, ring, slot: str, buf: Buffer, t: TileType) -> None:
        """This thread's elements of register tile `buf` into `slot` of shared ring `ring`."""
        if buf.layout == COL:
            # a vector along the columns, (C,) or (1, C), in a plain row-major ring: every thread holds the
            # entries at the columns of its row, the same in every row, so the threads of row 0 write them
            # (readers index the slot by column: `smem_element`)
            crd = self.local(("coords", buf.tile_rows, t.shape[-1]), f"crd{buf.tile_rows}",
                             f"sm100.coords({buf.tile_rows}, {t.shape[-1]}, tidx)")
            lead = "0, " if len(t.shape) == 2 else ""
            with self.out.block(f"if {crd}[0][0] == 0:  # row 0's threads write the vector"):
                with self.out.block(f"for c in cutlass.range_constexpr({buf.cols}):"):
                    self.out(f"{self.arg(ring.name)}[{lead}{crd}[c][1], {slot}] = {buf.name}[c]")
            return
        if buf.layout != "acc":
            # a row vector or a scalar: rank 1, or a 2-D (R, 1) / (1, 1) tile, whose ring is plain row-major (the
            # threads sharing a row write the same value)
            row = self.my_row(t.shape[0]) if buf.layout == "row" else "0"
            self.out(f"{self.arg(ring.name)}[{row}{', 0' if len(t.shape) == 2 else ''}, {slot}] = {buf.name}[0]")
            return
        self.check_rows(t)
        self.out(f"sm100.copy_rows({buf.name}, sm100.smem_rows({self.arg(ring.name)}[None, None, {slot}], "
                 f"{t.shape[0]}, {t.shape[1]}, tidx))")

    def held_in_registers(self, v: Value) -> bool:
        """A tensor-memory tile the MMA warp writes (a zero accumulator) never passes through its registers."""
        return not (isinstance(v.type, TileType) and v.type.space is Space.TMEM and self.g.issues_mma
                    and not self._cuda_core_writer())

    def _cuda_core_writer(self) -> bool:
        return self.gp.group.warps == 4 and not self.mixed

    def zero_fill(self, buffer: str, t: TileType) -> None:
        m, n = t.shape
        i = self.plan.zero_mmas.index((m, n))
        zm = self.arg(f"zmma{i}")
        thr = self.local(("thr", f"zmma{i}"), f"thr_zmma{i}", f"{zm}.get_slice(0)")
        za = self.local(("za", i), f"zeros_a{i}", f"{zm}.make_fragment_A({thr}.partition_A(aref.row_block("
                                                   f"{self.arg('s_zero')}, {m}, 16, 0)))[None, None, None, 0]")
        zb = self.local(("zb", i), f"zeros_b{i}", f"{zm}.make_fragment_B({thr}.partition_B(aref.row_block("
                                                   f"{self.arg('s_zero')}, {n}, 16, 0)))[None, None, None, 0]")
        acc = self.mma_target(("zacc", buffer), f"zacc_{ident(buffer)}", buffer, zm, m, n)
        self.out(f"# {buffer} starts at zero: the tensor core writes it (an MMA of two zero tiles)")
        self.issue(f"sm100.zero_fill({zm}, {acc}, {za}, {zb})")

    def zero_if_unwritten(self, v: Value, zero) -> None:
        """`zero()` when no MMA has written the accumulator `v` (its loop ran no trip: `unwritten_when`), so it
        holds the initial zeros the interpreter gives it, not whatever tensor memory held."""
        n = unwritten_when(self.gp, v) if self.g.issues_mma else None
        if n is None:
            return
        trip = self.scalar(n)
        if trip.static:
            self.out(f"# no MMA writes {v.name or 'the accumulator'} (the loop runs no trip): its initial zeros")
            zero()
            return
        with self.out.block(f"if {paren(trip.expr)} == 0:  # the loop ran no trip: no MMA wrote the accumulator, "
                            f"which holds its initial zeros"):
            zero()

    def op_tmem_store_fence(self, op: Op) -> None:
        self.out("sm100.tmem_store_fence()  # tcgen05.wait::st before the arrive that publishes")

    def op_tmem_alloc(self, op: Op) -> None:
        self.out(f"# {self.plan.tmem.columns} columns allocated by this warp before the roles started (kernel prologue)")

    # -------------------------------------------------------------------------------------- MMAs
    def operand_frag(self, v: Value, mma: str, which: str) -> str:
        c = self.env.get(id(v))
        if isinstance(c, TmemTile):
            if which != "A":
                raise BackendError("a tcgen05 B operand in tensor memory", self.loc)
            cfg = self.plan.mmas[int(mma[3:])]
            b = self.tbuf(c.buffer)
            k = v.type.shape[1]
            return self.local(("tmem_a", c.buffer, mma), f"a_{ident(c.buffer)}",
                              f"sm100.tmem_operand_a({self.arg(mma)}, {self.tmem()}, {b.col}, {cfg.m}, {cfg.n}, {k}, "
                              f"cutlass.{CUTLASS_DTYPE[v.type.dtype]})")
        return super().operand_frag(v, mma, which)

    def op_mma_async(self, op: Op) -> None:
        i = self.plan.mma_of[id(op)]
        cfg = self.plan.mmas[i]
        mma = f"mma{i}"
        a = self.operand_frag(op.operands[0], mma, "A")
        b = self.operand_frag(op.operands[1], mma, "B")
        buffer = op.attrs.tmem
        started = None
        accumulate = "False"
        if len(op.operands) > 2:
            c = self.env.get(id(op.operands[2]))
            if isinstance(c, TmemTile):
                if c.buffer != buffer:
                    raise BackendError("internal: an MMA accumulates from another tensor-memory buffer", op.loc)
                started = c.started
                accumulate = c.started or "True"
            elif not (isinstance(c, Zero) and c.fill == 0.0):
                raise BackendError("a tcgen05 accumulator that is neither zero nor in tensor memory", op.loc)
        acc = self.acc_tensor(buffer, mma, cfg)
        self.issue(f"sm100.umma({self.arg(mma)}, {acc}, {a}, {b}, accumulate={accumulate})")
        if started:
            self.out(f"{started} = cutlass.Boolean(True)")
        self.env[id(op.result)] = TmemTile(buffer, "0", None)

    def op_mbarrier_wait(self, op: Op) -> None:
        super().op_mbarrier_wait(op)
        if not self.plan.channel(op.attrs.channel).buffers:      # a tensor-memory ring: its data (or room)
            self.out("sm100.after_wait()  # tcgen05.fence::after_thread_sync")

    op_mbar_wait = op_mbarrier_wait

    def op_mma_commit(self, op: Op) -> None:
        a = op.attrs
        if a.which == "empty" and self.g.index in self.plan.channel(a.channel).cuda_core_readers:
            self.out("# every warp's CUDA-core reads of the slot are done before the MMAs' commit releases it")
            self.out(f"cute.arch.barrier(barrier_id={self.g.group_barrier}, number_of_threads=aref.WARP_GROUP_THREADS)")
        self.issue(f"sm100.commit({self.bar(op.operands[0], op.operands[1], a.which, a.channel)})  # tcgen05.commit")

    def mma_wait(self, op: Op) -> None:
        """`mma_wait` (the IR op's handler is `PersistentRole.op_mma_wait`, which may move it after the last
        tile): a commit of this group's MMAs to its own barrier, and the wait for it."""
        bar = self.arg(f"mma_done_{ident(self.gp.group.name)}")
        phase = self.names.reserve("mma_phase")
        if ("mma_phase",) not in self.frags:
            self.frags[("mma_phase",)] = phase
            self.setup("mma_phase = cutlass.Int32(0)")
        self.out("# this group's MMAs are done before its CUDA cores read their results")
        self.issue(f"sm100.commit({bar})")
        self.out(f"cute.arch.mbarrier_wait({bar}, mma_phase)")
        self.out("mma_phase = mma_phase ^ 1")
        self.retire(0)

    # ------------------------------------------------------------------------------- loop-carried
    def loop_entry(self, lp) -> None:
        tiles = {}
        for init, car in zip(lp.inits, lp.carried):
            if isinstance(car.type, TileType) and car.type.space is Space.TMEM:
                c = self.env[id(init)]
                if isinstance(c, Reg):
                    # a slot of a tensor-memory channel this group read into registers before the loop (a
                    # pipelined read carried to the next stage): an ordinary register carry
                    continue
                buffer = self._buffer_of_carried(lp, car)
                if isinstance(c, Zero):
                    flag = self.names(f"{ident(buffer)}_started")
                    self.out(f"{flag} = cutlass.Boolean(False)  # {buffer} holds no MMA result yet")
                    tiles[id(car)] = TmemTile(buffer, "0", flag)
                else:
                    tiles[id(car)] = TmemTile(buffer, "0", getattr(c, "started", None))
                self.dead_carried.add(id(car))          # no registers: the tile stays in tensor memory
        super().loop_entry(lp)
        self.env.update(tiles)

    def _buffer_of_carried(self, lp, car) -> str:
        y = lp.yields[list(lp.carried).index(car)]
        op = self.prod.get(id(y))
        while op is not None and op.kind is OpKind.SELECT:
            op = self.prod.get(id(op.operands[1]))
        if op is None or op.kind is not OpKind.MMA_ASYNC:
            raise BackendError("internal: a loop-carried tensor-memory tile not computed by an MMA", lp.loc)
        return op.attrs.tmem

    def loop_results(self, lp, trip) -> None:
        carried_tmem = {id(c): self.env[id(c)] for c in lp.carried if isinstance(self.env.get(id(c)), TmemTile)}
        super().loop_results(lp, trip)
        for c, r in zip(lp.carried, lp.results):
            if id(c) in carried_tmem:
                self.env[id(r)] = carried_tmem[id(c)]

    def op_select(self, op: Op) -> None:
        """A run-time choice between two states of one tensor-memory buffer (a guarded pipeline step's MMA
        result or the value before it) is that buffer: the choice is only whether an MMA has written it."""
        a, b = (self.env.get(id(o)) for o in op.operands[1:])
        p = self.scalar(op.operands[0])
        if p.static or not (isinstance(a, TmemTile) and isinstance(b, TmemTile)):
            super().op_select(op)
            return
        if (a.buffer, a.slot) != (b.buffer, b.slot):
            raise BackendError(f"a run-time choice between tensor-memory tiles {a.buffer}[{a.slot}] and "
                               f"{b.buffer}[{b.slot}]", op.loc)
        started = a.started
        if a.started != b.started:
            started = self.names(f"{ident(a.buffer)}_started")
            self.out(f"{started} = cutlass.Boolean(cutlass.select_({strip_parens(p.expr)}, {a.started or True}, "
                     f"{b.started or True}))")
        self.env[id(op.result)] = TmemTile(a.buffer, a.slot, started)

    # ----------------------------------------------------------------------------------- stores
    def op_store(self, op: Op) -> None:
        t = next(tp for tp in self.plan.tensors if tp.name == self.plan.ws.params[
            [id(p.value) for p in self.plan.ws.params].index(id(op.operands[0]))].name)
        value = op.operands[-1]
        coords = [self.scalar(c) for c in op.operands[1:-1]]
        rank = len(t.shape)
        lead = rank - len(op.attrs.tile_shape)
        idx = ", ".join(coordinate(c) for c in coords[lead:] + coords[:lead])
        direct = self.plan.direct_stores.get(id(op))
        if direct is not None:
            s = self.env[id(value)]
            tma = self.plan.tma(t.name, op.attrs.tile_shape, direct, store=True, reduce=op.attrs.reduce)
            s_part, g_part = self.tma_partition(tma, direct, len(op.attrs.tile_shape), rank)
            self.out(f"aref.issue_store({self.arg(tma.name)}, {s_part}[None, {strip_parens(s.slot.expr)}], "
                     f"{g_part}[None, {idx}], 0)  # one thread: TMA store straight from the slot")
            self.pending_direct[s.channel] = tma.name
            self.pending_store.add(direct)
            return
        stage = self.plan.staging[id(op)]
        tiled = len(op.attrs.tile_shape)
        tma = self.plan.tma(t.name, op.attrs.tile_shape, stage.name, store=True, reduce=op.attrs.reduce)
        s_tensor = self.staging_tensor(stage)        # its own tile, or a view over the idle buffer it reuses
        s_part, g_part = self.tma_partition(tma, stage.name, tiled, rank, staging=s_tensor)
        host = self.plan.host_of(stage)
        buf = self.materialize(value)
        if {stage.name, host and host.name} & self.pending_store or self.in_loop or self.plan.persistent:
            self.out("# the previous TMA store from this staging tile (an earlier one's) must have read it")
            self.out("aref.staging_free(warp_in_group)")
            self.out(f"cute.arch.barrier(barrier_id={self.g.group_barrier}, number_of_threads=aref.WARP_GROUP_THREADS)")
        if buf.layout == COL:          # a vector along the columns, (C,) or a (1, C) row: row 0's threads write it
            self.out(f"sm100.cols_to_smem({buf.name}, {s_tensor}, {buf.tile_rows}, "
                     f"{value.type.shape[-1]}, {tiled}, tidx, barrier_id={self.g.group_barrier})")
        elif tiled == 1:               # a row vector: each thread writes its row's value (both halves at 64 rows)
            self.check_rows(TileType((value.type.shape[0], 1), value.type.dtype, Space.RMEM))
            self.out(f"sm100.row_to_smem({buf.name}, {s_tensor}, {self.my_row(value.type.shape[0])}, "
                     f"barrier_id={self.g.group_barrier})")
        else:
            rows, cols = value.type.shape
            self.out(f"sm100.rows_to_smem({buf.name}, {s_tensor}, {rows}, {cols}, tidx, "
                     f"barrier_id={self.g.group_barrier})")
        self.out(f"aref.issue_store({self.arg(tma.name)}, {s_part}, {g_part}[None, {idx}], warp_in_group)")
        self.pending_store.add(stage.name)
        if host is not None:
            self.pending_store.add(host.name)

    def before_release(self, channel: str) -> None:
        if channel in self.pending_direct:
            del self.pending_direct[channel]
            self.out("# the TMA store has read the slot before it is released")
            self.out("aref.staging_free(0)")

    def op_mbar_arrive(self, op: Op) -> None:
        a = op.attrs
        if a.which == "empty":
            self.before_release(a.channel)
            if self.gp.group.warps == 1:
                self.out(f"aref.arrive_once({self.bar(op.operands[0], op.operands[1], 'empty', a.channel)}, 0)")
                return
        super().op_mbar_arrive(op)

    def op_slice(self, op: Op) -> None:
        c = self.env.get(id(op.operands[0]))
        a = op.attrs
        if not isinstance(c, TmemTile) or a.axis != 1:
            super().op_slice(op)
            return
        t = op.result.type
        b = self.tbuf(c.buffer)
        if t.dtype.bits != 32:
            raise BackendError(f"a column chunk of a {t.dtype.value} tensor-memory tile; CUDA cores read 32-bit "
                               f"tensor-memory tiles", op.loc)
        self.check_rows(t)
        if c.slot == "0" or b.depth == 1:
            view = self.local(("tview", c.buffer, a.start), f"t_{ident(c.buffer)}_{a.start}",
                              f"sm100.tmem_tile({self.tmem()}, {b.col + a.start}, {t.shape[0]}, {t.shape[1]})")
        else:                               # the chunk's columns in this item's slot (as `tmem_view`)
            view = self.names(f"t_{ident(c.buffer)}_{a.start}")
            self.out(f"{view} = sm100.tmem_tile({self.tmem()}, {b.col + a.start} + {b.cols // b.depth} * "
                     f"({c.slot}), {t.shape[0]}, {t.shape[1]})")
        buf = self.new_buffer(op.result)
        self.env[id(op.result)] = Reg(buf)
        self.out(f"sm100.tmem_load({view}, {buf.name}, {t.shape[0]}, {t.shape[1]}, tidx)  # columns "
                 f"{a.start}..{a.start + a.size - 1} of {c.buffer}")
