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
from aref.backend.cute.layout import ACC, fits, orientations, tile_layout
from aref.backend.cute.render import Nest, Renderer, root_ctx
from aref.backend.cute.values import Buffer, Reg, Scalar, SmemTile, Zero, affine_expr, paren, strip_parens
from aref.backend.cute.xthread import CrossThread
from aref.ir import Op, OpKind, Space, TileType, Value

# kinds the renderer computes lazily inside their user's element loop (the registry's expression and view
# emissions), and the users such a chain may be fused into
LAZY = frozenset(k for k in OpKind if any(e.form in (ops.EXPR, ops.VIEWING) for d in ops.entries()
                                          if d.kind is k for e in d.cute)) - {OpKind.CONST, OpKind.TRANSPOSE}
ELEMENTWISE = tuple(sorted(LAZY - {OpKind.FULL, OpKind.ARANGE, OpKind.SLICE}, key=lambda k: k.value))
FUSABLE_USERS = ELEMENTWISE + (OpKind.REDUCE,)
MAX_FUSED_LEAVES = 4           # stored tiles one fused expression may read (their registers stay live)
REGISTER_OVERHEAD = 32          # addresses, descriptors, loop state of a consumer role (measured with ptxas)


class MathEmitter(Renderer, CrossThread):
    def __init__(self):
        self.pos = 0
        self.in_loop = False
        self.inflight: list[tuple[Buffer, tuple[Buffer, ...]]] = []   # each in-flight wgmma: (writes, reads)
        self.holder: dict[str, Value] = {}         # buffer name -> the value it currently holds
        self.buffers: list[Buffer] = []
        self.carried_bufs: dict[str, Value] = {}   # in the loop body: carried buffer -> its yield value
        self.peak: tuple[int, list] = (0, [])
        self.converted: dict[tuple, Buffer] = {}    # (buffer, value, layout) -> the value moved to that layout
        self.region = "pre"

    # ----------------------------------------------------------------------------------------- liveness
    def analyse_uses(self) -> None:
        """Positions of definitions and uses (the emission order), and which elementwise values fuse."""
        gp = self.gp
        self.uses: dict[int, int] = {}
        self.use_at: dict[int, list[tuple[int, Op | None]]] = {}
        self.def_at: dict[int, int] = {}
        self.block_of: dict[int, int] = {}
        self.loop_span = (0, 0)
        self.alias: dict[int, Value] = {}          # static select result -> the value it picks
        self.static = static = {}                  # generation-time constants (predicates fold)
        pos = 0
        for b, (region, block) in enumerate(gp.regions()):
            if region == "loop":
                lp = gp.loop
                for v in lp.inits:
                    self._use(v, pos, None)
                start = pos
                for c in lp.carried:
                    self.def_at[id(c)] = pos + 0.5       # inside the loop, before its first op
            for op in block.ops:
                pos += 1
                self.block_of[id(op)] = b
                self._fold(op, static)
                if op.pred is not None and static.get(id(op.pred)) is False:
                    continue                         # a pipeline step this specialization does not run
                if op.kind is OpKind.SELECT and id(op.operands[0]) in static:
                    chosen = op.operands[1 if static[id(op.operands[0])] else 2]
                    self.alias[id(op.result)] = self._root(chosen)
                    self.def_at[id(op.result)] = pos
                    continue
                for v in op.operands:
                    self._use(v, pos, op)
                if op.pred is not None:
                    self._use(op.pred, pos, op)
                for r in op.results:
                    self.def_at[id(r)] = pos
            if region == "loop":
                end = pos + 1
                self.loop_span = (start, end)
                for y in gp.loop.yields:
                    self._use(y, end, None)
                for r in gp.loop.results:
                    self.def_at[id(r)] = end
        # a loop-carried value read neither in the body nor after the loop needs no storage and no yield
        self.dead_carried: set[int] = set()
        if gp.loop is not None:
            lp = gp.loop
            for c, y, r in zip(lp.carried, lp.yields, lp.results):
                if not self.use_at.get(id(c)) and not self.use_at.get(id(self._root(r))):
                    self.dead_carried.add(id(c))
                    ys = self.use_at.get(id(self._root(y)), [])
                    end = self.loop_span[1]
                    if (end, None) in ys:
                        ys.remove((end, None))
                        self.uses[id(self._root(y))] -= 1
        self.orient = orientations(gp)
        all_ops = list(gp.all_ops())
        # 16-bit casts and transposes of register tiles are computed where they are needed (an MMA, a store,
        # the next iteration), so their sources stay live until then
        self.deferred = {id(op.result) for op in all_ops if op.results and (
            op.kind is OpKind.CAST and op.result.type.dtype.bits < 32 and op.result.type.dtype.is_float
            and not all(u is not None and u.kind in FUSABLE_USERS for _, u in self.use_at.get(id(op.result), []))
            or op.kind is OpKind.TRANSPOSE and op.operands[0].type.space is not Space.SMEM)}
        # cheap index math (arange, constants, program ids and what is computed from them alone) is
        # recomputed at each use rather than stored
        self.cheap: set[int] = set()
        for op in all_ops:
            if op.kind in (OpKind.ARANGE, OpKind.FULL) or op.kind in LAZY and op.results and all(
                    not isinstance(o.type, TileType) or id(o) in self.cheap for o in op.operands):
                self.cheap.update(id(r) for r in op.results if isinstance(r.type, TileType))
        self.fused: set[int] = set(self.cheap)
        position = {id(op): i + 1 for i, op in enumerate(all_ops)}
        # a fused chain keeps every stored tile it reads live until its user: bound that, so a long
        # accumulation (t = t + f(x_i), ...) is stored every few steps rather than holding every x_i
        leaves: dict[int, int] = {}
        for op in all_ops:
            if op.kind not in ELEMENTWISE or not op.results:
                continue
            n = sum(leaves.get(id(o), 1) if id(o) in self.fused else 1 for o in op.operands
                    if isinstance(o.type, TileType) and id(o) not in self.cheap)
            leaves[id(op.result)] = n
            if n > MAX_FUSED_LEAVES or id(op.result) in self.cheap or not self.use_at.get(id(op.result)):
                continue
            if id(op.result) in self.deferred:
                continue
            users = {id(u) for _, u in self.use_at[id(op.result)]}
            if len(users) != 1:                      # one user op (it may read the value twice: a*a)
                continue
            p, user = self.use_at[id(op.result)][0]
            if user is None or user.kind not in FUSABLE_USERS or self.block_of[id(user)] != self.block_of[id(op)]:
                continue
            between = all_ops[position[id(op)]:position[id(user)] - 1]
            if any(o.kind is OpKind.MMA_ASYNC or (o.kind is OpKind.MBAR_ARRIVE and o.attrs.which == "empty")
                   for o in between):
                continue
            self.fused.add(id(op.result))
        self._last: dict[int, int] = {}

    def _fold(self, op: Op, static: dict) -> None:
        from aref.backend.cute.values import Scalar, scalar_binary
        if op.kind is OpKind.CONST and not isinstance(op.result.type, TileType):
            static[id(op.result)] = op.attrs.value
        elif op.kind is OpKind.SCALAR_BINARY and all(id(o) in static for o in op.operands):
            a, b = (Scalar.const(static[id(o)]) for o in op.operands)
            static[id(op.result)] = scalar_binary(op.attrs.fn, a, b).value

    def _root(self, v: Value) -> Value:
        while id(v) in self.alias:
            v = self.alias[id(v)]
        return v

    def _use(self, v: Value, pos: int, op: Op | None) -> None:
        v = self._root(v)
        self.uses[id(v)] = self.uses.get(id(v), 0) + 1
        self.use_at.setdefault(id(v), []).append((pos, op))

    def last_use(self, v: Value) -> int:
        """The last position at which `v` is read, counting reads moved into fused users (iterative: a
        fused chain may be as long as the program)."""
        root = self._root(v)
        stack = [root]
        while stack:
            x = stack[-1]
            if id(x) in self._last:
                stack.pop()
                continue
            later = [self._root(u.results[0]) for _, u in self.use_at.get(id(x), [])
                     if u is not None and u.results and (id(u.results[0]) in self.fused
                                                         or id(u.results[0]) in self.deferred)]
            todo = [u for u in later if id(u) not in self._last and u is not x]
            if todo:
                stack += todo
                continue
            key = id(x)
            last = self.def_at.get(key, 0)
            for p, user in self.use_at.get(key, []):
                if user is not None and user.results and (id(user.results[0]) in self.fused
                                                          or id(user.results[0]) in self.deferred):
                    p = self._last.get(id(self._root(user.results[0])), p)
                last = max(last, p)
            start, end = self.loop_span
            if self.def_at.get(key, 0) <= start and any(start < p <= end for p, _ in self.use_at.get(key, [])):
                last = max(last, end)
            self._last[key] = last
            stack.pop()
        return self._last[id(root)]

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
        owner = self.holder.get(b.name)
        if owner is None:
            return True
        last = self.last_use(owner)
        return (last < self.pos or in_place and last <= self.pos) and not self.busy(b)

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
        live = [b for b in self.buffers
                if self.busy(b) or (self.holder.get(b.name) is not None
                                    and self.last_use(self.holder[b.name]) >= self.pos)]
        n = sum(b.registers for b in live)
        if n > self.peak[0]:
            self.peak = (n, live)

    def check_registers(self) -> None:
        """Refuse a role whose register tiles cannot fit its setmaxnreg budget (ptxas would spill)."""
        regs = self.gp.group.regs
        tiles, peak = self.peak
        if self.buffers and tiles + REGISTER_OVERHEAD > regs:
            parts = ", ".join(f"{b.name} {b.registers}" for b in sorted(peak, key=lambda b: -b.registers)[:4])
            raise BackendError(
                f"warp group '{self.gp.group.name}' holds up to {tiles} registers per thread of tiles at once "
                f"({parts}) plus about "
                f"{REGISTER_OVERHEAD} for addresses and loop state, over its register budget of {regs} "
                f"(setmaxnreg): ptxas would spill", self.plan.ws.loc,
                hint="the partition's register model must give this group more registers (or smaller tiles)")

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
        if id(r) not in self.fused and op.kind not in (OpKind.EXPAND_DIMS, OpKind.SLICE):
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
        self.env[id(v)] = Reg(buf)
        return buf

    def elementwise(self, v: Value, op: Op) -> Buffer:
        t = v.type
        layout = self.layout_of(v)
        prefer = None
        for o in self.leaves(op):
            oc = self.env.get(id(o))
            if isinstance(oc, Reg) and self._fits(oc.buf, t, layout) and self.last_use(o) <= self.pos:
                prefer = oc.buf                      # compute in place over an input that dies here
                break
        nest, ctx = self.nest_for(layout, t), root_ctx(layout)
        text = strip_parens(self.render(v, ctx, nest, top=True))
        if prefer is not None and not any(nest.levels) and text == prefer.at("r", "c"):
            self.holder[prefer.name] = v                 # the value is the operand itself (x + 0): no code
            return prefer
        buf = self.new_buffer(v, hint=self.hint(v), prefer=prefer)
        nest.levels[-1].append(f"{buf.at('r', 'c')} = {self.convert_to(text, buf.dtype)}")
        self.emit_nest(nest)
        return buf

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
        for car, y in zip(lp.carried, lp.yields):
            c = self.env[id(car)]
            if id(car) in self.dead_carried:
                continue
            if isinstance(c, tuple) and c[0] == "staged":
                yc = self.env[id(y)]
                if yc[0] == "transpose":
                    self.stage(yc[1].operands[0], c[1])
            elif isinstance(c, Reg):
                yb = self.materialize(y)
                if yb is not c.buf:
                    if yb.name in self.carried_bufs:
                        raise BackendError("loop-carried tiles that swap storage", lp.loc)
                    self.check_not_inflight(yb)
                    self.out(f"# carry {yb.name} into the next iteration")
                    self.out(f"{c.buf.name}.store({yb.name}.load())")
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
            if isinstance(c, SmemTile):
                if not trip.static:
                    raise BackendError("a slot view live after a loop of run-time length", lp.loc)
                i, _, k = c.item.affine
                item = trip.value + k
                depth = self.plan.channel(c.channel).ch.depth
                c = SmemTile(c.channel, c.index, self.slot_of(c.channel, Scalar.const(item % depth)),
                             Scalar.const(item), c.tile, c.transposed, c.row0)
            self.env[id(res)] = c
