"""Assemble one sm_100a CuTe DSL module per kernel specialization from an `Sm100Plan`.

The module reads like the Hopper one (`aref.backend.cute.module`, whose role merging, docstring, constants
and fake arguments it shares): the schedule in the docstring, then shared storage, one `@cute.jit` function
per role (FA4's load / mma / softmax / correction / epilogue when the partition is FA4's), the kernel and
the host function. Blackwell's parts: the tensor-memory plan in the docstring; the allocation of tensor
memory by the allocating warp before the roles start; dispatch on warp ranges (four-warp groups first,
aligned to warp groups, then the one-warp groups, padded to a whole warp group whose idle warps only take
part in the register reallocation); tcgen05 tiled MMAs on the host.
"""
from __future__ import annotations

from aref.backend.cute.analysis import ident, ir_namer
from aref.backend.cute.module import (_fake_args, _roles, channel_line, constexpr_lines, dt, grid_lines, init_rings,
                                      kernel_prologue, launch, layout_line, layout_param, slot_modes, stream_param,
                                      tile_fields, ring_fields)
from aref.backend.cute.source import Lines
from aref.resources.memory import SWIZZLE_ALIGN
from aref.backend.cute.sm100.plan import Sm100Plan
from aref.backend.cute.sm100.role import Sm100RoleEmitter

HEADER_IMPORTS = """\
import cutlass
import cutlass.cute as cute
import cutlass.utils.blackwell_helpers as sm100_utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, tcgen05
from cuda.bindings.driver import CUstream
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.tensor_utils import LayoutEnum

from aref.backend.cute import support as aref
from aref.backend.cute.sm100 import support as sm100"""


def emit_module_sm100(plan: Sm100Plan) -> str:
    """The generated module's source text."""
    plan.namer = ir_namer(plan.ws)
    roles = _roles(plan, Sm100RoleEmitter)
    parts = [HEADER_IMPORTS, _constants(plan), _storage(plan)]
    parts += [r["source"] for r in roles["functions"]]
    parts += [_kernel(plan, roles), _host(plan), _fake_args(plan)]
    return _doc(plan, roles) + "\n" + "\n\n\n".join(p.rstrip("\n") for p in parts) + "\n"


def _doc(plan: Sm100Plan, roles) -> str:
    ws = plan.ws
    names = {g.gp.group.id: g.gp.group.name for g in plan.groups}
    lines = [f'"""aref kernel `{ws.name}` for {ws.arch}, generated from its Barrier IR by aref.backend.cute.', ""]
    shapes = ", ".join(f"{t.name} {'×'.join(map(str, t.shape))} {t.dtype.value}" for t in plan.tensors)
    lines.append(f"Problem: {shapes}; grid {tuple(ws.grid)}, {plan.warps * 32} threads, {plan.smem_bytes} bytes of "
                 f"shared memory" + (f", {plan.tmem.columns} columns of tensor memory." if plan.tmem else "."))
    lines.append("Roles (warps; registers per thread):")
    for g in sorted(plan.groups, key=lambda g: g.warp0):
        gp = g.gp
        warps = f"warp {g.warp0}" if gp.group.warps == 1 else f"warps {g.warp0}-{g.warp0 + 3}"
        extra = f", {gp.stages + 1} pipeline stages" if gp.stages else ""
        lines.append(f"  {gp.group.name:<11} {warps:<11} {g.description}; {gp.group.regs} registers{extra}")
    idle = plan.warps - sum(g.gp.group.warps for g in plan.groups)
    if idle:
        lines.append(f"  {'(idle)':<11} {'warp' + ('s' if idle > 1 else '') + ' ' + str(plan.warps - idle)}"
                     + (f"-{plan.warps - 1}" if idle > 1 else "") + "     complete the last warp group's register reallocation")
    lines.append("Channels (mbarrier rings; full/empty arrival counts):")
    for cp in plan.channels:
        ch = cp.ch
        if cp.buffers:
            where = ", ".join(f"{'×'.join(map(str, b.tile.shape))} {b.tile.dtype.value}" for b in cp.buffers)
        else:
            where = f"tensor memory {plan.tmem.ring_buffer[ch.name]}"
        how = "TMA" if ch.kind == "tma" else ("tcgen05.commit" if ch.full_count == 1 else "stores")
        lines.append(channel_line(plan, cp, where, how))
    if plan.tmem is not None:
        lines.append(f"Tensor memory ({plan.tmem.used} of {plan.tmem.columns} allocated columns, by "
                     f"{names[plan.tmem.allocator]}):")
        lines += [f"  {line.strip()[5:]}" for line in plan.tmem.lines()[1:]]
    for b in plan.aliased():
        at = f" at byte {b.item.offset}" if b.item.offset else ""
        lines.append(f"The store staged in {b.name} reuses {plan.host_of(b).name}{at}, idle by then.")
    hosts = {b.item.key: b for cp in plan.channels for b in cp.buffers if b.item is not None}
    for b in (b for cp in plan.channels for b in cp.buffers if b.item is not None and b.item.alias_of is not None):
        at = f" at byte {b.item.offset}" if b.item.offset else ""
        lines.append(f"The slot {b.name} reuses {hosts[b.item.alias_of].name}{at}, idle by then.")
    lines.append("")
    lines.append("Every Barrier IR synchronisation op appears once, under a `# aref-ir[group#op]` tag, in its")
    lines.append("group's role function and in the IR's order.")
    lines.append('"""')
    return "\n".join(lines)


def _constants(plan: Sm100Plan) -> str:
    ws = plan.ws
    out = grid_lines(plan) + [f"THREADS = {plan.warps * 32}  # {len(ws.groups)} roles in {plan.warps // 4} warp groups"]
    out += constexpr_lines(ws)
    if plan.tmem is not None:
        out.append(f"TMEM_COLUMNS = {plan.tmem.columns}  # {plan.tmem.used} used")
    return "\n".join(out)


def _buffers(plan: Sm100Plan, owned: bool = False):
    """Every shared buffer (each with a layout); `owned`: only those with storage of their own (a staging tile
    that reuses an idle buffer is a view of it, see `Sm100Plan.host_of`)."""
    for cp in plan.channels:
        # a ring in a slot dead by then is a view of that slot's storage (`kernel_prologue`)
        yield from (b for b in cp.buffers if not (owned and b.item is not None and b.item.alias_of is not None))
    yield from (b for b in plan.staging_buffers() if not (owned and plan.host_of(b) is not None))
    yield from plan.scratch.values()
    if plan.zero_tile is not None:
        yield plan.zero_tile


def _storage(plan: Sm100Plan) -> str:
    out = Lines()
    out("@cute.struct")
    with out.block("class SharedStorage:"):
        out('"""Every ring\'s mbarriers (full, empty per slot), tensor memory\'s address, then the tiles."""')
        out()
        ring_fields(out, plan)
        for i in plan.mma_barriers:
            out(f"mma_done_{ident(plan.groups[i].gp.group.name)}: cute.struct.MemRange[cutlass.Int64, 1]")
        if plan.tmem is not None:
            out("tmem_holder: cutlass.Int32")
        # swizzled (1024-byte aligned) tiles first, then the plain ones: no padding between them (the resource
        # model's layout order, `aref.resources.memory.smem_plan`)
        tile_fields(out, sorted(_buffers(plan, owned=True), key=lambda b: b.align != SWIZZLE_ALIGN))
    return out.text()


def _plain_tensors(plan: Sm100Plan) -> list[str]:
    """Tensors whose boxes TMA cannot describe: the load warp reads them with ordinary loads (passed as they are)."""
    names = {t for t, _ in plan.copies}
    return [t.name for t in plan.tensors if t.name in names and not t.empty]


def _kernel_params(plan: Sm100Plan) -> list[str]:
    out = []
    for t in plan.tmas:
        out += [f"{t.name}: cute.CopyAtom", f"{t.name}_gmem: cute.Tensor"]
    out += [f"{name}: cute.Tensor" for name in _plain_tensors(plan)]
    out += [f"mma{i}: cute.TiledMma" for i in range(len(plan.mmas))]
    out += [f"zmma{i}: cute.TiledMma" for i in range(len(plan.zero_mmas))]
    for b in _buffers(plan):
        out.append(layout_param(b))
    return out


def _kernel(plan: Sm100Plan, roles) -> str:
    out = Lines()
    kernel_prologue(out, plan, _kernel_params(plan), "warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())",
                    _buffers(plan, owned=True))
    for i in plan.mma_barriers:
        name = f"mma_done_{ident(plan.groups[i].gp.group.name)}"
        out(f"{name} = storage.{name}.data_ptr()")
    if plan.tmem is not None:
        out("tmem_holder = storage.tmem_holder.ptr")
    with out.block("if warp == 0:"):
        for t in plan.tmas:
            out(f"cpasync.prefetch_descriptor({t.name})")
        with out.block("with cute.arch.elect_one():"):
            init_rings(out, plan)
            for i in plan.mma_barriers:
                out(f"cute.arch.mbarrier_init(mma_done_{ident(plan.groups[i].gp.group.name)}, 1)")
            out("cute.arch.mbarrier_init_fence()")
        if plan.zero_tile is not None:
            out("sm100.fill_zeros(s_zero, cute.arch.lane_idx())  # operands of the tensor core's zero fills")
    if plan.tmem is not None:
        alloc = plan.group_of(plan.tmem.allocator)
        with out.block(f"if warp == {alloc.warp0}:  # {alloc.gp.group.name} allocates tensor memory for all roles"):
            out("cute.arch.alloc_tmem(TMEM_COLUMNS, tmem_holder)")
            out("cute.arch.relinquish_tmem_alloc_permit()")
    out("# every role sees initialised barriers (and tensor memory's address) before its first wait or arrive")
    out("cute.arch.sync_threads()")
    first = True
    by_warp = sorted(plan.groups, key=lambda g: g.warp0)
    call = {g.index: f["calls"][g.index] for f in roles["functions"] for g in f["groups"]}
    for g in by_warp:
        kw = "if" if first else "elif"
        first = False
        cond = f"warp == {g.warp0}" if g.gp.group.warps == 1 else f"warp >= {g.warp0} and warp < {g.warp0 + 4}"
        with out.block(f"{kw} {cond}:  # {g.gp.group.name}"):
            out(call[g.index])
    used = sum(g.gp.group.warps for g in plan.groups)
    if used < plan.warps:
        with out.block("else:  # idle warps of the last warp group: they only join its register reallocation"):
            out(f"cute.arch.setmaxregister_decrease({_one_warp_regs(plan)})")
    return out.text()


def _one_warp_regs(plan: Sm100Plan) -> int:
    return next((g.gp.group.regs for g in plan.groups if g.gp.group.warps == 1), 48)


def _major(m: str) -> str:
    return f"OperandMajorMode.{m}"


def _host(plan: Sm100Plan) -> str:
    ws = plan.ws
    out = Lines()
    out("@cute.jit")
    stream = stream_param(plan)
    # a tensor with no elements is not passed (CuTe has no empty layouts; its loads are zero fills)
    out(f"def host({', '.join(f'{t.name}: cute.Tensor' for t in plan.tensors if not t.empty)}, {stream}: CUstream):")
    out.depth += 1
    out('"""Build the tcgen05 tilings, swizzled shared layouts and TMA atoms, then launch the grid on `stream`."""')
    for i, c in enumerate(plan.mmas):
        src = ", tcgen05.OperandSource.TMEM" if c.a_source == "TMEM" else ""
        out(f"mma{i} = sm100_utils.make_trivial_tiled_mma({dt(c.a_dtype)}, {dt(c.b_dtype)}, {_major(c.a_major)}, "
            f"{_major(c.b_major)}, cutlass.Float32, tcgen05.CtaGroup.ONE, ({c.m}, {c.n}){src})")
    for i, (m, n) in enumerate(plan.zero_mmas):
        out(f"zmma{i} = sm100_utils.make_trivial_tiled_mma(cutlass.Float16, cutlass.Float16, OperandMajorMode.K, "
            f"OperandMajorMode.K, cutlass.Float32, tcgen05.CtaGroup.ONE, ({m}, {n}))  # zero fills")
    staging = {b.name for b in plan.staging_buffers()}
    for b in _buffers(plan):
        out(layout_line(b, b.name in staging))
    for t in plan.tmas:
        buf = plan.buffer(t.buffer) if t.buffer not in staging else plan.staging_by_name(t.buffer)
        box = ", ".join(map(str, t.box)) + ("," if len(t.box) == 1 else "")
        if t.store:
            op = "CopyReduceBulkTensorTileS2GOp()" if t.reduce else "CopyBulkTensorTileS2GOp()"
            layout = buf.layout if t.buffer in staging else f"cute.slice_({buf.layout}, ({slot_modes(buf)}, 0))"
        else:
            op = "CopyBulkTensorTileG2SOp()"
            layout = f"cute.slice_({buf.layout}, ({slot_modes(buf)}, 0))"
        out(f"{t.name}, {t.name}_gmem = cpasync.make_tiled_tma_atom(cpasync.{op}, {t.tensor}, {layout}, ({box}))")
    args = []
    for t in plan.tmas:
        args += [t.name, f"{t.name}_gmem"]
    args += _plain_tensors(plan)
    args += [f"mma{i}" for i in range(len(plan.mmas))] + [f"zmma{i}" for i in range(len(plan.zero_mmas))]
    args += [b.layout for b in _buffers(plan)]
    launch(out, ws, args, stream)
    return out.text()
