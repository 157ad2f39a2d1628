"""What the Blackwell (sm_100a) templates need to know about a Barrier IR kernel, and what they refuse.

`plan_kernel_sm100(ws)` reads a barrier-level `WSKernel` and lays out its resources:

  * roles, from what each group does: the **load** warp (TMA copies), the **mma** warp (tcgen05 MMAs,
    commits; one warp), **compute** warp groups (four warps: softmax, correction, reductions, epilogues from
    registers — they may also issue MMAs from one elected thread) and the **epilogue** warp (TMA stores of
    tiles already in shared memory);
  * the warp layout: four-warp groups first, aligned so warp w of a group reads tensor-memory lanes
    32·(w mod 4)…, then the one-warp groups, padded to a whole warp group (setmaxnreg is warp-group wide);
  * shared memory: every ring of a shared-memory channel, the staging tiles of stores from registers,
    and a zero tile when the MMA warp must publish a zero accumulator (written by a zero MMA). Which staging
    tile has storage of its own and which reuses an idle buffer is the resource model's placement
    (`aref.resources.memory.smem_plan`, as on Hopper): a chunked epilogue's column chunks of one store share
    one staging tile (each chunk's TMA store waits until the previous one has read it), a post-loop store may
    stage in a released hand-off ring or pack into an earlier staging tile of its group;
  * tensor memory: the kernel's `TmemPlan` (buffers and columns, from the aref lowering);
  * tcgen05 MMA configurations (dtypes, majors, M, N, A from shared or tensor memory) and TMA atoms.

Register tiles of compute groups use tcgen05's row layout: a 128-row tile gives each thread one whole row
(32x32b), a 64-row tile half a row (16x32bx2: threads t and t^16 share a row), so row reductions are
thread-local (plus one shuffle for 64 rows).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aref import ops
from aref.backend.cute.analysis import (BufferPlan, ChannelPlan, GroupPlan, KernelPlan, TensorPlan, TmaPlan, _add_tma,
                                        _check_tma_rule, _cuda_core_read, _items_per_tile, _set_tiled, check_launch,
                                        ident, plan_channel_buffers, plan_tma_load)
from aref.backend.cute.errors import BackendError
from aref.backend.cute.provenance import mma_shape_error
from aref.backend.cute.operands import check_mma_dtypes, check_operand_layouts, producers_of, smem_operand
from aref.ir import DType, Op, OpKind, Space, TensorType, TileType, Value
from aref.resources.layout import feeds_mma_only
from aref.resources.memory import SWIZZLE_ALIGN, SmemPlan, _align, smem_plan
from aref.resources.tensor_core import (MMA_BARRIER_BYTES, TMEM_ADDRESS_BYTES, mma_barrier_groups,
                                        zero_fill_shapes)
from aref.resources.tensor_core import zero_tile as zero_tile_of
from aref.ir.ws import WSKernel
from aref.target import target_of

TCGEN05_DTYPES = (DType.float16, DType.bfloat16, DType.float8_e4m3, DType.float8_e5m2)
ROWS = (64, 128)                  # rows of a tcgen05 tile (cta_group::1): M = 64 or 128


@dataclass(frozen=True)
class Tcgen05Config:
    """One tcgen05 tiling: operand dtypes and majors, the M×N tile, A from shared or tensor memory."""

    a_dtype: DType
    b_dtype: DType
    a_major: str                 # "K" or "MN"
    b_major: str
    m: int
    n: int
    a_source: str                # "SMEM" or "TMEM"


@dataclass
class Sm100GroupPlan(GroupPlan):
    warp0: int = 0               # the group's first warp in the CTA
    issues_mma: bool = False


@dataclass
class Sm100Plan(KernelPlan):
    tmem: object = None                                   # aref.lower.tmem.TmemPlan
    warps: int = 0                                        # warps of the CTA (whole warp groups)
    zero_tile: BufferPlan | None = None                   # zero A/B operand of the tensor core's zero fill
    zero_mmas: list = field(default_factory=list)         # (m, n) of every zero fill
    mma_of: dict = field(default_factory=dict)            # id(mma_async op) -> index into mmas
    direct_stores: dict = field(default_factory=dict)     # id(store op) -> slot buffer a TMA store reads
    mma_barriers: list = field(default_factory=list)      # groups that wait for their own MMAs
    exp2_fma: float = 0.0                                 # share of exp2 on the FMA units (software exp2)
    doubled: dict = field(default_factory=dict)           # persistent: tensor-memory buffer -> its 2-slot ring
    hosts: dict = field(default_factory=dict)             # staging buffer name -> the buffer whose storage it reuses

    def group_of(self, gid: int) -> Sm100GroupPlan:
        return next(g for g in self.groups if g.gp.group.id == gid)

    def staging_buffers(self) -> list[BufferPlan]:
        """Every staging buffer once (the column chunks of one store share one)."""
        return list({b.name: b for b in self.staging.values()}.values())

    def host_of(self, b: BufferPlan) -> BufferPlan | None:
        """The buffer whose storage staging buffer `b` reuses (None: its own)."""
        return self.hosts.get(b.name)

    def aliased(self) -> list[BufferPlan]:
        return [b for b in self.staging_buffers() if b.name in self.hosts]


def _role(gp) -> tuple[str, str, bool]:
    kinds = {op.kind for op in gp.all_ops()}
    mma = OpKind.MMA_ASYNC in kinds
    traits = set().union(*(ops.entry(op).traits for op in gp.all_ops()))
    if OpKind.TMA_LOAD in kinds:
        work = kinds & (ops.kinds_with(ops.CUDA_CORE) | {OpKind.MMA_ASYNC, OpKind.STORE, OpKind.SLOT_STORE})
        if work:
            raise BackendError(f"warp group '{gp.group.name}' both issues TMA loads and computes; the Blackwell "
                               f"templates keep the load warp a pure data-movement role",
                               next(op.loc for op in gp.all_ops() if op.kind is OpKind.TMA_LOAD),
                               hint="partition loads into their own warp")
        return "load", "load warp: TMA copies into shared-memory rings", False
    if gp.group.warps == 1:
        if mma:
            return "mma", "MMA warp: tcgen05 MMAs into tensor memory, completion by tcgen05.commit", True
        return "epilogue", "epilogue warp: TMA stores of tiles handed over in shared memory", False
    does = []
    if mma:
        does.append("tcgen05 MMAs from one elected thread")
    if {ops.EXPONENTIAL, ops.RUNNING_MAX} <= traits:
        does.append("softmax")
    elif OpKind.REDUCE in kinds:
        does.append("row reductions")
    if any(op.kind is OpKind.BINARY for op in gp.all_ops()) and gp.group.role == "correction":
        does.append("accumulator rescaling in tensor memory")
    if OpKind.STORE in kinds:
        does.append("TMA-store epilogue")
    return gp.group.role, f"{gp.group.role} warp group: " + (", ".join(does) or "CUDA-core work"), mma


def plan_kernel_sm100(ws: WSKernel, persistent: bool = False, ctas: int = 148, raster: int = 0) -> Sm100Plan:
    """Check `ws` against the Blackwell templates and lay out its resources (see the module docstring)."""
    if ws.level != "barrier":
        raise BackendError(f"the CuTe backend needs Barrier IR, got the {ws.level} level", ws.loc)
    if target_of(ws.arch).mma != "tcgen05":
        raise BackendError(f"internal: the Blackwell templates got an {ws.arch} kernel", ws.loc)
    if ws.resource_error is not None:
        raise ws.resource_error           # the resource model refused the groups' register budgets
    check_launch(ws, persistent, ctas, raster)
    if ws.tmem is None and any(op.kind is OpKind.MMA_ASYNC for gp in ws.groups for op in gp.all_ops()):
        raise BackendError("internal: sm_100a Barrier IR with MMAs but no tensor-memory plan (it was not made by "
                           "the sm_100a aref lowering)", ws.loc)
    tensors = [TensorPlan(p.name, p.value.type.dtype, tuple(p.value.type.shape)) for p in ws.params
               if isinstance(p.value.type, TensorType)]
    by_value = {id(p.value): t for p, t in zip(ws.params, tensors)}
    groups = []
    for i, gp in enumerate(ws.groups):
        if gp.group.warps not in (1, 4):
            raise BackendError(f"warp group '{gp.group.name}' has {gp.group.warps} warps; the Blackwell "
                               f"templates use one warp or one warp group of four", ws.loc)
        role, desc, mma = _role(gp)
        groups.append(Sm100GroupPlan(gp, i, role, desc, issues_mma=mma))
    warp = 0
    for g in [g for g in groups if g.gp.group.warps == 4] + [g for g in groups if g.gp.group.warps == 1]:
        g.warp0 = warp
        warp += g.gp.group.warps
    warps = -(-warp // 4) * 4
    channels = [ChannelPlan(ch, ident(ch.name), []) for ch in ws.channels]
    tmas: list[TmaPlan] = []
    copies: dict[tuple, str] = {}           # loads of tensors with no elements: the load warp zero-fills the slot
    staging: dict[int, BufferPlan] = {}
    hosts: dict[str, BufferPlan] = {}
    direct: dict[int, str] = {}
    # the resource model's layout: where each staging tile lives (a persistent CTA's next tile reloads the
    # rings a store would reuse, so there no staging tile reuses a ring, as on Hopper)
    smem = smem_plan(ws, reuse=not persistent)
    # tiles in tensor memory (ws.tmem) take no shared-memory buffer
    plan_channel_buffers(ws, channels, by_value, skip=lambda ch: any(t.space is Space.TMEM for t in ch.payload))
    mmas: list[Tcgen05Config] = []
    mma_of: dict[int, int] = {}
    for g in groups:
        gp = g.gp
        prod = producers_of(gp)
        for op in gp.all_ops():
            if op.kind is OpKind.TMA_LOAD:
                plan_tma_load(op, by_value, channels, tmas, copies)
            elif op.kind is OpKind.STORE:
                _plan_store(op, g, by_value, channels, prod, tmas, staging, direct, smem, hosts)
            elif op.kind is OpKind.MMA_ASYNC:
                cfg = tcgen05_config(op, prod, ws)
                if cfg not in mmas:
                    mmas.append(cfg)
                mma_of[id(op)] = mmas.index(cfg)
            elif op.kind is OpKind.SLOT_STORE and op.operands[0].type.tile.space is Space.TMEM and g.issues_mma:
                v = prod.get(id(op.operands[3]))
                if v is not None and v.kind is OpKind.FULL and v.attrs.value != 0.0:
                    raise BackendError(f"the MMA warp publishes a tile filled with {v.attrs.value} in tensor "
                                       f"memory; the tensor core writes zero fills only", op.loc,
                                       hint="start the accumulator at zero")
    # the zero fills and their tile of zeros, as the resource model counts them (`aref.resources.tensor_core`)
    zero_mmas = zero_fill_shapes(ws)
    for g in groups:            # slots whose tiles CUDA cores of a warp group read (a barrier before the release)
        if g.gp.group.warps == 4:
            for op in g.gp.all_ops():
                if op.kind is OpKind.SLOT_READ and _cuda_core_read(g.gp, op.result):
                    next(c for c in channels if c.ch.name == op.attrs.channel).cuda_core_readers.add(g.index)
    zt = zero_tile_of(ws)
    zero_tile = BufferPlan("s_zero", zt, 1, "zeros: A and B of the tensor core's zero fills") if zt else None
    used = {nb.id for nb in ws.named_barriers}
    next_id = max(used, default=0) + 1
    mma_barriers = mma_barrier_groups(ws)
    for g in groups:
        if g.gp.group.warps == 4:
            g.group_barrier = next_id
            next_id += 1
    if next_id > 16:
        raise BackendError(f"the kernel needs {next_id - 1} named barriers; the hardware has 15", ws.loc)
    scratch = {}
    for g in groups:            # column reductions of register tiles: the 4 warps' partials meet in shared memory;
        n = max((4 * op.operands[0].type.shape[1] for op in g.gp.all_ops() if op.kind is OpKind.REDUCE
                 and op.attrs.axis == 0 and len(op.operands[0].type.shape) == 2), default=0)
        if any(op.kind is OpKind.REDUCE and len(op.operands[0].type.shape) == 1 and not op.result.type.shape
               for op in g.gp.all_ops()):
            n = max(n, 4)       # a vector along the rows to one value: one partial per warp
        # transposes of register tiles read by register math: the whole tile, written by row, read by column
        n = max([n] + [op.result.type.numel for op in g.gp.all_ops() if op.kind is OpKind.TRANSPOSE
                       and op.operands[0].type.space is not Space.SMEM and not feeds_mma_only(g.gp, op.result)])
        if n and g.gp.group.warps == 4:
            scratch[(g.index, ("exchange",))] = BufferPlan(f"s_{ident(g.gp.group.name)}_xchg",
                                                           TileType((n,), DType.float32, Space.SMEM), 1,
                                                           f"{g.gp.group.name}'s exchange tile")
    staged = sum(b.nbytes for b in {b.name: b for b in staging.values()}.values())   # reused storage: 0 B
    smem_bytes = sum(b.nbytes for c in channels for b in c.buffers) + staged
    smem_bytes += sum(b.nbytes for b in scratch.values())
    smem_bytes += zero_tile.nbytes if zero_tile else 0
    smem_bytes += _align(16 * sum(c.ch.depth for c in channels) + MMA_BARRIER_BYTES * len(mma_barriers)
                         + TMEM_ADDRESS_BYTES, 16) + SWIZZLE_ALIGN
    limit = target_of(ws.arch).smem_per_cta      # opt-in dynamic shared memory per CTA
    if smem_bytes > limit:
        parts = ", ".join(f"{c.ch.name}: {c.ch.depth}×{c.ch.slot_bytes} B" for c in channels if c.buffers)
        raise BackendError(f"shared memory {smem_bytes} B exceeds the {limit} B per-CTA limit of {ws.arch} "
                           f"(rings {parts}; store staging {staged} B)", ws.loc,
                           hint="lower a channel depth or the tile sizes")
    items = _items_per_tile(ws) if persistent else {}
    tmem, doubled = (_double_accumulators(ws, channels, groups, items) if persistent and ws.tmem is not None
                     else (ws.tmem, {}))
    plan = Sm100Plan(ws, tensors, channels, staging, tmas, [], {}, groups, smem_bytes, smem, persistent=persistent,
                     ctas=ctas,
                     raster=raster, items_per_tile=items, tmem=tmem, warps=warps, zero_tile=zero_tile,
                     zero_mmas=zero_mmas, mma_of=mma_of, direct_stores=direct, mma_barriers=mma_barriers,
                     copies=copies, doubled=doubled, scratch=scratch, hosts=hosts)
    plan.mmas = mmas
    return plan


def _plan_store(op: Op, g, by_value, channels, prod, tmas, staging, direct, smem: SmemPlan, hosts) -> None:
    t = by_value[id(op.operands[0])]
    box = tuple(op.attrs.tile_shape)
    value = op.operands[-1]
    if len(box) not in (1, 2):
        raise BackendError(f"a rank-{len(box)} store: the TMA-store epilogue writes rank-1 and rank-2 tiles",
                           op.loc)
    _set_tiled(t, len(box), op.loc)
    _check_tma_rule(t, box, op.loc)
    if value.type.dtype is not t.dtype:
        raise BackendError(f"store of a {value.type.dtype.value} tile into a {t.dtype.value} tensor", op.loc)
    if value.type.dtype not in (DType.float16, DType.bfloat16, DType.float32):
        raise BackendError(f"the epilogue stores 16-bit or float32 tiles, not {value.type.dtype.value}", op.loc)
    so = smem_operand(value, prod, op.loc) if value.type.space is Space.SMEM else None
    if so is not None:
        if so.transposed or so.row0 or tuple(value.type.shape) != box:
            raise BackendError("a TMA store of a view of a shared-memory slot", op.loc)
        buf = next(c for c in channels if c.ch.name == so.channel).buffers[so.index]
        direct[id(op)] = buf.name
        name = buf.name
    else:
        if g.gp.group.warps != 4:
            raise BackendError(f"warp '{g.gp.group.name}' stores a register tile; tiles live in warp groups of "
                               f"four warps on sm_100a", op.loc)
        name = _plan_staging(op, g, t, box, value.type.dtype, channels, staging, smem, hosts)
    if not any(x.store and (x.tensor, x.box, x.reduce, x.buffer) == (t.name, box, op.attrs.reduce, name)
               for x in tmas):
        _add_tma(tmas, TmaPlan(f"tma_store_{t.name}" + ("_add" if op.attrs.reduce else ""), t.name, box, name,
                               store=True, reduce=op.attrs.reduce))


def _plan_staging(op: Op, g, t: TensorPlan, box, dtype: DType, channels, staging, smem: SmemPlan, hosts) -> str:
    """The staging buffer of a TMA store from registers, where the resource model places it (`smem`'s item): its
    own storage; the buffer of an earlier store of the same tile when the model gives both one tile (the column
    chunks of a chunked epilogue, pipeline copies of one store); or a view over an idle buffer (a released
    hand-off ring, an earlier staging tile at an offset: `hosts`). Returns the buffer's name."""
    tile = TileType(box, dtype, Space.SMEM)
    item = smem.by_key.get(("staging", id(op)))
    host = _host_buffer(item, channels, staging) if item is not None else None
    if host is not None and item.alias_of[0] == "staging" and item.offset == 0 and host.tile == tile:
        staging[id(op)] = host          # one staging tile: the role waits for the previous TMA store's read
        return host.name
    name = f"s_{t.name}_{ident(g.gp.group.name)}"
    if any(b.name.startswith(name) for b in staging.values()):
        name += f"_{len(staging)}"
    # the model's item sizes the buffer (none of its own bytes when it reuses `host`); a tile the backend
    # allocates where the model reuses storage the backend does not have keeps its own bytes
    own = item is None or (item.alias_of is not None and host is None)
    staging[id(op)] = BufferPlan(name, tile, 1, f"staging of {g.gp.group.name}'s store to {t.name}",
                                 None if own else item)
    if host is not None:
        hosts[name] = host
    return name


def _host_buffer(item, channels, staging) -> BufferPlan | None:
    """The backend's buffer of the storage the model's staging `item` reuses (None: its own, or storage the
    backend does not allocate, such as the staging tile of a store it issues straight from a slot: the store
    then takes a tile of its own, no larger than the storage the model counted for it)."""
    key = item.alias_of
    if key is None:
        return None
    if key[0] == "ring":
        cp = next((c for c in channels if c.ch.name == key[1]), None)
        return cp.buffers[key[2]] if cp is not None and len(cp.buffers) > key[2] else None
    return next((b for i, b in staging.items() if ("staging", i) == key), None)


def tmem_operand(v: Value, prod) -> Op | None:
    """The slot_read of a tensor-memory ring that `v` is (an MMA operand taken from tensor memory), or None."""
    op = prod.get(id(v))
    if op is not None and op.kind is OpKind.SLOT_READ and op.result.type.space is Space.TMEM:
        return op
    return None


def tcgen05_config(op: Op, prod, ws) -> Tcgen05Config:
    """The tcgen05 tiling of one mma_async; what tcgen05 cannot do is a `BackendError` naming the line."""
    a, b = op.operands[0], op.operands[1]
    m, k = a.type.shape
    n = b.type.shape[1]
    fp8 = check_mma_dtypes(op, TCGEN05_DTYPES, "tcgen05")
    check_operand_layouts(op, prod, ws, "tcgen05")
    k_atom = 32 if fp8 else 16
    step = 16 if m == 128 else 8
    broken = [(m, "a", f"M = {m} (a's rows) is neither 64 nor 128") if m not in ROWS else None,
              (n, "b", f"N = {n} (b's columns) is not a multiple of {step} up to 256")
              if n % step or not 8 <= n <= 256 else None,
              (k, "ab", f"K = {k} is not a multiple of {k_atom}") if k % k_atom else None]
    if any(broken):
        raise mma_shape_error(ws, op, "tcgen05 (cta_group::1)", [b for b in broken if b])
    sb = smem_operand(b, prod, op.loc)
    if sb is None:
        raise BackendError("the B operand of a tcgen05 MMA must come from shared memory (a channel slot)", op.loc,
                           hint="publish the tile through an aref channel")
    b_major = "K" if sb.transposed else "MN"
    if tmem_operand(a, prod) is not None:
        return Tcgen05Config(a.type.dtype, b.type.dtype, "K", b_major, m, n, "TMEM")
    sa = smem_operand(a, prod, op.loc)
    if sa is None:
        raise BackendError("the A operand of a tcgen05 MMA comes from shared or tensor memory, not registers",
                           op.loc, hint="internal: the partition should hand it over through a channel")
    a_major = "MN" if sa.transposed else "K"
    if fp8 and (a_major != "K" or b_major != "K"):
        raise BackendError("fp8 tcgen05 MMAs need both operands K-major (A: M×K, B: N×K row-major tiles)", op.loc)
    return Tcgen05Config(a.type.dtype, b.type.dtype, a_major, b_major, m, n, "SMEM")


def _double_accumulators(ws: WSKernel, channels: list[ChannelPlan], groups, items_per_tile: dict):
    """Persistent kernels: two tensor-memory stages for each accumulator the MMA warp publishes once per tile
    after its loop, so the MMAs of a CTA's next tile write one stage while the epilogue reads the other.

    The accumulator's ring (depth 1, one item per tile, every slot and phase a constant of the tile) becomes a
    ring of two slots — the IR's in-tile slot and phase are those of item 0 either way, and the persistent ring
    position (`tile_count` items) picks the stage — and its buffer two slots of its columns, where the columns
    above it are free and the allocation stays within the SM's columns. Returns (the tensor-memory plan,
    buffer -> ring)."""
    import copy
    import dataclasses

    tmem = copy.deepcopy(ws.tmem)
    doubled: dict[str, str] = {}
    const = {id(op.result) for gp in ws.groups for op in gp.all_ops() if op.kind is OpKind.CONST}
    for cp in channels:
        ch = cp.ch
        name = tmem.ring_buffer.get(ch.name)
        if cp.buffers or name is None or ch.depth != 1 or ch.region != "post" or items_per_tile.get(ch.name) != 1:
            continue
        b = tmem.buffer(name)
        producer = groups[ch.producer]
        if (b.depth != 1 or b.alias_of is not None or any(x.alias_of == name for x in tmem.buffers)
                or sum(r == name for r in tmem.ring_buffer.values()) != 1
                or not (producer.issues_mma and producer.gp.group.warps == 1)):
            continue
        ring_ops = [op for gp in ws.groups for op in gp.all_ops()
                    if getattr(op.attrs, "channel", None) == ch.name and len(op.operands) > 1]
        if not all(id(op.operands[1]) in const and (op.kind is not OpKind.MBAR_WAIT or id(op.operands[2]) in const)
                   for op in ring_ops):
            continue
        top = (b.col + b.cols, b.col + 2 * b.cols)
        if any(x is not b and x.col < top[1] and top[0] < x.col + x.cols for x in tmem.buffers):
            continue
        used = max(tmem.used, top[1])
        target = target_of(ws.arch)
        if target.tmem_allocation(used) > target.tmem_columns:
            continue
        b.cols, b.depth = 2 * b.cols, 2
        tmem.used, tmem.columns = used, max(tmem.columns, target.tmem_allocation(used))
        cp.ch = dataclasses.replace(ch, depth=2)
        doubled[name] = ch.name
    return tmem, doubled
