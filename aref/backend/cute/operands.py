"""Tracing MMA operands of the Barrier IR back to what holds them, and the wgmma configuration they need.

A shared-memory operand is a channel slot seen through views (a transpose, a row block of a cooperative
consumer); a register operand is a 16-bit tile in accumulator layout (the RS form), or the transpose of one,
which the group stages through a shared scratch tile and reads back MN-major.
"""
from __future__ import annotations

from dataclasses import dataclass

from aref.backend.cute.errors import BackendError
from aref.errors import SrcInfo
from aref.ir import DType, Op, OpKind, Space, TileType, Value
from aref.ws import GroupProgram

WGMMA_DTYPES = (DType.float16, DType.bfloat16, DType.float8_e4m3, DType.float8_e5m2)


@dataclass(frozen=True)
class MmaConfig:
    """A wgmma tiling: operand dtypes and majors, N, A from shared memory or registers (one 64-row atom)."""

    a_dtype: DType
    b_dtype: DType
    a_major: str                 # "K" or "MN"
    b_major: str
    n: int
    a_source: str                # "SMEM" or "RMEM"


@dataclass(frozen=True)
class SmemOperand:
    """A shared-memory tile reached from a slot_read through views: rows [row0, row0+rows) of the slot's
    tile, possibly transposed (then the IR operand is the transpose of the stored tile)."""

    channel: str
    index: int
    transposed: bool
    row0: int
    rows: int


def producers_of(gp: GroupProgram) -> dict[int, Op]:
    """Value id → defining op, following loop-carried values (see `GroupProgram.producers`)."""
    return gp.producers()


def smem_operand(v: Value, prod: dict[int, Op], loc: SrcInfo) -> SmemOperand | None:
    """Trace `v` through transpose/slice views to the slot it reads; None if it is not a shared tile."""
    if not isinstance(v.type, TileType) or v.type.space is not Space.SMEM:
        return None
    op = prod.get(id(v))
    if op is None:
        raise BackendError("internal: a shared-memory tile without a defining slot_read", loc)
    if op.kind is OpKind.SLOT_READ:
        return SmemOperand(op.attrs.channel, op.attrs.index, False, 0, op.result.type.shape[0])
    if op.kind is OpKind.SELECT:
        return smem_operand(op.operands[1], prod, loc)
    inner = smem_operand(op.operands[0], prod, loc)
    if op.kind is OpKind.TRANSPOSE:
        return SmemOperand(inner.channel, inner.index, not inner.transposed, inner.row0, inner.rows)
    if op.kind is OpKind.SLICE:
        if op.attrs.axis != 0 or inner.transposed:
            raise BackendError("a shared-memory view that slices columns (or a transposed tile) is not "
                               "supported by the wgmma templates", op.loc,
                               hint="cooperative consumers split rows of the A operand only")
        return SmemOperand(inner.channel, inner.index, False, inner.row0 + op.attrs.start, op.attrs.size)
    raise BackendError(f"a {op.kind.value} of a shared-memory tile cannot feed an MMA", op.loc)


def check_mma_dtypes(op: Op, dtypes, unit: str) -> bool:
    """The MMA's operand types are ones the tensor core (`unit`: wgmma, tcgen05) takes, both 16-bit and equal
    or both fp8; returns whether they are fp8."""
    a, b = op.operands[0], op.operands[1]
    for v, what in ((a, "A"), (b, "B")):
        if v.type.dtype not in dtypes:
            raise BackendError(f"{unit} operand {what} has dtype {v.type.dtype.value}; the tensor core takes "
                               f"{', '.join(d.value for d in dtypes)}", op.loc,
                               hint="cast the operand with .to(aref.float16) or .to(aref.bfloat16)")
    fp8 = a.type.dtype.bits == 8
    if (a.type.dtype.bits == 16) != (b.type.dtype.bits == 16) or (not fp8 and a.type.dtype != b.type.dtype):
        raise BackendError(f"{unit} needs two equal 16-bit operand types or two fp8 types; got "
                           f"{a.type.dtype.value} · {b.type.dtype.value}", op.loc)
    return fp8


def mma_config(op: Op, prod: dict[int, Op]) -> MmaConfig:
    a, b = op.operands[0], op.operands[1]
    m, k = a.type.shape
    n = b.type.shape[1]
    fp8 = check_mma_dtypes(op, WGMMA_DTYPES, "wgmma")
    if len(op.operands) > 2 and op.operands[2].type.dtype is not DType.float32:
        raise BackendError("the wgmma templates accumulate in float32 only", op.loc)
    k_atom = 32 if fp8 else 16
    if m % 64 or k % k_atom or n % 8 or not 8 <= n <= 256:
        raise BackendError(f"MMA of shape {m}×{n}×{k} does not tile into wgmma m64n{{8..256}}k{k_atom} "
                           f"instructions", op.loc, hint="use tile sizes that are multiples of 64 rows")
    sa, sb = smem_operand(a, prod, op.loc), smem_operand(b, prod, op.loc)
    if sb is None:
        raise BackendError("the B operand of a wgmma must come from shared memory (a channel slot)", op.loc,
                           hint="publish the tile through an aref channel")
    if sa is None:
        if is_transpose(a, prod):
            # staged through a shared scratch tile by the group itself and read back transposed (MN-major)
            if a.type.dtype.bits != 16:
                raise BackendError("a transposed register tile as wgmma operand must be 16-bit", op.loc)
            return MmaConfig(a.type.dtype, b.type.dtype, "MN", "K" if sb.transposed else "MN", n, "SMEM")
        if fp8:
            raise BackendError("an fp8 A operand from registers needs a register permutation that the "
                               "templates do not implement", op.loc)
        a_major = "K"
    else:
        a_major = "MN" if sa.transposed else "K"
    # The IR's B is K×N; CuTe's B tensor is N×K. A slot tile used transposed is stored N×K (K-major).
    b_major = "K" if sb.transposed else "MN"
    if fp8 and (a_major != "K" or b_major != "K"):
        raise BackendError("fp8 wgmma needs both operands K-major (A: M×K, B: N×K row-major tiles)", op.loc)
    return MmaConfig(a.type.dtype, b.type.dtype, a_major, b_major, n, "SMEM" if sa else "RMEM")


def scratch_key(gp: GroupProgram, v: Value, prod) -> tuple:
    """Which shared scratch tile holds the transposed register operand `v` (a transpose, or a loop-carried
    one: its init, every iteration's yield and the loop's result share the carried value's tile)."""
    lp = gp.loop
    if lp is not None:
        for i, (c, r) in enumerate(zip(lp.carried, lp.results)):
            if v is c or v is r:
                return ("carried", i)
    src = prod[id(v)].operands[0]
    return _cast_key(src, prod)


def _cast_key(v: Value, prod) -> tuple:
    """Register tiles equal up to casts share one scratch tile (`ds.to(f16)` written twice in the IR)."""
    op = prod.get(id(v))
    if op is not None and op.kind is OpKind.CAST:
        return ("cast", id(op.operands[0]), op.attrs.dtype)
    return ("value", id(v))


def is_transpose(v: Value, prod) -> bool:
    op = prod.get(id(v))
    while op is not None and op.kind in (OpKind.CAST, OpKind.SELECT):
        op = prod.get(id(op.operands[0 if op.kind is OpKind.CAST else 1]))
    return op is not None and op.kind is OpKind.TRANSPOSE
