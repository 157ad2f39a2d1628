"""Row splitting for cooperative consumers (Tawa's cooperative warp groups, CUTLASS's cooperative kernels).

K consumer groups compute the same tile program on different row blocks of the CTA tile: each owns M/K rows
of every row-distributed value (the MMA's M side and everything computed row-wise from it) and reads shared
inputs (the B tile, K/V tiles) whole. This pass rewrites Tile IR into that form — a pure function, checked
like any other by the interpreter — and says which replica each rewritten op belongs to.

A value is row-distributed when its axis 0 is the MMA's M dimension. Elementwise ops, row reductions,
`x[:, None]`, casts and the accumulator chain keep it; a transpose, a reduction over rows or an MMA that takes
it as the B operand mixes rows, and then the kernel cannot be split (`NotSplittable` names the op).
"""
from __future__ import annotations

from aref.errors import ArefError
from aref.ir import Kernel, Op, OpKind, TileType, Value
from partition.model import UnionFind

ELEMENTWISE = (OpKind.UNARY, OpKind.BINARY, OpKind.COMPARE, OpKind.WHERE, OpKind.CAST)
# M rows each Hopper consumer warp group needs at least (one wgmma m64 slab).
MIN_ROWS = 64


class NotSplittable(ArefError):
    kind = "cooperative"


def _analyse(kernel: Kernel):
    """Union-find over values whose row-distribution must agree; returns (is_rd(value), M) or raises."""
    sets = UnionFind()
    find = sets.find
    vals: dict[int, Value] = {}
    seeds: set[int] = set()
    forbid: dict[int, Op] = {}

    def same(a: Value, b: Value) -> None:
        vals[id(a)], vals[id(b)] = a, b
        sets.union(id(a), id(b))

    def never(v: Value, op: Op) -> None:
        if isinstance(v.type, TileType):
            vals[id(v)] = v
            forbid.setdefault(id(v), op)

    for op in kernel.all_ops():
        k, ops_ = op.kind, op.operands
        if k is OpKind.MMA:
            same(ops_[0], op.result)
            seeds.add(id(op.result))
            if len(ops_) == 3:
                same(ops_[2], op.result)
            never(ops_[1], op)
        elif k in ELEMENTWISE:
            r = op.result.type
            for v in ops_:
                t = v.type
                if isinstance(t, TileType) and len(t.shape) == len(r.shape) and t.shape[0] == r.shape[0] > 1:
                    same(v, op.result)
                else:
                    never(v, op)
        elif k is OpKind.REDUCE:
            if op.attrs.axis == len(ops_[0].type.shape) - 1 and len(ops_[0].type.shape) > 1:
                same(ops_[0], op.result)
            else:
                never(ops_[0], op)
                never(op.result, op)
        elif k is OpKind.EXPAND_DIMS:
            if op.attrs.axis >= 1:
                same(ops_[0], op.result)
            else:
                never(ops_[0], op)
                never(op.result, op)
        elif k in (OpKind.TRANSPOSE, OpKind.PUT):
            for v in ops_:
                never(v, op)
            for v in op.results:
                never(v, op)
    if kernel.loop is not None:
        lp = kernel.loop
        for a, b, c, d in zip(lp.inits, lp.carried, lp.yields, lp.results):
            if isinstance(a.type, TileType):
                same(a, b)
                same(b, c)
                same(c, d)
    rd_roots = {find(s) for s in seeds}
    for vid, op in forbid.items():
        if find(vid) in rd_roots:
            raise NotSplittable(f"{op.kind.value} mixes the rows of the MMA's M dimension, so the rows cannot be "
                                f"split across cooperative consumer groups", op.loc,
                                hint="use consumers='plain' (or 'pingpong' with independent sub-tiles)")
    rd = {vid for vid in vals if find(vid) in rd_roots}
    sizes = {vals[v].type.shape[0] for v in rd}
    if not rd:
        raise NotSplittable("no tensor-core work to split across cooperative consumers", kernel.loc)
    if len(sizes) != 1:
        raise NotSplittable(f"row-distributed tiles disagree on the row count ({sorted(sizes)})", kernel.loc)
    return rd, sizes.pop()


def can_row_split(kernel: Kernel, k: int) -> NotSplittable | None:
    """None if `kernel` splits into `k` cooperative row blocks, else the reason."""
    try:
        _, m = _analyse(kernel)
    except NotSplittable as why:
        return why
    if m % k or m // k < MIN_ROWS:
        return NotSplittable(f"{m} rows do not split into {k} blocks of at least {MIN_ROWS}", kernel.loc)
    return None


def row_split(kernel: Kernel, k: int) -> tuple[Kernel, dict[Op, int]]:
    """The kernel with row-distributed work replicated `k` times on row blocks, and each new op's replica."""
    why = can_row_split(kernel, k)
    if why is not None:
        raise why
    rd, m = _analyse(kernel)
    # the rows are one index space (the MMA's M side): the index-space split's rewrite, on dim 0 of each value
    from partition.dimsplit import Split, rewrite
    return rewrite(kernel, Split({vid: (0,) for vid in rd}, set(), m), k, tag="r")
