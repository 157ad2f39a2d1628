"""One warp group of the Barrier IR → one role function of CuTe DSL source.

The group's synchronisation skeleton is the Barrier IR itself: every wait, arrive, TMA load, wgmma issue,
wgmma wait, named barrier and register reallocation is emitted in the IR's order, region by region
(pre / prologue / steady-state loop / epilogue / post), each under a `# aref-ir[...]` tag that tests check
against the IR. Between those points the role templates fill in the work:

  * TMA producer   one warp issues the loads; the elected thread arms the transaction count;
  * wgmma          one `aref.wgmma` commit group per IR MMA, operands as shared-memory descriptors
                   (SS) or a register tile viewed as the A operand (RS, P·V);
  * register math  elementwise chains are fused into one unrolled loop over the thread's accumulator
                   elements, row-invariant parts hoisted per row, row reductions finished by a quad
                   shuffle, so softmax reads as exp2(s·scale − m) with one FMA per element;
  * epilogues      cast, stmatrix into a staging tile, one elected TMA store.

Register tiles get storage by a small allocator: an MMA accumulates in place, an elementwise result reuses
the storage of an operand that dies there, loop-carried values keep their storage across iterations (a
yield that could not be placed there is copied at the end of the body, which is legal only once its MMA
has retired — checked).
"""
from __future__ import annotations

from aref import ops
from aref.backend.cute.access import AccessEmitter
from aref.backend.cute.analysis import (BackendError, GroupPlan, KernelPlan, SmemOperand, producers_of,
                                        register_a, smem_operand, staged_source)
from aref.resources.demand import guard_implies
from aref.resources.layout import feeds_mma_only
from aref.backend.cute.math import MathEmitter
from aref.backend.cute.source import Lines, Names
from aref.backend.cute.values import (Buffer, Reg, Scalar, SmemTile, Zero, scalar_binary, strip_parens)
from aref.ir import Op, OpKind, Space, TileType, Value
from aref.ir.printer import format_op
from aref.lower.hopper import turn_once

TAGGED = (OpKind.MBAR_WAIT, OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX, OpKind.TMA_LOAD, OpKind.MMA_ASYNC,
          OpKind.MMA_WAIT, OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE, OpKind.SETMAXNREG,
          OpKind.FENCE_PROXY_ASYNC, OpKind.SLOT_STORE, OpKind.STORE)
# ops without effects or storage of their own: computed whether or not their pipeline step runs (scalars,
# views, a slot's read and the pipeline's selects; of the tile sources, a constant fill)
PURE = ops.SCALARS | ops.kinds_with(ops.VIEW) | ops.kinds_with(ops.PIPELINE) | {OpKind.FULL}
REGIONS = {"pre": "setup", "prologue": "prologue: pipeline fill", "epilogue": "epilogue: pipeline drain",
           "post": "after the loop"}


def tag_text(op: Op, name) -> str:
    """The IR op as the printer shows it, without types (the tag's readable part)."""
    return format_op(op, name).split(" : ")[0]


class RoleEmitter(AccessEmitter, MathEmitter):
    """Emit the body of one role function for group `g` of `plan`."""

    tagged = TAGGED                # op kinds emitted under an `# aref-ir[group#op]` tag
    templates = "Hopper templates"
    runtime_predicates = True      # pipeline steps guarded at run time (trip counts from program ids)

    def __init__(self, plan: KernelPlan, g: GroupPlan):
        super().__init__()
        self.plan, self.g, self.gp = plan, g, g.gp
        self.names = Names()
        self.args: dict[str, None] = {}            # kernel-scope names this role uses, in first-use order
        self.setup = Lines(1)
        self.out = Lines(1)
        self.env: dict[int, object] = {}
        self.prod = producers_of(self.gp)
        self.frags: dict[tuple, str] = {}
        self.irname = plan.namer
        self.loc = plan.ws.loc
        self.op_index = {id(op): i for i, op in enumerate(self.gp.all_ops())}
        self.pending_store: set[str] = set()       # staging tiles with a TMA store in flight
        self.under_guard = False                   # emitting a pipeline step under its run-time guard
        self.bases: dict[str, str] = {}            # persistent: ring position of each channel at the tile start
        self.base_inits: dict[str, str] = {}       # ... kept as a running sum (run-time trip counts)
        self.base_channels: dict[str, str] = {}
        self.producer = g.role == "tma_producer"
        self.analyse_uses()
        self.thread_setup()

    # ------------------------------------------------------------------------------------------ helpers
    def arg(self, name: str) -> str:
        self.args.setdefault(name, None)
        return name

    def local(self, key: tuple, hint: str, code: str) -> str:
        """A setup-section local (fragments, partitions, views), created once."""
        if key not in self.frags:
            name = self.names(hint)
            self.setup(f"{name} = {code}")
            self.frags[key] = name
        return self.frags[key]

    def thread_setup(self) -> None:
        for n in ("tidx", "group_tidx", "warp_in_group", "block", "r", "c", "x", "i_"):
            self.names.reserve(n)
        self.setup("tidx, _, _ = cute.arch.thread_idx()")
        self.setup("group_tidx = tidx % aref.WARP_GROUP_THREADS")
        self.setup("warp_in_group = cute.arch.make_warp_uniform(cute.arch.warp_idx() % 4)")
        self.setup("block = cute.arch.block_idx()")

    def thr(self, mma: str) -> str:
        return self.local(("thr", mma), f"thr_{mma}", f"{self.arg(mma)}.get_slice(group_tidx)")

    def layout_mma(self, cols: int) -> str:
        return f"mma{self.plan.layout_n[cols]}"

    def scalar(self, v: Value) -> Scalar:
        c = self.env.get(id(v))
        if not isinstance(c, Scalar):
            raise BackendError(f"internal: {v} is not a scalar here", self.gp.group and self.loc)
        return c

    def tag(self, op: Op) -> None:
        idx = self.op_index[id(op)]
        self.out(f"# aref-ir[{self.gp.group.name}#{idx}] {tag_text(op, self.irname)}")

    # --------------------------------------------------------------------------------------------- run
    def emit(self) -> tuple[Lines, Lines]:
        gp = self.gp
        for region, block in gp.regions():
            self.region = region
            if region == "loop":
                self.emit_loop()
                continue
            if not block.ops:
                continue
            if region != "pre":
                self.out(f"# ---- {REGIONS[region]}")
            self.block_ops = block.ops
            for op in block.ops:
                self.emit_op(op)
        self.final = Lines(1)
        if self.pending_store:
            target = self.final if self.plan.persistent else self.out     # after the tile loop if persistent
            target("# shared memory must outlive the TMA stores that read it")
            target("aref.staging_free(warp_in_group)")
        self.check_registers()
        return self.setup, self.out

    def emit_loop(self) -> None:
        lp = self.gp.loop
        trip = self.scalar(lp.trip_count)
        if trip.static and trip.value == 0 and any(id(i) not in self.env for i in lp.inits):
            # fewer trips than pipeline stages: the prologue and epilogue are the whole loop, and the state they
            # would hand the steady loop (ops of steps that do not exist here) is never made
            self.out("# ---- steady state: 0 iterations in this specialization")
            for op in lp.body.ops:
                if op.kind in TAGGED:
                    self.out(f"# aref-ir[{self.gp.group.name}#{self.op_index[id(op)]}] {tag_text(op, self.irname)}"
                             f"  (skipped: no steady state)")
            for init, res in zip(lp.inits, lp.results):
                c = self.env[id(res)] = self.env.get(id(init), ("dead", res))
                if isinstance(c, Reg) and self.last_use(res) > (self.held_until(c.buf) or 0):
                    self.holder[c.buf.name] = res      # the init's storage now holds the loop result (as the model)
            return
        iv = self.names(lp.iv.name or "i")
        self.env[id(lp.iv)] = Scalar(iv, None, (iv, 1, 0))
        self.loop_entry(lp)
        rng = f"cutlass.range({trip.expr}, unroll=1)"
        count = f": {trip.value} iteration{'s' if trip.value != 1 else ''}" if trip.static else ""
        self.out("# ---- steady state" + count)
        with self.out.block(f"for {iv} in {rng}:"):
            self.in_loop = True
            self.block_ops = lp.body.ops
            for op in lp.body.ops:
                self.emit_op(op)
            self.loop_exit(lp)
            self.in_loop = False
        self.loop_results(lp, trip)

    # ---------------------------------------------------------------------------------------- dispatch
    def emit_op(self, op: Op) -> None:
        self.loc = op.loc
        # the resource model's position of `op` (`Liveness`): every last use and liveness span the backend
        # compares against is one of its positions, so the two count the same program points (a steady loop
        # of 0 trips is not emitted, but its ops keep their positions)
        self.pos = self.liveness.position[id(op)]
        guard = None
        if op.pred is not None:
            p = self.scalar(op.pred)
            if not p.static and not self.runtime_predicates:
                raise BackendError(f"a pipeline step guarded by a run-time predicate; the {self.templates} need "
                                   f"trip counts fixed by the specialization", op.loc)
            if p.static and not p.value:
                if op.kind in self.tagged:
                    self.out(f"# aref-ir[{self.gp.group.name}#{self.op_index[id(op)]}] {tag_text(op, self.irname)}"
                             f"  (skipped: no such pipeline step in this specialization)")
                return
            if not p.static and op.kind not in PURE and self.kept_state(op) is None:
                guard = p            # a pipeline step that runs only for some trip counts (decided at run time)
        k = op.kind
        handler = getattr(self, "op_" + k.name.lower(), None)
        if handler is None:
            raise BackendError(f"the {self.templates} cannot emit a {k.value} op in a "
                               f"{self.g.description}", op.loc)
        if guard is None:
            if k in self.tagged:
                self.tag(op)
            handler(op)
        else:
            # a step whose result is fused into a later user only records an expression: nothing is made under
            # the guard, so nothing need be made before it (the model counts such chains as taking no storage)
            lazy = bool(op.results) and all(id(r) in self.fused for r in op.results)
            for v in () if lazy else op.operands:
                c = self.env.get(id(v))
                if (isinstance(c, Zero) or isinstance(c, tuple) and c[0] in ("lazy", "cast")) \
                        and self.last_use(v) > self.pos and self.held_in_registers(v) and id(v) not in self.cheap:
                    self.materialize(v)     # read after the step too: made whether or not the step runs
            with self.out.block(f"if {strip_parens(guard.expr)}:"):
                if k in self.tagged:
                    self.tag(op)
                self.under_guard = True
                try:
                    handler(op)
                finally:
                    self.under_guard = False
        self.track_live()

    def held_in_registers(self, v: Value) -> bool:
        """Whether `v` is computed into this group's registers when it is materialized (a guarded step computes
        such operands before its guard, so they exist whether or not the step runs)."""
        return True

    # ------------------------------------------------------------------------------------------ scalars
    def op_const(self, op: Op) -> None:
        self.env[id(op.result)] = Scalar.const(op.attrs.value)      # the verifier keeps constants scalar

    def op_program_id(self, op: Op) -> None:
        name = self.names(op.result.name or f"pid{op.attrs.axis}")
        self.out(f"{name} = block[{op.attrs.axis}]")
        self.env[id(op.result)] = Scalar(name, None, (name, 1, 0))

    def op_scalar(self, op: Op) -> None:
        a, b = (self.scalar(v) for v in op.operands)
        s = scalar_binary(op.attrs.fn, a, b)
        hint = op.result.name
        if not s.static and s.affine is None and hint and "^" not in hint and self.uses.get(id(op.result), 0) > 1:
            name = self.names(hint)
            self.out(f"{name} = {strip_parens(s.expr)}")
            s = Scalar(name)
        self.env[id(op.result)] = s

    op_scalar_binary = op_scalar

    def op_select(self, op: Op) -> None:
        p = self.scalar(op.operands[0])
        if p.static:
            self.env[id(op.result)] = self.env[id(op.operands[1 if p.value else 2])]
            return
        a, b = (self.env[id(o)] for o in op.operands[1:])
        cond = strip_parens(p.expr)
        if isinstance(a, Scalar) and isinstance(b, Scalar):
            self.env[id(op.result)] = Scalar(f"cutlass.select_({cond}, {a.expr}, {b.expr})")
        elif isinstance(a, SmemTile) and isinstance(b, SmemTile):
            if (a.channel, a.index, a.transposed, a.row0) != (b.channel, b.index, b.transposed, b.row0):
                raise BackendError("a run-time choice between tiles of two different channels", op.loc)
            pick = lambda x, y: Scalar(f"cutlass.select_({cond}, {x.expr}, {y.expr})")   # noqa: E731
            self.env[id(op.result)] = SmemTile(a.channel, a.index, pick(a.slot, b.slot), pick(a.item, b.item),
                                               a.tile, a.transposed, a.row0)
        elif isinstance(a, Reg) and isinstance(b, Reg) and a.buf is b.buf:
            self.env[id(op.result)] = a                 # one storage either way (an MMA accumulated in place)
        elif isinstance(op.result.type, TileType) and op.result.type.space is not Space.SMEM:
            self.lazy_or_now(op)                            # per element: the registry's select template
        else:
            raise BackendError(f"a run-time select between {type(a).__name__} and {type(b).__name__} values",
                               op.loc)

    # ------------------------------------------------------------------------------------------- barriers
    def op_mbar_arrive(self, op: Op) -> None:
        a = op.attrs
        cp = self.plan.channel(a.channel)
        ptr = self.bar(op.operands[0], op.operands[1], a.which, a.channel)
        if a.which == "empty":
            if a.count != 1:
                raise BackendError(f"an empty-barrier arrive of count {a.count}; the templates release a slot "
                                   f"once per consumer warp group", op.loc)
            self.before_release(a.channel)
            if self.g.index in cp.cuda_core_readers:
                self.out("# every warp's CUDA-core reads of the slot are done before the single arrival")
                self.out(f"cute.arch.barrier(barrier_id={self.g.group_barrier}, "
                         f"number_of_threads=aref.WARP_GROUP_THREADS)")
            if self.plan.cluster is not None and a.channel in self.plan.cluster.rings:
                self.out("# both CTAs of the cluster refill this slot (multicast): release it in each")
                self.out(f"aref.arrive_cluster({ptr}, warp_in_group)")
            else:
                self.out(f"aref.arrive_once({ptr}, warp_in_group)")
        else:
            if a.count != self.gp.group.threads:
                raise BackendError(f"a full-barrier arrive of count {a.count} from a {self.gp.group.threads}-thread "
                                   f"group", op.loc)
            self.out(f"cute.arch.mbarrier_arrive({ptr})  # every thread of the group: count {a.count}")

    def op_named_bar_sync(self, op: Op) -> None:
        self.once_per_cta(op, f"cute.arch.barrier(barrier_id={op.attrs.id}, number_of_threads={op.attrs.threads})")

    def op_named_bar_arrive(self, op: Op) -> None:
        self.once_per_cta(op, f"cute.arch.barrier_arrive(barrier_id={op.attrs.id}, "
                              f"number_of_threads={op.attrs.threads})")

    def once_per_cta(self, op: Op, line: str) -> None:
        """A persistent ping-pong kernel's turns go round-robin across the CTA's tiles: the turn the last group
        hands the first before the loop (`pre`) is handed before the CTA's first tile only, and the first
        group's balancing turn after the loop (`post`) is taken after its last tile only. Run per tile, the last
        group's hand-over for its next tile can arrive before the first group's balancing sync of the tile
        before, completing the barrier's generation alone: both groups then wait for each other
        (`aref.lower.turn_once`; the simulator's persistent launch found it)."""
        once = turn_once(self.plan.ws, op, self.region) if self.plan.persistent else None
        cond = {"first": "tile_count == 0", "last": "tile + num_ctas >= NUM_TILES"}.get(once)
        if cond is None:
            self.out(line)
            return
        with self.out.block(f"if {cond}:"):
            self.out(line)

    def op_setmaxnreg(self, op: Op) -> None:
        fn = "increase" if op.attrs.increase else "decrease"
        self.out(f"cute.arch.setmaxregister_{fn}({op.attrs.regs})")

    def op_fence_proxy_async(self, op: Op) -> None:
        self.out('cute.arch.fence_proxy("async.shared", space="cta")')

    def op_mma_wait(self, op: Op) -> None:
        self.out(f"warpgroup.wait_group({op.attrs.pending})")
        self.retire(op.attrs.pending)

    # ------------------------------------------------------------------------------------ slots and MMA
    def op_slot_read(self, op: Op) -> None:
        a = op.attrs
        self.env[id(op.result)] = SmemTile(a.channel, a.index, self.slot_of(a.channel, self.scalar(op.operands[1])),
                                           self.scalar(op.operands[2]), op.result.type)

    def op_transpose(self, op: Op) -> None:
        src = self.env[id(op.operands[0])]
        if isinstance(src, SmemTile):
            self.env[id(op.result)] = SmemTile(src.channel, src.index, src.slot, src.item, op.result.type,
                                               not src.transposed, src.row0)
            return
        if feeds_mma_only(self.gp, op.result):
            self.env[id(op.result)] = ("transpose", op)   # staged through shared memory where a wgmma reads it
            return
        self.transpose_registers(op)                      # register math reads it: an exchange

    def op_slice(self, op: Op) -> None:
        src = self.env[id(op.operands[0])]
        if isinstance(src, SmemTile) and op.attrs.axis == 0 and not src.transposed:
            self.env[id(op.result)] = SmemTile(src.channel, src.index, src.slot, src.item, op.result.type,
                                               src.transposed, src.row0 + op.attrs.start)
            return
        if isinstance(src, SmemTile):
            raise BackendError("a column slice of a shared-memory tile", op.loc,
                               hint="cooperative consumers split the rows of tiles only")
        self.env[id(op.result)] = ("lazy", op)            # a register slice: an index shift (render.slice_ctx)

    def operand_frag(self, v: Value, mma: str, which: str) -> str:
        """The wgmma fragment of operand `which` (A or B) for IR value `v`, sliced to its slot."""
        so: SmemOperand = smem_operand(v, self.prod, self.loc)
        tile = self.env[id(v)]
        if so is None and which == "A" and id(self.cur_op) in self.liveness.staged_mmas:
            return self.staged_as_stored(v, mma)              # SS: the copy an earlier wgmma staged
        if so is None and which == "A" and register_a(v, self.prod):   # RS: a 16-bit register tile as A
            buf = self.materialize(v)
            return self.local(("opa", buf.name), f"{buf.name}_as_a", f"aref.as_operand_a({buf.name})")
        if so is None:
            return self.staged_operand(v, mma, which)
        cp = self.plan.channel(so.channel)
        ring = cp.buffers[so.index]
        rows, cols = ring.tile.shape
        # CuTe wants A as M×K and B as N×K: the IR's A is used as stored, its B transposed.
        as_stored = (which == "A") != so.transposed
        view, vname = self.arg(ring.name), ring.name[2:]
        if so.rows != rows:
            blk = so.row0 // so.rows
            view = f"aref.row_block({view}, {so.rows}, {cols}, {blk})"
            vname += "_rows"
            rows = so.rows                     # the view is the row block from here on
        if not as_stored:
            view = f"aref.transposed({view}, {rows}, {cols}, {ring.depth})"
            vname += "_t"
        thr = self.thr(mma)
        frag = self.local(("frag", mma, which, vname), f"{which.lower()}_{vname}",
                          f"{self.arg(mma)}.make_fragment_{which}({thr}.partition_{which}({view}))")
        return f"{frag}[None, None, None, {strip_parens(tile.slot.expr)}]"

    def scratch_of(self, v: Value):
        from aref.backend.cute.analysis import scratch_key
        return self.plan.scratch[(self.g.index, scratch_key(self.gp, v, self.prod))]

    def stage(self, src: Value, scratch) -> None:
        """Write register tile `src` row-major to a scratch tile that wgmmas then read from shared memory."""
        if self.frags.get(("staged", scratch.name)) is src:
            return
        pseudo = Buffer(scratch.name, scratch.tile.shape, scratch.tile.dtype, "")
        if self.busy(pseudo):
            # a wgmma still reading the previous contents must retire first (write after read)
            last = max(i for i, (w, r) in enumerate(self.inflight) if pseudo == w or pseudo in r)
            pending = len(self.inflight) - last - 1
            self.out(f"warpgroup.wait_group({pending})  # the wgmma reading {scratch.name} must finish first")
            self.retire(pending)
        buf = self.materialize(src)
        self.check_not_inflight(buf)
        rows, cols = scratch.tile.shape
        self.out(f"# {buf.name} as a wgmma operand from shared memory: stage it in {scratch.name}")
        self.out(f"aref.stage_tile({self.arg(self.layout_mma(cols))}, {buf.name}, {self.arg(scratch.name)}"
                 f"[None, None, 0], group_tidx)")
        self.out('cute.arch.fence_proxy("async.shared", space="cta")')
        self.out(f"cute.arch.barrier(barrier_id={self.g.group_barrier}, number_of_threads=aref.WARP_GROUP_THREADS)")
        self.frags[("staged", scratch.name)] = src

    def staged_operand(self, v: Value, mma: str, which: str) -> str:
        """The fragment of a register operand `v` staged in its scratch tile (staged here unless it is)."""
        c = self.env[id(v)]
        scratch = self.scratch_of(v)
        if isinstance(c, tuple) and c[0] == "staged":
            transposed = True                             # a loop-carried transposed operand
        else:
            src, transposed = staged_source(v, self.prod)
            if isinstance(c, tuple) and c[0] == "transpose":
                src = c[1].operands[0]
            self.stage(src, scratch)
        rows, cols = scratch.tile.shape
        view = self.arg(scratch.name)
        if (which == "A") == transposed:                  # CuTe reads A as M×K and B as N×K
            view = f"aref.transposed({view}, {rows}, {cols}, 1)"
        frag = self.local(("scratch", mma, which, scratch.name, transposed), f"{which.lower()}_{scratch.name[2:]}",
                          f"{self.arg(mma)}.make_fragment_{which}({self.thr(mma)}.partition_{which}({view}))")
        self.scratch_reads = (getattr(self, "scratch_reads", None) or ()) + (
            Buffer(scratch.name, scratch.tile.shape, scratch.tile.dtype, ""),)
        return f"{frag}[None, None, None, 0]"

    def staged_as_stored(self, v: Value, mma: str) -> str:
        """The A fragment of register tile `v` read from the scratch tile an earlier wgmma of this region staged
        it in for a transposed use (K-major, as stored)."""
        scratch = self.scratch_of(v)
        if self.frags.get(("staged", scratch.name)) is None:
            raise BackendError("internal: a register operand read from a scratch tile nobody staged", self.loc)
        frag = self.local(("scratch_a", mma, scratch.name), f"a_{scratch.name[2:]}_as_stored",
                          f"{self.arg(mma)}.make_fragment_A({self.thr(mma)}.partition_A({self.arg(scratch.name)}))")
        self.scratch_reads = (getattr(self, "scratch_reads", None) or ()) + (
            Buffer(scratch.name, scratch.tile.shape, scratch.tile.dtype, ""),)
        return f"{frag}[None, None, None, 0]"

    def op_mma_async(self, op: Op) -> None:
        self.cur_op = op
        cfg_i = self.plan.mmas.index(self.mma_cfg(op))
        mma = f"mma{cfg_i}"
        a = self.operand_frag(op.operands[0], mma, "A")
        b = self.operand_frag(op.operands[1], mma, "B")
        r = op.result
        reads = tuple(self.env[id(op.operands[0])].buf for _ in [0] if isinstance(self.env.get(id(op.operands[0])), Reg)
                      and id(op) not in self.liveness.staged_mmas)
        if getattr(self, "scratch_reads", None):
            reads, self.scratch_reads = reads + self.scratch_reads, None
        fresh = len(self.buffers)
        if len(op.operands) > 2:
            acc_v = op.operands[2]
            c = self.env[id(acc_v)]
            if isinstance(c, Zero) and c.fill == 0.0 and self.last_use(acc_v) <= self.pos:
                buf, accumulate = self.new_buffer(r, hint=acc_v.name), False
            else:
                src = self.materialize(acc_v)
                buf, accumulate = src, True
                if self.last_use(acc_v) > self.pos and not self.keeps_state(op, acc_v):
                    # the old accumulator is still read (a run-time select keeps either state): update a copy
                    self.check_not_inflight(src)
                    buf = self.new_buffer(r, hint=f"{src.name}_next")
                    self.out(f"{buf.name}.store({src.name}.load())  # {src.name} is read after this MMA")
        else:
            buf, accumulate = self.new_buffer(r), False
        self.env[id(r)] = Reg(buf)
        self.holder[buf.name] = r           # accumulated in place: the buffer now holds the result, not acc
        self.out(f"aref.wgmma({self.arg(mma)}, {buf.name}, {a}, {b}, accumulate={accumulate})")
        self.issued(buf, *reads)
        if self.under_guard and (accumulate or len(self.buffers) == fresh):
            # a pipeline step's MMA under a run-time guard writes storage that held a value before it: where the
            # guard ends, the register allocator merges the two states with copies of the accumulator, and a copy
            # while the wgmma runs makes ptxas serialize every wgmma of the kernel (C7514 for a read, C7515 for a
            # write). Retired inside the guard, the merge reads a finished result. (The model keeps its in-flight
            # list: when the step does not run, what was issued before it is still in flight.)
            self.out("warpgroup.wait_group(0)  # retired inside its guard: the merge after it reads no running wgmma")

    def keeps_state(self, op: Op, acc: Value) -> bool:
        """Is every later read of `acc` a pipeline select under the MMA's own predicate (or one it implies: a later
        drain step's, `guard_implies`) that falls back to `acc` (the state if the step did not run), its other
        side a new value (the MMA's result, or what the step computed from it: attention's drain step selects
        O·α)? When the step runs, nothing reads `acc` after the MMA; when it does not, the MMA did not overwrite
        it: accumulating in place is exactly that select."""
        later = [u for p, u in self.use_at.get(id(self._root(acc)), []) if p > self.pos]
        return bool(later) and op.pred is not None and all(
            u is not None and u.kind is OpKind.SELECT and guard_implies(op.pred, u.operands[0], self.liveness)
            and self._root(u.operands[2]) is self._root(acc) and self._root(u.operands[1]) is not self._root(acc)
            for u in later)

    def mma_cfg(self, op: Op):
        from aref.backend.cute.analysis import mma_config
        return mma_config(op, self.prod, self.liveness.staged_mmas)

    def op_slot_store(self, op: Op) -> None:
        a = op.attrs
        if a.cols:
            raise BackendError("internal: a column chunk of a slot (a Blackwell rewrite) in a Hopper kernel", op.loc)
        cp = self.plan.channel(a.channel)
        ring = cp.buffers[a.index]
        slot = strip_parens(self.slot_of(a.channel, self.scalar(op.operands[1])).expr)
        v = op.operands[3]
        t = v.type
        buf = self.materialize(v)
        if buf.layout != "acc":
            # a row / column vector or a scalar: rank 1, or a 2-D (R, 1), (1, C) or (1, 1) tile, whose ring is
            # plain row-major (threads holding the same element write the same value)
            two_d = len(t.shape) == 2
            if buf.layout == "scalar":
                self.out(f"{self.arg(ring.name)}[{'0, 0' if two_d else '0'}, {slot}] = {buf.name}[0]")
                return
            idx = "aref.col_index(group_tidx, i_)" if buf.layout == "col" else "aref.row_index(group_tidx, i_)"
            if two_d:
                idx = f"0, {idx}" if buf.layout == "col" else f"{idx}, 0"
            with self.out.block(f"for i_ in cutlass.range_constexpr({buf.extents[0]}):"):
                self.out(f"{self.arg(ring.name)}[{idx}, {slot}] = {buf.name}[i_]")
            return
        dst = f"{self.arg(ring.name)}[None, None, {slot}]"
        mma = self.arg(self.layout_mma(t.shape[1]))
        if t.dtype.bits == 16:
            self.out(f"aref.stmatrix({mma}, {buf.name}, {dst}, group_tidx)")
        else:
            self.out(f"cute.autovec_copy({buf.name}, {self.thr(mma)}.partition_C({dst}))")

    # ------------------------------------------------------------------------------------ register values
    def op_full(self, op: Op) -> None:
        self.env[id(op.result)] = Zero(op.result.type, op.attrs.value)

    def op_cast(self, op: Op) -> None:
        t = op.result.type
        carried = id(op.result) in self.liveness.carried_casts
        if not isinstance(t, TileType) or id(op.result) not in self.deferred and not carried:
            self.lazy_or_now(op)                          # register math reads it: rounded in the expression
            return
        self.env[id(op.result)] = ("cast", op)           # materialized where an MMA or a store needs it ...
        if carried:
            self.materialize(op.result)                   # ... or here, whole, where the loop takes it in

    def reads_smem(self, v: Value) -> bool:
        stack = [v]
        while stack:
            c = self.env.get(id(stack.pop()))
            if isinstance(c, SmemTile):
                return True
            if isinstance(c, tuple) and c[0] in ("lazy", "cast"):
                stack += c[1].operands
        return False

    def op_binary(self, op: Op) -> None:
        self.lazy_or_now(op)

    op_unary = op_compare = op_where = op_expand_dims = op_arange = op_binary

    def op_reduce(self, op: Op) -> None:
        self.reduce(op)

