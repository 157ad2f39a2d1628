"""Element expressions of register math: what value `v` is at this thread's register index (r, c).

`Renderer` is the part of a role's math emitter that turns a DAG of lazy (fused) IR ops into Python source
for one element, inside a loop nest over the elements this thread holds (`Nest`). Each op's expression is
its registry entry's CuTe template (`aref.ops.cute_emission`, looked up by role and layout); rank-1 and
unit-extent operands are read with the indices their layout has (`Ctx`); every float result narrower than
float32 is rounded as the interpreter rounds it. The walk is iterative and binds an expression to a named
temporary when it nests deeply, is read twice, or varies less than the loop it sits in (hoisted), so
generated code stays valid and flat for programs of any length.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aref import ops
from aref.backend.cute.analysis import BackendError, CUTLASS_DTYPE
from aref.backend.cute.layout import ACC, COL, ROW, SCALAR
from aref.backend.cute.values import Reg, Scalar, SmemTile, Zero, literal, strip_parens
from aref.ir import DType, Op, OpKind, ScalarType, TileType, Value

MAX_DEPTH = 12              # operator nesting of one expression before a temporary takes it
NARROW = (DType.float16, DType.bfloat16, DType.float8_e4m3, DType.float8_e5m2)
COMPUTE_TYPE = {"float": "cutlass.Float32", "int": "cutlass.Int32", "bool": "cutlass.Boolean"}


@dataclass(frozen=True)
class Index:
    """A register index: loop variable plus a constant offset (a slice of a register tile)."""

    var: str
    offset: int = 0

    def __str__(self) -> str:
        return self.var if not self.offset else f"{self.var} + {self.offset}"

    def shift(self, k: int) -> "Index":
        return Index(self.var, self.offset + k)


@dataclass(frozen=True)
class Ctx:
    """Where a value is read: its row index, its column index (None where it has no such extent), and how
    rank-1 values read here are oriented."""

    r: Index | None = None
    c: Index | None = None
    orient: str = ROW

    @property
    def layout(self) -> str:
        if self.r is not None and self.c is not None:
            return ACC
        return ROW if self.r is not None else COL if self.c is not None else SCALAR

    @property
    def vars(self) -> set[str]:
        return {i.var for i in (self.r, self.c) if i is not None}


SCALAR_CTX = Ctx()


def root_ctx(layout: str) -> Ctx:
    """The context of a value stored in `layout`, indexed by the loop variables r and c."""
    return {ACC: Ctx(Index("r"), Index("c")), ROW: Ctx(Index("r"), None, ROW), COL: Ctx(None, Index("c"), COL),
            SCALAR: SCALAR_CTX}[layout]


@dataclass
class Nest:
    """A loop nest over register indices: `loops` outer to inner, statements per depth (0: before every
    loop) placed before the next inner loop (`levels`) or after it (`after`)."""

    loops: list[tuple[str, int]]
    levels: list[list[str]] = field(default_factory=list)
    after: list[list[str]] = field(default_factory=list)
    memo: dict = field(default_factory=dict)

    def __post_init__(self):
        self.levels = [[] for _ in range(len(self.loops) + 1)]
        self.after = [[] for _ in range(len(self.loops) + 1)]

    def depth_of(self, ctx: Ctx) -> int:
        """The shallowest depth at which every index `ctx` reads is defined."""
        depth = 0
        for i, (var, _) in enumerate(self.loops):
            if var in ctx.vars:
                depth = i + 1
        return depth


def align(operand: Value, result: TileType, ctx: Ctx) -> Ctx:
    """The context of an elementwise operand inside its result's context (numpy broadcasting)."""
    t = operand.type
    if not isinstance(t, TileType) or len(t.shape) == 0:
        return SCALAR_CTX
    rs = result.shape if isinstance(result, TileType) else ()
    if len(rs) == 2:
        if len(t.shape) == 2:
            return Ctx(ctx.r if t.shape[0] > 1 else None, ctx.c if t.shape[1] > 1 else None, ctx.orient)
        return Ctx(None, ctx.c, COL) if t.shape[0] > 1 else SCALAR_CTX
    return ctx if t.shape[-1] > 1 else SCALAR_CTX


class Renderer:
    """Mixin of `MathEmitter`: rendering lazy values into element expressions (needs env, use counts,
    buffers, `out`, `names` and the exchange helpers of the emitter)."""

    # ------------------------------------------------------------------------------------------- contexts
    def operand_ctxs(self, op: Op, ctx: Ctx) -> list[Ctx]:
        k = op.kind
        if k is OpKind.EXPAND_DIMS:
            (o,) = op.operands
            if isinstance(o.type, TileType) and len(o.type.shape) == 1 and o.type.shape[0] > 1:
                return [Ctx(ctx.r, None, ROW) if op.attrs.axis == 1 else Ctx(None, ctx.c, COL)]
            return [align(o, op.result.type, ctx)]
        if k is OpKind.SLICE:
            return [self.slice_ctx(op, ctx)]
        if k is OpKind.SELECT:
            return [SCALAR_CTX, ctx, ctx]
        return [align(o, op.result.type, ctx) for o in op.operands]

    def slice_ctx(self, op: Op, ctx: Ctx) -> Ctx:
        """A register slice is an index shift: whole 64-row atoms (2 row indices each) or 8-column groups."""
        a, src = op.attrs, op.operands[0].type
        rows = len(src.shape) == 2 and a.axis == 0 or len(src.shape) == 1 and ctx.orient == ROW
        step = 64 if rows else 8                  # a thread holds 2 row indices per atom, 2 columns per 8
        if a.start % step:
            raise BackendError(f"a slice of a register tile starting at {'row' if rows else 'column'} {a.start}: "
                               f"register slices must start on a {'64-row wgmma atom' if rows else '8-column group'} "
                               f"of the accumulator layout", op.loc)
        k = a.start // step * 2
        return Ctx(ctx.r.shift(k) if rows and ctx.r else ctx.r, ctx.c.shift(k) if not rows and ctx.c else ctx.c,
                   ctx.orient)

    def role_key(self) -> str:
        return "epilogue" if self.region == "post" else ("mma_consumer" if self.g.role == "mma_consumer"
                                                         else "compute")

    # ------------------------------------------------------------------------------------------ rendering
    def render(self, root: Value, ctx: Ctx, nest: Nest, top: bool = True) -> str:
        """Source of `root` at `ctx` inside `nest` (temporaries and hoisted values go into the nest)."""
        stack = [(root, ctx, False)]
        memo = nest.memo
        while stack:
            v, cx, expanded = stack.pop()
            key = (id(v), cx)
            if key in memo:
                continue
            c = self.env.get(id(v))
            op = c[1] if isinstance(c, tuple) and c[0] in ("lazy", "cast") else None
            if op is None:
                memo[key] = (self.leaf(v, c, cx, nest), 0)
                continue
            kids = list(zip(op.operands, self.operand_ctxs(op, cx)))
            if not expanded:
                stack.append((v, cx, True))
                stack += [(o, ocx, False) for o, ocx in kids if (id(o), ocx) not in memo]
                continue
            here = nest.depth_of(cx)
            for o, ocx in kids:          # a part that varies less than this op is computed once, outside
                t, d = memo[(id(o), ocx)]
                computed = isinstance(self.env.get(id(o)), (tuple, SmemTile))
                if nest.depth_of(ocx) < here and computed and not _trivial(t):
                    memo[(id(o), ocx)] = (self.bind(o, t, ocx, nest), 0)
            args = [memo[(id(o), ocx)] for o, ocx in kids]
            text, depth = self.render_op(op, [a for a, _ in args], cx, nest), 1 + max((d for _, d in args), default=0)
            if op.kind not in (OpKind.EXPAND_DIMS, OpKind.SLICE) and not (v is root and top) and (
                    depth > MAX_DEPTH or len(self.use_at.get(id(v), [])) > 1):
                text, depth = self.bind(v, text, cx, nest), 0
            memo[key] = (text, depth)
        return memo[(id(root), ctx)][0]

    def bind(self, v: Value, text: str, ctx: Ctx, nest: Nest) -> str:
        """A temporary for `text` at the shallowest depth of `nest` where its indices exist."""
        name = self.names(("e_" if ctx.layout == ACC else "row_" if ctx.layout == ROW else "t_") + self.name_of(v))
        nest.levels[nest.depth_of(ctx)].append(f"{name} = {strip_parens(text)}")
        return name

    def name_of(self, v: Value) -> str:
        """A readable name for `v`'s temporary: its own, or that of the value a view shows."""
        for _ in range(8):
            if v.name:
                return v.name
            c = self.env.get(id(v))
            if not (isinstance(c, tuple) and c[0] == "lazy" and c[1].kind in (OpKind.EXPAND_DIMS, OpKind.SLICE)):
                break
            v = c[1].operands[0]
        return v.name or "v"

    def leaf(self, v: Value, c, ctx: Ctx, nest: Nest) -> str:
        if isinstance(c, Scalar):
            return c.expr
        if isinstance(c, Zero):
            return self.constant(c.fill, c.tile.dtype)
        if isinstance(c, Reg):
            buf = self.in_layout(v, c.buf, ctx.layout)
            self.check_not_inflight(buf)
            text = buf.at(str(ctx.r) if ctx.r else None, str(ctx.c) if ctx.c else None)
            return f"cutlass.Float32({text})" if buf.dtype in NARROW else text
        if isinstance(c, SmemTile):
            return self.smem_element(c, v, ctx, nest)
        raise BackendError(f"internal: no element expression for {v} ({c!r})", self.loc)

    def constant(self, value, dtype: DType) -> str:
        if dtype is DType.bool_:
            return literal(bool(value))
        if not dtype.is_float:
            return str(int(value))
        return literal(float(value))

    def render_op(self, op: Op, args: list[str], ctx: Ctx, nest: Nest) -> str:
        """One op's expression from its operands' expressions, by its registry entry."""
        k = op.kind
        if k in (OpKind.EXPAND_DIMS, OpKind.SLICE):
            return args[0]
        res = op.result.type
        if k is OpKind.BINARY and (peep := self.peephole(op, args, ctx, nest)) is not None:
            return peep
        cls = ops.compute_class(res.dtype)
        if k is OpKind.COMPARE:
            classes = {ops.compute_class(o.type.dtype) for o in op.operands}
            cls = "float" if "float" in classes else "int"
        args = self.coerce(op, args, cls)
        text = self.template(ops.entry(op), op, args, ctx, cls, nest)
        if res.dtype in NARROW and k is not OpKind.SELECT:
            text = f"aref.rounded({strip_parens(text)}, cutlass.{CUTLASS_DTYPE[res.dtype]})"
        return text

    def coerce(self, op: Op, args: list[str], cls: str) -> list[str]:
        """Widen int or boolean operands of a float op to float32 (the interpreter's promotion)."""
        if cls != "float" or op.kind in (OpKind.CAST, OpKind.SELECT):
            return args
        out = []
        for o, a in zip(op.operands, args):
            oc = ops.compute_class(o.type.dtype)
            out.append(a if oc == "float" or (op.kind is OpKind.WHERE and o is op.operands[0])
                       else f"cutlass.Float32({strip_parens(a)})")
        return out

    def template(self, d: ops.OpDef, op: Op, args: list[str], ctx: Ctx, cls: str, nest: Nest) -> str:
        try:
            e = ops.cute_emission(d, self.role_key(), ctx.layout, cls)
        except ops.NoEmission as err:
            raise BackendError(str(err), op.loc) from None
        if e is None:                                    # the entry decomposes into other entries
            args = [a if _simple(a) else self.bind_text(a, ctx, nest) for a in args]

            def emit(kind, fn, xs):
                sub = ops.lookup(kind, fn)
                return self.template(sub, op, list(xs), ctx, cls, nest)
            return d.decompose(emit, op, *args)
        t = e.template(op) if callable(e.template) else e.template
        if not t.startswith("("):                         # a call: its arguments need no parentheses
            args = [strip_parens(a) for a in args]
        fields = dict(zip("abc", args))
        fields.update(T=COMPUTE_TYPE[cls], row=str(ctx.r) if ctx.r else "0", col=str(ctx.c) if ctx.c else "0")
        if "{const}" in t:
            fields["const"] = self.constant(op.attrs.value, op.result.type.dtype if op.results and
                                            isinstance(op.result.type, (TileType, ScalarType)) else DType.float32)
        return t.format(**fields)

    def bind_text(self, text: str, ctx: Ctx, nest: Nest) -> str:
        name = self.names("t_arg")
        nest.levels[nest.depth_of(ctx)].append(f"{name} = {strip_parens(text)}")
        return name

    def peephole(self, op: Op, args: list[str], ctx: Ctx, nest: Nest) -> str | None:
        """The entry's algebra (`aref.ops.Algebra`) on float math: a zero-initialised state's first step
        (`0 + x`, `x * 0`), a running max's first step (`max(-inf, x)`), and division by a per-row value as
        one reciprocal per row."""
        alg, dtype = ops.entry(op).algebra, op.result.type.dtype
        if not dtype.is_float:
            return None
        if alg.reciprocal and len(nest.loops) == 2 and nest.loops[0][0] == "r" and ctx.layout == ACC:
            if self.row_only(op.operands[1], op.result.type):
                inv = self.names("inv_" + (op.operands[1].name or "row"))
                nest.levels[1].append(f"{inv} = 1.0 / {strip_parens(args[1])}")
                return f"({args[0]} * {inv})"
        if alg.absorbing is not None and self.constant(alg.absorbing, dtype) in args:
            return self.constant(alg.absorbing, dtype)
        if alg.identity is not None:
            e = self.constant(alg.identity, dtype)
            if args[1] == e:
                return args[0]
            if args[0] == e and not alg.right_only:
                return args[1]
        return None

    @staticmethod
    def row_only(v: Value, result) -> bool:
        t = v.type
        return isinstance(t, TileType) and len(t.shape) == 2 and t.shape[1] == 1 and t.shape[0] > 1

    # ---------------------------------------------------------------------------------- shared memory
    def smem_element(self, s: SmemTile, v: Value, ctx: Ctx, nest: Nest) -> str:
        """An element (or row / column value) of a slot tile, in this thread's accumulator layout."""
        shape = s.tile.shape
        ring = self.arg(self.plan.channel(s.channel).buffers[s.index].name)
        slot = strip_parens(s.slot.expr)
        if ctx.layout == ACC:
            view = self.smem_view(s, rows_view=True)
            text = f"{view}[{ctx.r}, {ctx.c}]"
        else:
            row = f"aref.row_index(group_tidx, {ctx.r})" + (f" + {s.row0}" if s.row0 else "") if ctx.r else \
                (str(s.row0) if s.row0 else "0")
            col = f"aref.col_index(group_tidx, {ctx.c})" if ctx.c else "0"
            if s.transposed:
                row, col = col, row
            if len(shape) == 1:
                text = f"{ring}[{row if ctx.layout != COL else col}, {slot}]"
            else:
                text = f"{ring}[{row}, {col}, {slot}]"
        return f"cutlass.Float32({text})" if s.tile.dtype in NARROW else text


def _trivial(text: str) -> bool:
    """A name, a number or one register element (`buf[r]`): nothing worth a temporary."""
    head = text.split("[", 1)[0]
    return _simple(text) or (text.endswith("]") and head.isidentifier() and "(" not in text)


def _simple(text: str) -> bool:
    return text.replace("_", "").replace(".", "").isalnum() or text.lstrip("-").replace(".", "").isdigit()
