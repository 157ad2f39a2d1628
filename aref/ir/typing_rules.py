"""Result-type rules of the tile language, shared by the frontend (to build IR) and the verifier (to check it).

Each rule takes operand types and returns the result type, or raises `ArefTypeError` at `loc` saying what
to change.
"""
from __future__ import annotations

from aref.errors import ArefTypeError, SrcInfo
from aref.ir import (DType, MMA_OPERAND_DTYPES, FLOAT8, ScalarType, Space, TileType)

_FLOAT_RANK = {DType.float8_e4m3: 0, DType.float8_e5m2: 0, DType.float16: 1, DType.bfloat16: 1,
               DType.float32: 2}


def fmt_shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...], loc: SrcInfo) -> tuple[int, ...]:
    """Numpy broadcasting; tiles of different rank align on trailing dimensions."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise ArefTypeError(
                f"incompatible broadcast: shapes {fmt_shape(a)} and {fmt_shape(b)} differ in dimension "
                f"{-i} ({x} vs {y})", loc,
                hint="insert a unit dimension where you mean to broadcast, e.g. `row[:, None]`")
        out.append(max(x, y))
    return tuple(reversed(out))


def promote(a: DType, b: DType, loc: SrcInfo) -> DType:
    """Dtype of a binary op: the wider float wins; ints promote to the float operand's type."""
    if a == b:
        return a
    if not a.is_float and b.is_float:
        return b
    if a.is_float and not b.is_float:
        return a
    if a.is_float and b.is_float:
        ra, rb = _FLOAT_RANK[a], _FLOAT_RANK[b]
        if ra != rb:
            return a if ra > rb else b
        raise ArefTypeError(f"mixed dtypes {a.name} and {b.name} in one operation", loc,
                            hint="cast one side explicitly, e.g. `.to(aref.float32)`")
    return DType.int32


def operand_shape(t) -> tuple[int, ...]:
    return t.shape if isinstance(t, TileType) else ()


def elementwise(types: list, dtype: DType, loc: SrcInfo) -> TileType | ScalarType:
    """Result of an elementwise op over tiles and scalars: broadcast shape, given dtype, registers."""
    tiles = [t for t in types if isinstance(t, TileType)]
    if not tiles:
        return ScalarType(dtype)
    shape = tiles[0].shape
    for t in tiles[1:]:
        shape = broadcast_shapes(shape, t.shape, loc)
    return TileType(shape, dtype, Space.RMEM)


def binary_dtype(a, b, loc: SrcInfo) -> DType:
    return promote(a.dtype, b.dtype, loc)


def mma_type(a: TileType, b: TileType, acc: TileType | None, loc: SrcInfo) -> TileType:
    """`acc + a @ b` on the tensor core: a (M, K), b (K, N), acc (M, N) float32."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, TileType) or len(t.shape) != 2:
            raise ArefTypeError(f"mma operand {name} must be a 2-D tile, got {t}", loc,
                            hint="load or compute 2-D tiles (M×K and K×N) for aref.mma")
        if t.dtype not in MMA_OPERAND_DTYPES:
            raise ArefTypeError(
                f"mma operand {name} has dtype {t.dtype.name}; the tensor core takes float16, bfloat16 or "
                f"float8 operands", loc, hint=f"cast it first, e.g. `{name}.to(aref.float16)`")
    if a.dtype != b.dtype and not (a.dtype in FLOAT8 and b.dtype in FLOAT8):
        raise ArefTypeError(f"mma operands have different dtypes ({a.dtype.name} and {b.dtype.name})", loc,
                            hint="cast both operands to the same dtype")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ArefTypeError(
            f"mma shape mismatch: a is {m}x{k} and b is {k2}x{n}; the inner dimensions {k} and {k2} differ",
            loc, hint=mma_mismatch_hint(a.shape, b.shape))
    out = TileType((m, n), DType.float32, Space.RMEM)
    if acc is not None:
        if not isinstance(acc, TileType) or acc.shape != (m, n) or acc.dtype != DType.float32:
            raise ArefTypeError(f"mma accumulator must be a {m}x{n} float32 tile, got {acc}", loc,
                                hint=f"start it with `aref.zeros(({m}, {n}), aref.float32)`")
    return out


def mma_mismatch_hint(a: tuple[int, int], b: tuple[int, int], a_view: bool = False, b_view: bool = False,
                      noted: bool = False) -> str:
    """What fixes `aref.mma(a, b)` with a's columns ≠ b's rows: a transposed view where that makes the inner
    dimensions agree (and the operand is not one already), else equal K tile sizes. `a_view` / `b_view`: the
    operand is already a transposed view (`x.T`); `noted`: the error's notes show where the shapes are set."""
    (m, k), (k2, n) = a, b
    if n == k and not b_view:
        return "for C = A·Bᵀ with B stored N×K, pass the transposed view `b.T`"
    if m == k2 and not a_view:
        return "for C = Aᵀ·B with A stored K×M, pass the transposed view `a.T`"
    views = [x for x, view in (("a", a_view), ("b", b_view)) if view]
    already = (f"{' and '.join(views)} {'is' if len(views) == 1 else 'are'} already a transposed view (`.T`), so "
               f"transposing cannot fix it: " if views else "")
    return (f"{already}a's columns ({k}) and b's rows ({k2}) are the contracted dimension K: give both operands "
            f"the same K tile size" + (" (the notes show where each shape is set)" if noted else ""))


def reduce_type(x: TileType, axis: int, loc: SrcInfo) -> TileType:
    if not isinstance(x, TileType):
        raise ArefTypeError("reductions take a tile", loc, hint="reduce a tile, e.g. x.sum(1)")
    rank = len(x.shape)
    if not -rank <= axis < rank:
        raise ArefTypeError(f"reduction axis {axis} is out of range for a {rank}-D tile", loc,
                            hint=f"axes of a {rank}-D tile: {', '.join(str(i) for i in range(rank))}")
    axis %= rank
    shape = x.shape[:axis] + x.shape[axis + 1:]
    return TileType(shape, x.dtype, Space.RMEM)


def transpose_type(x: TileType, loc: SrcInfo) -> TileType:
    if not isinstance(x, TileType) or len(x.shape) != 2:
        raise ArefTypeError(f"`.T` needs a 2-D tile, got {x}", loc,
                            hint="transpose 2-D tiles only; broadcast vectors with x[:, None]")
    return TileType((x.shape[1], x.shape[0]), x.dtype, x.space)


def expand_dims_type(x: TileType, axis: int, loc: SrcInfo) -> TileType:
    rank = len(x.shape)
    if not 0 <= axis <= rank:
        raise ArefTypeError(f"cannot insert a unit dimension at {axis} of a {rank}-D tile", loc,
                            hint="use x[:, None] or x[None, :] on a vector")
    return TileType(x.shape[:axis] + (1,) + x.shape[axis:], x.dtype, Space.RMEM)


def load_type(tensor_shape: tuple[int, ...], dtype: DType, tile_shape: tuple[int, ...], n_coords: int,
              loc: SrcInfo) -> TileType:
    """A TMA-style box: the trailing len(tile_shape) dims are tiled, the leading ones indexed (squeezed)."""
    rank = len(tensor_shape)
    if n_coords != rank:
        raise ArefTypeError(f"a {rank}-D tensor needs {rank} coordinates, got {n_coords}", loc,
                            hint="give one block coordinate per dimension")
    if not 1 <= len(tile_shape) <= rank:
        raise ArefTypeError(f"tile shape {fmt_shape(tile_shape)} does not fit a {rank}-D tensor", loc,
                            hint=f"give at most {rank} tile dimensions (the trailing ones of the tensor)")
    for s in tile_shape:
        if not isinstance(s, int) or isinstance(s, bool) or s <= 0:
            raise ArefTypeError(f"tile sizes must be positive compile-time integers, got {fmt_shape(tile_shape)}",
                                loc, hint="pass sizes as keyword-only constexpr parameters such as BM: int = 128")
    return TileType(tuple(tile_shape), dtype, Space.SMEM)


def slice_type(x: TileType, axis: int, start: int, size: int, loc: SrcInfo) -> TileType:
    if not isinstance(x, TileType) or not 0 <= axis < len(x.shape):
        raise ArefTypeError(f"cannot slice axis {axis} of {x}", loc, hint="slice an existing axis of the tile")
    if start < 0 or size <= 0 or start + size > x.shape[axis]:
        raise ArefTypeError(f"slice [{start}, {start + size}) is outside axis {axis} of {x}", loc,
                            hint="keep the slice inside the tile's shape")
    shape = x.shape[:axis] + (size,) + x.shape[axis + 1:]
    return TileType(shape, x.dtype, x.space)
