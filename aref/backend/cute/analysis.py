"""What the Hopper templates need to know about a Barrier IR kernel, and what they cannot express yet.

`plan_kernel(ws)` reads a `WSKernel` at the barrier level and returns a `KernelPlan`: each warp group's role
(found from what its ops do, never from its name), the shared-memory buffers of every channel and output
staging tile (where they live and which idle buffer a staging tile reuses is the resource model's
`aref.resources.memory.smem_plan`), the TMA atoms — or, for boxes TMA cannot describe (`tma_problem`),
ordinary bounds-checked loads and stores — the wgmma configurations and the named-barrier ids. Everything the
templates cannot honour is rejected here with a `BackendError` naming the construct and the user's source
line, so code generation never produces a kernel that silently means something else.

Layout conventions (the generated code relies on them):
  * a 2-D shared tile of whole 8-row × 16-byte swizzle atoms (`aref.resources.memory.swizzled`) is stored
    row-major with the widest swizzle its rows take (`make_smem_layout_a` of a (rows, 1, cols) tile);
    operands that read it transposed get a composed MN-major view. Any other tile (rank 1; an (R, 1) column of
    per-row scales, a (1, 1) scalar, rows not a multiple of 8 or 16 bytes) is stored plain row-major: filled
    by TMA without swizzle or by the load warp's ordinary loads, read by register math, never an MMA operand;
  * a global tensor of rank r whose last t dims are tiled is given to CuTe with its t tiled modes first
    and its leading (indexed) modes after them, so TMA atoms tile exactly the boxes of the Barrier IR;
  * a 2-D register tile (R, C) lives in the accumulator layout of a wgmma with N = C (`layout_mma`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aref.backend.cute.errors import BackendError
from aref.backend.cute.roles import classify
from aref.backend.cute import overlap
from aref.resources.layout import exchange_elements
from aref.resources.tensor_core import loop_trip_value
from aref.backend.cute.operands import (MmaConfig, SmemOperand, check_operand_layouts, is_transpose,  # noqa: F401
                                        mma_config,
                                        producers_of, register_a, scratch_key, smem_operand, staged_source)
from aref.errors import SrcInfo
from aref.ir import DType, Op, OpKind, Space, TensorType, TileType, Value
from aref.resources.memory import (SmemItem, SmemPlan, scratch_tiles, smem_plan, staged_operands, staged_reads,
                                   store_tma_problem, tile_align, tma_problem)
from aref.ir.ws import Channel, GroupProgram, WSKernel
from aref.target import target_of

CUTLASS_DTYPE = {DType.float16: "Float16", DType.bfloat16: "BFloat16", DType.float8_e4m3: "Float8E4M3FN",
                 DType.float8_e5m2: "Float8E5M2", DType.float32: "Float32", DType.int32: "Int32"}


def ident(name: str) -> str:
    """A Python identifier from an IR name (`load1.x` → `load1_x`)."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_") or "v"
    return out if not out[0].isdigit() else "v" + out


# ------------------------------------------------------------------------------------------- plan types
@dataclass
class TensorPlan:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    tiled: int = 0               # trailing dims tiled by boxes (0: not accessed)
    tma: bool = False            # some access is a TMA copy (the launch then needs a 16-byte aligned tensor)

    @property
    def cute_shape(self) -> tuple[int, ...]:
        """Tiled modes first, then the leading (batch) modes: how the kernel sees the tensor."""
        lead = len(self.shape) - self.tiled
        return tuple(self.shape[lead:]) + tuple(self.shape[:lead])

    @property
    def stride_order(self) -> tuple[int, ...]:
        """CuTe stride order of `cute_shape` for a row-major torch tensor (0 = fastest)."""
        rank = len(self.shape)
        lead = rank - self.tiled
        order_of_dim = {d: rank - 1 - d for d in range(rank)}       # row-major: last dim fastest
        dims = list(range(lead, rank)) + list(range(lead))
        return tuple(order_of_dim[d] for d in dims)

    @property
    def align(self) -> int:
        """The alignment the kernel assumes of the tensor's start (TMA descriptors need 16 bytes)."""
        return 16 if self.tma else self.dtype.nbytes

    @property
    def empty(self) -> bool:
        """No elements: every box of it is out of bounds (loads give zeros, stores drop everything), so the
        kernel does not take it at all (CuTe has no empty layouts)."""
        return any(s == 0 for s in self.shape)


@dataclass
class BufferPlan:
    """A shared-memory ring of `depth` tiles: one payload of a channel, a store's staging tile or a scratch
    tile; where it lives (and whether it reuses another buffer) is the resource model's `item`."""

    name: str                    # storage field and tensor variable
    tile: TileType
    depth: int
    purpose: str
    item: SmemItem | None = None

    @property
    def nbytes(self) -> int:
        return self.item.nbytes if self.item is not None else self.tile.nbytes * self.depth

    @property
    def align(self) -> int:
        return self.item.align if self.item is not None else tile_align(self.tile)   # sm_100a: no SmemItem

    @property
    def layout(self) -> str:
        return f"{self.name}_layout"


@dataclass
class ChannelPlan:
    ch: Channel
    name: str
    buffers: list[BufferPlan]
    cuda_core_readers: set[int] = field(default_factory=set)   # consumer groups reading slots with CUDA cores


@dataclass(frozen=True)
class TmaPlan:
    """One TMA atom: `tensor` boxes of `box` into shared tiles of `buffer`'s layout (load or store)."""

    name: str
    tensor: str
    box: tuple[int, ...]
    buffer: str
    store: bool = False
    reduce: str | None = None


@dataclass
class GroupPlan:
    gp: GroupProgram
    index: int
    role: str                    # "tma_producer" | "mma_consumer" | "compute"
    description: str
    group_barrier: int = 0       # named barrier id of this warp group alone (stores, CUDA-core releases)


@dataclass
class KernelPlan:
    ws: WSKernel
    tensors: list[TensorPlan]
    channels: list[ChannelPlan]
    staging: dict[int, BufferPlan]            # id(store op) -> staging buffer (TMA stores)
    tmas: list[TmaPlan]
    mmas: list[MmaConfig]
    layout_n: dict[int, int]                  # C extent -> index into mmas used for register layouts
    groups: list[GroupPlan]
    smem_bytes: int
    smem: SmemPlan | None = None
    copies: dict[tuple, str] = field(default_factory=dict)   # (tensor, box) loaded without TMA -> why
    direct: dict[int, str] = field(default_factory=dict)     # id(store op) stored from registers -> why
    scratch: dict[tuple, BufferPlan] = field(default_factory=dict)   # (group, value key) -> transposed operand tile
    persistent: bool = False                 # one CTA per SM walking the tiles (static round-robin scheduler)
    ctas: int = 0                            # CTAs of a persistent launch
    raster: int = 0                          # tile order: groups of this many axis-0 rows (aref.backend.tile_order)
    items_per_tile: dict[str, object] = field(default_factory=dict)  # channel -> items one tile puts
    overlap: object | None = None            # epilogue overlap: the second consumer copy (`overlap.OverlapPlan`)
    cluster: object | None = None            # TMA multicast over a 2-CTA cluster (`cluster.ClusterPlan`)

    @property
    def threads(self) -> int:        # the IR's groups and, with epilogue overlap, the consumer's second copy
        return self.ws.total_threads + (128 if self.overlap is not None else 0)

    @property
    def tiles(self) -> int:
        n = 1
        for g in self.ws.grid:
            n *= g
        return n

    def tensor(self, name: str) -> TensorPlan:
        return next(t for t in self.tensors if t.name == name)

    def tensor_of(self, v: Value) -> TensorPlan:
        """The plan of the kernel parameter `v`."""
        return next(t for p, t in zip((p for p in self.ws.params if isinstance(p.value.type, TensorType)),
                                      self.tensors) if p.value is v)

    def channel(self, name: str) -> ChannelPlan:
        return next(c for c in self.channels if c.ch.name == name)

    def buffers(self) -> list[BufferPlan]:
        """Every shared buffer with storage of its own, in the resource model's layout order."""
        by_key = {}
        for c in self.channels:
            for b in c.buffers:
                by_key[b.item.key] = b
        for b in list(self.scratch.values()) + list(self.staging.values()):
            by_key[b.item.key] = b
        return [by_key[i.key] for i in self.smem.items if i.key in by_key and i.alias_of is None]

    def host_of(self, b: BufferPlan) -> BufferPlan | None:
        """The buffer whose storage `b` reuses (None: its own)."""
        if b.item is None or b.item.alias_of is None:
            return None
        return next(x for x in self.buffers() if x.item.key == b.item.alias_of)

    def staging_by_name(self, name: str) -> BufferPlan:
        return next(b for b in self.staging.values() if b.name == name)

    def aliased(self) -> list[BufferPlan]:
        return [b for b in self.staging.values() if self.host_of(b) is not None]

    def buffer(self, name: str) -> BufferPlan:
        for c in self.channels:
            for b in c.buffers:
                if b.name == name:
                    return b
        for b in list(self.scratch.values()) + list(self.staging.values()):
            if b.name == name:
                return b
        raise KeyError(name)

    def tma(self, tensor: str, box, buffer: str, store=False, reduce=None) -> TmaPlan:
        if store:
            return next(t for t in self.tmas if t.store and (t.tensor, t.box, t.reduce) == (tensor, tuple(box), reduce))
        return next(t for t in self.tmas if not t.store and (t.tensor, t.box) == (tensor, tuple(box)))


# ------------------------------------------------------------------------------------------------ plan
def plan_channel_buffers(ws: WSKernel, channels: list[ChannelPlan], by_value: dict, skip=lambda ch: False,
                         smem: SmemPlan | None = None) -> None:
    """The shared-memory buffers of every channel's payloads (but those `skip` says live elsewhere), named after
    the tensor a TMA payload comes from; a tile must be rank 1 or 2 (2-D tiles of partial swizzle atoms are
    stored plain, see the module docstring). `smem`: the resource model's layout, which places each ring (Hopper)."""
    loads: dict[tuple[str, int], set[str]] = {}
    for gp in ws.groups:
        for op in gp.all_ops():
            if op.kind is OpKind.TMA_LOAD:
                loads.setdefault((op.attrs.channel, op.attrs.index), set()).add(by_value[id(op.operands[0])].name)
    for cp in channels:
        ch = cp.ch
        if skip(ch):
            continue
        for j, t in enumerate(ch.payload):
            if t.dtype is DType.bool_:
                raise BackendError(f"channel '{ch.name}' carries a boolean tile; the templates hand numeric "
                                   f"tiles between warp groups", ch.loc,
                                   hint="keep a comparison in the warp group that selects with it, or cast the mask "
                                        "with `.to(aref.int32)`")
            if len(t.shape) not in (1, 2):
                raise BackendError(f"channel '{ch.name}' carries a rank-{len(t.shape)} tile; the templates take "
                                   f"rank 1 and 2", ch.loc)
            src = loads.get((ch.name, j), set())
            suffix = next(iter(src)) if len(src) == 1 else str(j)
            name = f"s_{cp.name}_{ident(suffix)}"
            if any(b.name == name for b in cp.buffers):      # two tiles of one tensor in an item (sub-tiles)
                name = f"{name}_{j}"
            cp.buffers.append(BufferPlan(name, t, ch.depth, f"channel {ch.name} payload {j}",
                                         smem.item(("ring", ch.name, j)) if smem is not None else None))


def plan_tma_load(op: Op, by_value: dict, channels: list[ChannelPlan], tmas: list[TmaPlan], copies: dict) -> None:
    """The TMA atom of a `tma_load` (the global tensor tiled by its box into the channel's slot). A box no TMA
    descriptor can describe (`tma_problem`) is recorded in `copies` instead, for the load warp to fill the slot
    itself with bounds-checked, zero-filled loads (both architectures; a tensor with no elements: zeros)."""
    t = by_value[id(op.operands[0])]
    box = tuple(op.attrs.tile_shape)
    _set_tiled(t, len(box), op.loc)
    buf = next(c for c in channels if c.ch.name == op.attrs.channel).buffers[op.attrs.index]
    if buf.tile.shape != box:
        raise BackendError("internal: TMA box differs from the slot tile", op.loc)
    why = tma_problem(t.shape, t.dtype, box)
    if why is not None:
        copies[(t.name, box)] = why
        return
    if not any(not x.store and (x.tensor, x.box) == (t.name, box) for x in tmas):
        # equal boxes into equal tiles share one atom (a ring's depth does not change its slot layout)
        t.tma = True
        _add_tma(tmas, TmaPlan(f"tma_{t.name}", t.name, box, buf.name))


def _check_tma_rule(t: TensorPlan, box: tuple[int, ...], loc: SrcInfo) -> None:
    """The Blackwell epilogue stores every tile with TMA (boxes over the tensor's edge are clipped by the hardware,
    as the interpreter's `store_box`); a store no TMA descriptor can describe is refused by that rule (the Hopper
    templates fall back to masked stores; both architectures load such boxes with ordinary loads)."""
    why = tma_problem(t.shape, t.dtype, box)
    if why is not None:
        raise BackendError(f"tensor {t.name} cannot be written by a TMA store: {why}; the Blackwell epilogue "
                           f"stores tiles with TMA only", loc,
                           hint=f"pad {t.name}'s rows to a multiple of 16 bytes, or compile for sm_90a")


def check_launch(ws: WSKernel, persistent: bool, ctas: int, raster: int) -> None:
    """The launch options both architectures' templates take: a grid of 1 to 3 non-empty axes, at least one
    persistent CTA, a raster group of 0 (none) or more."""
    if len(ws.grid) > 3 or any(g < 1 for g in ws.grid):
        raise BackendError(f"grid {ws.grid} is empty or has more than 3 dimensions", ws.loc)
    if persistent and ctas < 1:
        raise BackendError(f"a persistent launch needs at least one CTA, got {ctas}", ws.loc)
    if raster < 0:
        raise BackendError(f"raster must be 0 (no rasterization) or a group size ≥ 1, got {raster}", ws.loc)


def plan_kernel(ws: WSKernel, persistent: bool = False, ctas: int = 132, raster: int = 0,
                epilogue_overlap: bool = False) -> KernelPlan:
    """Check `ws` against what the Hopper templates support and lay out its resources.

    `persistent`: launch min(`ctas`, tiles) CTAs that each walk tiles round-robin (132 = H100 SXM SMs).
    `raster`: walk the tiles in groups of that many rows of grid axis 0 (`aref.backend.tile_order`); 0: x fastest.
    `epilogue_overlap` (persistent): two copies of the consumer take alternate tiles (`overlap`); the plan's
    `ws` is then a copy of `ws` with the register budgets of three groups.
    """
    if ws.level != "barrier":
        raise BackendError(f"the CuTe backend needs Barrier IR, got the {ws.level} level", ws.loc)
    if target_of(ws.arch).mma != "wgmma":
        raise BackendError(f"the CuTe backend generates Hopper (sm_90a) kernels only; got {ws.arch}", ws.loc,
                           hint="tcgen05 / tensor-memory templates for sm_100a are not written yet")
    if ws.resource_error is not None:
        raise ws.resource_error           # the resource model refused the groups' register budgets
    check_launch(ws, persistent, ctas, raster)
    ws, overlapped = overlap.prepare(ws, persistent) if epilogue_overlap else (ws, None)
    for gp in ws.groups:
        if gp.group.warps != 4:
            raise BackendError(f"warp group '{gp.group.name}' has {gp.group.warps} warps; the Hopper templates "
                               f"use whole warp groups of 4 warps", ws.loc)
    tensors = [TensorPlan(p.name, p.value.type.dtype, tuple(p.value.type.shape)) for p in ws.params
               if isinstance(p.value.type, TensorType)]
    by_value = {id(p.value): t for p, t in zip(ws.params, tensors)}
    groups = []
    for i, gp in enumerate(ws.groups):
        role, desc = classify(gp)
        groups.append(GroupPlan(gp, i, role, desc))
    channels = [ChannelPlan(ch, ident(ch.name), []) for ch in ws.channels]
    tmas: list[TmaPlan] = []
    copies: dict[tuple[str, tuple], str] = {}
    direct: dict[int, str] = {}
    mmas: list[MmaConfig] = []
    smem = smem_plan(ws, reuse=not persistent)

    for cp in channels:
        if cp.ch.kind not in ("tma", "store"):
            raise BackendError(f"channel '{cp.ch.name}' of kind {cp.ch.kind!r} is not supported", cp.ch.loc)
    plan_channel_buffers(ws, channels, by_value, smem=smem)
    staging: dict[int, BufferPlan] = {}
    scratch: dict[tuple, BufferPlan] = {}
    for g in groups:
        gp = g.gp
        prod = producers_of(gp)
        staged = frozenset(staged_reads(gp))
        for op in gp.all_ops():
            if op.kind is OpKind.TMA_LOAD:
                plan_tma_load(op, by_value, channels, tmas, copies)
            elif op.kind is OpKind.STORE:
                _plan_store(op, g, by_value[id(op.operands[0])], smem, staging, tmas, direct)
            elif op.kind is OpKind.MMA_ASYNC:
                check_operand_layouts(op, prod, ws, "wgmma")
                cfg = mma_config(op, prod, staged, ws)
                if cfg not in mmas:
                    mmas.append(cfg)
                for v, which in staged_operands(op, prod):
                    src, transposed = staged_source(v, prod)   # staged row-major through a scratch tile
                    key = (g.index, scratch_key(gp, v, prod))
                    if key not in scratch:
                        slot = scratch_tiles(gp)[key[1]]
                        same = next((b for k2, b in scratch.items() if k2[0] == g.index and b.item is not None
                                     and b.item.key == ("scratch", g.index, slot)), None)
                        name = f"s_{ident(g.gp.group.name)}_{ident(src.name or 'tile')}_{'T' if transposed else 'S'}" \
                               f"{len(scratch)}"
                        scratch[key] = same or BufferPlan(name, src.type.with_space(Space.SMEM), 1,
                                                          f"{g.gp.group.name}'s staged MMA operand {which}",
                                                          smem.item(("scratch", g.index, slot)))
            elif op.kind is OpKind.SLOT_READ:
                if _cuda_core_read(gp, op.result):
                    next(c for c in channels if c.ch.name == op.attrs.channel).cuda_core_readers.add(g.index)
        if g.role != "tma_producer":
            n = exchange_elements(gp)
            if n:       # cross-warp reductions and layout changes of register values (see `xthread`)
                scratch[(g.index, ("exchange",))] = BufferPlan(
                    f"s_{ident(g.gp.group.name)}_xchg", TileType((n,), DType.float32, Space.SMEM), 1,
                    f"{g.gp.group.name}'s exchange tile", smem.item(("exchange", g.index)))
    # register tiles need a wgmma C layout with their column count
    layout_n: dict[int, int] = {}
    for i, cfg in enumerate(mmas):
        layout_n.setdefault(cfg.n, i)
    for g in groups:
        prod = producers_of(g.gp)
        for op in g.gp.all_ops():
            smem_math = op.kind is OpKind.SLOT_STORE or (
                op.kind is OpKind.SLOT_READ and g.index in _channel(channels, op.attrs.channel).cuda_core_readers)
            if op.kind is OpKind.TRANSPOSE and op.operands[0].type.space is Space.SMEM:
                so = smem_operand(op.result, prod, op.loc)          # a slot tile CUDA cores read transposed
                smem_math = g.index in _channel(channels, so.channel).cuda_core_readers
            for v in (*op.results, *op.operands):
                t = v.type
                if isinstance(t, TileType) and len(t.shape) == 2 and t.shape[1] not in layout_n and t.shape[1] != 1 \
                        and t.shape[0] != 1 and (t.space is Space.RMEM or smem_math):
                    n = t.shape[1]
                    if n % 8 or not 8 <= n <= 256 or t.shape[0] % 64:
                        raise BackendError(f"register tile {t} cannot be held in a wgmma accumulator layout "
                                           f"(rows a multiple of 64, 8 ≤ columns ≤ 256)", op.loc)
                    mmas.append(MmaConfig(DType.float16, DType.float16, "K", "K", n, "SMEM"))
                    layout_n[n] = len(mmas) - 1
    if not layout_n and any(_rmem_rows(g.gp) for g in groups):
        mmas.append(MmaConfig(DType.float16, DType.float16, "K", "K", 8, "SMEM"))   # row vectors alone
        layout_n[8] = len(mmas) - 1
    # named barriers: the IR's ids first, then one per consumer warp group for its own syncs
    used = {nb.id for nb in ws.named_barriers}
    next_id = max(used, default=0) + 1
    for g in groups:
        if g.role != "tma_producer":
            g.group_barrier = next_id
            next_id += 1
    if next_id > 16:
        raise BackendError(f"the kernel needs {next_id - 1} named barriers; the hardware has 15", ws.loc)
    problem = smem.problem()
    if problem is not None:
        raise BackendError(problem + (" when persistent (a CTA's next tile reloads the rings, so stores cannot "
                                      "stage in them)" if persistent else ""), ws.loc,
                           hint="lower a channel depth or the tile sizes")
    plan = KernelPlan(ws, tensors, channels, staging, tmas, mmas, layout_n, groups, smem.total, smem, copies,
                      direct, scratch, persistent, ctas, raster, _items_per_tile(ws) if persistent else {})
    plan.overlap = overlap.plan_overlap(plan, overlapped) if overlapped is not None else None
    return plan


def _plan_store(op: Op, g: "GroupPlan", t: TensorPlan, smem, staging: dict, tmas: list, direct: dict) -> None:
    """A TMA store through a staging tile, or (when TMA cannot describe the box) masked stores from registers."""
    box = tuple(op.attrs.tile_shape)
    value = op.operands[-1].type
    if len(box) > 2:
        raise BackendError(f"a rank-{len(box)} store: the templates hold register tiles of rank 1 and 2", op.loc)
    _set_tiled(t, len(box), op.loc)
    if value.dtype is not t.dtype:
        raise BackendError(f"store of a {value.dtype.value} tile into a {t.dtype.value} tensor", op.loc)
    if value.dtype not in (DType.float16, DType.bfloat16, DType.float32):
        raise BackendError(f"the epilogue stores 16-bit or float32 tiles, not {value.dtype.value}", op.loc)
    if len(box) == 2 and value.shape[0] == 1:
        # registers hold a one-row tile as a column vector (or a scalar), which the epilogue does not write
        raise BackendError(f"a store of the one-row tile {tuple(value.shape)}: the Hopper templates store 2-D tiles "
                           f"held in the accumulator layout and (R, 1) columns", op.loc,
                           hint="store the rank-1 vector into a rank-1 box instead (a box of the last dim, the "
                                "leading coordinates indexed)")
    item = smem.by_key.get(("staging", id(op)))
    if item is None:
        direct[id(op)] = store_tma_problem(op) or "no staging tile"
        return
    t.tma = True
    base = f"s_{t.name}_{ident(g.gp.group.name)}"
    n = sum(b.name.startswith(base) for b in staging.values())
    buf = BufferPlan(base + (f"_{n}" if n else ""), TileType(box, value.dtype, Space.SMEM), 1,
                     f"staging of {g.gp.group.name}'s store to {t.name}", item)
    staging[id(op)] = buf
    if not any(x.store and (x.tensor, x.box, x.reduce) == (t.name, box, op.attrs.reduce) for x in tmas):
        # groups storing equal boxes share one atom (their staging layouts are equal)
        _add_tma(tmas, TmaPlan(f"tma_store_{t.name}" + ("_add" if op.attrs.reduce else ""), t.name, box,
                               buf.name, store=True, reduce=op.attrs.reduce))


def _rmem_rows(gp: GroupProgram) -> bool:
    """Does the group hold register row vectors (which take their row order from a wgmma layout)?"""
    return any(isinstance(v.type, TileType) and v.type.space is Space.RMEM for op in gp.all_ops() for v in op.results)


@dataclass(frozen=True)
class RuntimeItems:
    """Items a channel's ring advances per tile when the loop's trip count is known only at run time:
    `per_iter` × the trip count, plus `fixed` items outside the loop."""

    per_iter: int
    fixed: int = 0


def trip_value(gp: GroupProgram) -> Value | None:
    """The Tile IR loop's trip count N in a group program: the pipelined loop runs max(N − S, 0) steady steps."""
    return loop_trip_value(gp)


def _items_per_tile(ws: WSKernel) -> dict[str, object]:
    """Items each channel's producer puts per tile: its `empty` waits, the loop's counted trip times (an int),
    or `RuntimeItems` when the trip count depends on the tile."""
    from aref.backend.cute.values import Scalar, scalar_binary

    out: dict[str, object] = {}
    for ch in ws.channels:
        gp = ws.groups[ch.producer]
        static: dict[int, object] = {}
        for op in gp.all_ops():
            if op.kind is OpKind.CONST and not isinstance(op.result.type, TileType):
                static[id(op.result)] = op.attrs.value
            elif op.kind is OpKind.SCALAR_BINARY and all(id(o) in static for o in op.operands):
                a, b = (Scalar.const(static[id(o)]) for o in op.operands)
                static[id(op.result)] = scalar_binary(op.attrs.fn, a, b).value
        n = trip_value(gp)
        if n is not None and id(n) not in static and ch.region == "loop":
            fixed = sum(1 for region, block in gp.regions() if region in ("pre", "post") for op in block.ops
                        if op.kind is OpKind.MBAR_WAIT and op.attrs.channel == ch.name and op.attrs.which == "empty")
            out[ch.name] = RuntimeItems(ch.items_per_iter, fixed - ch.lead)
            continue
        trip = static.get(id(gp.loop.trip_count)) if gp.loop is not None else 0
        count = 0
        for region, block in gp.regions():
            for op in block.ops:
                if op.kind is OpKind.MBAR_WAIT and op.attrs.channel == ch.name and op.attrs.which == "empty":
                    if op.pred is not None and static.get(id(op.pred)) is False:
                        continue
                    count += trip if region == "loop" else 1
        # a channel put ahead of its items (`Channel.lead`) waits once more for a slot than it puts: its
        # last iteration's wait (for the item after the last, the MMA writing the columns) puts nothing
        out[ch.name] = count - ch.lead
    return out


def _cuda_core_read(gp: GroupProgram, v: Value, depth: int = 0) -> bool:
    """Is the shared tile `v` read by anything but a wgmma (through views and loop-carried copies)?"""
    for u in _users(gp, v):
        if u.kind in (OpKind.TRANSPOSE, OpKind.SLICE, OpKind.SELECT):
            if depth < 16 and _cuda_core_read(gp, u.result, depth + 1):
                return True
        elif u.kind is not OpKind.MMA_ASYNC:
            return True
    return False


def ir_namer(ws: WSKernel):
    """The value names `aref ir --stage barrier` prints, so tags read exactly like the IR dump."""
    import aref.ir.ws as ws_module
    from aref.ir.printer import Namer

    captured = []

    class Capturing(Namer):
        def __init__(self):
            super().__init__()
            captured.append(self)

    saved = ws_module.Namer
    ws_module.Namer = Capturing
    try:
        ws_module.print_ws(ws)
    finally:
        ws_module.Namer = saved
    return captured[0]


def _channel(channels: list[ChannelPlan], name: str) -> ChannelPlan:
    return next(c for c in channels if c.ch.name == name)


def _users(gp: GroupProgram, v: Value) -> list[Op]:
    out = [op for op in gp.all_ops() if any(o is v for o in op.operands)]
    if gp.loop is not None and any(y is v for y in gp.loop.yields):
        for c, y in zip(gp.loop.carried, gp.loop.yields):
            if y is v:
                out += [op for op in gp.all_ops() if any(o is c for o in op.operands)]
    return out


def _add_tma(tmas: list[TmaPlan], t: TmaPlan) -> None:
    if t in tmas:
        return
    if any(x.name == t.name for x in tmas):
        t = TmaPlan(f"{t.name}_{sum(x.name.startswith(t.name) for x in tmas)}", t.tensor, t.box, t.buffer,
                    t.store, t.reduce)
    tmas.append(t)


def _set_tiled(t: TensorPlan, n: int, loc: SrcInfo) -> None:
    if t.tiled and t.tiled != n:
        raise BackendError(f"tensor {t.name} is accessed with boxes of rank {t.tiled} and {n}", loc)
    if n > len(t.shape):
        raise BackendError(f"a rank-{n} box on the rank-{len(t.shape)} tensor {t.name}", loc)
    t.tiled = n
