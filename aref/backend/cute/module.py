"""Assemble one CuTe DSL module per kernel specialization from a `KernelPlan`.

Module layout (what a reader finds, top to bottom):
  docstring   the schedule: roles, channels with depths / arrival counts / transaction bytes, registers
  constants   tile and problem sizes of this specialization
  storage     a `@cute.struct` with every ring's mbarriers and 1024-byte-aligned tiles
  roles       one `@cute.jit` function per role; groups whose code is identical up to constants share one
  kernel      barrier init by one elected thread, CTA sync, dispatch on the warp-group index
  host        `@cute.jit host(*tensors, stream)`: wgmma tilings, swizzled layouts, TMA atoms, launch on `stream`
  fake args   `make_fake_args()` (fake tensors and a fake stream) for compiling without a GPU
"""
from __future__ import annotations

import re

from aref.backend.cute import cluster
from aref.backend.cute.analysis import CUTLASS_DTYPE, KernelPlan, MmaConfig, ident, ir_namer
from aref.backend.cute.merge_roles import merge_roles, rename_identifier
from aref.backend.cute.role import RoleEmitter
from aref.backend.cute.source import Lines, prune_unused
from aref.ir import DType
from aref.resources.memory import swizzled
from aref.backend.tile_order import group_rows, tile_coords_source

HEADER_IMPORTS = """\
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cuda.bindings.driver import CUstream
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.tensor_utils import LayoutEnum

from aref.backend.cute import support as aref"""


def dt(d: DType) -> str:
    return f"cutlass.{CUTLASS_DTYPE[d]}"


def emit_module(plan: KernelPlan) -> str:
    """The generated module's source text."""
    ws = plan.ws
    plan.namer = ir_namer(ws)
    roles = _roles(plan)
    parts = [HEADER_IMPORTS, _constants(plan), _storage(plan)]
    parts += [r["source"] for r in roles["functions"]]
    parts += [_kernel(plan, roles), _host(plan), _fake_args(plan)]
    return _docstring(plan, roles) + "\n" + "\n\n\n".join(p.rstrip("\n") for p in parts) + "\n"


# ----------------------------------------------------------------------------------------------- roles
FUNCTION_OF_ROLE = {"tma_producer": "producer", "mma_consumer": "consumer"}


def _roles(plan: KernelPlan, emitter=RoleEmitter) -> dict:
    """Emit every group's role function; merge groups whose code differs only in constants and names."""
    rendered = []
    for g in plan.groups:
        em = emitter(plan, g)
        setup, body = em.emit()
        rendered.append((g, em, setup, body))
    functions: list[dict] = []
    calls: dict[int, str] = {}
    for g, em, setup, body in rendered:
        base = FUNCTION_OF_ROLE.get(g.role, "compute" if emitter is RoleEmitter else g.role)
        text_lines = _function_lines(em, setup, body)
        for f in functions:
            merged = merge_roles(f, g, em, text_lines)
            if merged:
                calls[g.index] = merged
                break
        else:
            f = {"base": base, "lines": text_lines, "groups": [g], "args": list(em.args), "renames": {},
                 "locals": set(em.names.used)}
            functions.append(f)
    used = {}
    for f in functions:
        n = used.get(f["base"], 0)
        used[f["base"]] = n + 1
        f["name"] = f["base"] if sum(x["base"] == f["base"] for x in functions) == 1 else f"{f['base']}{n}"
    for f in functions:
        f["source"] = _function_source(plan, f, {x["name"] for x in functions})
    return {"functions": functions}


def _function_lines(em: RoleEmitter, setup: Lines, body: Lines) -> list[str]:
    lines = body.lines[:]
    # register reallocation comes first in the role, before any setup
    head = []
    while lines and (lines[0].strip().startswith("# aref-ir") and "setmaxnreg" in lines[0]
                     or lines[0].strip().startswith("cute.arch.setmaxregister")):
        head.append(lines.pop(0))
    setup_lines = setup.lines
    plan = em.plan
    if plan.persistent or plan.raster > 1:
        setup_lines = [line for line in setup_lines if line.strip() != "block = cute.arch.block_idx()"]
    if plan.raster > 1 and not plan.persistent:
        # a 1-D launch of every tile; each CTA finds its coordinates in the rasterized order
        setup_lines = [f"    block = {tile_coords_source('cute.arch.block_idx()[0]', plan.ws.grid, plan.raster)}"
                       "  # rasterized tile order"] + setup_lines
    if plan.persistent:
        loop = ["    # persistent: this CTA walks the tiles round-robin, every ring continuing across tiles",
                "    first_tile, num_ctas = cute.arch.block_idx()[0], cute.arch.grid_dim()[0]"]
        loop += ["    " + line for line in em.base_inits.values()]
        # epilogue overlap: copy COPY of the consumer takes the CTA's tiles with tile_count % 2 == COPY
        copied = plan.overlap is not None and em.g.index == plan.overlap.group
        start, step = ("first_tile + COPY * num_ctas", "2 * num_ctas") if copied else ("first_tile", "num_ctas")
        loop += [f"    for tile in cutlass.range({start}, NUM_TILES, {step}, unroll=1):",
                 "        tile_count = (tile - first_tile) // num_ctas",
                 f"        block = {tile_coords_source('tile', plan.ws.grid, plan.raster)}"]
        loop += ["        " + line for line in em.bases.values()]
        advance = em.advance_bases()
        if advance:
            advance = ["        # this tile's items advance the rings it used"] + ["        " + x for x in advance]
        lines = ["    " + line if line else line for line in lines]
        if copied:
            from aref.backend.cute.overlap import wrap_tile_body
            lines = wrap_tile_body(plan, plan.overlap, lines, " " * 8)
        lines = loop + lines + advance
    if em.producer:
        # the whole group reallocates registers; one warp waits, arms the barriers and issues the copies
        lines = ["    # one warp of the group issues every TMA load", "    if warp_in_group == 0:"] + \
                ["    " + line if line else line for line in lines]
    return head + prune_unused(setup_lines, head + lines + em.final.lines) + lines + em.final.lines


def _grid3(grid) -> tuple[int, int, int]:
    g = tuple(grid) + (1,) * (3 - len(grid))
    return g[0], g[1], g[2]


def _function_source(plan: KernelPlan, f: dict, reserved=frozenset()) -> str:
    g0 = f["groups"][0]
    import os
    for p, per_group in list(f["renames"].items()):
        variants = [p] + list(per_group.values())
        pre = os.path.commonprefix(variants)
        suf = os.path.commonprefix([v[::-1] for v in variants])[::-1]
        new = pre + suf if len(pre) + len(suf) <= min(map(len, variants)) else pre
        new = new.replace("__", "_").strip("_")
        # nor shadow a role function, nor a local of the function (a register tile `s` beside the ring `s_x`)
        if new in variants or not new.isidentifier() or new in reserved or new in f["locals"]:
            new = "own_" + re.sub(r"^s_", "", p)        # this group's own buffer / barrier
        if new != p and new not in f["args"]:
            f["args"][f["args"].index(p)] = new
            f["lines"] = [rename_identifier(line, p, new) for line in f["lines"]]
            per_group[g0.index] = p
            f["renames"][new] = per_group
            del f["renames"][p]
    params = list(f["args"])
    numbers = f.get("numbers", {})
    sig = params + [f"{n}: cutlass.Constexpr" for n in numbers] + (["GROUP: cutlass.Constexpr"] if f.get("guarded") else [])
    ov = plan.overlap
    copied = ov is not None and any(g.index == ov.group for g in f["groups"])
    if copied:     # epilogue overlap: which copy runs the role, and its own named barrier
        sig += ["COPY: cutlass.Constexpr", "GROUP_BARRIER: cutlass.Constexpr"]
    out = Lines()
    out("@cute.jit")
    out(f"def {f['name']}({', '.join(sig)}):")
    out.depth += 1
    who = ", ".join(f"group {g.index} '{g.gp.group.name}' ({g.gp.group.regs} registers)" for g in f["groups"])
    if copied:
        who += f" and its copy, group {ov.copy_index}: copy COPY takes the CTA's tiles with tile_count % 2 == COPY"
    doc = f'"""{g0.description}: {who}.'
    if numbers:
        doc += "\n\n    Per-group constants: " + ", ".join(numbers) + "."
    out(doc + '"""' if not numbers else doc + '\n    """')
    for line in f["lines"]:
        out.lines.append(line)
    # calls: one per group with its own names and constants
    f["calls"] = {}
    for k, g in enumerate(f["groups"]):
        args = [f["renames"].get(p, {}).get(g.index, p) for p in params]
        args += [f"{n}={pq[0] if k == 0 else pq[1]}" for n, pq in numbers.items()]
        args += [f"GROUP={g.index}"] if f.get("guarded") else []
        for c, index in enumerate((g.index, ov.copy_index) if copied and g.index == ov.group else (g.index,)):
            more = [f"COPY={c}", f"GROUP_BARRIER={ov.group_barriers[c]}"] if copied else []
            f["calls"][index] = f"{f['name']}({', '.join(args + more)})"
    return out.text()


# --------------------------------------------------------------------------------------- module parts
def _docstring(plan: KernelPlan, roles) -> str:
    ws = plan.ws
    lines = [f'"""aref kernel `{ws.name}` for {ws.arch}, generated from its Barrier IR by aref.backend.cute.', ""]
    shapes = ", ".join(f"{t.name} {'×'.join(map(str, t.shape))} {t.dtype.value}" for t in plan.tensors)
    lines.append(f"Problem: {shapes}; grid {tuple(ws.grid)}, {plan.threads} threads, "
                 f"{plan.smem_bytes} bytes of shared memory.")
    lines.append("Warp groups:")
    for g in plan.groups:
        gp = g.gp
        extra = f", {gp.stages + 1} pipeline stages" if gp.stages else ""
        extra += f", wgmma depth {gp.mma_depth}" if gp.mma_depth else ""
        lines.append(f"  {g.index} {gp.group.name:<10} {g.description}; {gp.group.regs} registers{extra}")
    if plan.overlap is not None:
        from aref.backend.cute.overlap import describe
        lines.append(describe(plan))
    if plan.cluster is not None:
        lines.append(cluster.describe(plan))
    lines.append("Channels (mbarrier rings; full/empty arrival counts):")
    for cp in plan.channels:
        ch = cp.ch
        pay = ", ".join(f"{'×'.join(map(str, b.tile.shape))} {b.tile.dtype.value}" for b in cp.buffers)
        lines.append(channel_line(plan, cp, pay, ch.kind))
    if ws.pingpong:
        lines.append("Ping-pong order on the tensor cores: "
                     + " -> ".join(ws.groups[g].group.name for g in ws.pingpong)
                     + " (named barriers " + ", ".join(str(nb.id) for nb in ws.named_barriers) + ")")
    for b in plan.aliased():
        host = plan.host_of(b)
        at = f" at byte {b.item.offset}" if b.item.offset else ""
        what = f"The slot {b.name}" if b in plan.aliased_rings() else f"The store staged in {b.name}"
        lines.append(f"{what} reuses {host.name}{at}, idle by then.")
    for (tensor, box), why in sorted(plan.copies.items()):
        lines.append(f"Boxes {box} of {tensor} are loaded with ordinary loads: TMA cannot describe them ({why}).")
    for op_id, why in plan.direct.items():
        tensor = next(t for t in plan.tensors if t.name == _store_tensor(plan, op_id))
        lines.append(f"Stores to {tensor.name} go straight from registers, masked: TMA cannot describe them ({why}).")
    lines.append("")
    lines.append("Every Barrier IR synchronisation op appears once, under a `# aref-ir[group#op]` tag, in its")
    lines.append("group's role function and in the IR's order.")
    lines.append('"""')
    return "\n".join(lines)


def channel_line(plan, cp, where: str, how: str) -> str:
    """The docstring's line of one channel: depth, where its slots are, how they fill, who produces and
    consumes, the arrival counts."""
    ch = cp.ch
    names = {g.gp.group.id: g.gp.group.name for g in plan.groups}
    return (f"  {cp.name}: depth {ch.depth}, [{where}], {how}" + (f" {ch.tx_bytes} B" if ch.tx_bytes else "")
            + f", {names[ch.producer]} -> {', '.join(names[c] for c in ch.consumers)}, "
              f"full {ch.full_count} / empty {cluster.empty_count(plan, cp)}")


def constexpr_lines(ws) -> list[str]:
    """The specialization's numeric constexprs as module constants."""
    return [f"{ident(k).upper()} = {v!r}" for k, v in ws.constexprs.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)]


def ring_fields(out: Lines, plan) -> None:
    """The shared-storage fields of every ring's mbarriers (full, empty per slot)."""
    for cp in plan.channels:
        out(f"{cp.name}_full: cute.struct.MemRange[cutlass.Int64, {cp.ch.depth}]")
        out(f"{cp.name}_empty: cute.struct.MemRange[cutlass.Int64, {cp.ch.depth}]")


def tile_fields(out: Lines, buffers) -> None:
    """The shared-storage fields of tiles, each at its alignment (1024 bytes for swizzled 2-D tiles, the
    resource model's layout on Hopper)."""
    for b in buffers:
        out(f"{b.name}: cute.struct.Align[cute.struct.MemRange[{dt(b.tile.dtype)}, "
            f"{b.tile.numel * b.depth}], {b.align}]")


def grid_lines(plan: KernelPlan) -> list[str]:
    """The launch grid constants: the tile grid, (persistent) the tiles and one CTA per SM walking them, or
    (rasterized) one CTA per tile on a 1-D grid."""
    grid = _grid3(plan.ws.grid)
    order = f" in groups of {group_rows(grid[0], plan.raster)} rows" if plan.raster > 1 else ""
    if plan.persistent:
        return [f"NUM_TILES = {plan.tiles}  # the tile grid {grid}, walked by persistent CTAs{order}",
                f"GRID = ({min(plan.ctas, plan.tiles)}, 1, 1)  # one CTA per SM"]
    if plan.raster > 1:
        return [f"GRID = ({plan.tiles}, 1, 1)  # the tile grid {grid}, one CTA per tile{order}"]
    return [f"GRID = {grid}"]


def _constants(plan: KernelPlan) -> str:
    ws = plan.ws
    out = grid_lines(plan)
    out.append(f"THREADS = {plan.threads}  # {len(ws.groups) + (plan.overlap is not None)} warp groups")
    return "\n".join(out + constexpr_lines(ws))


def _storage(plan: KernelPlan) -> str:
    out = Lines()
    out("@cute.struct")
    with out.block("class SharedStorage:"):
        out('"""Every ring\'s mbarriers (full, empty per slot), then its tiles and the store staging tiles."""')
        out()
        ring_fields(out, plan)
        tile_fields(out, plan.buffers())
    return out.text()


def _store_tensor(plan: KernelPlan, op_id: int) -> str:
    for gp in plan.ws.groups:
        for op in gp.all_ops():
            if id(op) == op_id:
                return plan.tensor_of(op.operands[0]).name
    raise KeyError(op_id)


def _plain_tensors(plan: KernelPlan) -> list[str]:
    """Tensors the kernel reads or writes with ordinary loads and stores (passed as they are)."""
    names = {t for t, _ in plan.copies} | {_store_tensor(plan, i) for i in plan.direct}
    return [t.name for t in plan.tensors if t.name in names and not t.empty]


def _kernel_params(plan: KernelPlan) -> list[str]:
    out = []
    for t in plan.tmas:
        out += [f"{t.name}: cute.CopyAtom", f"{t.name}_gmem: cute.Tensor"]
    out += [f"{name}: cute.Tensor" for name in _plain_tensors(plan)]
    out += [f"mma{i}: cute.TiledMma" for i in range(len(plan.mmas))]
    for b in plan.buffers() + plan.aliased():
        out.append(layout_param(b))
    return out


def layout_param(b) -> str:
    """The kernel parameter of buffer `b`'s layout: swizzled tiles have a composed (swizzle ∘ layout) one."""
    return f"{b.layout}: {'cute.ComposedLayout' if swizzled(b.tile) else 'cute.Layout'}"


def layout_line(b, staging: bool) -> str:
    """The host's construction of buffer `b`'s shared layout (`depth` slots; a staging tile has one): a swizzled
    tile (`aref.resources.memory.swizzled`) takes the widest swizzle of its rows, as wgmma / tcgen05 operands and
    TMA epilogues need; any other tile is plain row-major, so an (R, 1) tile is laid out as an (R,) vector."""
    r = b.tile.shape
    if staging and swizzled(b.tile):
        return (f"{b.layout} = cute.slice_(sm90_utils.make_smem_layout_epi({dt(b.tile.dtype)}, "
                f"LayoutEnum.ROW_MAJOR, {tuple(r)}, 1), (None, None, 0))")
    if swizzled(b.tile):
        return (f"{b.layout} = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, ({r[0]}, 1, {r[1]}), "
                f"{dt(b.tile.dtype)}, {b.depth})")
    depth = () if staging else (b.depth,)
    shape = tuple(r) + depth
    if len(r) == 1:
        return f"{b.layout} = cute.make_layout({shape})"
    stride = (r[1], 1) + ((r[0] * r[1],) if depth else ())
    return f"{b.layout} = cute.make_layout({shape}, stride={stride})  # plain row-major: not whole swizzle atoms"


def slot_modes(b) -> str:
    """The tile modes of buffer `b` before its slot index."""
    return "None, None" if len(b.tile.shape) == 2 else "None"


def kernel_prologue(out: Lines, plan, params: list[str], warp_index: str, buffers) -> None:
    """The kernel's signature and its first lines: the warp (group) index, the shared storage, every ring's
    mbarrier pointers and the shared tiles as tensors."""
    out("@cute.kernel")
    out(f"def {ident(plan.ws.name)}_kernel(")
    for p in params:
        out(f"    {p},")
    out("):")
    out.depth += 1
    out(warp_index)
    out("storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)")
    for cp in plan.channels:
        out(f"{cp.name}_full = storage.{cp.name}_full.data_ptr()")
        out(f"{cp.name}_empty = storage.{cp.name}_empty.data_ptr()")
    for b in buffers:
        if swizzled(b.tile):
            out(f"{b.name} = storage.{b.name}.get_tensor({b.layout}.outer, swizzle={b.layout}.inner)")
        else:
            out(f"{b.name} = storage.{b.name}.get_tensor({b.layout})")
    rings = {b.item.key: b for cp in plan.channels for b in cp.buffers if b.item is not None}
    for cp in plan.channels:
        for b in cp.buffers:
            if b.item is None or b.item.alias_of is None:
                continue
            # the slot of a channel after the loop in a slot dead by then (`aref.resources.memory.smem_plan`)
            host = rings[b.item.alias_of]
            offset = b.item.offset // host.tile.dtype.nbytes
            recast = "recast_tile" if swizzled(b.tile) else "recast_vector"
            out(f"{b.name} = aref.{recast}({host.name}, {b.layout}, {dt(b.tile.dtype)}"
                + (f", {offset})" if offset else ")") + f"  # in {host.name}, dead by then")


def init_rings(out: Lines, plan) -> None:
    """Every ring's mbarriers initialised (by the one elected thread the caller is in)."""
    for cp in plan.channels:
        ch = cp.ch
        out(f"aref.init_ring({cp.name}_full, {cp.name}_empty, {ch.depth}, {ch.full_count}, "
            f"{cluster.empty_count(plan, cp)})  # {ch.name}")


def _kernel(plan: KernelPlan, roles) -> str:
    out = Lines()
    kernel_prologue(out, plan, _kernel_params(plan),
                    "warp_group = cute.arch.make_warp_uniform(cute.arch.warp_idx() // 4)", plan.buffers())
    with out.block("if cute.arch.warp_idx() == 0:"):
        for t in plan.tmas:
            out(f"cpasync.prefetch_descriptor({t.name})")
        with out.block("with cute.arch.elect_one():"):
            init_rings(out, plan)
            out("cute.arch.mbarrier_init_fence()")
    if plan.cluster is None:
        out("# every role must see initialised barriers before its first wait or arrive")
        out("cute.arch.sync_threads()")
    else:   # the peer's multicasts and remote arrives too
        cluster.sync(out, "every role of both CTAs must see initialised barriers before any wait, arrive or TMA")
    first = True
    for f in roles["functions"]:
        for g in f["groups"]:
            kw = "if" if first else "elif"
            first = False
            with out.block(f"{kw} warp_group == {g.index}:  # {g.gp.group.name}"):
                out(f["calls"][g.index])
    if plan.overlap is not None:      # the consumer's second copy: its own branch, the role function's call
        ov = plan.overlap
        call = next(f["calls"][ov.copy_index] for f in roles["functions"] if ov.copy_index in f["calls"])
        with out.block(f"elif warp_group == {ov.copy_index}:  # {plan.groups[ov.group].gp.group.name}, copy 1"):
            out(call)
    if plan.cluster is not None:
        cluster.sync(out, "no CTA exits while its peer may still multicast into it or arrive on its barriers")
    return out.text()


def _mma_line(i: int, cfg: MmaConfig) -> str:
    src = ", a_source=warpgroup.OperandSource.RMEM" if cfg.a_source == "RMEM" else ""
    return (f"mma{i} = sm90_utils.make_trivial_tiled_mma({dt(cfg.a_dtype)}, {dt(cfg.b_dtype)}, "
            f"OperandMajorMode.{cfg.a_major}, OperandMajorMode.{cfg.b_major}, cutlass.Float32, (1, 1, 1), "
            f"tiler_mn=(64, {cfg.n}){src})")


def stream_param(plan: KernelPlan) -> str:
    """The host function's stream parameter: `stream`, unless a tensor already has that name."""
    taken = {t.name for t in plan.tensors}
    name = "stream"
    while name in taken:
        name += "_"
    return name


def _host(plan: KernelPlan) -> str:
    ws = plan.ws
    out = Lines()
    stream = stream_param(plan)
    out("@cute.jit")
    out(f"def host({', '.join(f'{t.name}: cute.Tensor' for t in plan.tensors if not t.empty)}, {stream}: CUstream):")
    out.depth += 1
    out('"""Build the wgmma tilings, swizzled shared layouts and TMA atoms, then launch the grid on `stream`."""')
    for i, cfg in enumerate(plan.mmas):
        out(_mma_line(i, cfg))
    staged = {b.name for b in plan.staging.values()}
    for b in plan.buffers() + plan.aliased():
        out(layout_line(b, b.name in staged))
    for t in plan.tmas:
        buf = plan.buffer(t.buffer)
        box = ", ".join(map(str, t.box)) + ("," if len(t.box) == 1 else "")
        if t.store:
            op = "CopyReduceBulkTensorTileS2GOp()" if t.reduce else "CopyBulkTensorTileS2GOp()"
            layout, extra = buf.layout, ""
        else:
            op, extra = cluster.host_atom(plan, t.name)
            layout = f"cute.slice_({buf.layout}, ({slot_modes(buf)}, 0))"
        out(f"{t.name}, {t.name}_gmem = cpasync.make_tiled_tma_atom(cpasync.{op}, {t.tensor}, {layout}, ({box}){extra})")
    args = []
    for t in plan.tmas:
        args += [t.name, f"{t.name}_gmem"]
    args += _plain_tensors(plan)
    args += [f"mma{i}" for i in range(len(plan.mmas))]
    args += [b.layout for b in plan.buffers() + plan.aliased()]
    launch(out, ws, args, stream, plan.cluster)
    return out.text()


def launch(out: Lines, ws, args: list[str], stream: str, clustered=None) -> None:
    """The host's launch of the kernel with `args`: the grid, one CTA per SM, on `stream` (in clusters of
    `clustered.shape`, a `cluster.ClusterPlan`, if given)."""
    out(f"{ident(ws.name)}_kernel(")
    out(f"    {', '.join(args)},")
    out(").launch(")
    out("    grid=GRID,")
    if clustered is not None:
        out(f"    cluster={clustered.shape},")
    out("    block=(THREADS, 1, 1),")
    out("    smem=SharedStorage.size_in_bytes(),")
    out("    # one CTA per SM: without it ptxas ignores setmaxnreg (warning C7508)")
    out("    min_blocks_per_mp=1,")
    out(f"    stream={stream},")
    out(")")


def _fake_args(plan: KernelPlan) -> str:
    lines = ["def make_fake_args():",
             '    """Fake tensors of this specialization (tiled modes first, batch modes last) and a fake stream."""',
             "    return ["]
    for t in (t for t in plan.tensors if not t.empty):
        lines.append(f"        make_fake_compact_tensor({dt(t.dtype)}, {t.cute_shape}, stride_order={t.stride_order}, "
                     f"assumed_align={t.align}),  # {t.name}")
    lines.append(f"        make_fake_stream(),  # {stream_param(plan)}")
    lines.append("    ]")
    return "\n".join(lines)
