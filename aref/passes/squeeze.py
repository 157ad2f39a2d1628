"""Leading unit dimensions of rank-3+ tiles dropped: a (1, R, C) tile is the (R, C) tile it holds.

A box with a leading extent of 1 reads or writes the same elements as the box without it, that coordinate
then indexing the dimension (element offset coordinate × 1 = coordinate); numpy broadcasting aligns trailing
dimensions, so dropping leading 1s changes no value, only ranks. This pass rewrites a Tile IR kernel whose
rank-3+ tiles all have only unit dimensions in front of their last two: loads and stores get the 2-D box,
`x[None]` (an `expand_dims` adding a leading unit dimension) disappears, elementwise ops and channels carry
the 2-D tiles. The backend holds tiles of rank 1 and 2; a kernel with a rank-3 tile this cannot flatten so
(a leading extent above 1, a reduction or view along a leading axis) is left as it is and refused there.
"""
from __future__ import annotations

import copy

from aref.ir import ArefType, FullAttrs, Kernel, LoadAttrs, OpKind, StoreAttrs, TileType, Value
from aref.ops import ELEMENTWISE_KINDS

ELEMENTWISE = ELEMENTWISE_KINDS
PASSING = ELEMENTWISE | {OpKind.LOAD, OpKind.STORE, OpKind.FULL, OpKind.PUT, OpKind.GET}


def _squeezable(t) -> bool:
    return isinstance(t, TileType) and len(t.shape) > 2 and all(s == 1 for s in t.shape[:-2])


def _flat(t: TileType) -> TileType:
    return TileType(t.shape[-2:], t.dtype, t.space)


def _eligible(kernel: Kernel) -> bool:
    """Every rank-3+ tile has unit leading dims, and only ops that do not look at axes touch one (elementwise,
    loads, stores, constants, channels, and `x[None]`)."""
    found = False
    for op in kernel.all_ops():
        tiles = [v.type for v in op.operands + op.results if isinstance(v.type, TileType)]
        big = [t for t in tiles if len(t.shape) > 2]
        if not big:
            continue
        found = True
        if not all(_squeezable(t) for t in big):
            return False
        if op.kind is OpKind.EXPAND_DIMS:
            src, res = op.operands[0].type, op.result.type
            if not (len(src.shape) == 2 and len(res.shape) == 3 and op.attrs.axis == 0):
                return False
        elif op.kind not in PASSING:
            return False
    return found


def squeeze(kernel: Kernel) -> Kernel:
    """`kernel` with its rank-3+ tiles flattened to their last two dims (a new kernel), when `_eligible`."""
    if not _eligible(kernel):
        return kernel
    out = copy.deepcopy(kernel)
    repl: dict[int, Value] = {}

    def sub(v: Value) -> Value:
        return repl.get(id(v), v)

    def retype(v: Value) -> None:
        if _squeezable(v.type):
            v.type = _flat(v.type)
        elif isinstance(v.type, ArefType) and any(_squeezable(t) for t in v.type.payload):
            v.type = ArefType(tuple(_flat(t) if _squeezable(t) else t for t in v.type.payload), v.type.depth)

    lp = out.loop
    for c in (lp.carried + lp.results) if lp is not None else ():
        retype(c)
    for _, block in out.blocks():
        kept = []
        for op in block.ops:
            op.operands = tuple(sub(v) for v in op.operands)
            if op.kind is OpKind.EXPAND_DIMS and len(op.result.type.shape) == 3:
                repl[id(op.result)] = op.operands[0]            # `x[None]`: the same tile
                continue
            if op.kind is OpKind.LOAD and len(op.attrs.tile_shape) > 2:
                op.attrs = LoadAttrs(tuple(op.attrs.tile_shape[-2:]))
            elif op.kind is OpKind.STORE and len(op.attrs.tile_shape) > 2:
                op.attrs = StoreAttrs(tuple(op.attrs.tile_shape[-2:]), op.attrs.reduce)
            for r in op.results:
                retype(r)
            if op.kind is OpKind.FULL:
                op.attrs = FullAttrs(op.result.type.shape, op.attrs.value, op.attrs.dtype)
            kept.append(op)
        block.ops = kept
    if lp is not None:
        lp.inits = tuple(sub(v) for v in lp.inits)
        lp.yields = tuple(sub(v) for v in lp.yields)
    return out
