"""Row splitting for cooperative consumers (Tawa's cooperative warp groups, CUTLASS's cooperative kernels).

K consumer groups compute the same tile program on different row blocks of the CTA tile: each owns M/K rows
of every row-distributed value (the MMA's M side and everything computed row-wise from it) and reads shared
inputs (the B tile, K/V tiles) whole. This pass rewrites Tile IR into that form — a pure function, checked
like any other by the interpreter — and says which replica each rewritten op belongs to.

A value is row-distributed when its axis 0 is the MMA's M dimension. Elementwise ops, row reductions,
`x[:, None]`, casts and the accumulator chain keep it; a transpose, a reduction over rows or an MMA that takes
it as the B operand mixes rows, and then the kernel cannot be split (`NotSplittable` names the op).

Every op with a row extent is rewritten for the replica's block of rows [j·M/K, (j+1)·M/K): `full` and
`arange` get the block's length — and `arange`, an index tile, the block's first row as offset, so it keeps
its global values —, reductions, broadcasts and elementwise ops take their types from their operands, loads
and channel tiles stay whole and are sliced where a replica reads them, and stores move their row coordinate.
Tile work that is not row-distributed (index tiles of the columns, math on shared tiles) is recomputed by
every replica rather than sent between them; side effects on such values happen once.
"""
from __future__ import annotations

from aref import ops as ops_registry
from aref.errors import ArefError
from aref.guard import ROW_SPLIT, compiler_pass
from aref.ir import (ArangeAttrs, Block, ConstAttrs, DType, FnAttrs, FullAttrs, Kernel, Loop, Op, OpKind, ScalarType,
                     SliceAttrs, StoreAttrs, TileType, Value)
from aref.ir.typing_rules import slice_type
from aref.verify import verify
from partition.model import UnionFind

ELEMENTWISE = ops_registry.kinds_with(ops_registry.ELEMENTWISE, ops_registry.CUDA_CORE)   # registry: elementwise math
# ops every replica shares whole (their users slice what they need), and side effects done once unless they
# touch row-distributed values
_SHARED = (OpKind.LOAD, OpKind.GET, OpKind.CONSUMED, OpKind.CHANNEL)
_ONCE = (OpKind.STORE, OpKind.PUT)
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
    rows = m // k
    replica: dict[Op, int] = {}
    # per replica: old value id -> new value (row block) ; shared values map to themselves
    vmap: list[dict[int, Value]] = [dict() for _ in range(k)]
    slices: list[dict[tuple[int, int], Value]] = [dict() for _ in range(k)]

    def part_type(t: TileType) -> TileType:
        return TileType((rows,) + t.shape[1:], t.dtype, t.space)

    def lookup(v: Value, j: int, out: list[Op], loc) -> Value:
        if id(v) in vmap[j]:
            return vmap[j][id(v)]
        if id(v) not in rd:
            return v
        key = (id(v), id(out))       # a shared source (a loaded or channel tile): slice it where it is used
        if key not in slices[j]:
            nv = Value(slice_type(v.type, 0, j * rows, rows, loc), f"{v.name}.r{j}" if v.name else None)
            sop = Op(OpKind.SLICE, (v,), (nv,), SliceAttrs(0, j * rows, rows), loc)
            out.append(sop)
            slices[j][key] = nv
        return slices[j][key]

    def const(x: int, out: list[Op], loc) -> Value:
        v = Value(ScalarType(DType.int32))
        out.append(Op(OpKind.CONST, (), (v,), ConstAttrs(x), loc))
        return v

    def rewrite(ops: list[Op]) -> list[Op]:
        out: list[Op] = []
        for op in ops:
            involved = any(id(v) in rd for v in op.operands + op.results)
            if op.kind in _SHARED or (op.kind in _ONCE and not involved) or not (
                    involved or any(isinstance(r.type, TileType) for r in op.results)):
                # loads and channel ops stay whole (every replica reads them), scalar index math is shared,
                # and a side effect on values no replica owns happens once (replica 0's copy of them)
                operands = tuple(lookup(v, 0, out, op.loc) for v in op.operands)
                new = op if operands == op.operands else Op(op.kind, operands, op.results, op.attrs, op.loc)
                out.append(new)
                if new.kind in _ONCE:
                    replica[new] = 0
                continue
            for j in range(k):
                if op.kind is OpKind.STORE:
                    out.append(_split_store(op, j, k, rows, lambda v, j=j, loc=op.loc: lookup(v, j, out, loc), out,
                                            const))
                    replica[out[-1]] = j
                    continue
                # row-distributed work runs on the replica's row block; other tile work (index tiles of the
                # columns, math on shared tiles) is recomputed by every replica rather than sent between them
                operands = tuple(lookup(v, j, out, op.loc) for v in op.operands)
                results = []
                for r in op.results:
                    nv = Value(part_type(r.type) if id(r) in rd else r.type, r.name)
                    vmap[j][id(r)] = nv
                    results.append(nv)
                for new in _replica_ops(op, operands, tuple(results), j, rows, out, const):
                    out.append(new)
                    replica[new] = j
        return out

    pre_ops = rewrite(kernel.pre.ops)
    loop = None
    if kernel.loop is not None:
        lp = kernel.loop
        inits, carried, yields_old, results = [], [], [], []
        for a, b, c, d in zip(lp.inits, lp.carried, lp.yields, lp.results):
            if isinstance(b.type, TileType):          # every replica carries its own copy (its rows, if split)
                for j in range(k):
                    inits.append(lookup(a, j, pre_ops, lp.loc))
                    nb = Value(part_type(b.type) if id(b) in rd else b.type, b.name)
                    vmap[j][id(b)] = nb
                    carried.append(nb)
                    yields_old.append((c, j))
                    nd = Value(part_type(d.type) if id(d) in rd else d.type, d.name)
                    vmap[j][id(d)] = nd
                    results.append(nd)
            else:
                inits.append(a)
                carried.append(b)
                yields_old.append((c, None))
                results.append(d)
        body_ops = rewrite(lp.body.ops)
        yields = tuple(v if j is None else lookup(v, j, body_ops, lp.loc) for v, j in yields_old)
        body = Block(body_ops)
        loop = Loop(lp.iv, lp.trip_count, tuple(inits), tuple(carried), body, yields, tuple(results), lp.loc)
    post = Block(rewrite(kernel.post.ops))
    out = Kernel(kernel.name, kernel.params, kernel.constexprs, kernel.grid, Block(pre_ops), loop, post,
                 kernel.loc)
    with compiler_pass(ROW_SPLIT, kernel.loc, verifying=True):
        verify(out)
    return out, replica


def _replica_ops(op: Op, operands: tuple, results: tuple, j: int, rows: int, out: list[Op], const) -> list[Op]:
    """Replica j's ops for `op` on its row block [j·rows, (j+1)·rows). Ops whose attributes fix a row
    extent get it cut to the block; an index tile also moves to the block's first row, so that
    `arange(M)` in replica j holds j·rows … j·rows + rows − 1, the global rows it stands for."""
    if op.kind is OpKind.FULL:
        return [Op(op.kind, operands, results, FullAttrs(results[0].type.shape, op.attrs.value, op.attrs.dtype),
                   op.loc)]
    if op.kind is OpKind.ARANGE and results[0].type.shape[0] != op.attrs.n:
        if j == 0:
            return [Op(op.kind, operands, results, ArangeAttrs(rows), op.loc)]
        base = Value(results[0].type, results[0].name)
        local = Op(op.kind, operands, (base,), ArangeAttrs(rows), op.loc)
        return [local, Op(OpKind.BINARY, (base, const(j * rows, out, op.loc)), results, FnAttrs("add"), op.loc)]
    return [Op(op.kind, operands, results, op.attrs, op.loc)]


def _split_store(op: Op, j: int, k: int, rows: int, lookup, out: list[Op], const) -> Op:
    """Replica j stores its row block: the row coordinate becomes coord·k + j with a tile of M/k rows."""
    tensor, coords, tile = op.operands[0], list(op.operands[1:-1]), op.operands[-1]
    lead = len(tensor.type.shape) - len(op.attrs.tile_shape)
    c = coords[lead]
    scaled = Value(ScalarType(DType.int32))
    out.append(Op(OpKind.SCALAR_BINARY, (c, const(k, out, op.loc)), (scaled,), FnAttrs("mul"), op.loc))
    row = Value(ScalarType(DType.int32))
    out.append(Op(OpKind.SCALAR_BINARY, (scaled, const(j, out, op.loc)), (row,), FnAttrs("add"), op.loc))
    coords[lead] = row
    shape = (rows,) + op.attrs.tile_shape[1:]
    return Op(OpKind.STORE, (tensor, *coords, lookup(tile)), (), StoreAttrs(shape, op.attrs.reduce), op.loc)
