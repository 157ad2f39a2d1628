"""Register math of a role: liveness, register-tile storage, materialization and loop-carried values.

`MathEmitter` is the half of `RoleEmitter` that deals with values living in registers. Elementwise ops are
lazy when their single user is another elementwise op or a reduction in the same block (and nothing that
could change their inputs — an MMA issue or a slot release — lies in between), and always when they are
cheap index math (`arange`, constants, program ids and what is computed from them alone: masks are
recomputed where they are used, never stored). A lazy chain is emitted as one element expression inside
its user's loop (`render.Renderer`). Everything else is materialized at its place in the IR, which keeps
the schedule's overlap (softmax between two wgmma waits stays there). Reductions and layout changes that
cross threads are `xthread.CrossThread`'s.
"""
from __future__ import annotations

from aref import ops
from aref.backend.cute.analysis import BackendError, CUTLASS_DTYPE
from aref.resources.layout import ACC, fits, orientations, tile_layout
from aref.backend.cute.render import Renderer, root_ctx
from aref.backend.cute.values import Buffer, Reg, Scalar, SmemTile, Zero, affine_expr, paren, strip_parens
from aref.backend.cute.xthread import CrossThread
from aref.ir import Op, OpKind, TileType, Value

from aref.resources import ROLE_OVERHEAD, Liveness, register_demand
from aref.resources.demand import kept_by_select
from aref.resources.registers import ELEMENTWISE, FUSABLE_USERS, LAZY, MAX_FUSED_LEAVES  # noqa: F401


class MathEmitter(Renderer, CrossThread):
    def __init__(self):
        self.pos = 0
        self.in_loop = False
        self.inflight: list[tuple[Buffer, tuple[Buffer, ...]]] = []   # each in-flight wgmma: (writes, reads)
        self.holder: dict[str, Value] = {}         # buffer name -> the value it currently holds
        self.transient: dict[str, tuple] = {}      # buffer name -> (cheap value, the one position it is read)
        self.buffers: list[Buffer] = []
        self.carried_bufs: dict[str, Value] = {}   # in the loop body: carried buffer -> its yield value
        self.peak: tuple[int, list] = (0, [])
        self.converted: dict[tuple, Buffer] = {}    # (buffer, value, layout) -> the value moved to that layout
        self.kept: dict[str, float] = {}           # buffer name -> position up to which a guarded step's
        #                                            selects may still read the value it computed over
        self.kept_value: dict[str, Value] = {}     # buffer name -> that value (the state the drain began with)
        self.region = "pre"

    # ----------------------------------------------------------------------------------------- liveness
    def analyse_uses(self) -> None:
        """Definitions, uses, fusion and deferral of the group's values: the resource model's `Liveness`, so the
        registers this code holds are the ones the model counted when it set the group's budget."""
        lv = self.liveness = Liveness(self.gp, self.plan.ws.arch)
        self.uses, self.use_at, self.def_at, self.block_of = lv.uses, lv.use_at, lv.def_at, lv.block_of
        self.loop_span, self.alias, self.static = lv.loop_span, lv.alias, lv.static
        self.dead_carried, self.fused, self.deferred = lv.dead_carried, lv.fused, lv.deferred
        self.cheap = lv.cheap
        self.orient = orientations(self.gp)

    def _root(self, v: Value) -> Value:
        return self.liveness.root(v)

    def last_use(self, v: Value) -> int:
        """The last position at which `v` is read, counting reads moved into fused users."""
        return self.liveness.last_use(v)

    # ------------------------------------------------------------------------------------------ storage
    def layout_of(self, v: Value) -> str:
        return tile_layout(v.type, self.orient(v))

    def _fits(self, buf: Buffer, t: TileType, layout: str) -> bool:
        return buf.shape == tuple(t.shape) and buf.dtype is t.dtype and buf.layout == layout

    def new_buffer(self, v: Value, hint: str | None = None, prefer: Buffer | None = None,
                   layout: str | None = None) -> Buffer:
        """Storage for `v`: `prefer` or a free buffer of the same shape and layout, else a new register tensor."""
        t = v.type
        layout = layout or self.layout_of(v)
        self.check_fits(t, layout)
        yield_of = self._yield_carried(v)
        candidates = ([prefer] if prefer else []) + [b for b in self.buffers if self._fits(b, t, layout)]
        for b in candidates:
            if b is None or not self._fits(b, t, layout) or not self._free(b, in_place=b is prefer):
                continue
            if b.name in self.carried_bufs and self.carried_bufs[b.name] is not yield_of and b is not prefer:
                continue
            self.holder[b.name] = v
            return b
        name = self.names(hint or self.hint(v) or ("s" if layout == ACC else layout))
        buf = self.alloc_buffer(name, t, layout)
        self.buffers.append(buf)
        self.holder[name] = v
        return buf

    def check_fits(self, t: TileType, layout: str) -> None:
        """Refuse a tile the architecture's register layout cannot hold as a `layout` value."""
        if not fits(t, layout):
            raise BackendError(f"register tile {t} cannot be held in the wgmma accumulator layout as a {layout} "
                               f"value: rows must come in whole 64-row atoms and columns in groups of 8", self.loc,
                               hint="use tile sizes that are multiples of 64 rows and 8 columns")

    def alloc_buffer(self, name: str, t: TileType, layout: str) -> Buffer:
        """Declare register storage `name` for `t` tiles held as `layout` (the architecture's register layout)."""
        dt = f"cutlass.{CUTLASS_DTYPE.get(t.dtype, 'Boolean')}"
        if layout == ACC:
            mma = self.layout_mma(t.shape[1])
            self.setup(f"{name} = cute.make_rmem_tensor({self.thr(mma)}.partition_shape_C({tuple(t.shape)}), {dt})")
            buf = Buffer(name, tuple(t.shape), t.dtype, mma, layout=ACC)
            buf.rc = self.names.reserve(f"{name}_rc")
            self.setup(f"{buf.rc} = aref.rows_view({name})")
        else:
            buf = Buffer(name, tuple(t.shape), t.dtype, "", layout=layout)
            n = buf.extents[0] if buf.extents else 1
            self.setup(f"{name} = cute.make_rmem_tensor({n}, {dt})")
        return buf

    def _free(self, b: Buffer, in_place: bool = False) -> bool:
        """Free at this op: its value is dead (or, computing elementwise in place, dies right here)."""
        last = self.held_until(b)
        if last is None:
            return True
        return (last < self.pos or in_place and last <= self.pos) and not self.busy(b)

    def held_until(self, b: Buffer) -> float | None:
        """The last position at which `b`'s value is read from `b` (None: it holds nothing). Cheap index math
        made for one reader (a store, an MMA) is held for that op only: it is recomputed at every use."""
        owner = self.holder.get(b.name)
        if owner is None:
            return None
        once = self.transient.get(b.name)
        last = once[1] if once is not None and once[0] is owner else self.last_use(owner)
        return max(last, self.kept.get(b.name, last))

    def _yield_carried(self, v: Value):
        lp = self.gp.loop
        if lp is None or not self.in_loop:
            return None
        return next((v for y in lp.yields if y is v), None)

    def hint(self, v: Value) -> str | None:
        """A name for `v`'s storage: its own, that of the named value its user computes, or an operand's."""
        if v.name:
            return v.name
        lp = self.gp.loop
        if lp is not None:
            for c, y in zip(lp.carried, lp.yields):
                if self._root(y) is v and c.name:
                    return c.name
        op = self.prod.get(id(v))
        if op is not None and op.kind in ELEMENTWISE:
            for o in op.operands:
                if o.name and o.type == v.type:
                    return o.name
        users = self.use_at.get(id(v), [])
        if len(users) == 1 and users[0][1] is not None and users[0][1].results and users[0][1].results[0].name:
            return users[0][1].results[0].name
        return None

    def track_live(self) -> None:
        """Record the peak of registers held by live tiles (after each op)."""
        live = [b for b in self.buffers if self.busy(b) or (self.held_until(b) or 0) >= self.pos]
        n = sum(b.registers for b in live)
        if n > self.peak[0]:
            self.peak = (n, live)

    def check_registers(self) -> None:
        """The role's register tiles fit its setmaxnreg budget by the resource model (which set the budget
        from the same liveness), and this code holds no more than the model counted."""
        demand = register_demand(self.gp, self.plan.ws.arch)
        if self.buffers and demand.need > self.gp.group.regs:
            raise BackendError(f"{demand.describe()}, over its register budget of {self.gp.group.regs} "
                               f"(setmaxnreg): ptxas would spill", self.plan.ws.loc,
                               hint="the lowering sets budgets from the resource model; a budget set by hand must "
                                    f"be at least {demand.need}")
        held, live = self.peak
        if held > demand.peak and held + ROLE_OVERHEAD > self.gp.group.regs:
            # the code holds more than the model counted, and more than the budget the model set: it would spill
            parts = ", ".join(f"{b.name} {b.registers}" for b in live)
            raise BackendError(f"internal: the CuTe backend holds {held} registers per thread of tiles in warp group "
                               f"'{self.gp.group.name}' ({parts}), more than the resource model's {demand.peak} "
                               f"and its budget of {self.gp.group.regs}", self.plan.ws.loc)

    def issued(self, writes: Buffer, *reads: Buffer) -> None:
        self.inflight.append((writes, reads))

    def retire(self, pending: int) -> None:
        self.inflight = self.inflight[len(self.inflight) - pending:] if pending else []

    def busy(self, buf: Buffer) -> bool:
        """An in-flight wgmma writes or reads `buf`: it may not be overwritten."""
        return any(buf == w or buf in r for w, r in self.inflight)

    def check_not_inflight(self, buf: Buffer) -> None:
        """`buf` is about to be read: no in-flight wgmma may still write it (reading alongside is fine)."""
        if any(buf == w for w, _ in self.inflight):
            raise BackendError(f"internal: register tile {buf.name} is read while a wgmma that writes it may "
                               f"still run (the Barrier IR's mma_wait does not cover it)", self.loc)

    # ---------------------------------------------------------------------------------- materialization
    def lazy_or_now(self, op: Op) -> None:
        """Fuse `op` into its user, or compute it here."""
        r = op.result
        if not isinstance(r.type, TileType):                # CTA-uniform math on runtime scalars
            from aref.backend.cute.render import SCALAR_CTX, Nest
            args = [self.env[id(o)].expr for o in op.operands]
            text = strip_parens(self.render_op(op, args, SCALAR_CTX, Nest([])))
            if self.uses.get(id(r), 0) > 1:
                name = self.names(r.name or "t")
                self.out(f"{name} = {text}")
                text = name
            self.env[id(r)] = Scalar(text)
            return
        z = ops.entry(op).algebra.absorbing
        if z is not None and any(isinstance(self.env.get(id(o)), Zero) and self.env[id(o)].fill == z
                                 for o in op.operands):
            self.env[id(r)] = Zero(r.type, z)               # a zero-initialised state scaled: still 0
            return
        self.env[id(r)] = ("lazy", op)
        # a value nothing reads is never computed (the resource model gives it no storage)
        if id(r) not in self.fused and op.kind not in (OpKind.EXPAND_DIMS, OpKind.SLICE) \
                and self.use_at.get(id(r)):
            self.materialize(r)

    def materialize(self, v: Value) -> Buffer:
        """The register buffer holding `v`, emitting the code that computes it if needed."""
        c = self.env[id(v)]
        if isinstance(c, Reg):
            return c.buf
        t = v.type
        if isinstance(c, Zero):
            buf = self.new_buffer(v)
            self.out(f"{buf.name}.fill({self.constant(c.fill, t.dtype)})")
        elif isinstance(c, tuple) and c[0] == "cast" and isinstance(self.env.get(id(c[1].operands[0])), SmemTile) \
                and len(t.shape) == 2:
            # a slot's tile converted straight from shared memory (no register copy of the wider source)
            sc = self.env[id(c[1].operands[0])]
            buf = self.new_buffer(v, hint=f"{sc.channel.replace('.', '_')}_{t.dtype.value}")
            self.out(f"{buf.name}.store({self.smem_view(sc)}.load().to(cutlass.{CUTLASS_DTYPE[t.dtype]}))")
        elif isinstance(c, tuple) and c[0] == "cast":
            src = self.materialize(c[1].operands[0])      # a whole register tile converted at once
            self.check_not_inflight(src)
            buf = self.new_buffer(v, hint=f"{src.name}_{t.dtype.value}")
            self.out(f"{buf.name}.store({src.name}.load().to(cutlass.{CUTLASS_DTYPE[t.dtype]}))")
        elif isinstance(c, tuple) and c[0] in ("lazy", "cast"):
            buf = self.elementwise(v, c[1])
        elif isinstance(c, SmemTile) and self.layout_of(v) == ACC and not c.transposed:
            buf = self.new_buffer(v)
            self.out(f"cute.autovec_copy({self.smem_view(c)}, {buf.name})")
        elif isinstance(c, SmemTile):
            buf = self.new_buffer(v)
            self.compute_into(buf, v)
        else:
            raise BackendError(f"internal: cannot hold {v} in registers ({c!r})", self.loc)
        if id(v) in self.cheap:
            self.transient[buf.name] = (v, self.pos)   # made for this op's read: recomputed at the next one
        else:
            self.env[id(v)] = Reg(buf)
        return buf

    def elementwise(self, v: Value, op: Op) -> Buffer:
        t = v.type
        layout = self.layout_of(v)
        prefer, kept = None, None
        state = self.kept_state(op)          # (then `emit_op` left the step unguarded: it must select)
        if state is not None:
            prefer, kept = self.env[id(state)].buf, self.last_use(state)
        for o in () if state is not None else self.leaves(op):
            oc = self.env.get(id(o))
            if isinstance(oc, Reg) and self._fits(oc.buf, t, layout) and self.last_use(o) <= self.pos:
                prefer = oc.buf                      # compute in place over an input that dies here
                break
        if prefer is not None and self.kept.get(prefer.name, 0) > self.pos \
                and kept_by_select(op, self.kept_value[prefer.name], self.liveness):
            # the storage still holds an earlier guarded step's state for later selects, but this step runs only
            # where each of them picks a new value (a later drain step's O·α, as the model counts it)
            self.kept[prefer.name] = self.pos
        nest, ctx = self.nest_for(layout, t), root_ctx(layout)
        text = strip_parens(self.render(v, ctx, nest, top=True))
        if kept is None and prefer is not None and not any(nest.levels) and text == prefer.at("r", "c"):
            self.holder[prefer.name] = v                 # the value is the operand itself (x + 0): no code
            return prefer
        if kept is not None:
            self.kept[prefer.name], self.kept_value[prefer.name] = kept, state
            buf = prefer
            self.holder[prefer.name] = v
        else:
            buf = self.new_buffer(v, hint=self.hint(v), prefer=prefer)
        nest.levels[-1].append(f"{buf.at('r', 'c')} = {self.convert_to(text, buf.dtype)}")
        if kept is not None:
            # where the step does not run, the state's storage is left as it is: a branch, not a select of
            # every element (ptxas keeps a selected tile's old and new values apart: at head dim 256 the
            # drain's rescaled O, 128 registers, spilled 3 KB beside the O it selects from)
            with self.out.block(f"if {strip_parens(self.scalar(op.pred).expr)}:"):
                self.emit_nest(nest)
        else:
            self.emit_nest(nest)
        return buf

    def kept_state(self, op: Op) -> Value | None:
        """The state a pipeline step guarded at run time computes over in place (`kept_by_select`: read later
        only by its own step's selects), if `op` is such a step here; else None."""
        if op.pred is None or self.pos != self.liveness.position[id(op)] or op.kind not in ELEMENTWISE:
            return None
        t = op.result.type
        if not isinstance(t, TileType) or id(op.result) in self.fused or not self.use_at.get(id(op.result)):
            return None
        for o in self.leaves(op):
            oc = self.env.get(id(o))
            if isinstance(oc, Reg) and self._fits(oc.buf, t, self.layout_of(op.result)) \
                    and self.last_use(o) > self.pos and kept_by_select(op, o, self.liveness) and not self.busy(oc.buf):
                return o
        return None

    def leaves(self, op: Op) -> list[Value]:
        """The materialized inputs of a fused expression (iterative: chains may be long)."""
        out, stack, seen = [], list(reversed(op.operands)), set()
        while stack:
            o = stack.pop()
            if id(o) in seen:
                continue
            seen.add(id(o))
            c = self.env.get(id(o))
            if isinstance(c, tuple) and c[0] in ("lazy", "cast"):
                stack += reversed(c[1].operands)
            else:
                out.append(o)
        return out

    def smem_view(self, s: SmemTile, rows_view: bool = False) -> str:
        """This thread's part of a slot tile, partitioned like a wgmma accumulator (emitted before use)."""
        cp = self.plan.channel(s.channel)
        ring = cp.buffers[s.index]
        rows, cols = ring.tile.shape
        base = self.arg(ring.name)
        if s.tile.shape[0] != rows and not s.transposed:
            base = f"aref.row_block({base}, {s.tile.shape[0]}, {cols}, {s.row0 // s.tile.shape[0]})"
        elif s.transposed:
            if s.row0 or s.tile.shape != (cols, rows):
                raise BackendError("register math on a row block of a transposed shared-memory tile", self.loc)
            base = f"aref.transposed({base}, {rows}, {cols}, {ring.depth})"
        n = s.tile.shape[1]
        part = f"{self.thr(self.layout_mma(n))}.partition_C({base}[None, None, {strip_parens(s.slot.expr)}])"
        name = self.names(f"{ring.name[2:]}_part")
        self.out(f"{name} = {'aref.rows_view(' + part + ')' if rows_view else part}")
        return name

    def before_release(self, channel: str) -> None:
        """Fused values never straddle a slot release (see `analyse_uses`), so nothing is pending here."""

    # ------------------------------------------------------------------------------------ loop-carried
    def loop_entry(self, lp) -> None:
        self.carried_bufs = {}
        self.carried_vars: dict[int, str] = {}
        yields = self.prescan(lp)
        for init, car, y in zip(lp.inits, lp.carried, lp.yields):
            c = self.env[id(init)]
            if id(car) in self.dead_carried:
                self.env[id(car)] = ("dead", car)
                continue
            if isinstance(car.type, TileType) and car.type.space.value == "smem":
                self.env[id(car)] = self.carried_slot(car, y, yields)
            elif isinstance(c, tuple) and c[0] in ("transpose", "staged"):
                scratch = self.scratch_of(car)                  # a transposed operand lives in shared memory
                if c[0] == "transpose":
                    self.stage(c[1].operands[0], scratch)
                self.env[id(car)] = ("staged", scratch)
            elif isinstance(c, Scalar):
                ys = yields.get(id(y))
                if c.static and ys is not None and ys.static and ys.value == c.value:
                    self.env[id(car)] = c
                else:
                    name = self.names(car.name or "carried")
                    self.out(f"{name} = {strip_parens(c.expr)}")
                    self.env[id(car)] = Scalar(name)
                    self.carried_vars[id(car)] = name
            else:
                buf = self.materialize(init)
                self.env[id(car)] = Reg(buf)
                self.holder[buf.name] = car
                self.carried_bufs[buf.name] = y

    def prescan(self, lp) -> dict[int, Scalar]:
        """Scalar values of the loop body (constants and affine indices), before emitting it."""
        env = dict((k, v) for k, v in self.env.items() if isinstance(v, Scalar))
        env[id(lp.iv)] = self.env[id(lp.iv)]
        from aref.backend.cute.values import scalar_binary
        for op in lp.body.ops:
            if op.kind is OpKind.CONST and not isinstance(op.result.type, TileType):
                env[id(op.result)] = Scalar.const(op.attrs.value)
            elif op.kind is OpKind.SCALAR_BINARY and all(id(o) in env for o in op.operands):
                env[id(op.result)] = scalar_binary(op.attrs.fn, *(env[id(o)] for o in op.operands))
        self._prescan_env = env
        return env

    def carried_slot(self, car: Value, y: Value, env: dict) -> SmemTile:
        """A slot view carried to the next iteration: the yield's slot one item earlier."""
        from aref.backend.cute.analysis import smem_operand
        so = smem_operand(y, self.prod, self.loc)
        op = self.prod[id(y)]
        while op.kind is not OpKind.SLOT_READ:
            op = self.prod[id(op.operands[0 if op.kind is not OpKind.SELECT else 1])]
        item = env.get(id(op.operands[2]))
        if item is not None and item.static:            # a view of a tile from before the loop: the same slot
            depth = self.plan.channel(so.channel).ch.depth
            slot = self.slot_of(so.channel, Scalar.const(item.value % depth))
            return SmemTile(so.channel, so.index, slot, item, car.type, so.transposed, so.row0)
        if item is None or item.affine is None or item.affine[1] != 1:
            raise BackendError("a shared-memory tile carried across loop iterations whose item is not the loop "
                               "index plus a constant", self.loc)
        i, _, k = item.affine
        depth = self.plan.channel(so.channel).ch.depth
        prev = affine_expr(i, 1, k - 1)
        slot = Scalar(f"{paren(prev)} % {depth}" if depth > 1 else "0", 0 if depth == 1 else None)
        slot = self.slot_of(so.channel, slot)
        return SmemTile(so.channel, so.index, slot, Scalar(prev, None, (i, 1, k - 1)), car.type,
                        so.transposed, so.row0)

    def loop_exit(self, lp) -> None:
        # tiles first: a yield computed from a carried scalar must read it before the scalar moves on
        moves = []                      # (carried buffer, the buffer holding its next value)
        for car, y in zip(lp.carried, lp.yields):
            c = self.env[id(car)]
            if id(car) in self.dead_carried:
                continue
            if isinstance(c, tuple) and c[0] == "staged":
                yc = self.env[id(y)]
                if yc[0] == "transpose":
                    self.stage(yc[1].operands[0], c[1])
            elif isinstance(c, Reg):
                yb = self.materialize(y)        # every yield computed before any carried buffer is written
                if yb is not c.buf:
                    if any(yb == w for w, _ in self.inflight):
                        # the next value is an MMA result still being written (its accumulator came from
                        # shared memory, so it could not be made in the carried tile): retire that wgmma first
                        last = max(i for i, (w, _) in enumerate(self.inflight) if w == yb)
                        pending = len(self.inflight) - last - 1
                        self.out(f"warpgroup.wait_group({pending})  # {yb.name} moves into {c.buf.name}: "
                                 f"its wgmma must finish first")
                        self.retire(pending)
                    moves.append((c.buf, yb))
        # the moves are one parallel assignment: a next value held in another carried tile's buffer (an
        # accumulator updated in place over a carried operand, a swap) is read before that buffer is written
        written = {dst.name for dst, _ in moves}
        sources = {}
        for dst, src in moves:
            if src.name in written and src.name not in sources:
                sources[src.name] = self.names(f"{src.name}_next")
                self.out(f"{sources[src.name]} = {src.name}.load()")
        for dst, src in moves:
            self.out(f"# carry {src.name} into the next iteration")
            self.out(f"{dst.name}.store({sources.get(src.name, src.name + '.load()')})")
        updates = [(self.carried_vars[id(car)], strip_parens(self.scalar(y).expr))
                   for car, y in zip(lp.carried, lp.yields) if id(car) in self.carried_vars]
        if len(updates) > 1:          # simultaneous: one carried scalar's update may read another's old value
            self.out(f"{', '.join(n for n, _ in updates)} = {', '.join(e for _, e in updates)}")
        for name, expr in updates[:1] if len(updates) == 1 else []:
            self.out(f"{name} = {expr}")
        self.carried_bufs = {}

    def loop_results(self, lp, trip: Scalar) -> None:
        for car, y, res in zip(lp.carried, lp.yields, lp.results):
            c = self.env[id(car)]
            if isinstance(c, Reg):
                self.holder[c.buf.name] = res
            if isinstance(c, SmemTile) and not c.item.static:
                i, _, k = c.item.affine
                depth = self.plan.channel(c.channel).ch.depth
                if trip.static:
                    item = Scalar.const(trip.value + k)
                    slot = Scalar.const(item.value % depth)
                else:                                   # the item after a loop of run-time length
                    item = Scalar(affine_expr(paren(trip.expr), 1, k))
                    slot = Scalar(f"({item.expr}) % {depth}")
                c = SmemTile(c.channel, c.index, self.slot_of(c.channel, slot), item, c.tile, c.transposed, c.row0)
            self.env[id(res)] = c
