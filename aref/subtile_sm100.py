"""Blackwell epilogue subtiling: post-loop register math over column chunks, as CUTLASS's epilogue tiles.

On Blackwell a warp group holds a 128-row tile one row per thread, so an epilogue that combines two
128 × 128 float32 accumulators (a dual GEMM's gate and up) would hold 256 registers per thread. When a
group's post-loop code would not fit the register file per thread, and it is column-separable — element-
wise math, casts and stores of (R, C) tiles (row vectors broadcast along the rows), no reduction across
columns, nothing handed to another group — it is rewritten to run over C / k-column chunks: every tile it
takes from a channel is read through a column slice (a tcgen05.ld of those columns), the chunk's math
follows, and each chunk is stored as its own TMA box. The group takes every channel item first and releases
them after the last chunk, so no slot is released while a chunk still reads it.
"""
from __future__ import annotations

from aref.ir import (Block, ConstAttrs, DType, FnAttrs, Op, OpKind, ScalarType, SliceAttrs, StoreAttrs, TileType,
                     Value)
from aref.ws import GroupProgram, WSKernel

MAX_REGS = 256
ELEMENTWISE = (OpKind.BINARY, OpKind.UNARY, OpKind.COMPARE, OpKind.WHERE, OpKind.CAST, OpKind.FULL)
I32 = ScalarType(DType.int32)


def subtile_epilogues(ws: WSKernel) -> None:
    """Rewrite (in place) the post-loop block of every four-warp group that needs it (module docstring)."""
    from aref.resources import register_demand

    def group_register_need(gp: GroupProgram) -> int:
        return register_demand(gp, "sm_100a").need
    for gp in ws.groups:
        if gp.group.warps != 4 or not gp.post.ops or group_register_need(gp) <= MAX_REGS:
            continue
        shape = _separable(gp.post.ops)
        if shape is None:
            continue
        for k in (2, 4, 8):
            if shape[1] % k or shape[1] // k < 16:
                break
            trial = GroupProgram(gp.group, post=Block(_chunked(gp.post.ops, shape, k)))
            if group_register_need(trial) <= MAX_REGS or k == 8 or shape[1] // (2 * k) < 16:
                gp.post.ops = _chunked(gp.post.ops, shape, k)
                break


def _is_tile(v: Value) -> bool:
    return isinstance(v.type, TileType) and len(v.type.shape) == 2 and v.type.shape[1] != 1


def _separable(ops: list[Op]) -> tuple[int, int] | None:
    """The (R, C) of the block's 2-D tiles if it is column-separable, else None."""
    shapes = {tuple(v.type.shape) for op in ops for v in (*op.operands, *op.results) if _is_tile(v)}
    if len(shapes) != 1:
        return None
    shape = shapes.pop()
    for op in ops:
        if op.kind in (OpKind.REDUCE, OpKind.MMA, OpKind.PUT, OpKind.TRANSPOSE, OpKind.SLICE, OpKind.ARANGE):
            if any(_is_tile(v) for v in (*op.operands, *op.results)):
                return None
        if op.kind is OpKind.STORE and (op.attrs.reduce or tuple(op.attrs.tile_shape) != shape):
            return None
        if op.kind is OpKind.GET and any(_is_tile(r) for r in op.results) and len(op.results) != 1:
            return None
    if not any(op.kind is OpKind.STORE for op in ops):
        return None
    return shape


def _chunked(ops: list[Op], shape: tuple[int, int], k: int) -> list[Op]:
    """The block with its tile work repeated over k column chunks (gets first, releases last)."""
    rows, cols = shape
    width = cols // k
    tile_work = {id(op) for op in ops if op.kind in ELEMENTWISE + (OpKind.STORE, OpKind.EXPAND_DIMS)
                 and any(_is_tile(v) for v in (*op.operands, *op.results))}
    head = [op for op in ops if id(op) not in tile_work and op.kind is not OpKind.CONSUMED]
    tail = [op for op in ops if op.kind is OpKind.CONSUMED]
    taken = {id(r) for op in head for r in op.results if _is_tile(r)}      # whole tiles from channels
    out = list(head)
    for j in range(k):
        m: dict[int, Value] = {}
        for op in ops:
            if id(op) not in tile_work:
                continue
            operands = []
            for v in op.operands:
                if id(v) in m:
                    operands.append(m[id(v)])
                elif id(v) in taken or (_is_tile(v) and tuple(v.type.shape) == shape):
                    # a whole tile from a channel, or one the block did not make (a register tile carried out
                    # of the loop, a pre-loop tile): the chunk reads its columns
                    part = Value(TileType((rows, width), v.type.dtype, v.type.space), v.name)
                    out.append(Op(OpKind.SLICE, (v,), (part,), SliceAttrs(1, j * width, width), op.loc))
                    m[id(v)] = part
                    operands.append(part)
                else:
                    operands.append(v)
            if op.kind is OpKind.STORE:
                coords = list(operands[1:-1])
                scale = Value(I32)
                out.append(Op(OpKind.CONST, (), (scale,), ConstAttrs(k), op.loc))
                col = Value(I32)
                out.append(Op(OpKind.SCALAR_BINARY, (coords[-1], scale), (col,), FnAttrs("mul"), op.loc))
                if j:
                    off, shifted = Value(I32), Value(I32)
                    out.append(Op(OpKind.CONST, (), (off,), ConstAttrs(j), op.loc))
                    out.append(Op(OpKind.SCALAR_BINARY, (col, off), (shifted,), FnAttrs("add"), op.loc))
                    col = shifted
                out.append(Op(OpKind.STORE, (operands[0], *coords[:-1], col, operands[-1]), (),
                              StoreAttrs((rows, width), op.attrs.reduce), op.loc))
                continue
            results = tuple(Value(_narrow(r.type, rows, width), r.name) for r in op.results)
            attrs = op.attrs
            if op.kind is OpKind.FULL:
                attrs = type(attrs)((rows, width), attrs.value, attrs.dtype)
            out.append(Op(op.kind, tuple(operands), results, attrs, op.loc, op.pred, op.stage))
            for a, b in zip(op.results, results):
                m[id(a)] = b
    return out + tail


def _narrow(t, rows: int, width: int):
    if isinstance(t, TileType) and len(t.shape) == 2 and t.shape[1] != 1:
        return TileType((rows, width), t.dtype, t.space)
    return t
