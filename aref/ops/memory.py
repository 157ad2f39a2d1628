"""Structural entries: memory, tensor-core MMAs, aref channels and the Barrier IR's synchronisation ops.

These are not elementwise math: the CuTe backend emits them from its role templates (the synchronisation
skeleton follows the IR op for op), so their emission form is STRUCTURAL. Their entries hold traits, type
rules, value semantics where they have values, and cost.
"""
from __future__ import annotations

import math

from aref.ir import typing_rules as rules
from aref.errors import VerifyError
from aref.ir import ArefType, DType, Op, OpKind, RingType, ScalarType, Space, TensorType, TileType
from aref.ops.registry import (CHANNEL, CROSS_GROUP, MEMORY, MMA, SIDE_EFFECT, STRUCTURAL, SYNC, VIEW, Cost, Emit,
                               Hints, OpDef, register)
from aref.ops.elementwise import ISSUE

I32 = ScalarType(DType.int32)
STRUCT = (Emit(form=STRUCTURAL),)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


# ----------------------------------------------------------------------------------------------- memory
def _load_rule(types, attrs, loc):
    t = types[0]
    if not isinstance(t, TensorType) or any(x != I32 for x in types[1:]):
        raise VerifyError("load takes a tensor and i32 coordinates", loc)
    return (rules.load_type(t.shape, t.dtype, attrs.tile_shape, len(types) - 1, loc),)


def _store_rule(types, attrs, loc):
    t, tile = types[0], types[-1]
    if not isinstance(t, TensorType) or not isinstance(tile, TileType) or any(x != I32 for x in types[1:-1]):
        raise VerifyError("store takes a tensor, i32 coordinates and a tile", loc)
    rules.load_type(t.shape, t.dtype, attrs.tile_shape, len(types) - 2, loc)
    if tile.shape != attrs.tile_shape or tile.dtype != t.dtype:
        raise VerifyError(f"store of {tile} into {t} with tile shape {attrs.tile_shape}", loc)
    return ()


def box(tensor_shape, coords, tile_shape):
    """Per dimension: (start, stop) of the box in the tensor, clipped, and where it lands in the tile."""
    lead = len(tensor_shape) - len(tile_shape)
    out = []
    for d, (size, c) in enumerate(zip(tensor_shape, coords)):
        ts = tile_shape[d - lead] if d >= lead else 1
        start = c * ts
        lo, hi = max(start, 0), min(start + ts, size)
        out.append((lo, max(hi, lo), lo - start, ts))
    return out, lead


def load_box(tensor, coords, tile_shape):
    """TMA load semantics: the box at block `coords`, zeros where it leaves the tensor."""
    import torch

    dims, lead = box(tensor.shape, coords, tile_shape)
    tile = torch.zeros(tile_shape, dtype=tensor.dtype)
    if any(hi <= lo for lo, hi, _, _ in dims):
        return tile
    src = tensor[tuple(slice(lo, hi) for lo, hi, _, _ in dims)]
    src = src.reshape(src.shape[lead:])
    dst = tuple(slice(off, off + (hi - lo)) for lo, hi, off, _ in dims[lead:])
    tile[dst] = src
    return tile


def store_box(tensor, coords, tile, attrs):
    """TMA store semantics: write (or reduce-add) the in-bounds part of the box."""
    dims, lead = box(tensor.shape, coords, attrs.tile_shape)
    if any(hi <= lo for lo, hi, _, _ in dims):
        return None
    part = tile[tuple(slice(off, off + (hi - lo)) for lo, hi, off, _ in dims[lead:])]
    view = tensor[tuple(slice(lo, hi) for lo, hi, _, _ in dims)]
    part = part.reshape(view.shape)
    if attrs.reduce == "add":
        view.copy_((view.float() + part.float()).to(tensor.dtype))
    else:
        view.copy_(part)
    return None


def tma_bytes(op: Op) -> int:
    """Bytes a TMA_LOAD (box from `SlotAttrs.tile_shape`, dtype of its ring) or tile LOAD/STORE moves."""
    if op.kind is OpKind.TMA_LOAD:
        ring = op.operands[-4].type
        assert isinstance(ring, RingType), "tma_load operand -4 must be the ring"
        n = 1
        for s in (op.attrs.tile_shape or ring.tile.shape):
            n *= s
        return n * ring.tile.dtype.nbytes
    if op.kind is OpKind.LOAD:
        return op.result.type.nbytes
    if op.kind is OpKind.STORE:
        return op.operands[-1].type.nbytes
    raise ValueError(f"{op.kind.value} is not a memory copy")


def mma_flops(op: Op) -> int:
    """2·M·N·K of an MMA / MMA_ASYNC from its A operand (.., M, K) and result (.., M, N)."""
    a, out = op.operands[0].type, op.result.type
    m, n = out.shape[-2], out.shape[-1]
    lead = 1
    for s in out.shape[:-2]:
        lead *= s
    return 2 * lead * m * n * a.shape[-1]


def _load(op, vals, cta):
    return load_box(vals[0], [int(c) for c in vals[1:]], op.attrs.tile_shape)


def _store(op, vals, cta):
    return store_box(vals[0], [int(c) for c in vals[1:-1]], vals[-1], op.attrs)


def _copy_cycles(op, m, rng=None):
    """A load lands after the memory latency plus its transfer; a store only occupies the copy engine."""
    if op.kind is OpKind.STORE:          # fire and forget: only the copy engine's share
        return max(1, _ceil(tma_bytes(op), m.tma_bytes_per_clk))
    # a load lands after the latency plus the time its own bytes take to arrive
    return m.tma_latency_draw(rng) + _ceil(tma_bytes(op), m.tma_copy_rate)


COPY_COST = Cost("tma", _copy_cycles)
register(OpDef(OpKind.LOAD, None, "a TMA-style box load (out-of-bounds elements read as zero)",
               frozenset({MEMORY}), COPY_COST, type_rule=_load_rule, interpret=_load, cute=STRUCT,
               hints=Hints(carrier="gemm"), surface="aref.load"))
register(OpDef(OpKind.STORE, None, "a TMA-style box store (out-of-bounds elements dropped; reduce='add')",
               frozenset({MEMORY, SIDE_EFFECT}), COPY_COST, type_rule=_store_rule, interpret=_store, cute=STRUCT,
               hints=Hints(carrier="gemm"), surface="aref.store"))


# ------------------------------------------------------------------------------------------------- MMA
def _mma_rule(types, attrs, loc):
    if len(types) not in (2, 3):
        raise VerifyError("mma takes a, b and an optional accumulator", loc)
    return (rules.mma_type(types[0], types[1], types[2] if len(types) == 3 else None, loc),)


def _mma(op, vals, cta):
    prod = vals[0].float() @ vals[1].float()
    return prod + vals[2] if len(vals) == 3 else prod


def _mma_cycles(op, m, rng=None):
    dtype = op.operands[0].type.dtype
    flop = m.tensor_flop_per_clk.get(dtype)
    if flop is None:
        raise ValueError(f"{m.name} has no tensor-core rate for {dtype.value}")
    return max(1, math.ceil(mma_flops(op) / (flop * m.tensor_efficiency)))


MMA_COST = Cost("tc", _mma_cycles)
register(OpDef(OpKind.MMA, None, "acc + a @ b on the tensor core (float32 accumulate)", frozenset({MMA}), MMA_COST,
               type_rule=_mma_rule, interpret=_mma, cute=STRUCT, hints=Hints(carrier="gemm"),
               surface="aref.mma"))
register(OpDef(OpKind.MMA_ASYNC, None, "an asynchronous MMA (retired by mma_wait)",
               frozenset({MMA, SIDE_EFFECT, CROSS_GROUP}), MMA_COST, interpret=_mma, cute=STRUCT,
               hints=Hints(carrier="gemm")))


# -------------------------------------------------------------------------------------------- channels
def _put_rule(types, attrs, loc):
    ch = types[0]
    if not isinstance(ch, ArefType) or tuple(t.with_space(Space.SMEM) for t in types[1:]) != ch.payload:
        raise VerifyError(f"put payload {[str(t) for t in types[1:]]} does not match {ch}", loc)
    return ()


def _get_rule(types, attrs, loc):
    if not isinstance(types[0], ArefType):
        raise VerifyError("get takes a channel", loc)
    return types[0].payload


def _consumed_rule(types, attrs, loc):
    if not isinstance(types[0], ArefType):
        raise VerifyError("consumed takes a channel", loc)
    return ()


SYNC_COST = Cost(ISSUE, lambda op, m, rng=None: m.sync_cycles)
FREE = Cost(ISSUE, lambda op, m, rng=None: 0)
CARRIER = Hints(carrier="gemm")
register(
    # the channel's type comes from its puts (the verifier checks depth and kind), so no type rule
    OpDef(OpKind.CHANNEL, None, "an aref: a ring of `depth` slots", frozenset({CHANNEL, SIDE_EFFECT}), FREE,
          cute=STRUCT, hints=CARRIER, surface="aref.channel"),
    OpDef(OpKind.PUT, None, "publish a payload into the next slot", frozenset({CHANNEL, SIDE_EFFECT}), SYNC_COST,
          type_rule=_put_rule, cute=STRUCT, hints=CARRIER, surface="ch.put"),
    OpDef(OpKind.GET, None, "borrow the oldest published payload", frozenset({CHANNEL, SIDE_EFFECT}), FREE,
          type_rule=_get_rule, cute=STRUCT, hints=CARRIER, surface="ch.get"),
    OpDef(OpKind.CONSUMED, None, "release the oldest borrowed slot", frozenset({CHANNEL, SIDE_EFFECT}),
          SYNC_COST, type_rule=_consumed_rule, cute=STRUCT, hints=CARRIER, surface="ch.consumed"),
)


# ------------------------------------------------------------------------------------------ Barrier IR
def _in_tmem(ring) -> bool:
    return isinstance(ring.type, RingType) and ring.type.tile.space is Space.TMEM


def _slot_store_unit(op) -> str:
    """Shared memory's port, or on Blackwell tensor memory's store path (tcgen05.st); an MMA result published
    where the MMA wrote it moves nothing (the issue slot)."""
    if not _in_tmem(op.operands[0]):
        return "smem"
    return ISSUE if op.operands[3].type.space is Space.TMEM else "tmem_st"


_slot_store_unit.tile_unit = "smem"


def _slot_store_cycles(op, m, rng=None):
    if _in_tmem(op.operands[0]):
        if op.operands[3].type.space is Space.TMEM:
            return 0
        return max(1, _ceil(op.operands[3].type.nbytes, m.tmem_bytes_per_clk))
    return max(1, _ceil(op.operands[3].type.nbytes, m.smem_bytes_per_clk))


def _slot_read_unit(op) -> str:
    """A view of a shared-memory slot; a tensor-memory slot is loaded to registers (tcgen05.ld; the timing
    model charges nothing when only MMAs use the tile, `aref.sim.program`)."""
    return "tmem_ld" if _in_tmem(op.operands[0]) else ISSUE


_slot_read_unit.tile_unit = ISSUE


def _slot_read_cycles(op, m, rng=None):
    if _in_tmem(op.operands[0]):
        return max(1, _ceil(op.result.type.nbytes, m.tmem_bytes_per_clk))
    return 0


def _tma_cycles(op, m, rng=None):
    return m.tma_latency_draw(rng) + _ceil(tma_bytes(op), m.tma_copy_rate)


register(
    OpDef(OpKind.TMA_LOAD, None, "a TMA copy into a ring slot, completing on the slot's full barrier",
          frozenset({MEMORY, SIDE_EFFECT, CROSS_GROUP}), Cost("tma", _tma_cycles), cute=STRUCT, hints=CARRIER),
    OpDef(OpKind.SLOT_STORE, None, "registers into a ring slot (a register payload; tcgen05.st into tensor memory)",
          frozenset({MEMORY, SIDE_EFFECT, CROSS_GROUP}), Cost(_slot_store_unit, _slot_store_cycles), cute=STRUCT,
          hints=CARRIER),
    OpDef(OpKind.SLOT_READ, None, "the tile a ring slot holds, as a shared-memory view (tcgen05.ld of tensor memory)",
          frozenset({MEMORY, VIEW, SIDE_EFFECT, CROSS_GROUP}), Cost(_slot_read_unit, _slot_read_cycles), cute=STRUCT,
          hints=CARRIER),
)
# (the fences order this group's own writes and the allocation precedes every hand-off: they act on nothing
# another group observes, unlike the barriers, MMA waits and commits, the deallocation and setmaxnreg)
LOCAL_SYNC = (OpKind.FENCE_PROXY_ASYNC, OpKind.TMEM_STORE_FENCE, OpKind.TMEM_ALLOC)
for kind, doc in ((OpKind.MBAR_WAIT, "wait on an mbarrier phase parity"),
                  (OpKind.MBAR_ARRIVE, "arrive on an mbarrier"),
                  (OpKind.MBAR_EXPECT_TX, "arrive and arm an mbarrier's transaction count"),
                  (OpKind.FENCE_PROXY_ASYNC, "order generic-proxy shared writes before async-proxy reads"),
                  (OpKind.TMEM_STORE_FENCE, "order tensor-memory stores before tcgen05 reads"),
                  (OpKind.MMA_WAIT, "wait until at most N MMA groups are in flight"),
                  (OpKind.MMA_COMMIT, "Blackwell: tcgen05.commit, an mbarrier arrive once this group's MMAs "
                                      "complete"),
                  (OpKind.TMEM_ALLOC, "Blackwell: allocate the kernel's tensor-memory columns"),
                  (OpKind.TMEM_DEALLOC, "Blackwell: free the tensor-memory columns (relinquishing the permit)"),
                  (OpKind.NAMED_BAR_SYNC, "named barrier: arrive and wait"),
                  (OpKind.NAMED_BAR_ARRIVE, "named barrier: arrive"),
                  (OpKind.SETMAXNREG, "register reallocation of a warp group")):
    traits = frozenset({SYNC, SIDE_EFFECT} | (set() if kind in LOCAL_SYNC else {CROSS_GROUP}))
    register(OpDef(kind, None, doc, traits, SYNC_COST, cute=STRUCT, hints=CARRIER))
