"""The tile language: what a kernel author calls inside an `@aref_kernel` function.

Values are proxies (`Tile`, `Scalar`, `TensorArg`, `Channel`) that record Tile IR ops while the function is
traced. Tiles behave like small arrays: `+ - * /`, comparisons, broadcasting with `x[:, None]`, `.T`,
`.to(dtype)`, `.max(axis)` / `.sum(axis)`. Loop-carried values need no API: reassign a variable in the
`aref.range` loop and the frontend carries it.
"""
from __future__ import annotations

import builtins

from aref import ops
from aref import typing_rules as rules
from aref.errors import ArefError, ArefSyntaxError, ArefTypeError
from aref.ir import (ArangeAttrs, CastAttrs, ConstAttrs, DType, ExpandDimsAttrs,
                     FnAttrs, FullAttrs, LoadAttrs, NoAttrs, OpKind, ProgramIdAttrs, ScalarType, StoreAttrs,
                     TileType, TransposeAttrs, Value)
from aref.trace import current, user_loc

float16 = DType.float16
bfloat16 = DType.bfloat16
float8_e4m3 = DType.float8_e4m3
float8_e5m2 = DType.float8_e5m2
float32 = DType.float32
int32 = DType.int32

__all__ = ["float16", "bfloat16", "float8_e4m3", "float8_e5m2", "float32", "int32", "Tile", "Scalar",
           "TensorArg", "Channel", "program_id", "load", "store", "zeros", "full", "arange", "mma",
           "maximum", "minimum", "clamp", "pow", "where", "rowmax", "rowsum", "rowmin", "channel", "range",
           "cast", "cdiv",
           *(fn for fn in ops.UNARY_FNS if fn != "neg")]


# ------------------------------------------------------------------------------------------- proxies
class _Proxy:
    """Common behaviour: a proxy is not a Python bool, int or iterable."""

    __slots__ = ("value",)

    def __init__(self, value: Value):
        self.value = value

    def __bool__(self):
        raise ArefSyntaxError(
            "a traced value has no Python truth value: `if`, `and`, `or`, `not` and Python's `min`/`max` on "
            "tiles or runtime scalars are not supported", user_loc(),
            hint="use `aref.where(cond, a, b)` to select, `&` / `|` to combine masks, `aref.minimum`/"
                 "`aref.maximum` for min/max; branch only on compile-time constants")

    def __iter__(self):
        raise ArefSyntaxError(
            "a traced value cannot be iterated or unpacked", user_loc(),
            hint="`a, b = ch.get()` unpacks the tiles of one put: it needs `ch.put(a, b)`; a put of a single tile "
                 "gets back one tile (`a = ch.get()`)")

    def __index__(self):
        raise ArefSyntaxError(
            "a runtime value cannot be used as a Python integer (e.g. in Python's range() or as a tile size)",
            user_loc(), hint="tile sizes are compile-time constants; loop with `aref.range(n)`")

    __hash__ = object.__hash__

    # arithmetic shared by tiles and scalars
    def __add__(self, o): return _arith("add", self, o)
    def __radd__(self, o): return _arith("add", o, self)
    def __sub__(self, o): return _arith("sub", self, o)
    def __rsub__(self, o): return _arith("sub", o, self)
    def __mul__(self, o): return _arith("mul", self, o)
    def __rmul__(self, o): return _arith("mul", o, self)
    def __truediv__(self, o): return _arith("div", self, o)
    def __rtruediv__(self, o): return _arith("div", o, self)
    def __floordiv__(self, o): return _arith("floordiv", self, o)
    def __rfloordiv__(self, o): return _arith("floordiv", o, self)
    def __mod__(self, o): return _arith("mod", self, o)
    def __rmod__(self, o): return _arith("mod", o, self)
    def __pow__(self, o): return _power(self, o)
    def __rpow__(self, o): return _power(o, self)
    def __neg__(self): return _unary("neg", self)
    def __abs__(self): return _unary("abs", self)
    def __lt__(self, o): return _compare("lt", self, o)
    def __le__(self, o): return _compare("le", self, o)
    def __gt__(self, o): return _compare("gt", self, o)
    def __ge__(self, o): return _compare("ge", self, o)
    def __eq__(self, o): return _compare("eq", self, o)  # type: ignore[override]
    def __ne__(self, o): return _compare("ne", self, o)  # type: ignore[override]
    def __and__(self, o): return _compare("and", self, o)
    def __rand__(self, o): return _compare("and", o, self)
    def __or__(self, o): return _compare("or", self, o)
    def __ror__(self, o): return _compare("or", o, self)

    def __invert__(self):
        raise ArefTypeError("`~` (logical not) is not in the language", user_loc(),
                            hint="write the comparison the other way, e.g. `a < b` for `~(a >= b)`, or swap the "
                                 "branches of aref.where")

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype


class Scalar(_Proxy):
    """A runtime scalar: a program id, the loop index, or arithmetic on them."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Scalar({self.value.type})"


class Tile(_Proxy):
    """A tile value: shape and dtype are static; the data lives in shared memory or registers."""

    __slots__ = ()

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.type.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def T(self) -> "Tile":
        loc = user_loc()
        return _build(OpKind.TRANSPOSE, None, [self.value], TransposeAttrs((1, 0)), loc)

    def to(self, dtype: DType) -> "Tile":
        return cast(self, dtype)

    def max(self, axis: int = -1) -> "Tile":
        return _reduce("max", self, axis)

    def min(self, axis: int = -1) -> "Tile":
        return _reduce("min", self, axis)

    def sum(self, axis: int = -1) -> "Tile":
        return _reduce("sum", self, axis)

    def __getitem__(self, key) -> "Tile":
        loc = user_loc()
        key = key if isinstance(key, tuple) else (key,)
        full_slice = all(isinstance(k, slice) and k == slice(None) for k in key if k is not None)
        kept = [k for k in key if k is not None]
        if not full_slice or (len(kept) != self.ndim and Ellipsis not in key):
            raise ArefSyntaxError(
                f"tiles support only indexing that inserts unit dimensions, like `x[:, None]`; got {key!r} "
                f"on a {self.ndim}-D tile", loc, hint="slicing tiles is not supported; load the part you need")
        out, axis = self, 0
        for k in key:
            if k is None:
                out = _build(OpKind.EXPAND_DIMS, None, [out.value], ExpandDimsAttrs(axis), loc)
            axis += 1
        return out

    def __len__(self):
        raise ArefSyntaxError("use `.shape` for a tile's size", user_loc(),
                              hint="e.g. x.shape[0] for its rows")

    def __repr__(self) -> str:
        return f"Tile({self.value.type})"


class TensorArg:
    """A kernel argument in global memory. Read tiles with `aref.load`, write with `aref.store`."""

    def __init__(self, name: str, value: Value):
        self.name = name
        self.value = value

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.type.shape

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _misuse(self, *_):
        raise ArefTypeError(f"`{self.name}` is a tensor in global memory, not a tile", user_loc(),
                            hint=f"load a tile first: `aref.load({self.name}, coords, tile_shape)`")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __getitem__ = _misuse
    __matmul__ = __neg__ = __lt__ = __gt__ = _misuse

    def __repr__(self) -> str:
        return f"TensorArg({self.name}: {self.value.type})"


# --------------------------------------------------------------------------------------- op builders
def _emit1(kind, operands, result_type, attrs, loc) -> Tile | Scalar:
    op = current().emit(kind, operands, [result_type], attrs, loc)
    return wrap(op.result)


def _build(kind: OpKind, fn: str | None, operands: list[Value], attrs, loc) -> Tile | Scalar:
    """Emit one op whose result type is its registry entry's type rule (dtype gates included)."""
    (t,) = ops.result_types(kind, fn, [v.type for v in operands], attrs, loc)
    return _emit1(kind, operands, t, attrs, loc)


def wrap(v: Value) -> Tile | Scalar:
    return Tile(v) if isinstance(v.type, TileType) else Scalar(v)


def _const(x, dtype: DType, loc, tracer=None) -> Value:
    """A constant, shared by all uses in the current block (the IR stays readable)."""
    tracer = tracer or current()
    value = bool(x) if dtype is DType.bool_ else (float(x) if dtype.is_float else int(x))
    key = (id(tracer.block), dtype, repr(value))
    v = tracer.consts.get(key)
    if v is None:
        v = tracer.emit(OpKind.CONST, [], [ScalarType(dtype)], ConstAttrs(value), loc).result
        tracer.consts[key] = v
    return v


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, builtins.bool)


def _check_operand(x, what: str, loc):
    if isinstance(x, _Proxy):
        return x
    if _is_number(x) or isinstance(x, builtins.bool):
        return x
    if isinstance(x, TensorArg):
        x._misuse()
    from aref.frontend_rt import Poison  # local: the runtime module imports this one
    if isinstance(x, Poison):
        x.fail()
    raise ArefTypeError(f"{what} got an operand of Python type {type(x).__name__}", loc,
                        hint="operands are tiles, runtime scalars or Python numbers")


def _as_values(xs, loc) -> list[Value]:
    """Turn proxies and Python numbers into Values; numbers take the dtype of the proxies beside them."""
    proxies = [x for x in xs if isinstance(x, _Proxy)]
    if proxies and builtins.any(p.dtype.is_float for p in proxies):
        dtype = next(p.dtype for p in proxies if p.dtype.is_float)
    else:
        dtype = DType.int32
    out = []
    for x in xs:
        if isinstance(x, _Proxy):
            out.append(x.value)
        else:
            d = DType.float32 if isinstance(x, float) and not dtype.is_float else dtype
            out.append(_const(x, d, loc))
    return out


def _arith(fn: str, a, b):
    loc = user_loc()
    a, b = _check_operand(a, fn, loc), _check_operand(b, fn, loc)
    if fn in ("floordiv", "mod", "div") and _is_number(b) and b == 0:
        raise ArefTypeError(f"{'division' if fn != 'mod' else 'modulo'} by zero", loc,
                            hint="the divisor is the constant 0: check the compile-time constants it comes from")
    if isinstance(a, Scalar) and _is_number(b) and (fn, b) in (("add", 0), ("sub", 0), ("mul", 1)):
        return a                               # x + 0, x - 0, x * 1 fold away (as in `pid * S + i`)
    if isinstance(b, Scalar) and _is_number(a) and (fn, a) in (("add", 0), ("mul", 1)):
        return b
    va, vb = _as_values([a, b], loc)
    if isinstance(va.type, ScalarType) and isinstance(vb.type, ScalarType) and not va.type.dtype.is_float \
            and not vb.type.dtype.is_float:
        if fn == "div":
            raise ArefTypeError("`/` on integer scalars", loc, hint="use `//` for integer division")
        return _scalar_op({"maximum": "max", "minimum": "min"}.get(fn, fn), va, vb, loc)
    return _build(OpKind.BINARY, fn, [va, vb], FnAttrs(fn), loc)


MAX_UNROLLED_POWER = 16      # x ** n with a constant integer |n| up to this: multiplications (exact, FMA pipe)


def _power(a, b):
    """`a ** b`. A constant integral exponent is multiplication (`x ** 2` is `x * x`, `x ** -1` is `1 / x`:
    exact, and right for negative bases); any other exponent is the registry's `pow` (torch.pow's values)."""
    loc = user_loc()
    a, b = _check_operand(a, "**", loc), _check_operand(b, "**", loc)
    if isinstance(a, _Proxy) and _is_number(b) and float(b).is_integer() and builtins.abs(b) <= MAX_UNROLLED_POWER:
        n = int(b)
        if n == 0:
            return 1 if isinstance(a, Scalar) else full(a.shape, 1, a.dtype)
        if n < 0 and not a.dtype.is_float:
            raise ArefTypeError(f"an integer {'tile' if isinstance(a, Tile) else 'scalar'} to the negative power "
                                f"{n}", loc, hint="cast it to a float type first, e.g. `x.to(aref.float32) ** -1`")
        result, square, k = None, a, builtins.abs(n)
        while k:                                      # exponentiation by squaring
            if k & 1:
                result = square if result is None else _arith("mul", result, square)
            k >>= 1
            if k:
                square = _arith("mul", square, square)
        return _arith("div", 1.0, result) if n < 0 else result
    if isinstance(a, Scalar) or isinstance(b, Scalar) or not builtins.any(isinstance(x, Tile) for x in (a, b)):
        raise ArefTypeError("`**` with a runtime scalar", loc,
                            hint=f"powers of index math take a constant integer exponent (up to "
                                 f"{MAX_UNROLLED_POWER}); compute tiles with `**`")
    return _arith("pow", a, b)


def _scalar_op(fn: str, va: Value, vb: Value, loc) -> Scalar:
    tracer = current()
    key = (id(tracer.block), fn, id(va), id(vb))   # scalar index math repeats a lot: share it
    if key not in tracer.consts:
        tracer.consts[key] = _build(OpKind.SCALAR_BINARY, fn, [va, vb], FnAttrs(fn), loc).value
    return Scalar(tracer.consts[key])


def _compare(fn: str, a, b):
    loc = user_loc()
    a, b = _check_operand(a, fn, loc), _check_operand(b, fn, loc)
    va, vb = _as_values([a, b], loc)
    return _build(OpKind.COMPARE, fn, [va, vb], FnAttrs(fn), loc)


def _unary(fn: str, x, loc=None):
    loc = loc or user_loc()
    x = _check_operand(x, fn, loc)
    if not isinstance(x, _Proxy):
        raise ArefTypeError(f"aref.{fn} takes a tile; for Python numbers use the math module", loc,
                            hint="e.g. math.exp(x) for a Python number, aref.exp(tile) for a tile")
    if isinstance(x, Scalar) and x.dtype is DType.int32 and fn in ("neg", "abs"):
        # integer index math stays scalar arithmetic (CTA-uniform): -x = 0 - x, |x| = max(x, 0 - x)
        negated = _scalar_op("sub", _const(0, DType.int32, loc), x.value, loc)
        return negated if fn == "neg" else _scalar_op("max", x.value, negated.value, loc)
    return _build(OpKind.UNARY, fn, [x.value], FnAttrs(fn), loc)


def _reduce(fn: str, x, axis: int, loc=None):
    loc = loc or user_loc()
    if not isinstance(x, Tile):
        raise ArefTypeError(f"{fn} reduction takes a tile", loc,
                            hint="reduce a tile, e.g. aref.rowmax(s) or s.max(1)")
    if not isinstance(axis, int):
        raise ArefTypeError("the reduction axis must be a compile-time integer", loc,
                            hint="e.g. x.sum(1) for rows, x.sum(0) for columns")
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        rules.reduce_type(x.value.type, axis, loc)          # the out-of-range error
    return _build(OpKind.REDUCE, fn, [x.value], FnAttrs(fn, axis % x.ndim), loc)


# ----------------------------------------------------------------------------------- public functions
def program_id(axis: int) -> Scalar:
    """This CTA's index along grid axis `axis` (0, 1 or 2)."""
    loc = user_loc()
    tracer = current("aref.program_id")
    if axis not in (0, 1, 2):
        raise ArefTypeError(f"program_id axis must be 0, 1 or 2, got {axis!r}", loc,
                            hint="a grid has at most three axes: aref.program_id(0), (1) or (2)")
    if axis not in tracer.program_ids:
        op = tracer.emit(OpKind.PROGRAM_ID, [], [ScalarType(DType.int32)], ProgramIdAttrs(axis), loc)
        tracer.block.ops.remove(op)       # program ids are CTA constants: define them before everything
        tracer.pre.ops.insert(len(tracer.program_ids), op)
        tracer.program_ids[axis] = op.result
    return Scalar(tracer.program_ids[axis])


def load(tensor: TensorArg, coords, tile_shape) -> Tile:
    """Load a tile (global → shared memory, TMA semantics; out-of-bounds elements read as zero).

    `coords` has one entry per tensor dimension: block coordinates for the trailing `len(tile_shape)`
    dimensions (element offset = coord · tile size) and element indices for the leading ones, which are
    dropped from the tile's shape.
    """
    loc = user_loc()
    tracer = current("aref.load")
    if not isinstance(tensor, TensorArg):
        raise ArefTypeError(f"aref.load reads from a tensor argument, got {type(tensor).__name__}", loc,
                            hint="pass one of the kernel's tensor parameters: aref.load(A, coords, tile_shape)")
    coords = tuple(coords) if isinstance(coords, (tuple, list)) else (coords,)
    tile_shape = tuple(tile_shape) if isinstance(tile_shape, (tuple, list)) else (tile_shape,)
    t = rules.load_type(tensor.shape, tensor.dtype, tile_shape, len(coords), loc)
    unrolled = tracer.unrolled_outside_loop()
    if unrolled is not None and unrolled.shape_dependent:
        raise unrolled.error(f"loads a tile on every trip (line {loc.line})")
    cvals = [_coord(c, loc, tracer) for c in coords]
    return _emit1(OpKind.LOAD, [tensor.value, *cvals], t, LoadAttrs(tile_shape), loc)


def store(tensor: TensorArg, coords, tile: Tile, reduce: str | None = None) -> None:
    """Store a tile to global memory at block `coords` (same convention as `load`; out-of-bounds dropped).

    `reduce="add"` accumulates into the tensor instead (a TMA reduce-add), for results that several CTAs
    contribute to.
    """
    loc = user_loc()
    tracer = current("aref.store")
    if not isinstance(tensor, TensorArg):
        raise ArefTypeError(f"aref.store writes to a tensor argument, got {type(tensor).__name__}", loc,
                            hint="pass one of the kernel's tensor parameters: aref.store(C, coords, tile)")
    tile = _check_operand(tile, "aref.store", loc)
    if not isinstance(tile, Tile):
        raise ArefTypeError("aref.store stores a tile", loc,
                            hint="store a tile computed in the kernel, e.g. aref.store(C, coords, acc.to(C.dtype))")
    if reduce not in (None, "add"):
        raise ArefTypeError(f"store reduce must be None or 'add', got {reduce!r}", loc,
                            hint="TMA stores can only add into global memory: reduce='add', or reduce "
                                 "in the kernel (rowmax / x.max(axis)) before storing")
    coords = tuple(coords) if isinstance(coords, (tuple, list)) else (coords,)
    rules.load_type(tensor.shape, tensor.dtype, tile.shape, len(coords), loc)
    if tile.dtype != tensor.dtype:
        raise ArefTypeError(
            f"storing a {tile.dtype.name} tile into {tensor.name}, a {tensor.dtype.name} tensor", loc,
            hint=f"cast first: `.to(aref.{tensor.dtype.name})`")
    cvals = [_coord(c, loc, tracer) for c in coords]
    op = tracer.emit(OpKind.STORE, [tensor.value, *cvals, tile.value], [], StoreAttrs(tile.shape, reduce), loc)
    tracer.stores.append((op, coords))


def _coord(c, loc, tracer) -> Value:
    from aref.frontend_rt import Poison  # local: the runtime module imports this one
    if isinstance(c, Poison):
        c.fail()
    if isinstance(c, Scalar):
        if c.dtype is not DType.int32:
            raise ArefTypeError("tile coordinates must be integers", loc,
                                hint="coordinates are integer index math on program ids and the loop index")
        return c.value
    if isinstance(c, int) and not isinstance(c, builtins.bool):
        return _const(c, DType.int32, loc, tracer)
    raise ArefTypeError(f"tile coordinates must be integers or program ids, got {type(c).__name__}", loc,
                         hint="use Python ints, aref.program_id(i), the loop index, or `//`, `%`, `+`, `*` of them")


def full(shape, value: float, dtype: DType = float32) -> Tile:
    """A register tile filled with `value`."""
    loc = user_loc()
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if not shape or not builtins.all(isinstance(s, int) and s > 0 for s in shape):
        raise ArefTypeError(f"tile shape must be positive compile-time integers, got {shape!r}", loc,
                            hint="e.g. (BM, BN) with integer constants BM, BN ≥ 1")
    if not isinstance(dtype, DType):
        raise ArefTypeError(f"dtype not supported: {dtype!r}", loc, hint="use aref.float16, aref.float32, ...")
    if not _is_number(value):
        raise ArefTypeError("aref.full needs a Python number as its fill value", loc,
                            hint="e.g. aref.full((BM,), -math.inf); to copy a tile, use it directly")
    return _build(OpKind.FULL, None, [], FullAttrs(shape, float(value), dtype), loc)


def zeros(shape, dtype: DType = float32) -> Tile:
    """A register tile of zeros (e.g. an accumulator)."""
    return full(shape, 0.0, dtype)


def arange(n: int) -> Tile:
    """The int32 tile [0, 1, ..., n-1] (for masks)."""
    loc = user_loc()
    if not isinstance(n, int) or n <= 0:
        raise ArefTypeError(f"aref.arange needs a positive compile-time integer, got {n!r}", loc,
                            hint="e.g. aref.arange(BN) with an integer constant BN ≥ 1")
    return _build(OpKind.ARANGE, None, [], ArangeAttrs(n), loc)


def cdiv(a, b):
    """Ceiling division: the number of tiles of size `b` that cover `a` (a trip count or grid size for extents
    that are not a multiple of the tile). Integers give an integer; a run-time scalar gives a scalar."""
    if isinstance(a, builtins.bool) or isinstance(b, builtins.bool):
        raise ArefTypeError("aref.cdiv takes integers", user_loc(), hint="pass tile counts and sizes as ints")
    if isinstance(a, int) and isinstance(b, int):
        if b <= 0:
            raise ArefError(f"aref.cdiv needs a positive divisor (a tile size), got {b}", user_loc(),
                            hint="tile sizes are positive integers")
        return -(-a // b)
    return (a + (b - 1)) // b


def mma(a: Tile, b: Tile, acc: Tile | None = None) -> Tile:
    """`acc + a @ b` on the tensor core with float32 accumulation (a: M×K, b: K×N; `b.T` is a free view)."""
    loc = user_loc()
    for x in (a, b) + ((acc,) if acc is not None else ()):
        _check_operand(x, "aref.mma", loc)
        if not isinstance(x, Tile):
            raise ArefTypeError("aref.mma takes tiles", loc,
                                hint="aref.mma(a, b, acc) with tiles a (M×K), b (K×N) and an optional acc (M×N)")
    operands = [a.value, b.value] + ([acc.value] if acc is not None else [])
    try:
        return _build(OpKind.MMA, None, operands, NoAttrs(), loc)
    except ArefTypeError as err:
        ta, tb = a.value.type, b.value.type
        if len(ta.shape) == len(tb.shape) == 2 and ta.shape[1] != tb.shape[0]:
            # the inner dimensions differ: say where each operand's shape was set, and what fixes it
            tracer = current()
            views = [tracer.producer.get(id(x.value)) for x in (a, b)]
            views = [op is not None and op.kind is OpKind.TRANSPOSE for op in views]
            notes = [tracer.shape_note(name, x.value) for name, x in (("a", a), ("b", b))]
            raise err.noting(*notes, hint=rules.mma_mismatch_hint(ta.shape, tb.shape, *views,
                                                                     noted=any(notes))) from None
        raise


def cast(x: Tile, dtype: DType) -> Tile:
    """Convert a tile's elements to `dtype` (round to nearest even)."""
    loc = user_loc()
    if not isinstance(dtype, DType) or dtype is DType.bool_:
        raise ArefTypeError(f"dtype not supported: {dtype!r}", loc,
                            hint="use aref.float16, bfloat16, float8_e4m3, float8_e5m2, float32 or int32")
    x = _check_operand(x, "cast", loc)
    if not isinstance(x, _Proxy):
        raise ArefTypeError("cast takes a tile", loc,
                            hint="cast tiles with x.to(aref.float16); Python numbers mix in without a cast")
    if x.dtype == dtype:
        return x
    return _build(OpKind.CAST, None, [x.value], CastAttrs(dtype), loc)


def _unary_function(fn: str):
    """The public function of a UNARY registry entry (`aref.exp`, ...)."""
    def f(x):
        return _unary(fn, x, user_loc())
    f.__name__ = f.__qualname__ = fn
    f.__doc__ = ops.lookup(OpKind.UNARY, fn).doc[:1].upper() + ops.lookup(OpKind.UNARY, fn).doc[1:] + "."
    return f


# one public function per UNARY entry that has a surface name (`neg` is the `-x` operator)
UNARY_FUNCTIONS = tuple(fn for fn in ops.UNARY_FNS if ops.lookup(OpKind.UNARY, fn).surface == f"aref.{fn}")
for _fn in UNARY_FUNCTIONS:
    globals()[_fn] = _unary_function(_fn)
(exp, exp2, log, log2, sqrt, rsqrt, abs, tanh, sigmoid, erf, sin, cos, floor,
 ceil) = (globals()[f] for f in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "tanh", "sigmoid", "erf",
                                 "sin", "cos", "floor", "ceil"))


def maximum(a, b):
    """Elementwise maximum (NaN-free inputs assumed, as on the GPU's fmax)."""
    return _arith("maximum", a, b)


def minimum(a, b):
    """Elementwise minimum (NaN-free inputs assumed, as on the GPU's fmin)."""
    return _arith("minimum", a, b)


def clamp(x, lo, hi):
    """`x` limited to [lo, hi] elementwise: `minimum(maximum(x, lo), hi)` (torch.clamp's values)."""
    return minimum(maximum(x, lo), hi)


def pow(x, y):  # noqa: A001 - the tile language's spelling of `x ** y` (Triton's tl.math.pow)
    """Elementwise `x ** y`."""
    return _power(x, y)


def where(cond, a, b):
    """Per-element select: `a` where `cond` is true, else `b`."""
    loc = user_loc()
    cond, a, b = (_check_operand(x, "aref.where", loc) for x in (cond, a, b))
    if not isinstance(cond, _Proxy) or cond.dtype is not DType.bool_:
        raise ArefTypeError("aref.where needs a boolean condition tile (from a comparison)", loc,
                            hint="e.g. aref.where(x > 0, x, 0.0)")
    va, vb = _as_values([a, b], loc)
    return _build(OpKind.WHERE, None, [cond.value, va, vb], NoAttrs(), loc)


def rowmax(x: Tile) -> Tile:
    """Maximum over the last axis (one value per row)."""
    return _reduce("max", x, -1, user_loc())


def rowsum(x: Tile) -> Tile:
    """Sum over the last axis (one value per row)."""
    return _reduce("sum", x, -1, user_loc())


def rowmin(x: Tile) -> Tile:
    return _reduce("min", x, -1, user_loc())


# the arefs and the loop live in their own module; `aref.lang` is the one surface
from aref.lang_arefs import Channel, channel, range  # noqa: E402,F401
