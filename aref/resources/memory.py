"""Shared memory and tensor memory of a warp-specialized kernel, and what a TMA descriptor can describe.

Shared memory holds, in this order (the CuTe backend lays its storage struct out exactly so):
  * two mbarriers (full, empty) per slot of every channel (on Blackwell also one per group that waits for its
    MMAs and the tensor-memory address slot: `aref.resources.tensor_core`);
  * every channel's ring: `depth` slots of each payload tile (tensor-memory payloads keep only barriers);
  * a scratch tile per staged register operand of a wgmma (wgmma reads B, a transposed or an fp8 A from
    shared memory only; the group stages it there);
  * an exchange tile per group whose register math crosses threads (cross-warp reductions, vectors read
    in both orientations, transposes of register tiles read by register math);
  * a staging tile per TMA store (registers → shared memory → TMA), unless the store reuses an idle buffer:
    a single-item channel its group has released and nobody else reads, or the staging tile of one of its
    own earlier stores (TMA stores of one group never overlap their staging: each waits for the previous
    bulk read first);
  * on Blackwell, the tile of zeros the tensor core's zero fills read (`aref.resources.tensor_core`).
A 2-D tile of whole 8-row × 16-byte swizzle atoms (`swizzled`) is stored with the widest swizzle its rows take
(128 bytes where they are a multiple of 128 bytes) and starts on a 1024-byte boundary (the swizzle's period);
every other tile — rank 1, or 2-D with rows not a multiple of 8 or a row not a multiple of 16 bytes, such as an
(R, 1) column of per-row scales — is stored plain (row-major, unswizzled) and starts on a 128-byte boundary (a
TMA copy's shared-memory address must be 128-byte aligned). Only swizzled tiles can be MMA operands.

`tma_problem` is the TMA descriptor rule (CUDA driver API, cuTensorMapEncodeTiled): rank ≤ 5, every extent
≥ 1, every global stride but the innermost a multiple of 16 bytes, box extents ≤ 256 and an inner box of a
multiple of 16 bytes. A load or store it refuses is done with ordinary loads / stores instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aref.ir import DType, Op, OpKind, Space, TensorType, TileType
from aref.ops import MMA_KINDS
from aref.resources.layout import exchange_elements
from aref.resources.tensor_core import MMA_BARRIER_BYTES, TMEM_ADDRESS_BYTES, mma_barrier_groups, zero_tile
from aref.target import target_of

MBARRIER_BYTES = 8
SWIZZLE_ALIGN = 1024
TILE_ALIGN = 128
TMA_MAX_RANK, TMA_MAX_BOX, TMA_STRIDE_ALIGN = 5, 256, 16


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def swizzled(t: TileType) -> bool:
    """Is shared tile `t` stored swizzled: a 2-D tile of whole 8-row × 16-byte swizzle atoms? Any other tile is
    stored plain, row-major (a (R, 1) tile holds the same bytes as an (R,) vector). wgmma / tcgen05 operands and
    the epilogue's 2-D staging tiles are swizzled."""
    return len(t.shape) == 2 and t.shape[0] % 8 == 0 and (t.shape[1] * t.dtype.bits) % 128 == 0


def tile_align(t: TileType) -> int:
    """Where a shared tile may start: swizzled tiles on their 1024-byte period, plain ones on 128 bytes."""
    return SWIZZLE_ALIGN if swizzled(t) else TILE_ALIGN


def tile_bytes(t: TileType, depth: int = 1) -> int:
    """Bytes `depth` copies of shared tile `t` take, padded to the next tile's alignment."""
    return _align(t.nbytes * depth, tile_align(t))


# ------------------------------------------------------------------------------------------------- TMA
def tma_problem(shape: tuple[int, ...], dtype: DType, box: tuple[int, ...]) -> str | None:
    """Why boxes `box` (the trailing dims) of a row-major tensor `shape` cannot be a TMA copy; None if they can."""
    esize = dtype.nbytes
    if len(shape) > TMA_MAX_RANK:
        return f"it has rank {len(shape)} (TMA takes at most {TMA_MAX_RANK})"
    if any(s < 1 for s in shape):
        return "it has no elements"
    stride = esize
    for d in reversed(range(len(shape) - 1)):
        stride *= shape[d + 1]
        if stride % TMA_STRIDE_ALIGN:
            return (f"its dim {d} has a stride of {stride} bytes ({shape[d + 1]} × {esize} B rows), not a multiple of "
                    f"{TMA_STRIDE_ALIGN}")
    if any(b > TMA_MAX_BOX for b in box):
        return f"the box {box} has an extent over {TMA_MAX_BOX}"
    if box[-1] * esize % TMA_STRIDE_ALIGN:
        return f"the box's inner extent is {box[-1] * esize} bytes, not a multiple of {TMA_STRIDE_ALIGN}"
    return None


# ------------------------------------------------------------------------------------------ shared memory
@dataclass
class SmemItem:
    """One shared-memory buffer: `depth` copies of `tile` (or raw `size` bytes), aligned to `align`."""

    kind: str                    # "barriers" | "ring" | "scratch" | "staging"
    key: tuple                   # ("ring", channel, index) / ("scratch", group, key) / ("staging", id(store op))
    what: str                    # for messages
    tile: TileType | None = None
    depth: int = 1
    size: int = 0
    alias_of: tuple | None = None     # a staging tile placed in this other buffer (no bytes of its own)
    offset: int = 0                   # byte offset inside `alias_of`

    @property
    def align(self) -> int:
        return 8 if self.tile is None else tile_align(self.tile)

    @property
    def nbytes(self) -> int:
        if self.alias_of is not None:
            return 0
        return self.size if self.tile is None else tile_bytes(self.tile, self.depth)


@dataclass
class SmemPlan:
    """Every buffer in layout order, and the bytes the storage struct takes (what the launch asks for)."""

    items: list[SmemItem]
    total: int
    limit: int
    by_key: dict = field(default_factory=dict)

    def item(self, key: tuple) -> SmemItem:
        return self.by_key[key]

    def problem(self) -> str | None:
        if self.total <= self.limit:
            return None
        ring_items = [i for i in self.items if i.kind == "ring"]
        rings = ", ".join(f"{i.what}: {i.depth}×{i.tile.nbytes} B" for i in ring_items[:8])
        if len(ring_items) > 8:
            rest = ring_items[8:]
            rings += f" and {len(rest)} more: {sum(i.nbytes for i in rest)} B"
        stage = sum(i.nbytes for i in self.items if i.kind == "staging")
        scratch = sum(i.nbytes for i in self.items if i.kind == "scratch")
        return (f"shared memory {self.total} B exceeds the {self.limit} B per-CTA limit (rings {rings}; store "
                f"staging {stage} B" + (f"; staged-operand scratch {scratch} B" if scratch else "") + ")")


def unrolled_rings(plan: SmemPlan, ws):
    """(the Python `for` loop, rings, bytes) of the Python loop whose unrolled trips hold the most ring bytes,
    when those rings alone are more than the plan's excess over the limit (without that loop's copies the
    kernel would fit); else None. A loop's rings are those of the tiles loaded in it (`SrcInfo.python_loop`)."""
    loc_of = {ch.name: ch.loc for ch in ws.channels}
    by_loop: dict = {}
    for item in plan.items:
        loop = loc_of.get(item.key[1]).python_loop if item.kind == "ring" and item.key[1] in loc_of else None
        if loop is not None:
            n, nbytes = by_loop.get(loop, (0, 0))
            by_loop[loop] = (n + 1, nbytes + item.nbytes)
    if not by_loop:
        return None
    loop, (n, nbytes) = max(by_loop.items(), key=lambda kv: kv[1][1])
    return (loop, n, nbytes) if n > 1 and nbytes >= plan.total - plan.limit else None


def layout_bytes(items: list[SmemItem]) -> int:
    """Bytes of a storage struct holding `items` in order, each at its alignment, plus the allocator's slack
    for aligning the struct itself."""
    off = 0
    for it in items:
        if it.nbytes:
            off = _align(off, it.align) + it.nbytes
    return off + SWIZZLE_ALIGN


def smem_plan(ws, reuse: bool = True) -> SmemPlan:
    """The shared memory of barrier-level (or pipelined) kernel `ws`. A store stages through shared memory
    when TMA can describe its box (`tma_problem`). `reuse=False` gives every staging tile its own storage
    (a persistent CTA's next tile reloads the rings a store would reuse)."""
    items: list[SmemItem] = []
    depth_sum = sum(ch.depth for ch in ws.channels)
    barrier_bytes = 2 * MBARRIER_BYTES * depth_sum
    zeros = None
    target = target_of(ws.arch)
    if target.has_tensor_memory:
        # the tcgen05 tensor core: its MMA barriers, the tensor-memory address slot and the tile of zeros its
        # zero fills read, as the Blackwell backend lays them out
        barrier_bytes += MMA_BARRIER_BYTES * len(mma_barrier_groups(ws)) + TMEM_ADDRESS_BYTES
        tile = zero_tile(ws)
        if tile is not None:
            zeros = SmemItem("zero", ("zero",), "zeros of the tensor core's zero fills", tile)
    items.append(SmemItem("barriers", ("barriers",), "mbarriers", size=barrier_bytes))
    rings = []
    for ch in ws.channels:
        for j, t in enumerate(ch.payload):
            if t.space is Space.TMEM:
                continue
            rings.append(SmemItem("ring", ("ring", ch.name, j), ch.name, t, ch.depth))
    scratch = []
    for gi, gp in enumerate(ws.groups):
        tiles = scratch_tiles(gp)
        for slot in dict.fromkeys(tiles.values()):
            scratch.append(SmemItem("scratch", ("scratch", gi, slot), f"{gp.group.name}'s staged MMA operand",
                                    TileType(slot[1], slot[2], Space.SMEM)))
    for gi, gp in enumerate(ws.groups):
        n = exchange_elements(gp) if gp.group.role != "tma_producer" else 0
        if n:       # cross-warp reductions and layout changes of register values
            scratch.append(SmemItem("scratch", ("exchange", gi), f"{gp.group.name}'s exchange tile",
                                    TileType((n,), DType.float32, Space.SMEM)))
    staging = []
    for gp in ws.groups:
        for op in gp.all_ops():
            # on Blackwell a tile read from a ring slot is TMA-stored straight from that slot (no staging)
            direct = target.has_tensor_memory and op.kind is OpKind.STORE and op.operands[-1].type.space is Space.SMEM
            if op.kind is OpKind.STORE and store_tma_problem(op) is None and not direct:
                staging.append(SmemItem("staging", ("staging", id(op)), f"staging of {gp.group.name}'s store to "
                                        f"{_tensor_name(ws, op)}", staging_tile(op)))
    if reuse:
        _place_staging(ws, rings, staging)
    # 1024-aligned tiles first, then the 128-aligned ones: no padding between them
    buffers = sorted(rings + scratch + staging + ([zeros] if zeros else []), key=lambda i: i.align != SWIZZLE_ALIGN)
    items += buffers
    plan = SmemPlan(items, layout_bytes(items), target.smem_per_cta)
    plan.by_key = {i.key: i for i in items}
    return plan


def staging_tile(op: Op) -> TileType:
    """The shared-memory tile a TMA store stages its value in."""
    v = op.operands[-1].type
    return TileType(tuple(v.shape), v.dtype, Space.SMEM)


def store_tma_problem(op: Op) -> str | None:
    t = op.operands[0].type
    return tma_problem(tuple(t.shape), t.dtype, tuple(op.attrs.tile_shape))


def load_tma_problem(op: Op) -> str | None:
    """For a LOAD or TMA_LOAD op."""
    t = op.operands[0].type
    return tma_problem(tuple(t.shape), t.dtype, tuple(op.attrs.tile_shape))


def _tensor_name(ws, op: Op) -> str:
    return next((p.name for p in ws.params if p.value is op.operands[0]), "a tensor")


def _place_staging(ws, rings: list[SmemItem], staging: list[SmemItem]) -> None:
    """Let a store's staging tile reuse an idle buffer (see the module docstring)."""
    by_key = {s.key: s for s in staging}
    taken: set[tuple] = set()
    for gp in ws.groups:
        released: set[str] = set()
        own: list[SmemItem] = []                # this group's staging tiles of stores already issued
        first: dict[tuple, SmemItem] = {}       # one user store's pipeline copies share one staging tile
        packed: dict[tuple, int] = {}           # post-loop bytes placed in an earlier staging tile
        for op in gp.all_ops():
            if op.kind is OpKind.MBAR_ARRIVE and op.attrs.which == "empty":
                released.add(op.attrs.channel)
            if op.kind is not OpKind.STORE or ("staging", id(op)) not in by_key:
                continue
            stage = by_key[("staging", id(op))]
            same = (id(op.operands[0]), tuple(op.attrs.tile_shape), op.attrs.reduce, stage.tile, op.loc)
            if same in first:
                host = first[same]
                stage.alias_of, stage.offset = (host.alias_of, host.offset) if host.alias_of else (host.key, 0)
                continue
            first[same] = stage
            need = stage.tile.nbytes
            if not swizzled(stage.tile):
                continue                        # swizzled 2-D staging tiles only reuse swizzled buffers
            placed = False
            for ring in rings:
                ch = ws.channel(ring.key[1])
                if (ch.region == "loop" or ch.consumers != (gp.group.id,) or ch.name not in released
                        or ring.key in taken or not swizzled(ring.tile) or ring.nbytes < need):
                    continue
                stage.alias_of, placed = ring.key, True
                taken.add(ring.key)
                break
            if not placed and _in_post(gp, op):
                # after the loop, an earlier store's staging tile of this group is idle once its TMA store has
                # read it; pack the post-loop stores into it
                for host in own:
                    if host.alias_of is not None or not swizzled(host.tile):
                        continue
                    used = packed.get(host.key, 0)
                    if used + need <= host.nbytes:
                        stage.alias_of, stage.offset = host.key, used
                        packed[host.key] = used + _align(need, SWIZZLE_ALIGN)
                        placed = True
                        break
            own.append(stage)


def _in_post(gp, op: Op) -> bool:
    return any(o is op for o in gp.post.ops)


# ------------------------------------------------------------------------------- staged register operands
# wgmma reads B (and a transposed or fp8 A) from shared memory only: such a register operand is written
# row-major to a scratch tile by its group and read back K-major as stored or MN-major through a transposed
# view. A 16-bit A used as stored is read from registers (the RS form) and needs no scratch tile.
def is_transpose(v, prod) -> bool:
    """Is `v` a transpose (through casts and pipeline selects)?"""
    op = prod.get(id(v))
    while op is not None and op.kind in (OpKind.CAST, OpKind.SELECT):
        op = prod.get(id(op.operands[0 if op.kind is OpKind.CAST else 1]))
    return op is not None and op.kind is OpKind.TRANSPOSE


def is_register_transpose(v, prod) -> bool:
    """Is MMA operand `v` a transpose of a register tile (through casts and pipeline selects)?"""
    return v.type.space is not Space.SMEM and is_transpose(v, prod)


def register_a(v, prod) -> bool:
    """A 16-bit register tile used as stored: the A operand of an RS wgmma (no staging)."""
    return v.type.space is not Space.SMEM and v.type.dtype.bits == 16 and not is_transpose(v, prod)


def staged_operands(op: Op, prod) -> list[tuple]:
    """The operands (value, "A"/"B") of MMA `op` that its group stages through a scratch tile."""
    return [(v, which) for v, which in ((op.operands[0], "A"), (op.operands[1], "B"))
            if v.type.space is not Space.SMEM and not (which == "A" and register_a(v, prod))]


def staged_source(v, prod) -> tuple:
    """The register tile a staged wgmma operand is written from, row-major, and whether the operand is its
    transpose (then the wgmma reads the scratch tile through a transposed, MN-major view)."""
    op = prod.get(id(v))
    while op is not None and op.kind in (OpKind.CAST, OpKind.SELECT) and is_transpose(v, prod):
        op = prod.get(id(op.operands[0 if op.kind is OpKind.CAST else 1]))
    if op is not None and op.kind is OpKind.TRANSPOSE:
        return op.operands[0], True
    return v, False


def scratch_key(gp, v, prod) -> tuple:
    """Which shared scratch tile holds the staged register operand `v`. One loop-carried state shares one
    tile: its init, carried value, yield and result (and casts of them: `S.to(f16)` staged in the prologue
    and in every iteration); so do tiles equal up to casts and transposition (`ds.to(f16)` written twice)."""
    lp = gp.loop
    slot: dict[int, int] = {}
    if lp is not None:
        for i, vals in enumerate(zip(lp.inits, lp.carried, lp.yields, lp.results)):
            for x in vals:
                slot[id(x)] = i
        if id(v) in slot and id(v) not in {id(y) for y in lp.yields} | {id(x) for x in lp.inits}:
            return ("carried", slot[id(v)])

    def state(x) -> tuple:
        return ("carried", slot[id(x)]) if id(x) in slot else ("value", id(x))

    src = staged_source(v, prod)[0]
    op = prod.get(id(src))
    if op is not None and op.kind is OpKind.CAST:
        return ("cast",) + state(op.operands[0]) + (op.attrs.dtype,)
    return state(src)


def scratch_tiles(gp) -> dict[tuple, tuple]:
    """Which scratch tile each staged register operand of group `gp` uses: {`scratch_key` → slot}. The
    pipeline's prologue retires all its wgmmas before the steady state starts, so the steady state reuses the
    prologue's tiles (a prologue's Pᵀ and the loop's share one); regions after the loop take fresh ones (the
    loop's last wgmmas may still read its tiles), and loop-carried ones keep their own throughout."""
    prod = gp.producers()
    out: dict[tuple, tuple] = {}
    used: dict[tuple, int] = {}
    high: dict[tuple, int] = {}
    for region, block in gp.regions():
        used = {} if region == "loop" else dict(high)
        for op in block.ops:
            if op.kind not in MMA_KINDS:
                continue
            for v, _ in staged_operands(op, prod):
                key = scratch_key(gp, v, prod)
                if key in out:
                    continue
                t = staged_source(v, prod)[0].type
                if key[0] == "carried":
                    out[key] = (key, tuple(t.shape), t.dtype)
                    continue
                n = used.get((t.shape, t.dtype), 0)
                used[(t.shape, t.dtype)] = n + 1
                high[(t.shape, t.dtype)] = max(high.get((t.shape, t.dtype), 0), n + 1)
                out[key] = (("tile", n), tuple(t.shape), t.dtype)
    return out


def staged_reads(gp) -> set[int]:
    """MMAs (ids) of group `gp` whose A operand is a 16-bit register tile an earlier MMA of the same region
    staged (read transposed, say): it is in a scratch tile already, so they read it there as stored (K-major)
    — as FA3 reads dS from shared memory for both dK and dQ — and the register copy is free once staged."""
    prod = gp.producers()
    out: set[int] = set()
    for _, block in gp.regions():
        staged: set[tuple] = set()
        for op in block.ops:
            if op.kind not in MMA_KINDS:
                continue
            a = op.operands[0]
            if register_a(a, prod) and scratch_key(gp, a, prod) in staged:
                out.add(id(op))
            for v, _ in staged_operands(op, prod):
                key = scratch_key(gp, v, prod)
                if key[0] != "carried":
                    staged.add(key)
    return out


# ----------------------------------------------------------------------------------------- tensor memory
def tmem_columns(ws) -> int:
    """32-bit tensor-memory columns the kernel's tensor-memory rings take: a tile of R rows and C bytes per row
    spans ceil(R / 128) blocks of C / 4 columns (128 lanes per SM). The hook the sm_100a side extends with
    its own allocations (accumulators the MMA warp keeps in tensor memory)."""
    total = 0
    for ch in ws.channels:
        for t in ch.payload:
            if t.space is Space.TMEM:
                lanes = target_of(ws.arch).tmem_lanes
                rows = t.shape[0] if len(t.shape) > 1 else 1
                row_bytes = t.nbytes // rows
                total += ch.depth * -(-rows // lanes) * -(-row_bytes // 4)
    return total


def resident_tiles_bytes(kernel) -> int:
    """Shared memory a Tile IR kernel keeps outside its loop's streaming rings: tiles loaded before the loop and
    a staging tile per TMA store, where a store after the loop may stage in a tile loaded before it (as
    `smem_plan` places it once the kernel is partitioned). The optimal partitioner's solver budgets the loop's
    rings within the rest."""
    out = sum(tile_bytes(op.result.type) for op in kernel.pre.ops if op.kind is OpKind.LOAD)
    return out + sum(need for _, need in resident_staging(kernel))


def resident_staging(kernel) -> list[tuple[Op, int]]:
    """The TMA stores of a Tile IR kernel whose staging tiles take shared memory of their own, with their bytes
    (a store after the loop stages in a tile loaded before it where one is large enough)."""
    return [(op, need) for op, need, host in staging_hosts(kernel) if host is None]


def staging_hosts(kernel) -> list[tuple[Op, int, Op | None]]:
    """Every TMA store of a Tile IR kernel with its staging bytes and the load before the loop whose tile may
    hold its staging (None: none is large enough, or the store is in the loop). Each such tile hosts one
    store after the loop, the smallest that fits, the stores in program order. Once partitioned
    (`smem_plan`), the tile holds it only where the store's group alone reads that tile: the optimal
    partitioner states that condition to its solver (`partition.streams.add_post_staging`)."""
    hosts = sorted(((tile_bytes(op.result.type), i, op) for i, op in enumerate(kernel.pre.ops)
                    if op.kind is OpKind.LOAD and swizzled(op.result.type)), key=lambda h: h[:2])
    out = []
    for op in kernel.all_ops():
        if op.kind is OpKind.STORE and isinstance(op.operands[0].type, TensorType) and store_tma_problem(op) is None:
            need = tile_bytes(staging_tile(op))
            host = None
            if op in kernel.post.ops and swizzled(staging_tile(op)):
                fit = next((h for h in hosts if h[0] >= need), None)
                if fit is not None:
                    hosts.remove(fit)
                    host = fit[2]
            out.append((op, need, host))
    return out


def packing_hosts(kernel) -> dict[Op, list[Op]]:
    """For each store after the loop that `staging_hosts` gives a tile loaded before the loop: the TMA stores
    in the loop whose staging tile may hold its staging instead, where the two run in one group (`smem_plan`
    packs a group's post-loop stores into its earlier staging tiles). Each loop store's bytes are shared out
    in program order among the post-loop stores listed for it, whichever partition runs them, so no two
    rely on the same bytes."""
    plan = staging_hosts(kernel)
    body = kernel.loop.body.ops if kernel.loop is not None else []
    loop = [(op, need, 0) for op, need, _ in plan if op in body and swizzled(staging_tile(op))]
    used = {id(op): 0 for op, _, _ in loop}
    out: dict[Op, list[Op]] = {}
    for op, need, host in plan:
        if host is None:
            continue
        for store, room, _ in loop:
            if used[id(store)] + need <= room:
                used[id(store)] += _align(need, SWIZZLE_ALIGN)
                out.setdefault(op, []).append(store)
    return out
