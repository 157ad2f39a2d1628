"""Blackwell: elementwise work on a tensor-memory tile that does not fit the registers runs column chunk by chunk.

A four-warp group holds a 128-row tile one row per thread, so FA4's correction at head dim 256 — O·α, O read
from tensor memory and written back — would hold O's 256 columns (256 registers per thread) at once. FA4
rescales O in tensor memory chunk by chunk instead: load some columns (tcgen05.ld), scale them, store them
back (tcgen05.st), next columns. This pass (Barrier IR, after the aref lowering) does that for any group
whose register demand is over setmaxnreg's limit, wherever a block

  * reads a 2-D 32-bit tile `t` from a tensor-memory ring (`slot_read`),
  * computes from it with elementwise ops (binary, unary, comparisons, `where`, casts), whose other operands
    are broadcast along the columns ((R, 1) columns, row vectors, scalars) — the column values,
  * and writes each column value it keeps into a ring slot (`slot_store` of an (R, C) payload: tensor memory,
    or a swizzled shared-memory tile handed to the epilogue warp), nothing else reading them.

Each chunk reads its columns of `t` (a column `slice`: the backend's tcgen05.ld of those columns), computes and
stores them at their columns of the slot (`SlotAttrs.cols`). The synchronisation around it keeps its order
except where the chunks need it changed: the `empty` waits of the written slots (and the index math they
read) move before the first chunk, and the releases and publishes of the span (arrivals, fences) after the
last. That moves a release after a wait only where the wait cannot need the release: the wait is for a slot
item that never blocks (a constant item below the ring's depth: its first pass), or the written slot holds
the read tile's columns (an in-place rewrite: O ← O·α, whose `empty` phase is the release of the previous
item by the MMA that read it, which needs the previous release of the read slot, not this one); anywhere
else the block is left whole and the register rule refuses it.
"""
from __future__ import annotations

from aref.ir import Op, OpKind, SliceAttrs, SlotAttrs, Space, TileType, Value
from aref.ir.ws import GroupProgram, WSKernel
from aref.ops import ELEMENTWISE_KINDS

# per-element register math a chunk may run over (a pipeline select merges whole tiles: not chunked)
ELEMENTWISE = ELEMENTWISE_KINDS - {OpKind.SELECT}
# the synchronisation that follows the chunks (releases, publishes and the fences before them)
AFTER = (OpKind.MBAR_ARRIVE, OpKind.TMEM_STORE_FENCE, OpKind.FENCE_PROXY_ASYNC, OpKind.MMA_COMMIT)
MIN_WIDTH = 16


def chunk_tensor_memory_math(ws: WSKernel) -> None:
    """Rewrite (in place) the blocks of every four-warp group over setmaxnreg's limit (module docstring)."""
    from aref.resources import MAX_REGS, register_demand
    if ws.tmem is None:
        return
    for gp in ws.groups:
        if gp.group.warps != 4 or any(op.kind is OpKind.MMA_ASYNC for op in gp.all_ops()):
            continue
        if register_demand(gp, ws.arch).need <= MAX_REGS:
            continue
        blocks = [(block, block.ops, _spans(block.ops)) for _, block in gp.regions()]
        blocks = [b for b in blocks if b[2]]
        for k in (2, 4, 8):            # the widest chunks that fit (fewest instructions)
            trials = [_rewrite(ws, gp, whole, spans, k) for _, whole, spans in blocks]
            for (block, whole, _), trial in zip(blocks, trials):
                block.ops = whole if trial is None else trial
            if register_demand(gp, ws.arch).need <= MAX_REGS:
                break


def _spans(ops: list[Op]) -> list[tuple[int, set[int], list[int]]]:
    """(index of the read, ids of the column values, indices of the stores) of every chunkable span."""
    users: dict[int, list[int]] = {}
    for i, op in enumerate(ops):
        for v in op.operands:
            users.setdefault(id(v), []).append(i)
    out = []
    for i, op in enumerate(ops):
        t = op.result.type if op.kind is OpKind.SLOT_READ else None
        if t is None or op.operands[0].type.tile.space is not Space.TMEM or len(t.shape) != 2 or t.dtype.bits != 32:
            continue
        shape = tuple(t.shape)
        cols, stores, todo, ok = {id(op.result)}, [], [op.result], True
        while todo and ok:
            v = todo.pop()
            for j in users.get(id(v), []):
                u = ops[j]
                if u.kind is OpKind.SLOT_STORE and u.operands[3] is v:
                    ring = u.operands[0].type.tile
                    ok = tuple(ring.shape) == shape and (ring.space is Space.SMEM or ring.dtype.bits == 32)
                    stores.append(j)
                elif u.kind in ELEMENTWISE and tuple(u.result.type.shape) == shape and u.pred is None \
                        and not any(_wide(x, shape) and id(x) not in cols and x is not v for x in u.operands):
                    if id(u.result) not in cols:
                        cols.add(id(u.result))
                        todo.append(u.result)
                else:
                    ok = False          # a reduction, an MMA, a store to memory, another (R, C) operand, ...
                if not ok:
                    break
        if ok and stores:
            out.append((i, cols, sorted(set(stores))))
    return out


def _wide(v: Value, shape: tuple) -> bool:
    return isinstance(v.type, TileType) and tuple(v.type.shape) == shape


def _rewrite(ws: WSKernel, gp: GroupProgram, ops: list[Op], spans: list[tuple], k: int) -> list[Op] | None:
    """The block with every span over k column chunks; None if a span cannot be (module docstring)."""
    out = list(ops)
    # the last span first, so that the indices of the earlier ones still hold
    for start, cols, stores in sorted(spans, key=lambda s: -s[0]):
        new = _chunk_span(ws, gp, out, start, cols, stores, k)
        if new is None:
            return None
        out = new
    return out


def _chunk_span(ws: WSKernel, gp: GroupProgram, ops: list[Op], start: int, cols: set[int], stores: list[int],
                k: int) -> list[Op] | None:
    read = ops[start]
    rows, ncols = read.result.type.shape
    width = ncols // k
    if ncols % k or width < MIN_WIDTH:
        return None
    end = stores[-1]
    span = ops[start + 1:end + 1]
    work = [op for op in span if any(id(r) in cols for r in op.results)
            or op.kind is OpKind.SLOT_STORE and id(op.operands[3]) in cols]
    work_ids = {id(op) for op in work}
    rest = [op for op in span if id(op) not in work_ids]
    if any(op.kind is OpKind.SLOT_STORE for op in rest) or any(id(v) in cols for op in rest for v in op.operands):
        return None          # another store among the chunks' synchronisation, or a column value read elsewhere
    after = [op for op in rest if op.kind in AFTER]
    before = [op for op in rest if op.kind not in AFTER]
    at = {id(op): i for i, op in enumerate(span)}
    for w in (op for op in before if op.kind is OpKind.MBAR_WAIT):
        for a in after:
            if at[id(a)] < at[id(w)] and not _may_precede(ws, gp, ops, w, a, read):
                return None
    out = ops[:start + 1] + before
    for j in range(k):
        part = Value(TileType((rows, width), read.result.type.dtype, read.result.type.space), read.result.name)
        out.append(Op(OpKind.SLICE, (read.result,), (part,), SliceAttrs(1, j * width, width), read.loc,
                      stage=read.stage))
        m: dict[int, Value] = {id(read.result): part}
        for op in work:
            operands = tuple(m.get(id(v), v) for v in op.operands)
            if op.kind is OpKind.SLOT_STORE:
                a = op.attrs
                out.append(Op(op.kind, operands, (), SlotAttrs(a.channel, a.index, a.tile_shape, (j * width, width)),
                              op.loc, pred=op.pred, stage=op.stage))
                continue
            results = tuple(Value(TileType((rows, width), r.type.dtype, r.type.space), r.name) for r in op.results)
            out.append(Op(op.kind, operands, results, op.attrs, op.loc, pred=op.pred, stage=op.stage))
            m.update({id(r): n for r, n in zip(op.results, results)})
    return out + after + ops[end + 1:]


def _may_precede(ws: WSKernel, gp: GroupProgram, ops: list[Op], wait: Op, arrive: Op, read: Op) -> bool:
    """May `wait` (for a slot the chunks write) run before `arrive`, which came first? Where it never blocks
    (the first pass over a ring outside the loop: a fresh barrier's opposite parity), or where the chunks
    rewrite the read tile in place and `arrive` releases that tile (module docstring)."""
    if wait.attrs.which != "empty":
        return False
    ch = ws.channel(wait.attrs.channel)
    parity = _const_of(ops, wait.operands[2])
    if ch.region != "loop" and ch.producer == gp.group.id and parity == 1 and _first_wait(gp, wait):
        return True
    same = ws.tmem.ring_buffer.get(ch.name) is not None and \
        ws.tmem.ring_buffer.get(ch.name) == ws.tmem.ring_buffer.get(read.attrs.channel)
    return (same and arrive.kind is OpKind.MBAR_ARRIVE and arrive.attrs.which == "empty"
            and arrive.attrs.channel == read.attrs.channel)


def _const_of(ops: list[Op], v: Value):
    op = next((o for o in ops if any(r is v for r in o.results)), None)
    return int(op.attrs.value) if op is not None and op.kind is OpKind.CONST else None


def _first_wait(gp: GroupProgram, wait: Op) -> bool:
    """Is `wait` the group's first wait on its barrier (nothing before it in the group's program order)?"""
    for op in gp.all_ops():
        if op is wait:
            return True
        if op.kind is OpKind.MBAR_WAIT and op.attrs.channel == wait.attrs.channel and op.attrs.which == "empty":
            return False
    return True
