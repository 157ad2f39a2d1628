"""Where a tile's shape was set in the user's program, read off the Barrier IR: for errors about shapes the
backend cannot emit (an MMA that does not tile into tensor-core instructions), the lines to change beside the
line that fails.

A tile read from a ring slot came from the TMA copy (or the register tile) its producer group wrote into that
ring; views, row slices of cooperative consumers and casts keep the shape's origin; anything else (a
computed tile, a constant one) set it at its own line.
"""
from __future__ import annotations

import re

from aref.errors import SrcInfo
from aref.ir import Op, OpKind, TileType, Value

_THROUGH = (OpKind.TRANSPOSE, OpKind.SLICE, OpKind.CAST, OpKind.EXPAND_DIMS)


def producers(ws) -> dict[int, Op]:
    """id(value) -> the op that defines it, over every warp group of `ws`."""
    return {id(r): op for gp in ws.groups for op in gp.all_ops() for r in op.results}


def _ring_writer(ws, read: Op) -> Op | None:
    """The op that writes the ring slot a `slot_read` reads: a TMA copy, or a register tile's `slot_store`."""
    for gp in ws.groups:
        for op in gp.all_ops():
            if op.kind in (OpKind.TMA_LOAD, OpKind.SLOT_STORE) and getattr(op.attrs, "channel", None) == \
                    read.attrs.channel and op.attrs.index == read.attrs.index:
                return op
    return None


def shape_origin(ws, v: Value, prod: dict[int, Op] | None = None) -> Op | None:
    """The op whose line set the shape of tile `v` (a TMA load with its tile shape, or the op that made it)."""
    prod = producers(ws) if prod is None else prod
    for _ in range(32):
        op = prod.get(id(v))
        if op is None:
            return None
        if op.kind in _THROUGH:
            v = op.operands[0]
        elif op.kind is OpKind.SLOT_READ:
            writer = _ring_writer(ws, op)
            if writer is None or writer.kind is OpKind.TMA_LOAD:
                return writer
            v = next((x for x in writer.operands if isinstance(x.type, TileType)), None)
            if v is None:
                return writer
        else:
            return op
    return None


def _source_text(loc: SrcInfo) -> str:
    """The text of the call at `loc` (its columns on its line), or the whole line."""
    import linecache
    line = linecache.getline(loc.file, loc.line) if loc.line > 0 else ""
    return line[loc.col:loc.col_end] if loc.col_end > loc.col else line


def mma_shape_error(ws, op: Op, unit: str, broken: list[tuple[int, str, str]]):
    """The `BackendError` of an MMA `op` whose shape does not tile into `unit` instructions. `broken`: one
    (extent, operands, why) per rule it breaks, `operands` the operands ("a", "b" or "ab") that carry the
    extent. The notes show where the operands' shapes are set; the hint names the compile-time constants
    with the offending values that appear where those operands' shapes are set."""
    from aref.backend.cute.errors import BackendError
    m, k = op.operands[0].type.shape
    n = op.operands[1].type.shape[1]
    err = BackendError(f"MMA of shape {m}×{n}×{k} (M×N×K) does not tile into {unit} instructions: "
                       + "; ".join(why for _, _, why in broken), op.loc)
    if ws is None:
        return err.noting(hint="change the tile sizes of the MMA's operands")
    prod = producers(ws)
    notes, texts = [], {}
    for name, v in zip("ab", op.operands):
        origin = shape_origin(ws, v, prod)
        if origin is None or origin.loc.line <= 0:
            continue
        texts[name] = _source_text(origin.loc)
        shape = "×".join(map(str, v.type.shape))
        if origin.kind is OpKind.TMA_LOAD:
            tile = "×".join(map(str, origin.attrs.tile_shape))
            notes.append((f"{name} ({shape}) is a tile loaded here with tile shape {tile}", origin.loc))
        else:
            notes.append((f"{name} ({shape}) gets its shape here", origin.loc))
    names = []
    for extent, operands, _ in broken:
        for const, value in (ws.constexprs or {}).items():
            if value == extent and not isinstance(value, bool) and const not in names and any(
                    re.search(rf"\b{re.escape(const)}\b", texts.get(x, "")) for x in operands):
                names.append(const)
    where = ", ".join(f"{c} = {ws.constexprs[c]}" for c in names)
    return err.noting(*notes, hint="change the tile sizes where they are set" + (f" ({where})" if where else "")
                      + (": see the notes" if notes else ""))
