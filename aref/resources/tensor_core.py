"""What Blackwell's tensor core adds to a kernel's shared memory, stated once for the resource model and the
sm_100a backend: the zero tile of its zero fills and the MMA barriers of the groups that wait for their MMAs.

tcgen05 MMAs write tensor memory, and CUDA cores cannot fill it with a constant cheaply, so a tensor-memory
accumulator that starts at zero and that no MMA may write before it is read (its loop may run no trip) is
zeroed by an MMA of zero operands: one shared-memory tile of zeros, as many rows as the largest such fill
(`zero_fill_shapes`). A group that issues MMAs and waits for their completion (`MMA_WAIT`) arrives on one
mbarrier of its own (`mma_barrier_groups`); the tensor-memory allocator returns its base address through one
more 16-byte slot.
"""
from __future__ import annotations

from aref.errors import CompilerBugError
from aref.ir import DType, OpKind, Space, TileType, Value

ZERO_TILE_K = 16                    # the zero fill's K: one fp16 MMA step
TMEM_ADDRESS_BYTES = 16             # the slot tcgen05.alloc writes the tensor-memory base address to
MMA_BARRIER_BYTES = 16


def issues_mma(gp) -> bool:
    """Does the group issue tensor-core MMAs?"""
    return any(op.kind is OpKind.MMA_ASYNC for op in gp.all_ops())


def loop_trip_value(gp) -> Value | None:
    """The Tile IR loop's trip count N in a group program: the pipelined loop runs max(N − S, 0) steady steps."""
    lp = gp.loop
    if lp is None:
        return None
    if not gp.stages:
        return lp.trip_count
    prod = {id(r): op for op in gp.all_ops() for r in op.results}
    steady = prod.get(id(lp.trip_count))
    sub = prod.get(id(steady.operands[0])) if steady is not None else None
    if sub is None or sub.kind is not OpKind.SCALAR_BINARY or sub.attrs.fn != "sub":
        raise CompilerBugError("internal: the pipelined loop's trip count is not max(N - stages, 0)", lp.loc)
    return sub.operands[0]


def unwritten_when(gp, v: Value) -> Value | None:
    """The Tile IR trip count N of `gp`'s loop when `v` is the accumulator that loop carries from an initial zero
    and N may be 0 (run-time, or 0 in this specialization): no MMA has written its tensor memory when N = 0,
    where the interpreter's value is the initial zeros. None when an MMA always writes `v` first.

    With N = 0 every guarded pipeline step is skipped, so `v` is followed through each `select(ran, new, old)`
    to `old`, and from a loop's result to its initial value."""
    lp = gp.loop
    n = loop_trip_value(gp)
    if lp is None or n is None:
        return None
    prod = {id(r): op for op in gp.all_ops() for r in op.results}
    count = prod.get(id(n))
    if count is not None and count.kind is OpKind.CONST and count.attrs.value > 0:
        return None
    results = {id(r): init for r, init in zip(lp.results, lp.inits)}
    for _ in range(64):
        if id(v) in results:
            v = results[id(v)]
            continue
        op = prod.get(id(v))
        if op is not None and op.kind is OpKind.SELECT:
            v = op.operands[2]
            continue
        return n if op is not None and op.kind is OpKind.FULL and op.attrs.value == 0.0 else None
    return None


def zero_fill_shapes(ws) -> list[tuple[int, int]]:
    """(M, N) of every zero fill the tensor core makes, in first-use order: a tile an MMA-issuing group
    publishes in tensor memory that is a constant fill or an accumulator no MMA may have written yet."""
    shapes: list[tuple[int, int]] = []
    for gp in ws.groups:
        if not issues_mma(gp):
            continue
        prod = {id(r): op for op in gp.all_ops() for r in op.results}
        for op in gp.all_ops():
            if op.kind is not OpKind.SLOT_STORE or op.operands[0].type.tile.space is not Space.TMEM:
                continue
            v = prod.get(id(op.operands[3]))
            if v is not None and v.kind is OpKind.FULL or unwritten_when(gp, op.operands[3]) is not None:
                shape = tuple(op.operands[3].type.shape)
                if shape not in shapes:
                    shapes.append(shape)
    return shapes


def zero_tile(ws) -> TileType | None:
    """The shared-memory tile of zeros the zero fills read as A and B (None without zero fills)."""
    shapes = zero_fill_shapes(ws)
    if not shapes:
        return None
    return TileType((max(max(m, n) for m, n in shapes), ZERO_TILE_K), DType.float16, Space.SMEM)


def mma_barrier_groups(ws) -> list[int]:
    """Indices of the groups that issue MMAs and wait for their completion on an mbarrier of their own."""
    return [i for i, gp in enumerate(ws.groups)
            if issues_mma(gp) and any(op.kind is OpKind.MMA_WAIT for op in gp.all_ops())]
