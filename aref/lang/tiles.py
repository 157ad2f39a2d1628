"""The tile language's values: the proxies a traced kernel computes with (`Tile`, `Scalar`, `TensorArg`), the
op builders behind their operators (arithmetic, comparisons, reductions, casts), and the dtype names.
The public functions that build ops are `aref.lang`'s."""
from __future__ import annotations

import builtins

from aref import ops
from aref.errors import ArefSyntaxError, ArefTypeError
from aref.ir import (CastAttrs, ConstAttrs, DType, ExpandDimsAttrs, FnAttrs, FullAttrs, OpKind, ScalarType, TileType,
                     TransposeAttrs, Value)
from aref.ir import typing_rules as rules
from aref.lang.trace import Poison, current, user_loc

float16 = DType.float16
bfloat16 = DType.bfloat16
float8_e4m3 = DType.float8_e4m3
float8_e5m2 = DType.float8_e5m2
float32 = DType.float32
int32 = DType.int32


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
            return 1 if isinstance(a, Scalar) else _build(OpKind.FULL, None, [], FullAttrs(a.shape, 1.0, a.dtype), loc)
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
