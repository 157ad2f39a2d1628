"""Splitting one index space of a tile program over cooperative consumer groups (FA3's key split).

Every tile dimension belongs to an index space: dimensions that must be indexed alike because an op links
them (an elementwise op's aligned dims, an MMA's M / N / K sides, a transpose, a reduction's kept dims, a
loop-carried value's init, body and result). Row splitting (`partition.rowsplit`) splits the MMA's M rows;
this pass splits any space whose dimensions sit on whole wgmma atoms — attention backward's key space, which
is the N side of S = Q·Kᵀ and dP = dO·Vᵀ, the M side of dV = Pᵀ·dO and dK = dSᵀ·Q, and the contracted side of
dQ = dS·K. FlashAttention-3 splits a 128-key block over two consumer warp groups exactly so.

Replica j of K computes every op that has a dimension in the space on its block [j·b, (j+1)·b) (b = n / K):
shared inputs (loaded tiles, channel gets) are viewed through a slice of their block, stores write their
block's sub-box. An op that contracts the space (an MMA whose K side is in it, a sum over it) gives each
replica a partial sum; partials may only be scaled, added to partials, accumulated by later MMAs from a zero
start, and stored with `reduce="add"` — each replica then adds its own part, which is the same sum.
`NotSplittable` names the op that breaks these rules.
"""
from __future__ import annotations

from dataclasses import dataclass

from aref.ir import (Block, ConstAttrs, DType, FnAttrs, FullAttrs, Kernel, Loop, Op, OpKind, ScalarType, SliceAttrs,
                     StoreAttrs, TileType, Value)
from aref.ops import CUDA_CORE_KINDS, ELEMENTWISE_KINDS
from aref.ir.typing_rules import slice_type
from aref.verify import verify
from partition.model import UnionFind
from partition.rowsplit import NotSplittable

ELEMENTWISE = CUDA_CORE_KINDS & ELEMENTWISE_KINDS     # per-element register math (not a select)
LINEAR = {"mul", "div", "add", "sub", "neg"}
SOURCES = (OpKind.LOAD, OpKind.GET)


@dataclass
class Split:
    """The space chosen and what it reaches: value id -> its dims in the space; values holding partial sums."""

    dims: dict[int, tuple[int, ...]]
    partial: set[int]
    size: int


def _shape(v: Value) -> tuple[int, ...]:
    return v.type.shape if isinstance(v.type, TileType) else ()


def _links(kernel: Kernel):
    """Union-find over (value id, dim) nodes, and the contractions (op, value, dim contracted)."""
    sets = UnionFind()
    vals: dict[int, Value] = {}
    contractions: list[tuple[Op, Value, int]] = []

    def same(a: Value, i: int, b: Value, j: int) -> None:
        vals[id(a)], vals[id(b)] = a, b
        sets.union((id(a), i), (id(b), j))

    def node(v: Value, i: int) -> None:
        vals[id(v)] = v
        sets.find((id(v), i))

    for op in kernel.all_ops():
        k, xs = op.kind, op.operands
        for v in list(xs) + list(op.results):
            for i in range(len(_shape(v))):
                node(v, i)
        if k is OpKind.MMA:
            a, b, r = xs[0], xs[1], op.result
            same(a, 0, r, 0)
            same(b, 1, r, 1)
            same(a, 1, b, 0)
            contractions.append((op, a, 1))
            if len(xs) == 3:
                same(xs[2], 0, r, 0)
                same(xs[2], 1, r, 1)
        elif k in ELEMENTWISE or k is OpKind.SELECT:
            r = op.result
            rs = _shape(r)
            for v in xs:
                s = _shape(v)
                for i in range(1, len(s) + 1):
                    if s[-i] == rs[-i] and s[-i] != 1:
                        same(v, len(s) - i, r, len(rs) - i)
        elif k is OpKind.TRANSPOSE:
            same(xs[0], 0, op.result, 1)
            same(xs[0], 1, op.result, 0)
        elif k is OpKind.EXPAND_DIMS:
            for i in range(len(_shape(xs[0]))):
                same(xs[0], i, op.result, i if i < op.attrs.axis else i + 1)
        elif k is OpKind.REDUCE:
            axis = op.attrs.axis
            for i in range(len(_shape(xs[0]))):
                if i != axis:
                    same(xs[0], i, op.result, i if i < axis else i - 1)
            contractions.append((op, xs[0], axis))
        elif k is OpKind.PUT:
            pass                     # payloads reach their gets through the channel (linked below)
    # channel payloads: a put's tiles and the matching get's results are the same tiles
    puts: dict[int, list[Op]] = {}
    for op in kernel.all_ops():
        if op.kind is OpKind.PUT:
            puts.setdefault(id(op.operands[0]), []).append(op)
    for op in kernel.all_ops():
        if op.kind is OpKind.GET:
            for p in puts.get(id(op.operands[0]), [])[:1]:
                for t, r in zip(p.operands[1:], op.results):
                    for i in range(len(_shape(r))):
                        same(t, i, r, i)
    lp = kernel.loop
    if lp is not None:
        for a, b, c, d in zip(lp.inits, lp.carried, lp.yields, lp.results):
            for i in range(len(_shape(b))):
                same(a, i, b, i)
                same(b, i, c, i)
                same(c, i, d, i)
    return sets, vals, contractions


def candidate_spaces(kernel: Kernel) -> list[tuple]:
    """Spaces worth splitting, largest register footprint first: the row dims of loop-carried MMA
    accumulators (what a consumer group holds for the whole loop)."""
    sets, vals, _ = _links(kernel)
    if kernel.loop is None:
        return []
    prod = {id(r): op for op in kernel.all_ops() for r in op.results}
    seen, out = set(), []
    for y in kernel.loop.yields:
        op = prod.get(id(y))
        if op is None or op.kind is not OpKind.MMA:
            continue
        for dim in (0, 1):
            root = sets.find((id(y), dim))
            if root not in seen:
                seen.add(root)
                out.append((root, y.type.nbytes))
    return [r for r, _ in sorted(out, key=lambda x: -x[1])]


def analyse(kernel: Kernel, space, k: int) -> Split:
    """Check that `space` splits `k` ways; raise `NotSplittable` naming the op that prevents it."""
    sets, vals, contractions = _links(kernel)
    dims: dict[int, list[int]] = {}
    sizes = set()
    for vid, v in vals.items():
        for i in range(len(_shape(v))):
            if sets.find((vid, i)) == space:
                dims.setdefault(vid, []).append(i)
                sizes.add(_shape(v)[i])
    if len(sizes) != 1:
        raise NotSplittable(f"the split index space has several extents {sorted(sizes)}", kernel.loc)
    n = sizes.pop()
    if n % k:
        raise NotSplittable(f"{n} does not split into {k} blocks", kernel.loc)
    b = n // k
    prod = {id(r): op for op in kernel.all_ops() for r in op.results}
    for op in kernel.all_ops():
        touched = [(v, dims[id(v)]) for v in list(op.operands) + list(op.results) if id(v) in dims]
        if not touched:
            continue
        if op.kind in (OpKind.SLICE, OpKind.ARANGE, OpKind.PUT):
            raise NotSplittable(f"a {op.kind.value} of a tile indexed by the split dimension", op.loc)
        if op.kind is OpKind.MMA:
            a, r = op.operands[0], op.result
            kstep = 32 if a.type.dtype.bits == 8 else 16
            if (id(r) in dims and 0 in dims[id(r)] and b % 64) or (id(r) in dims and 1 in dims[id(r)] and b % 8) \
                    or (id(a) in dims and 1 in dims[id(a)] and b % kstep):
                raise NotSplittable(f"blocks of {b} do not fill whole wgmma atoms (M 64, N 8, K {kstep})", op.loc)
        for v, ds in touched:
            src = prod.get(id(v))
            if src is not None and src.kind in SOURCES and ds != [0]:
                raise NotSplittable(f"a shared tile {v.type} is split along its dim {ds}: only rows (dim 0) of a "
                                    f"loaded tile can be viewed per group", op.loc)
    partial = _partials(kernel, contractions, dims, space, sets, prod)
    return Split({vid: tuple(d) for vid, d in dims.items()}, partial, n)


def _partials(kernel, contractions, dims, space, sets, prod) -> set[int]:
    """Values that hold one replica's part of a sum over the split space, checked to reach only linear uses
    and reduce-add stores."""
    partial: set[int] = set()
    for op, v, dim in contractions:
        if sets.find((id(v), dim)) == space:
            partial.add(id(op.result))
    lp = kernel.loop
    carried_of = {}
    if lp is not None:
        for a, b, c, d in zip(lp.inits, lp.carried, lp.yields, lp.results):
            carried_of[id(c)] = (a, b, d)
    changed = True
    while changed:
        changed = False
        for op in kernel.all_ops():
            ins = [v for v in op.operands if id(v) in partial]
            if not ins:
                continue
            r = op.result if len(op.results) == 1 else None
            ok = False
            if op.kind is OpKind.STORE:
                ok = op.attrs.reduce == "add" and op.operands[-1] in ins
                if not ok:
                    raise NotSplittable("a partial sum over the split dimension is stored without reduce=\"add\"",
                                        op.loc, hint="store it with reduce=\"add\" so each group adds its part")
                continue
            if op.kind in (OpKind.EXPAND_DIMS, OpKind.TRANSPOSE, OpKind.SELECT):
                ok = True
            elif op.kind is OpKind.MMA:
                ok = len(op.operands) == 3 and ins == [op.operands[2]]          # an accumulator chain
            elif op.kind in (OpKind.BINARY, OpKind.UNARY) and op.attrs.fn in LINEAR:
                tiles = [v for v in op.operands if isinstance(v.type, TileType)]
                if op.attrs.fn in ("add", "sub"):
                    ok = all(id(v) in partial for v in tiles) and len(tiles) == len(op.operands)
                elif op.attrs.fn in ("mul", "div"):
                    ok = len(ins) == 1 and (op.attrs.fn == "mul" or op.operands[0] in ins)
                else:
                    ok = True
            if not ok:
                raise NotSplittable(f"{op.kind.value} of a partial sum over the split dimension: each group would "
                                    f"hold only its part of the sum", op.loc)
            if r is not None and id(r) not in partial:
                partial.add(id(r))
                changed = True
        for vid, (init, c, d) in carried_of.items():
            if vid in partial and id(c) not in partial:
                i_op = prod.get(id(init))
                if i_op is None or i_op.kind is not OpKind.FULL or i_op.attrs.value != 0.0:
                    raise NotSplittable("a loop-carried partial sum that does not start at zero", kernel.loc)
                partial |= {id(c), id(d), id(init)}
                changed = True
    return partial


def dim_split(kernel: Kernel, k: int, space=None) -> tuple[Kernel, dict[Op, int]]:
    """The kernel with `space` (default: the first candidate that splits) split over `k` replicas, and each
    replica's ops."""
    if space is None:
        why = None
        for cand in candidate_spaces(kernel):
            try:
                split = analyse(kernel, cand, k)
                space = cand
                break
            except NotSplittable as e:
                why = why or e
        else:
            raise why or NotSplittable("no loop-carried accumulator to split over consumer groups", kernel.loc)
    else:
        split = analyse(kernel, space, k)
    return rewrite(kernel, split, k, "k")


def rewrite(kernel: Kernel, split: Split, k: int, tag: str = "k") -> tuple[Kernel, dict[Op, int]]:
    """Replicate every op that touches the split space `k` times on blocks of it (see the module docstring);
    shared sources are viewed through slices named `<value>.<tag><j>`. Also the row split's rewrite."""
    b = split.size // k
    involved_vals = set(split.dims) | split.partial
    vmap: list[dict[int, Value]] = [dict() for _ in range(k)]
    views: list[dict[tuple, Value]] = [dict() for _ in range(k)]
    replica: dict[Op, int] = {}

    def part_type(v: Value) -> TileType:
        t = v.type
        shape = tuple(b if i in split.dims.get(id(v), ()) else s for i, s in enumerate(t.shape))
        return TileType(shape, t.dtype, t.space)

    def lookup(v: Value, j: int, out: list[Op], loc) -> Value:
        if id(v) in vmap[j]:
            return vmap[j][id(v)]
        if id(v) not in split.dims:
            return v                                   # shared whole (no dim in the space)
        key = (id(v), id(out))                         # a shared source: view this replica's rows
        if key not in views[j]:
            nv = Value(slice_type(v.type, 0, j * b, b, loc), f"{v.name}.{tag}{j}" if v.name else None)
            out.append(Op(OpKind.SLICE, (v,), (nv,), SliceAttrs(0, j * b, b), loc))
            views[j][key] = nv
        return views[j][key]

    def const(x: int, out: list[Op], loc) -> Value:
        v = Value(ScalarType(DType.int32))
        out.append(Op(OpKind.CONST, (), (v,), ConstAttrs(x), loc))
        return v

    def rewrite(ops: list[Op]) -> list[Op]:
        out: list[Op] = []
        for op in ops:
            involved = op.kind not in SOURCES and any(id(v) in involved_vals for v in op.operands + op.results)
            if not involved:
                out.append(op)
                continue
            for j in range(k):
                if op.kind is OpKind.STORE:
                    out.append(_split_store(op, j, k, b, split, lambda v, j=j, loc=op.loc: lookup(v, j, out, loc),
                                            out, const))
                    replica[out[-1]] = j
                    continue
                operands = tuple(lookup(v, j, out, op.loc) for v in op.operands)
                results = []
                for r in op.results:
                    nv = Value(part_type(r) if id(r) in split.dims else r.type, r.name)
                    vmap[j][id(r)] = nv
                    results.append(nv)
                attrs = op.attrs
                if op.kind is OpKind.FULL:
                    attrs = FullAttrs(results[0].type.shape, attrs.value, attrs.dtype)
                new = Op(op.kind, operands, tuple(results), attrs, op.loc)
                out.append(new)
                replica[new] = j
        return out

    pre_ops = rewrite(kernel.pre.ops)
    loop = None
    if kernel.loop is not None:
        lp = kernel.loop
        inits, carried, yields_old, results = [], [], [], []
        for a, c, y, d in zip(lp.inits, lp.carried, lp.yields, lp.results):
            if id(c) in involved_vals:
                for j in range(k):
                    inits.append(lookup(a, j, pre_ops, lp.loc))
                    nc = Value(part_type(c) if id(c) in split.dims else c.type, c.name)
                    vmap[j][id(c)] = nc
                    carried.append(nc)
                    yields_old.append((y, j))
                    nd = Value(part_type(d) if id(d) in split.dims else d.type, d.name)
                    vmap[j][id(d)] = nd
                    results.append(nd)
            else:
                inits.append(a)
                carried.append(c)
                yields_old.append((y, None))
                results.append(d)
        body_ops = rewrite(lp.body.ops)
        yields = tuple(v if j is None else lookup(v, j, body_ops, lp.loc) for v, j in yields_old)
        loop = Loop(lp.iv, lp.trip_count, tuple(inits), tuple(carried), Block(body_ops), yields, tuple(results),
                    lp.loc)
    post = Block(rewrite(kernel.post.ops))
    out = Kernel(kernel.name, kernel.params, kernel.constexprs, kernel.grid, Block(pre_ops), loop, post, kernel.loc)
    verify(out)
    return out, replica


def _split_store(op: Op, j: int, k: int, b: int, split: Split, lookup, out: list[Op], const) -> Op:
    """Replica j stores its block: a coordinate of a split box dimension becomes coord·k + j with a box of b;
    a partial sum is stored (reduce-added) whole by every replica."""
    tensor, coords, tile = op.operands[0], list(op.operands[1:-1]), op.operands[-1]
    lead = len(tensor.type.shape) - len(op.attrs.tile_shape)
    box = list(op.attrs.tile_shape)
    for d in split.dims.get(id(tile), ()):
        c = coords[lead + d]
        scaled = Value(ScalarType(DType.int32))
        out.append(Op(OpKind.SCALAR_BINARY, (c, const(k, out, op.loc)), (scaled,), FnAttrs("mul"), op.loc))
        at = Value(ScalarType(DType.int32))
        out.append(Op(OpKind.SCALAR_BINARY, (scaled, const(j, out, op.loc)), (at,), FnAttrs("add"), op.loc))
        coords[lead + d] = at
        box[d] = b
    return Op(OpKind.STORE, (tensor, *coords, lookup(tile)), (), StoreAttrs(tuple(box), op.attrs.reduce), op.loc)
