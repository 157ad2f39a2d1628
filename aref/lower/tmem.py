"""Tensor memory (Blackwell): the allocation plan of a barrier-level sm_100a kernel.

An SM has 128 lanes × 512 columns of 32-bit tensor memory (the target's `tmem_lanes`, `tmem_columns`). A
kernel allocates a power of two of columns (32…512: `tmem_min_alloc` up) once, from one warp, and frees it at
the end. Every tile that lives there gets a *buffer*: a range
of columns over the lanes its rows use (a 128-row tile one row per lane; a 64-row tile, tcgen05's M = 64
layout, 16 lanes of each 32-lane sub-partition over the same columns). A 32-bit (R, C) tile takes C
columns, a 16-bit one C / 2 (two elements per column).

Buffers come from liveness, in two steps:

* **In place** (must share): an MMA accumulates into the columns it reads its accumulator from; its result,
  the loop-carried value it becomes, the tensor-memory slot it is published in and the slot it was taken
  from are one buffer. FA4's O is one such buffer: the MMA warp accumulates P·V into it, the correction
  group rescales it in place (tcgen05.ld, multiply, tcgen05.st) between two MMAs.
* **Aliasing** (may share, when lifetimes allow): a tile a group computes from a tile it read out of tensor
  memory, written back for the MMA group, may take the upper columns of the tile it came from — FA4's P
  (16-bit) over S (32-bit). Allowed when the writer's read of the old tile precedes its write (data flow),
  and the MMA group issues the MMA that reads the new tile before the MMA that overwrites it for the next
  item (one thread's tcgen05 MMAs execute in issue order).

`plan_tensor_memory(ws)` returns the plan (and names every MMA's buffer); a plan that does not fit is an
`ArefError` naming the tiles. `tensor_memory_columns(ws)` is the figure the resource model reports.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aref.errors import ArefError
from aref.ir import OpKind, Space, TileType, Value
from aref.ops import VIEWS
from aref.target import target_of
from aref.target.machine import tmem_tile_columns
from aref.ir.unionfind import UnionFind


@dataclass
class TmemBuffer:
    """Columns [col, col + cols) of the lanes a tile's rows use."""

    name: str
    col: int
    cols: int
    tile: TileType
    holds: tuple[str, ...]          # the channels (and values) that live here over time
    alias_of: str | None = None     # written over the top columns of another buffer (P over S)
    depth: int = 1                  # slots of a ring CUDA cores fill (slot s at col + s * cols / depth)

    @property
    def rows(self) -> int:
        return self.tile.shape[0]


@dataclass
class TmemPlan:
    columns: int                    # allocated: a power of two, 32..512
    used: int
    allocator: int                  # group id that allocates and frees
    buffers: list[TmemBuffer] = field(default_factory=list)
    ring_buffer: dict[str, str] = field(default_factory=dict)     # tensor-memory channel -> buffer
    dealloc_barrier: int = 0        # named barrier the groups arrive at when done with tensor memory

    def buffer(self, name: str) -> TmemBuffer:
        return next(b for b in self.buffers if b.name == name)

    def lines(self) -> list[str]:
        out = [f"tmem columns={self.columns} used={self.used} allocated by group {self.allocator}"]
        for b in self.buffers:
            where = f" over {b.alias_of}" if b.alias_of else ""
            slots = f" x{b.depth} slots" if b.depth > 1 else ""
            out.append(f"  tmem {b.name}: columns [{b.col}, {b.col + b.cols}) {b.tile.shape[0]}x{b.tile.shape[1]}"
                       f"x{b.tile.dtype.value}{slots}{where} <- {', '.join(b.holds) or '(its group only)'}")
        return out


def tile_columns(t: TileType, where: str, loc, lanes: int) -> int:
    """32-bit columns a tile takes in tensor memory of `lanes` lanes (tcgen05 writes 64- and 128-row tiles;
    other row counts are planned the same way and refused by the backend, which knows the instruction
    shapes)."""
    if len(t.shape) != 2 or t.shape[0] > lanes:
        raise ArefError(f"{where} is a {t} in tensor memory; it has {lanes} lanes (rows)", loc,
                        hint="use 64- or 128-row tiles for MMA results on sm_100a")
    if t.dtype.bits not in (16, 32):
        raise ArefError(f"{where} is a {t} in tensor memory; it holds 16- and 32-bit elements", loc)
    return tmem_tile_columns(t)


def _tmem_ring(ch) -> bool:
    return any(t.space is Space.TMEM for t in ch.payload)


def plan_tensor_memory(ws) -> TmemPlan | None:
    """The tensor-memory plan of barrier-level kernel `ws` (None if nothing lives there). Sets each
    `mma_async`'s `MmaAttrs.tmem` to its buffer."""
    from aref.ir import MmaAttrs

    target = target_of(ws.arch)
    rings = {id(r): ch for ch in ws.channels if _tmem_ring(ch) for r in ch.rings}
    sets = UnionFind()
    mmas = []
    in_tmem: set[int] = set()
    mma_results: set[int] = set()
    for gp in ws.groups:
        prod = gp.producers()
        for op in gp.all_ops():
            if op.kind is OpKind.MMA_ASYNC:
                mmas.append((gp, op))
                in_tmem.add(id(op.result))
                mma_results.add(id(op.result))
            elif op.kind is OpKind.SLOT_READ and id(op.operands[0]) in rings:
                in_tmem.add(id(op.result))
        links = []                # loop-carried chains and pipeline selects of tensor-memory values
        if gp.loop is not None:
            lp = gp.loop
            links += [tuple(x) for x in zip(lp.inits, lp.carried, lp.yields, lp.results)]
        links += [tuple(op.operands[1:]) + (op.result,) for op in gp.all_ops() if op.kind is OpKind.SELECT]
        changed = True
        while changed:
            changed = False
            for group in links:
                if any(id(v) in in_tmem for v in group):
                    for v in group:
                        if id(v) not in in_tmem and _mma_tile(v, prod):
                            in_tmem.add(id(v))
                            changed = True
        for group in links:
            members = [v for v in group if id(v) in in_tmem]
            for v in members[1:]:
                sets.union(members[0], v)
        for op in gp.all_ops():
            if op.kind is OpKind.MMA_ASYNC:
                sets.find(op.result)
                if len(op.operands) > 2 and id(op.operands[2]) in in_tmem:
                    sets.union(op.result, op.operands[2])
            elif op.kind is OpKind.SLOT_READ and id(op.operands[0]) in rings:
                sets.union(op.operands[0], op.result)
            elif op.kind is OpKind.SLOT_STORE and id(op.operands[0]) in rings:
                sets.find(op.operands[0])
                if id(op.operands[3]) in in_tmem:
                    sets.union(op.operands[0], op.operands[3])
    for gp in ws.groups:                      # tensor-memory values are typed as such from here on
        for op in gp.all_ops():
            for v in op.results:
                if id(v) in in_tmem:
                    v.type = v.type.with_space(Space.TMEM)
        if gp.loop is not None:
            for v in (*gp.loop.carried, *gp.loop.results):
                if id(v) in in_tmem:
                    v.type = v.type.with_space(Space.TMEM)
        for op in gp.all_ops():   # `.T` is a view: it keeps its operand's space (typing_rules.transpose_type)
            if op.kind is OpKind.TRANSPOSE and op.operands[0].type.space is Space.TMEM:
                op.result.type = op.result.type.with_space(Space.TMEM)
    for ch in rings.values():
        for r in ch.rings:
            sets.find(r)
    _share_private(ws, sets, rings)
    classes: dict[object, list] = {}
    for x in list(sets.parent):
        classes.setdefault(sets.find(x), []).append(x)
    if not classes:
        return None
    chan_of = {id(r): ch for ch in rings.values() for r in ch.rings}

    def tile_of(members) -> TileType:
        for m in members:
            if id(m) in chan_of:
                ch = chan_of[id(m)]
                return ch.payload[ch.rings.index(m)]
        return members[0].type

    def name_of(members) -> str:
        named = [m.name for m in members if id(m) not in chan_of and m.name and "." not in m.name]
        if named:
            return min(named, key=len)
        chans = [chan_of[id(m)].name for m in members if id(m) in chan_of]
        return chans[0] if chans else "acc"

    mma_loc = {id(op.result): op.loc for _, op in mmas}
    order = {}
    for gp in ws.groups:
        for op in gp.all_ops():
            for v in (*op.results, *op.operands):
                if v in sets and sets.find(v) not in order:
                    order[sets.find(v)] = len(order)
    buffers: list[TmemBuffer] = []
    taken: set[str] = set()
    root_buffer: dict[object, TmemBuffer] = {}
    for root in sorted(classes, key=lambda r: order.get(r, 1 << 30)):
        members = classes[root]
        t = tile_of(members)
        holds = tuple(dict.fromkeys(chan_of[id(m)].name for m in members if id(m) in chan_of))
        base = name_of(members).replace(".", "_")
        name, i = base, 1
        while name in taken:
            name, i = f"{base}_{i}", i + 1
        taken.add(name)
        # the user's MMA that writes the tile, else the channel that carries it
        loc = next((mma_loc[id(m)] for m in members if id(m) in mma_loc),
                   next((chan_of[id(m)].loc for m in members if id(m) in chan_of), ws.loc))
        depth = max((chan_of[id(m)].depth for m in members if id(m) in chan_of), default=1)
        written_in_place = len({id(m) for m in members if id(m) in chan_of}) > 1 or any(
            id(m) in mma_results for m in members)
        if depth > 1 and written_in_place:
            raise ArefError(f"internal (aref lowering): tensor-memory tile {name} is rewritten in place but its "
                            f"ring has {depth} slots", loc)
        cols = depth * tile_columns(t, f"tile {name}", loc, target.tmem_lanes)
        buf = TmemBuffer(name, 0, cols, t, holds, depth=depth)
        buffers.append(buf)
        root_buffer[root] = buf
    _alias(ws, sets, root_buffer, rings)
    col = 0
    for b in buffers:
        if b.alias_of is None:
            b.col = col
            col += b.cols
    for b in buffers:
        if b.alias_of is not None:
            host = next(x for x in buffers if x.name == b.alias_of)
            b.col = host.col + host.cols - b.cols
    used = col
    if used > target.tmem_columns:
        parts = ", ".join(f"{b.name} ({'x'.join(map(str, b.tile.shape))} {b.tile.dtype.value}) {b.cols}"
                          for b in buffers if b.alias_of is None)
        raise ArefError(f"tensor memory: the tiles of @{ws.name} need {used} columns but an SM has "
                        f"{target.tmem_columns}: "
                        f"{parts}", ws.loc,
                        hint="use smaller tiles (fewer columns per accumulator) or fewer sub-tiles")
    plan = TmemPlan(target.tmem_allocation(used), used, _allocator(ws), buffers)
    for ch in rings.values():
        homes = {root_buffer[sets.find(r)].name for r in ch.rings}
        if len(homes) > 1:
            # the plan, the simulator and the sm_100a templates map a tensor-memory channel to one buffer
            raise ArefError(f"channel '{ch.name}' hands over {len(homes)} tensor-memory tiles in one item; the "
                            f"Blackwell lowering keeps one tensor-memory tile per channel", ch.loc,
                            hint=("put the tiles through separate channels (one put each)" if ch.user else
                                  "the compiler made this channel between warp groups: try the other partitioner "
                                  "(--partition) or keep the tiles' producer and consumer in one group"))
        for r in ch.rings:
            plan.ring_buffer[ch.name] = root_buffer[sets.find(r)].name
    for gp, op in mmas:
        op.attrs = MmaAttrs(root_buffer[sets.find(op.result)].name)
    return plan


def _share_private(ws, sets, rings) -> None:
    """One buffer for a group's own MMA results whose lifetimes do not overlap. A tile no channel hands on
    lives in the group that writes and reads it; the pipeline's prologue (or epilogue) copy of a loop MMA is a
    value of its own, dead before the loop's first write of the same tile (the group reads it with
    tcgen05.ld, waited for, before it issues anything later in program order), so it takes the loop's columns
    instead of a buffer beside them (FA's S on the group that issues its own Q·Kᵀ). Spans are positions in
    the group's program order with the whole loop one position: two tiles live in the loop never share."""
    chan = {id(r) for ch in rings.values() for r in ch.rings}
    classes: dict[object, list] = {}
    for x in list(sets.parent):
        classes.setdefault(sets.find(x), []).append(x)
    private = {root for root, members in classes.items() if not any(id(m) in chan for m in members)}
    for gp in ws.groups:
        span: dict[object, list[int]] = {}
        pos = 0
        for region, block in gp.regions():
            for op in block.ops:
                for v in (*op.operands, *op.results):
                    if v in sets and sets.find(v) in private:
                        lo_hi = span.setdefault(sets.find(v), [pos, pos])
                        lo_hi[0], lo_hi[1] = min(lo_hi[0], pos), max(lo_hi[1], pos)
                if region != "loop":
                    pos += 1
            if region == "loop":
                pos += 1
        free: list[tuple[int, object]] = []          # (end of the last tile in it, its class) per buffer
        for root in sorted(span, key=lambda r: span[r][0]):
            t = classes[root][0].type
            shape = (t.shape, t.dtype) if isinstance(t, TileType) else None
            for i, (end, host) in enumerate(free):
                h = classes[host][0].type
                if end < span[root][0] and shape == (h.shape, h.dtype):
                    sets.union(host, root)
                    free[i] = (span[root][1], host)
                    break
            else:
                free.append((span[root][1], root))


def _mma_tile(v: Value, prod) -> bool:
    """Could `v` be a tensor-memory tile of an MMA chain (an MMA result, a constant fill, a select)?"""
    op = prod.get(id(v))
    return isinstance(v.type, TileType) and len(v.type.shape) == 2 and (
        op is None or op.kind in (OpKind.MMA_ASYNC, OpKind.FULL, OpKind.SELECT, OpKind.SLOT_READ))


def _allocator(ws) -> int:
    """The group that allocates: the first that issues MMAs (FA4's MMA warp allocates and frees)."""
    for gp in ws.groups:
        if any(op.kind is OpKind.MMA_ASYNC for op in gp.all_ops()):
            return gp.group.id
    return ws.groups[-1].group.id


def _alias(ws, sets, root_buffer, rings) -> None:
    """P over S: a ring a CUDA-core group writes with a tile computed from a tensor-memory tile it read (same
    item), which the MMA group reads before its next write of the source, takes the source's top columns."""
    for gp in ws.groups:
        if gp.loop is None or any(op.kind is OpKind.MMA_ASYNC for op in gp.all_ops()):
            continue
        body = gp.loop.body.ops
        prod = {id(r): op for op in body for r in op.results}
        for op in body:
            if op.kind is not OpKind.SLOT_STORE or id(op.operands[0]) not in rings:
                continue
            dst = rings[id(op.operands[0])]
            src = _source_ring(op.operands[3], prod, rings)
            if src is None or src is dst or src.depth != 1 or dst.depth != 1 or dst.region != "loop":
                continue
            a, b = root_buffer[sets.find(src.rings[0])], root_buffer[sets.find(dst.rings[0])]
            if a is b or b.alias_of or a.alias_of or b.cols > a.cols or len(dst.consumers) != 1:
                continue
            if b.holds != (dst.name,):
                continue        # an MMA accumulates on the tile in place and hands it on: it outlives dst's read
            if tuple(src.consumers) != (gp.group.id,):
                continue        # another group still reads S: writing P over it would race with that read
            if dst.consumers != (src.producer,) or not _reads_before_rewrite(ws.groups[src.producer], src, dst):
                continue
            if any(x.alias_of == a.name for x in root_buffer.values()):
                continue
            b.alias_of = a.name


def _source_ring(v: Value, prod, rings, depth: int = 0):
    """The single tensor-memory ring `v` is computed from (through this group's ops), or None."""
    if depth > 64:
        return None
    op = prod.get(id(v))
    if op is None:
        return None
    if op.kind is OpKind.SLOT_READ:
        return rings.get(id(op.operands[0]))
    found = {}
    for x in op.operands:
        if isinstance(x.type, TileType) and len(x.type.shape) == 2:
            ch = _source_ring(x, prod, rings, depth + 1)
            if ch is not None:
                found[ch.name] = ch
    return next(iter(found.values())) if len(found) == 1 else None


def _reads_before_rewrite(mma_gp, src, dst) -> bool:
    """In the MMA group's steady state, the MMA reading item k of `dst` issues before the MMA writing item
    k + 1 of `src` (one step later, or earlier in the same step)."""
    if mma_gp.loop is None:
        return False
    body = mma_gp.loop.body.ops
    pos = {op: i for i, op in enumerate(body)}
    prod = {id(r): op for op in body for r in op.results}

    def reads(op, ring) -> bool:
        def base(v, d=0):
            p = prod.get(id(v))
            if p is None or d > 16:
                return None
            if p.kind is OpKind.SLOT_READ:
                return p.operands[0]
            if p.kind in VIEWS or p.kind is OpKind.SELECT:
                return base(p.operands[-1] if p.kind is OpKind.SELECT else p.operands[0], d + 1)
            return None
        return any(base(v) is ring for v in op.operands)

    readers = [op for op in body if op.kind is OpKind.MMA_ASYNC and reads(op, dst.rings[0])]
    stores = [op for op in body if op.kind is OpKind.SLOT_STORE and op.operands[0] is src.rings[0]]
    writers = []
    for st in stores:
        w = prod.get(id(st.operands[3]))
        if w is not None and w.kind is OpKind.MMA_ASYNC:
            writers.append(w)
    if not readers or not writers:
        return False
    for r in readers:
        for w in writers:
            sr, sw = r.stage or 0, w.stage or 0
            if not (sw + 1 > sr or (sw + 1 == sr and pos[r] < pos[w])):
                return False
    return True


def tensor_memory_columns(ws) -> int:
    """Columns of tensor memory the kernel allocates (0 if none): the figure the resource model counts."""
    plan = getattr(ws, "tmem", None)
    return plan.columns if plan is not None else 0


__all__ = ["TmemPlan", "TmemBuffer", "plan_tensor_memory", "tensor_memory_columns", "tile_columns"]
