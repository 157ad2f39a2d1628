"""Register math of a role: liveness, register-tile storage, fused elementwise loops and row reductions.

`MathEmitter` is the half of `RoleEmitter` that deals with values living in registers. Elementwise ops are
lazy when their single user is another elementwise op or a reduction in the same block (and nothing that
could change their inputs — an MMA issue or a slot release — lies in between): the chain is then emitted
as one expression inside the user's element loop. Everything else is materialized at its place in the IR,
which keeps the schedule's overlap (softmax between two wgmma waits stays there).
"""
from __future__ import annotations

from aref.backend.cute.analysis import BackendError, CUTLASS_DTYPE
from aref.backend.cute.values import Buffer, Reg, Scalar, SmemTile, Zero, affine_expr, literal, paren, strip_parens
from aref.ir import DType, Op, OpKind, Space, TileType, Value

ELEMENTWISE = (OpKind.BINARY, OpKind.UNARY, OpKind.COMPARE, OpKind.WHERE, OpKind.EXPAND_DIMS, OpKind.CAST)
FUSABLE_USERS = ELEMENTWISE + (OpKind.REDUCE,)
BINARY = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "div": "({a} / {b})",
          "maximum": "cute.arch.fmax({a}, {b})", "minimum": "cute.arch.fmin({a}, {b})"}
UNARY = {"exp": "cute.math.exp({a}, fastmath=True)", "exp2": "cute.math.exp2({a}, fastmath=True)",
         "log": "cute.math.log({a}, fastmath=True)", "log2": "cute.math.log2({a}, fastmath=True)",
         "sqrt": "cute.math.sqrt({a}, fastmath=True)", "rsqrt": "cute.math.rsqrt({a}, fastmath=True)",
         "abs": "cute.math.absf({a})", "neg": "(-{a})"}
REGISTER_OVERHEAD = 32          # addresses, descriptors, loop state of a consumer role (measured with ptxas)
COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


class MathEmitter:
    def __init__(self):
        self.pos = 0
        self.in_loop = False
        self.inflight: list[tuple[Buffer, ...]] = []   # registers each in-flight wgmma group writes or reads
        self.holder: dict[str, Value] = {}         # buffer name -> the value it currently holds
        self.buffers: list[Buffer] = []
        self.carried_bufs: dict[str, Value] = {}   # in the loop body: carried buffer -> its yield value
        self.peak: tuple[int, list] = (0, [])
        self.elem_pre: list[str] = []              # per-element temporaries of the loop being rendered
        self.elem_cache: dict = {}

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
        self.fused: set[int] = set()
        ops = list(gp.all_ops())
        # 16-bit casts and transposes of register tiles are computed where they are needed (an MMA, a store,
        # the next iteration), so their sources stay live until then
        self.deferred = {id(op.result) for op in ops if op.results and (
            op.kind is OpKind.CAST and op.result.type.dtype is not DType.float32
            or op.kind is OpKind.TRANSPOSE and op.operands[0].type.space is not Space.SMEM)}
        position = {id(op): i + 1 for i, op in enumerate(ops)}
        for op in ops:
            if op.kind not in ELEMENTWISE or not op.results or not self.use_at.get(id(op.result)):
                continue
            if op.kind is OpKind.CAST and op.result.type.dtype is not DType.float32:
                continue
            users = {id(u) for _, u in self.use_at[id(op.result)]}
            if len(users) != 1:                      # one user op (it may read the value twice: a*a)
                continue
            p, user = self.use_at[id(op.result)][0]
            if user is None or user.kind not in FUSABLE_USERS or self.block_of[id(user)] != self.block_of[id(op)]:
                continue
            between = ops[position[id(op)]:position[id(user)] - 1]
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
        """The last position at which `v` is read, counting reads moved into fused users."""
        v = self._root(v)
        key = id(v)
        if key in self._last:
            return self._last[key]
        last = self.def_at.get(key, 0)
        for p, user in self.use_at.get(key, []):
            if user is not None and user.results and (id(user.results[0]) in self.fused
                                                      or id(user.results[0]) in self.deferred):
                p = self.last_use(user.results[0])
            last = max(last, p)
        start, end = self.loop_span
        if self.def_at.get(key, 0) <= start and any(start < p <= end for p, _ in self.use_at.get(key, [])):
            last = max(last, end)
        self._last[key] = last
        return last

    # ------------------------------------------------------------------------------------------ storage
    def _fits(self, buf: Buffer, t: TileType) -> bool:
        return buf.shape == tuple(t.shape) and buf.dtype is t.dtype

    def new_buffer(self, v: Value, hint: str | None = None, prefer: Buffer | None = None) -> Buffer:
        """Storage for `v`: `prefer` or a free buffer of the same shape, else a new register tensor."""
        t = v.type
        if t.dtype not in (DType.float32, DType.float16, DType.bfloat16):
            raise BackendError(f"a {t.dtype.value} register tile cannot be stored; the templates keep float32 "
                               f"accumulators and 16-bit MMA operands in registers", self.loc)
        yield_of = self._yield_carried(v)
        candidates = ([prefer] if prefer else []) + [b for b in self.buffers if self._fits(b, t)]
        for b in candidates:
            if b is None or not self._fits(b, t) or not self._free(b, in_place=b is prefer):
                continue
            if b.name in self.carried_bufs and self.carried_bufs[b.name] is not yield_of and b is not prefer:
                continue
            self.holder[b.name] = v
            return b
        name = self.names(hint or self.hint(v) or ("s" if len(t.shape) == 2 else "row"))
        buf = self.alloc_buffer(name, t)
        self.buffers.append(buf)
        self.holder[name] = v
        return buf

    def alloc_buffer(self, name: str, t: TileType) -> Buffer:
        """Declare register storage `name` for tiles of type `t` (the architecture's register layout)."""
        dt = f"cutlass.{CUTLASS_DTYPE[t.dtype]}"
        if len(t.shape) == 2:
            mma = self.layout_mma(t.shape[1])
            self.setup(f"{name} = cute.make_rmem_tensor({self.thr(mma)}.partition_shape_C({tuple(t.shape)}), {dt})")
            buf = Buffer(name, tuple(t.shape), t.dtype, mma)
            if t.dtype is DType.float32:
                buf.rc = self.names.reserve(f"{name}_rc")
                self.setup(f"{buf.rc} = aref.rows_view({name})")
        else:
            buf = Buffer(name, tuple(t.shape), t.dtype, "")
            self.setup(f"{name} = cute.make_rmem_tensor({buf.rows}, {dt})")
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

    def issued(self, *bufs: Buffer) -> None:
        self.inflight.append(bufs)

    def retire(self, pending: int) -> None:
        self.inflight = self.inflight[len(self.inflight) - pending:] if pending else []

    def busy(self, buf: Buffer) -> bool:
        return any(buf in group for group in self.inflight)

    def check_not_inflight(self, buf: Buffer) -> None:
        if self.busy(buf):
            raise BackendError(f"internal: register tile {buf.name} is read while a wgmma that writes it may "
                               f"still run (the Barrier IR's mma_wait does not cover it)", self.loc)

    # ---------------------------------------------------------------------------------- materialization
    def lazy_or_now(self, op: Op) -> None:
        """Fuse `op` into its user, or compute it here."""
        if op.kind is OpKind.BINARY and op.attrs.fn == "mul" and any(
                isinstance(self.env.get(id(o)), Zero) and self.env[id(o)].fill == 0.0 for o in op.operands):
            self.env[id(op.result)] = Zero(op.result.type, 0.0)     # a zero-initialised state scaled: still 0
            return
        self.env[id(op.result)] = ("lazy", op)
        if id(op.result) not in self.fused and op.kind is not OpKind.EXPAND_DIMS:
            self.materialize(op.result)

    def materialize(self, v: Value) -> Buffer:
        """The register buffer holding `v`, emitting the code that computes it if needed."""
        c = self.env[id(v)]
        if isinstance(c, Reg):
            return c.buf
        t = v.type
        if isinstance(c, Zero):
            buf = self.new_buffer(v)
            self.out(f"{buf.name}.fill({literal(c.fill)})")
        elif isinstance(c, tuple) and c[0] == "cast":
            src = self.materialize(c[1].operands[0])
            self.check_not_inflight(src)
            buf = self.new_buffer(v, hint=f"{src.name}_{t.dtype.value}")
            self.out(f"{buf.name}.store({src.name}.load().to(cutlass.{CUTLASS_DTYPE[t.dtype]}))")
        elif isinstance(c, tuple) and c[0] == "lazy":
            buf = self.elementwise(v, c[1])
        elif isinstance(c, SmemTile):
            buf = self.new_buffer(v)
            self.out(f"cute.autovec_copy({self.smem_view(c)}, {buf.name})")
        else:
            raise BackendError(f"internal: cannot hold {v} in registers ({c!r})", self.loc)
        self.env[id(v)] = Reg(buf)
        return buf

    def elementwise(self, v: Value, op: Op) -> Buffer:
        t = v.type
        prefer = None
        for o in self.leaves(op):
            oc = self.env.get(id(o))
            if isinstance(oc, Reg) and self._fits(oc.buf, t) and self.last_use(o) <= self.pos:
                prefer = oc.buf                      # compute in place over an input that dies here
                break
        pre: list[str] = []
        self.elem_pre, self.elem_cache = [], {}
        body = self.render(v, pre, two_d=len(t.shape) == 2, top=True)
        if prefer is not None and not self.elem_pre and not pre and strip_parens(body) in (
                f"{prefer.rc}[r, c]", f"{prefer.name}[r]"):
            self.holder[prefer.name] = v                 # the value is the operand itself (x + 0): no code
            return prefer
        buf = self.new_buffer(v, hint=self.hint(v), prefer=prefer)
        self.emit_loop_nest(buf, pre, f"{buf.rc if buf.is_tile else buf.name}[{'r, c' if buf.is_tile else 'r'}] = "
                                      f"{strip_parens(body)}")
        return buf

    def leaves(self, op: Op) -> list[Value]:
        """The materialized inputs of a fused expression."""
        out = []
        for o in op.operands:
            c = self.env.get(id(o))
            if isinstance(c, tuple) and c[0] == "lazy":
                out += self.leaves(c[1])
            else:
                out.append(o)
        return out

    def emit_loop_nest(self, shape_of: Buffer, pre: list[str], stmt: str) -> None:
        with self.out.block(f"for r in cutlass.range_constexpr({shape_of.rows}):"):
            for line in pre:
                self.out(line)
            if shape_of.is_tile:
                with self.out.block(f"for c in cutlass.range_constexpr({shape_of.cols}):"):
                    for line in self.elem_pre:
                        self.out(line)
                    self.out(stmt)
            else:
                for line in self.elem_pre:
                    self.out(line)
                self.out(stmt)

    def reduce(self, op: Op) -> None:
        fn = op.attrs.fn
        if fn not in ("max", "sum"):
            raise BackendError(f"a row {fn} reduction; the templates reduce with max and sum", op.loc)
        src = op.operands[0]
        pre: list[str] = []
        self.elem_pre, self.elem_cache = [], {}
        expr = strip_parens(self.render(src, pre, two_d=True, top=False))
        buf = self.new_buffer(op.result, hint=self.hint(op.result) or f"row_{fn}")
        self.env[id(op.result)] = Reg(buf)
        rows, cols = 2 * src.type.shape[0] // 64, src.type.shape[1] // 4
        init = "-cutlass.Float32.inf" if fn == "max" else "cutlass.Float32(0.0)"
        step = f"x = cute.arch.fmax(x, {expr})" if fn == "max" else f"x = x + {expr}"
        with self.out.block(f"for r in cutlass.range_constexpr({rows}):"):
            for line in pre:
                self.out(line)
            self.out(f"x = {init}")
            with self.out.block(f"for c in cutlass.range_constexpr({cols}):"):
                for line in self.elem_pre:
                    self.out(line)
                self.out(step)
            self.out(f"{buf.name}[r] = aref.quad_{fn}(x)  # the other columns of the row live in the quad")

    # ----------------------------------------------------------------------------------------- rendering
    def depends(self, v: Value) -> int:
        """0: scalar, 1: one value per row, 2: per element."""
        c = self.env[id(v)]
        if isinstance(c, Scalar):
            return 0
        if isinstance(c, (Reg, Zero, SmemTile)):
            t = v.type
            return 2 if len(t.shape) == 2 and t.shape[1] != 1 else 1
        if isinstance(c, tuple) and c[0] == "lazy":
            op = c[1]
            if op.kind is OpKind.EXPAND_DIMS:
                return 1
            return max(self.depends(o) for o in op.operands)
        return 2

    def render(self, v: Value, pre: list[str], two_d: bool, top: bool = False) -> str:
        """Source of `v` at element (r, c) (or row r), hoisting row-invariant parts into `pre`."""
        c = self.env[id(v)]
        if isinstance(c, Scalar):
            return c.expr
        if isinstance(c, Zero):
            return literal(c.fill)
        if isinstance(c, Reg):
            self.check_not_inflight(c.buf)
            return f"{c.buf.rc}[r, c]" if c.buf.is_tile else f"{c.buf.name}[r]"
        if isinstance(c, SmemTile):
            text = self.smem_element(c, v)
            if two_d and self.depends(v) == 1:           # one shared-memory read per row, not per element
                key = ("row", id(v))
                if key not in self.elem_cache:
                    name = self.names("row_" + (v.name or c.channel))
                    pre.append(f"{name} = {text}")
                    self.elem_cache[key] = name
                return self.elem_cache[key]
            return text
        if isinstance(c, tuple) and c[0] == "cast":
            raise BackendError("a 16-bit tile used in register math; compute in float32", self.loc)
        op = c[1]
        if len(self.use_at.get(id(v), [])) > 1 and not top:
            key = ("elem", id(v))
            if key not in self.elem_cache:
                text = self.render_op(op, pre, two_d)
                name = self.names("e_" + (v.name or "v"))
                self.elem_pre.append(f"{name} = {strip_parens(text)}")
                self.elem_cache[key] = name
            return self.elem_cache[key]
        if two_d and not top and self.depends(v) == 1 and op.kind is not OpKind.EXPAND_DIMS:
            text = self.render_op(op, pre, two_d=False)
            name = self.names("row_" + (v.name or "v"))
            pre.append(f"{name} = {strip_parens(text)}")
            return name
        return self.render_op(op, pre, two_d)

    def render_op(self, op: Op, pre: list[str], two_d: bool) -> str:
        k = op.kind
        args = [self.render(o, pre, two_d) for o in op.operands]
        if k is OpKind.EXPAND_DIMS:
            return args[0]
        if k is OpKind.BINARY:
            if op.attrs.fn == "div" and two_d and self.depends(op.operands[1]) == 1:
                inv = self.names("inv_" + (op.operands[1].name or "row"))
                pre.append(f"{inv} = 1.0 / {strip_parens(args[1])}")
                return f"({args[0]} * {inv})"
            if op.attrs.fn == "add" and "0.0" in args:      # a zero-initialised accumulator's first step
                return args[1] if args[0] == "0.0" else args[0]
            if op.attrs.fn == "mul" and "0.0" in args:
                return "0.0"
            if op.attrs.fn == "maximum" and "-cutlass.Float32.inf" in args:   # a running max's first step
                return args[1] if args[0] == "-cutlass.Float32.inf" else args[0]
            return BINARY[op.attrs.fn].format(a=args[0], b=args[1])
        if k is OpKind.UNARY:
            return UNARY[op.attrs.fn].format(a=strip_parens(args[0]))
        if k is OpKind.COMPARE:
            return f"({args[0]} {COMPARE[op.attrs.fn]} {args[1]})"
        if k is OpKind.WHERE:
            return f"aref.where({strip_parens(args[0])}, {args[1]}, {args[2]})"
        if k is OpKind.CAST:
            return f"cutlass.Float32({strip_parens(args[0])})"
        raise BackendError(f"internal: cannot render {k.value}", op.loc)

    def smem_element(self, s: SmemTile, v: Value) -> str:
        """An element (or row value) of a slot tile, in the accumulator layout of this thread."""
        if s.transposed:
            raise BackendError("register math on a transposed shared-memory tile", self.loc)
        if len(s.tile.shape) == 1 or s.tile.shape[-1] == 1:
            rc = self.row_coords(s.tile.shape[0])
            ring = self.arg(self.plan.channel(s.channel).buffers[s.index].name)
            row = f"{rc}[r, 0][0]" + (f" + {s.row0}" if s.row0 else "")
            return f"{ring}[{row}, {strip_parens(s.slot.expr)}]"
        return f"{self.smem_view(s, rows_view=True)}[r, c]"

    def smem_view(self, s: SmemTile, rows_view: bool = False) -> str:
        """This thread's part of a slot tile, partitioned like a wgmma accumulator (emitted before use)."""
        cp = self.plan.channel(s.channel)
        ring = cp.buffers[s.index]
        rows, cols = s.tile.shape
        base = self.arg(ring.name)
        if rows != ring.tile.shape[0]:
            base = f"aref.row_block({base}, {rows}, {cols}, {s.row0 // rows})"
        part = f"{self.thr(self.layout_mma(cols))}.partition_C({base}[None, None, {strip_parens(s.slot.expr)}])"
        name = self.names(f"{ring.name[2:]}_part")
        self.out(f"{name} = {'aref.rows_view(' + part + ')' if rows_view else part}")
        return name

    def row_coords(self, rows: int) -> str:
        cols = min(self.plan.layout_n)
        mma = self.layout_mma(cols)
        return self.local(("rowc", rows), f"rows{rows}_coord", f"aref.row_coords({self.thr(mma)}, {rows}, {cols})")

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
        for car, y in zip(lp.carried, lp.yields):
            c = self.env[id(car)]
            if id(car) in self.dead_carried:
                continue
            if id(car) in self.carried_vars:
                self.out(f"{self.carried_vars[id(car)]} = {strip_parens(self.scalar(y).expr)}")
            elif isinstance(c, tuple) and c[0] == "staged":
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
