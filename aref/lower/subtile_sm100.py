"""Blackwell epilogue subtiling: post-loop register math over column chunks, as CUTLASS's epilogue tiles.

On Blackwell a warp group holds a 128-row tile one row per thread, so an epilogue that combines two
128 × 128 float32 accumulators (a dual GEMM's gate and up) would hold 256 registers per thread. When a
group's post-loop code would not fit the register file per thread, and it is column-separable, it is
rewritten to run over C / k-column chunks: every tile it takes from a channel is read through a column slice
(a tcgen05.ld of those columns; of a shared-memory slot, its (R, C / k) tile at the chunk's columns), the
chunk's math follows, and each chunk is stored as its own TMA box. The
group takes every channel item first and releases them after the last chunk, so no slot is released while a
chunk still reads it.

Column-separable (`_columns`): every value of the block either carries the column axis C of its (R, C) tiles
— an (R, C) or (1, C) tile, or a 1-D (C,) vector (one that is expanded to a row `v[None, :]`, broadcast
against a 2-D tile, or is a reduction over rows) — and is computed chunk by chunk, or does not (scalars,
(R, 1) columns, (R,) vectors expanded by `v[:, None]` or reduced over columns) and is computed once before
the chunks and broadcast into them. Column values are made by elementwise ops, `arange`, `expand_dims` and
reductions over rows (axis 0: each chunk reduces its own columns, so it yields its slice of the (C,)
result); they are used only by column values and stores (of a column value: each chunk stores its box), and by
reductions across the columns (axis 1: sum, max, min), whose chunk partials are combined (added in chunk
order, or their max / min) — what reads such a reduction runs once, after the last chunk.
Anything else — a column value computed from a reduction across the columns (it is complete only after the
last chunk), a transpose, an MMA or a channel put of a column value, a 1-D vector used both as rows and as
columns — is not separable, and the register rule refuses the block.
"""
from __future__ import annotations

from aref.ir import (ArangeAttrs, Block, ConstAttrs, DType, FnAttrs, Op, OpKind, ScalarType, SliceAttrs,
                     StoreAttrs, TileType, Value)
from aref.ir.ws import GroupProgram, WSKernel
from aref.target import target_of

ELEMENTWISE = (OpKind.BINARY, OpKind.UNARY, OpKind.COMPARE, OpKind.WHERE, OpKind.CAST, OpKind.FULL)
# ops that make a column value chunk by chunk
CHUNKED = ELEMENTWISE + (OpKind.EXPAND_DIMS, OpKind.ARANGE, OpKind.REDUCE)
I32 = ScalarType(DType.int32)
ROW, COL = "row", "col"
COMBINE = {"sum": "add", "max": "maximum", "min": "minimum"}     # a reduction's partials, combined


def subtile_epilogues(ws: WSKernel) -> None:
    """Rewrite (in place) the post-loop block of every four-warp group that needs it (module docstring)."""
    from aref.resources import register_demand
    most = target_of(ws.arch).setmaxnreg_max         # the most registers setmaxnreg gives a warp group

    def group_register_need(gp: GroupProgram) -> int:
        return register_demand(gp, ws.arch).need
    for gp in ws.groups:
        if gp.group.warps != 4 or not gp.post.ops or group_register_need(gp) <= most:
            continue
        found = _columns(gp.post.ops)
        if found is None:
            continue
        for k in (2, 4, 8):
            if found[0][1] % k or found[0][1] // k < 16:
                break
            trial = GroupProgram(gp.group, post=Block(_chunked(gp.post.ops, *found, k)))
            if group_register_need(trial) <= most or k == 8 or found[0][1] // (2 * k) < 16:
                gp.post.ops = _chunked(gp.post.ops, *found, k)
                break


def _tiles(op: Op) -> list[Value]:
    return [v for v in (*op.operands, *op.results) if isinstance(v.type, TileType)]


def _wide(v: Value) -> bool:
    """A 2-D tile with more than one column: (R, C) or (1, C)."""
    return isinstance(v.type, TileType) and len(v.type.shape) == 2 and v.type.shape[1] != 1


def _vector(v: Value) -> bool:
    return isinstance(v.type, TileType) and len(v.type.shape) == 1 and v.type.shape[0] > 1


def _axis_labels(ops: list[Op]) -> dict[int, str] | None:
    """ROW or COL for every 1-D vector whose use or making says which axis it runs along (numpy broadcasting
    aligns a vector with the columns of a 2-D tile); None if one runs along both."""
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        while parent.setdefault(i, i) != i:
            i = parent[i]
        return i
    seeds: list[tuple[int, str]] = []
    for op in ops:
        vecs = [v for v in _tiles(op) if _vector(v)]
        if op.kind in ELEMENTWISE:
            for v in vecs[1:]:                       # operands and result of one elementwise op share an axis
                parent[find(id(v))] = find(id(vecs[0]))
            if op.results and _wide(op.results[0]):
                seeds += [(id(v), COL) for v in op.operands if _vector(v)]
        elif op.kind is OpKind.EXPAND_DIMS and _vector(op.operands[0]):
            seeds.append((id(op.operands[0]), COL if op.attrs.axis == 0 else ROW))
        elif op.kind is OpKind.REDUCE and len(op.operands[0].type.shape) == 2 and _vector(op.results[0]):
            seeds.append((id(op.results[0]), COL if op.attrs.axis == 0 else ROW))
    labels: dict[int, str] = {}
    for i, axis in seeds:
        if labels.setdefault(find(i), axis) != axis:
            return None
    vec_ids = {id(v) for op in ops for v in _tiles(op) if _vector(v)}
    return {i: labels[find(i)] for i in vec_ids if find(i) in labels}


def _columns(ops: list[Op]) -> tuple[tuple[int, int], set[int], set[int]] | None:
    """The block's (R, C), the ids of its column values and those of the ops that run after the last chunk (on
    reductions across the columns, combined over the chunks) if it is column-separable (module docstring)."""
    wide = {tuple(v.type.shape) for op in ops for v in _tiles(op) if _wide(v)}
    if len({c for _, c in wide}) != 1 or len({r for r, _ in wide} - {1}) != 1:
        return None
    shape = (max(r for r, _ in wide), wide.pop()[1])
    labels = _axis_labels(ops)
    if labels is None:
        return None
    for op in ops:                                   # a vector's length must be that of its axis
        for v in _tiles(op):
            if _vector(v) and id(v) in labels and v.type.shape[0] != shape[labels[id(v)] == COL]:
                return None
    cols = {id(v) for op in ops for v in _tiles(op) if _wide(v) or labels.get(id(v)) == COL}
    made = {id(r) for op in ops for r in op.results}
    for op in ops:
        for v in op.operands:
            if id(v) in cols and id(v) not in made and (_vector(v) or v.type.shape[0] == 1):
                # a (1, C) row or (C,) vector made before the loop is held in registers whole: the row layout
                # slices the columns of 128-row register tiles only
                return None
    stored = False
    late: set[int] = set()                           # values known only after the last chunk
    after: set[int] = set()
    for op in ops:
        col_in = any(id(v) in cols for v in op.operands)
        col_out = any(id(v) in cols for v in op.results)
        if any(id(v) in late for v in op.operands):
            if col_in or col_out:
                return None                          # the chunks would need it before it is complete
            late.update(id(r) for r in op.results)
            after.add(id(op))
        elif op.kind is OpKind.REDUCE and col_in and op.attrs.axis == 1 and op.attrs.fn in COMBINE:
            late.add(id(op.result))                  # across the columns: each chunk's partial, combined
        elif op.kind is OpKind.STORE and col_in:
            if op.attrs.reduce or op.attrs.tile_shape[-1] != shape[1]:
                return None
            stored = True
        elif op.kind is OpKind.GET and col_out:
            tile = op.results[0]
            if len([r for r in op.results if isinstance(r.type, TileType)]) != 1 or not _wide(tile):
                return None
        elif col_in or col_out:
            if op.kind not in CHUNKED or not all(id(r) in cols for r in op.results):
                return None                          # a column value leaves the chunks (or comes from an
            if op.kind is OpKind.REDUCE and (op.attrs.axis != 0 or len(op.operands[0].type.shape) != 2):
                return None                          # op that cannot make it column by column)
    return (shape, cols, after) if stored or late else None      # else no chunk would do anything


def _chunked(ops: list[Op], shape: tuple[int, int], cols: set[int], after: set[int], k: int) -> list[Op]:
    """The block with its column work repeated over k column chunks (gets first, then the chunks, then what
    reads the combined reductions across the columns, releases last)."""
    rows, ncols = shape
    width = ncols // k
    work = {id(op) for op in ops if op.kind is not OpKind.GET and any(id(v) in cols for v in
                                                                      (*op.operands, *op.results))}
    head = [op for op in ops if id(op) not in work and id(op) not in after and op.kind is not OpKind.CONSUMED]
    tail = [op for op in ops if op.kind is OpKind.CONSUMED]
    out = list(head)
    total: dict[int, Value] = {}                     # a reduction across the columns: its partials so far

    def const(value: int, loc) -> Value:
        c = Value(I32)
        out.append(Op(OpKind.CONST, (), (c,), ConstAttrs(value), loc))
        return c
    for j in range(k):
        m: dict[int, Value] = {}
        for op in ops:
            if id(op) not in work:
                continue
            operands = []
            for v in op.operands:
                if id(v) in m:
                    operands.append(m[id(v)])
                elif id(v) in cols:
                    # a whole tile from a channel, or one the block did not make (a register tile carried out
                    # of the loop, a pre-loop tile): the chunk reads its columns
                    axis = len(v.type.shape) - 1
                    part = Value(_narrow(v.type, width), v.name)
                    out.append(Op(OpKind.SLICE, (v,), (part,), SliceAttrs(axis, j * width, width), op.loc))
                    m[id(v)] = part
                    operands.append(part)
                else:
                    operands.append(v)       # a scalar, an (R, 1) column or a row vector: broadcast whole
            if op.kind is OpKind.STORE:
                coords = list(operands[1:-1])
                col = Value(I32)
                out.append(Op(OpKind.SCALAR_BINARY, (coords[-1], const(k, op.loc)), (col,), FnAttrs("mul"),
                              op.loc))
                if j:
                    shifted = Value(I32)
                    out.append(Op(OpKind.SCALAR_BINARY, (col, const(j, op.loc)), (shifted,), FnAttrs("add"),
                                  op.loc))
                    col = shifted
                out.append(Op(OpKind.STORE, (operands[0], *coords[:-1], col, operands[-1]), (),
                              StoreAttrs((*op.attrs.tile_shape[:-1], width), op.attrs.reduce), op.loc))
                continue
            if op.kind is OpKind.REDUCE and op.attrs.axis == 1:
                part = Value(op.result.type, op.result.name)
                out.append(Op(op.kind, tuple(operands), (part,), op.attrs, op.loc, op.pred, op.stage))
                if j:
                    both = Value(op.result.type, op.result.name)
                    out.append(Op(OpKind.BINARY, (total[id(op.result)], part), (both,), FnAttrs(COMBINE[op.attrs.fn]),
                                  op.loc, op.pred, op.stage))
                    part = both
                total[id(op.result)] = part
                continue
            results = tuple(Value(_narrow(r.type, width), r.name) for r in op.results)
            attrs = op.attrs
            if op.kind is OpKind.FULL:
                attrs = type(attrs)(_narrow(op.results[0].type, width).shape, attrs.value, attrs.dtype)
            if op.kind is OpKind.ARANGE:             # the chunk's indices: arange(width) + j·width
                local = Value(results[0].type, op.results[0].name)
                out.append(Op(OpKind.ARANGE, (), (local,), ArangeAttrs(width), op.loc, op.pred, op.stage))
                if j:
                    shifted = Value(results[0].type, op.results[0].name)
                    out.append(Op(OpKind.BINARY, (const(j * width, op.loc), local), (shifted,), FnAttrs("add"),
                                  op.loc, op.pred, op.stage))
                    local = shifted
                m[id(op.results[0])] = local
                continue
            out.append(Op(op.kind, tuple(operands), results, attrs, op.loc, op.pred, op.stage))
            for a, b in zip(op.results, results):
                m[id(a)] = b
    for op in ops:                                   # what reads a combined reduction, once
        if id(op) in after:
            out.append(Op(op.kind, tuple(total.get(id(v), v) for v in op.operands), op.results, op.attrs, op.loc,
                          op.pred, op.stage))
    return out + tail


def _narrow(t: TileType, width: int) -> TileType:
    """A column value's type in a chunk of `width` columns."""
    return TileType((*t.shape[:-1], width), t.dtype, t.space)
