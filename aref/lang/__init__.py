"""The tile language: what a kernel author calls inside an `@aref_kernel` function.

Values are proxies (`Tile`, `Scalar`, `TensorArg`, `Channel`) that record Tile IR ops while the function is
traced. Tiles behave like small arrays: `+ - * /`, comparisons, broadcasting with `x[:, None]`, `.T`,
`.to(dtype)`, `.max(axis)` / `.sum(axis)`. Loop-carried values need no API: reassign a variable in the
`aref.range` loop and the frontend carries it.
"""
from __future__ import annotations

import builtins
import sys

from aref import ops
from aref.errors import ArefError, ArefTypeError
from aref.ir import (ArangeAttrs, DType, FullAttrs, LoadAttrs, NoAttrs, OpKind, ProgramIdAttrs, ScalarType, StoreAttrs,
                     Value)
from aref.ir import typing_rules as rules
from aref.lang.arefs import Channel, channel, range  # noqa: F401  (the arefs and the loop: their own module)
from aref.lang.tiles import (Scalar, TensorArg, Tile, _Proxy, _arith, _as_values, _build, _check_operand,  # noqa: F401
                             _const, _emit1, _is_number, _power, _reduce, _unary, bfloat16, cast, float8_e4m3,
                             float8_e5m2, float16, float32, int32)
from aref.lang.trace import Poison, current, user_loc

__all__ = ["float16", "bfloat16", "float8_e4m3", "float8_e5m2", "float32", "int32", "Tile", "Scalar",
           "TensorArg", "Channel", "program_id", "load", "store", "zeros", "full", "arange", "mma",
           "maximum", "minimum", "clamp", "pow", "where", "rowmax", "rowsum", "rowmin", "channel", "range",
           "cast", "cdiv",
           *(fn for fn in ops.UNARY_FNS if fn != "neg")]


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


ops.use_language(sys.modules[__name__])       # the registry's test cases are written in this language
