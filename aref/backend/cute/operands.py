"""Tracing MMA operands of the Barrier IR back to what holds them, and the wgmma configuration they need.

A shared-memory operand is a channel slot seen through views (a transpose, a row block of a cooperative
consumer). A register operand is either a 16-bit A tile in accumulator layout (the RS form), or — any
other register operand: B, a transposed tile, fp8 — staged by the group through a shared scratch tile
(row-major, its own shape) and read back K-major as stored or MN-major through a transposed view.
"""
from __future__ import annotations

from dataclasses import dataclass

from aref.backend.cute.errors import BackendError
from aref.backend.cute.provenance import mma_shape_error
from aref.errors import SrcInfo
from aref.ir import DType, Op, OpKind, Space, TileType, Value
from aref.resources.memory import is_transpose, register_a, scratch_key, staged_source, swizzled  # noqa: F401
from aref.ir.ws import GroupProgram

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


def check_operand_layouts(op: Op, prod: dict[int, Op], ws, unit: str) -> None:
    """The tensor core (`unit`: wgmma, tcgen05) reads a shared-memory operand through a swizzled layout (its
    descriptor's canonical K- or MN-major form); a slot tile of partial swizzle atoms is stored plain (see
    `aref.resources.memory.swizzled`) and cannot be one."""
    for v, what in ((op.operands[0], "A"), (op.operands[1], "B")):
        so = smem_operand(v, prod, op.loc)
        if so is None:
            continue
        t = ws.channel(so.channel).payload[so.index]
        if not swizzled(t):
            raise BackendError(f"{unit} operand {what} is the {t.shape} {t.dtype.value} tile of channel "
                               f"'{so.channel}', stored plain (not whole 8-row × 16-byte swizzle atoms); the "
                               f"tensor core reads shared operands through a swizzled layout only", op.loc,
                               hint="load operand tiles whose rows are a multiple of 8 and 16 bytes")


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


def mma_config(op: Op, prod: dict[int, Op], staged: frozenset = frozenset(), ws=None) -> MmaConfig:
    """The wgmma configuration of MMA `op`; `staged`: ids of MMAs whose register A operand is read from the
    shared-memory copy an earlier MMA staged (`aref.resources.memory.staged_reads`); `ws`: the kernel, for
    errors that show where the operands' shapes are set."""
    a, b = op.operands[0], op.operands[1]
    m, k = a.type.shape
    n = b.type.shape[1]
    fp8 = check_mma_dtypes(op, WGMMA_DTYPES, "wgmma")
    if len(op.operands) > 2 and op.operands[2].type.dtype is not DType.float32:
        raise BackendError("the wgmma templates accumulate in float32 only", op.loc)
    k_atom = 32 if fp8 else 16
    broken = [(m, "a", f"M = {m} (a's rows) is not a multiple of 64") if m % 64 else None,
              (n, "b", f"N = {n} (b's columns) is not a multiple of 8 from 8 to 256")
              if n % 8 or not 8 <= n <= 256 else None,
              (k, "ab", f"K = {k} is not a multiple of {k_atom}") if k % k_atom else None]
    if any(broken):
        raise mma_shape_error(ws, op, f"wgmma m64n{{8..256}}k{k_atom}", [b for b in broken if b])
    sa, sb = smem_operand(a, prod, op.loc), smem_operand(b, prod, op.loc)
    # CuTe wants A as M×K and B as N×K. A slot tile used as stored is A: K-major, B: MN-major (the IR's B is
    # K×N); transposed, the other way round. A register operand is staged row-major through a shared scratch
    # tile (see `staged_source`) unless it is a 16-bit A read straight from registers (RS) — or read as stored
    # from the scratch tile an earlier wgmma staged it in (`staged`).
    if sa is not None:
        a_major = "MN" if sa.transposed else "K"
    elif id(op) in staged or register_a(a, prod):
        a_major = "K"
    else:
        a_major = "MN" if staged_source(a, prod)[1] else "K"
    if sb is not None:
        b_major = "K" if sb.transposed else "MN"
    else:
        b_major = "K" if staged_source(b, prod)[1] else "MN"
    if fp8 and (a_major != "K" or b_major != "K"):
        raise BackendError("fp8 wgmma needs both operands K-major (A: M×K, B: N×K row-major tiles)", op.loc,
                           hint="the tensor core reads fp8 operands K-major only: load B as an N×K tile and pass "
                                "`b.T` (or transpose the register tile you feed it)")
    return MmaConfig(a.type.dtype, b.type.dtype, a_major, b_major, n, "RMEM" if sa is None and register_a(a, prod)
                     and id(op) not in staged else "SMEM")

