"""Role-based warp-specialized Hopper GEMM template, emitted as readable CuTe DSL source.

`emit_gemm_source(spec)` returns one Python module per specialization computing C = A·Bᵀ with A (M×K) and
B (N×K) both K-major and C (M×N) row-major. The module has the schedule as named constants, a
`SharedStorage` struct, small `@cute.jit` helpers for the aref ring, one `@cute.kernel` with two roles and a
`@cute.jit` host function `host(mA, mB, mC)` that builds the TMA atoms and launches a grid of
(M/BM)×(N/BN) CTAs. `make_fake_args()` returns fake tensors to compile it without a GPU.

Roles (one warp group each):
  producer  — setmaxnreg.dec; its first warp waits `empty`, arrives on `full` with the expected transaction
              bytes (one elected thread) and issues the TMA loads of the A and B tiles into the `ab` ring.
  consumers — setmaxnreg.inc; 1 or 2 groups (cooperative: group g owns rows [g·BM/G, (g+1)·BM/G)); each
              waits `full`, issues the wgmmas of one k-tile, commits a group and, after wait_group(P)
              proves the wgmmas of item k−P complete, releases that slot (one arrival per group on
              `empty`). After the loop: wait_group(0), release the last P slots, then the epilogue
              (fp32 → out dtype, stmatrix to shared memory, fence.proxy.async, named barrier, TMA store).

Every aref operation carries a `# aref:` comment with the slot and parity it uses, so tests can check the
generated code against the Barrier IR.
"""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

from aref.backend.cute.spec import CUTLASS_DTYPE, KernelSpec, SpecError, THREADS_PER_WARP_GROUP
from aref.backend.cute import toolchain

EPILOGUE_BARRIER_ID = 1  # named barrier 0 is __syncthreads


def emit_gemm_source(spec: KernelSpec, problem_shape: tuple[int, int, int] | None = None) -> str:
    """Generate the CuTe DSL module for a validated GEMM `spec`.

    `problem_shape` (M, N, K) fills dynamic extents for `make_fake_args`; extents fixed in the spec are used
    as they are. Raises `SpecError` if the spec is invalid or not a cooperative non-persistent GEMM.
    """
    spec.validate()
    if spec.kind != "gemm":
        raise SpecError(f"emit_gemm_source needs kind='gemm', got {spec.kind!r}")
    if spec.persistent:
        raise SpecError("the Hopper GEMM template is not persistent yet: set persistent=False")
    if len(spec.channels) != 1 or len(spec.channels[0].payloads) != 2:
        raise SpecError("the GEMM template expects exactly one channel carrying the A and B tiles")
    ab = spec.channels[0]
    if ab.consumer_arrivals != spec.num_consumers:
        raise SpecError(
            f"channel {ab.name!r}: consumer_arrivals={ab.consumer_arrivals}, but the template releases a slot "
            f"once per consumer warp group ({spec.num_consumers})"
        )
    t = spec.tile
    d, p = ab.depth, spec.mma_depth
    m, n, k = (spec.tensor(x).shape for x in ("A", "B", "A"))
    shape = {"M": m[0], "N": n[0], "K": k[1]}
    if problem_shape is not None:
        for key, value in zip("MNK", problem_shape):
            if shape[key] is not None and shape[key] != value:
                raise SpecError(f"problem_shape {key}={value} contradicts the spec's static extent {shape[key]}")
            shape[key] = value
    fake = {key: (str(v) if v is not None else f"cute.sym_int32(divisibility={div})")
            for (key, v), div in zip(shape.items(), (t.bm, t.bn, t.bk))}

    values = dict(
        BM=t.bm, BN=t.bn, BK=t.bk, D=d, P=p, G=spec.num_consumers, ch=ab.name,
        PRODUCER_REGS=spec.registers.producer, CONSUMER_REGS=spec.registers.consumer,
        A=CUTLASS_DTYPE[spec.a_dtype], B=CUTLASS_DTYPE[spec.b_dtype], C=CUTLASS_DTYPE[spec.out_dtype],
        ACC=CUTLASS_DTYPE[spec.acc_dtype], TX=ab.tx_bytes, EPI_BAR=EPILOGUE_BARRIER_ID,
        fakeM=fake["M"], fakeN=fake["N"], fakeK=fake["K"], smem=spec.smem_bytes,
        a_name=ab.payloads[0].name, b_name=ab.payloads[1].name, WG=THREADS_PER_WARP_GROUP,
    )
    # Sections carry their final indentation; blank lines between them follow PEP 8.
    kernel = "\n\n".join(part.strip("\n") for part in (
        _KERNEL_PROLOGUE, _PRODUCER, _consumer_mainloop(p), _epilogue(spec)))
    parts = [_HEADER, _CONSTANTS, _storage(spec), _RING_HELPERS, kernel, _HOST, _FAKE_ARGS]
    source = "\n\n\n".join(part.strip("\n") for part in parts) + "\n"
    return source.format(**values)


def write_gemm_module(spec: KernelSpec, path: str | os.PathLike[str], **kw) -> Path:
    """Emit the module for `spec` into `path` (parents created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(emit_gemm_source(spec, **kw))
    return path


def compile_gemm(spec: KernelSpec, arch: str, out_dir: str | os.PathLike[str], **kw) -> toolchain.CompileReport:
    """Emit, load and compile the GEMM for `spec` into `out_dir` (the source is kept there as gemm.py)."""
    out = Path(out_dir)
    module_path = write_gemm_module(spec, out / "gemm.py", **kw)
    return toolchain.compile_source_file(module_path, arch, out)


def variant_name(spec: KernelSpec) -> str:
    """A short stable name for a specialization, e.g. `gemm_f16_128x128x64_g2_d4_p1`."""
    t = spec.tile
    return (f"gemm_{spec.a_dtype}_{spec.out_dtype}_{t.bm}x{t.bn}x{t.bk}_g{spec.num_consumers}"
            f"_d{spec.channels[0].depth}_p{spec.mma_depth}")


# ----------------------------------------------------------------------------------------------- template
# Sections are str.format templates: single braces are substitutions, doubled braces are literal.
_HEADER = '''
"""Warp-specialized Hopper GEMM C = A·Bᵀ (A: M×K, B: N×K, both K-major; C: M×N row-major).

Generated by aref.backend.cute.hopper_gemm from a KernelSpec.
Schedule: tile {BM}×{BN}×{BK}; `{ch}` ring depth {D}; wgmma issue depth {P};
{G} cooperative consumer warp group(s); registers producer {PRODUCER_REGS}, consumer {CONSUMER_REGS};
{A} × {B} → {ACC} accumulate → {C}; {smem} bytes of shared memory.
"""
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.cute.runtime import make_fake_compact_tensor
from cutlass.tensor_utils import LayoutEnum
'''

_CONSTANTS = '''
BM, BN, BK = {BM}, {BN}, {BK}
A_DTYPE, B_DTYPE, C_DTYPE, ACC_DTYPE = cutlass.{A}, cutlass.{B}, cutlass.{C}, cutlass.{ACC}
AB_DEPTH = {D}  # slots in the `{ch}` ring
MMA_DEPTH = {P}  # wgmma groups left in flight: wgmma.wait_group(MMA_DEPTH)
NUM_CONSUMERS = {G}
WARP_GROUP_THREADS = {WG}
NUM_THREADS = WARP_GROUP_THREADS * (1 + NUM_CONSUMERS)
PRODUCER_REGS, CONSUMER_REGS = {PRODUCER_REGS}, {CONSUMER_REGS}
AB_TX_BYTES = {TX}  # bytes the two TMA loads of one slot deliver to `full`
AB_EMPTY_ARRIVALS = NUM_CONSUMERS  # one elected arrival per consumer warp group releases a slot
EPILOGUE_BARRIER_ID = {EPI_BAR}  # named barrier over the consumer threads only
'''


def _storage(spec: KernelSpec) -> str:
    staging = "" if spec.epilogue_aliases_ring else (
        "\n        sC: cute.struct.Align[cute.struct.MemRange[C_DTYPE, BM * BN], 1024]")
    why = ("The epilogue stages C in the A/B ring, which is idle once every k-tile has been consumed."
           if spec.epilogue_aliases_ring else
           "The ring is smaller than the C tile, so the epilogue has its own staging buffer.")
    return textwrap.dedent(f'''
    @cute.struct
    class SharedStorage:
        """Mbarriers of the `{{ch}}` ring, then its A and B tiles (1024-byte aligned for the swizzle).

        {why}
        """

        {{ch}}_full: cute.struct.MemRange[cutlass.Int64, AB_DEPTH]
        {{ch}}_empty: cute.struct.MemRange[cutlass.Int64, AB_DEPTH]
        sA: cute.struct.Align[cute.struct.MemRange[A_DTYPE, BM * BK * AB_DEPTH], 1024]
        sB: cute.struct.Align[cute.struct.MemRange[B_DTYPE, BN * BK * AB_DEPTH], 1024]{staging}
    ''')


_RING_HELPERS = '''
@cute.jit
def ring_slot(k):
    """Slot of item k in a ring of AB_DEPTH slots."""
    return k % AB_DEPTH


@cute.jit
def ring_parity(k):
    """Phase parity of item k: flips each time the ring wraps around."""
    return (k // AB_DEPTH) % 2


@cute.jit
def init_ring(full, empty):
    """Initialise every slot's barriers (unrolled, so the PTX holds one mbarrier.init per barrier)."""
    for slot in cutlass.range_constexpr(AB_DEPTH):
        # aref: init {ch} slot=slot full=1 (TMA arrive_and_expect_tx) empty={G}
        cute.arch.mbarrier_init(full + slot, 1)
        cute.arch.mbarrier_init(empty + slot, AB_EMPTY_ARRIVALS)
    cute.arch.mbarrier_init_fence()


@cute.jit
def release_slot(empty, k, warp_in_group):
    """Consumer side of `consumed`: one elected thread per consumer warp group arrives on empty.

    Called only once wgmma.wait_group has shown that this group's wgmmas reading item k completed; the
    wgmma is warp-group collective, so one thread's completion covers the whole group.
    """
    if warp_in_group == 0:
        with cute.arch.elect_one():
            # aref: consumed {ch} slot=k%{D} arrive empty count=1 per consumer group
            cute.arch.mbarrier_arrive(empty + ring_slot(k))
'''

_KERNEL_PROLOGUE = '''
@cute.kernel
def gemm_kernel(
    tma_a: cute.CopyAtom,
    mA: cute.Tensor,
    tma_b: cute.CopyAtom,
    mB: cute.Tensor,
    tma_c: cute.CopyAtom,
    mC: cute.Tensor,
    tiled_mma: cute.TiledMma,
    a_smem_layout: cute.ComposedLayout,
    b_smem_layout: cute.ComposedLayout,
    c_smem_layout: cute.ComposedLayout,
):
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.warp_idx()
    warp_group = cute.arch.make_warp_uniform(tidx // WARP_GROUP_THREADS)
    tile_m, tile_n, _ = cute.arch.block_idx()

    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    {ch}_full = storage.{ch}_full.data_ptr()
    {ch}_empty = storage.{ch}_empty.data_ptr()
    sA = storage.sA.get_tensor(a_smem_layout.outer, swizzle=a_smem_layout.inner)
    sB = storage.sB.get_tensor(b_smem_layout.outer, swizzle=b_smem_layout.inner)

    if warp_idx == 0:
        cpasync.prefetch_descriptor(tma_a)
        cpasync.prefetch_descriptor(tma_b)
        cpasync.prefetch_descriptor(tma_c)
        with cute.arch.elect_one():
            init_ring({ch}_full, {ch}_empty)
    # Every role must see initialised barriers before its first wait or arrive.
    cute.arch.sync_threads()

    gA = cute.local_tile(mA, (BM, BK), (tile_m, None))  # (BM, BK, k_tiles)
    gB = cute.local_tile(mB, (BN, BK), (tile_n, None))  # (BN, BK, k_tiles)
    gC = cute.local_tile(mC, (BM, BN), (tile_m, tile_n))
    k_tiles = cute.size(gA, mode=[2])
'''

_PRODUCER = '''
    if warp_group == 0:
        # ---- producer role: one warp issues TMA; the group hands its registers to the consumers.
        cute.arch.setmaxregister_decrease(PRODUCER_REGS)
        if warp_idx == 0:
            tAsA, tAgA = cpasync.tma_partition(
                tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
            )
            tBsB, tBgB = cpasync.tma_partition(
                tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2)
            )
            for k in cutlass.range(k_tiles, unroll=1):
                slot = ring_slot(k)
                # aref: wait empty {ch} slot=k%{D} parity=((k//{D})%2)^1
                cute.arch.mbarrier_wait({ch}_empty + slot, ring_parity(k) ^ 1)
                # aref: put {ch} slot=k%{D} tma expect_tx={TX} payloads={a_name},{b_name}
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx({ch}_full + slot, AB_TX_BYTES)
                # cute.copy elects the issuing thread of a TMA load itself.
                cute.copy(tma_a, tAgA[(None, k)], tAsA[(None, slot)], tma_bar_ptr={ch}_full + slot)
                cute.copy(tma_b, tBgB[(None, k)], tBsB[(None, slot)], tma_bar_ptr={ch}_full + slot)
'''


def _consumer_mainloop(p: int) -> str:
    return _CONSUMER_MAINLOOP + (_RELEASE_IN_ORDER if p == 0 else _RELEASE_LAGGING)


_CONSUMER_MAINLOOP = '''
    else:
        # ---- consumer role: wgmma with the accumulator in registers.
        cute.arch.setmaxregister_increase(CONSUMER_REGS)
        consumer_tidx = tidx - WARP_GROUP_THREADS
        warp_in_group = cute.arch.make_warp_uniform(warp_idx % 4)
        thr_mma = tiled_mma.get_slice(consumer_tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc = cute.make_rmem_tensor(thr_mma.partition_C(gC).shape, ACC_DTYPE)
        # Zeroing once lets every wgmma accumulate, instead of carrying the scale-d flag across the loop.
        acc.fill(0.0)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        k_blocks = cute.size(tCrA, mode=[2])

        for k in cutlass.range(k_tiles, unroll=1):
            slot = ring_slot(k)
            # aref: wait full {ch} slot=k%{D} parity=(k//{D})%2
            cute.arch.mbarrier_wait({ch}_full + slot, ring_parity(k))
            warpgroup.fence()
            for kb in cutlass.range_constexpr(k_blocks):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, kb, slot)], tCrB[(None, None, kb, slot)], acc)
            warpgroup.commit_group()
'''.strip("\n") + "\n"

_RELEASE_IN_ORDER = '''
            # MMA_DEPTH == 0: this item's wgmmas are complete once wait_group(0) returns.
            warpgroup.wait_group(0)
            release_slot({ch}_empty, k, warp_in_group)
'''.strip("\n")

_RELEASE_LAGGING = '''
            # Keep MMA_DEPTH groups in flight; the group of item k - MMA_DEPTH is now complete.
            warpgroup.wait_group(MMA_DEPTH)
            if k >= MMA_DEPTH:
                release_slot({ch}_empty, k - MMA_DEPTH, warp_in_group)
        # Drain: the last MMA_DEPTH items (fewer when k_tiles < MMA_DEPTH) are released after wait_group(0).
        warpgroup.wait_group(0)
        for k in cutlass.range(cutlass.max(k_tiles - MMA_DEPTH, 0), k_tiles, unroll=1):
            release_slot({ch}_empty, k, warp_in_group)
'''.strip("\n")


def _epilogue(spec: KernelSpec) -> str:
    lines = ["", "        # ---- epilogue: fp32 accumulators -> C_DTYPE -> shared memory -> TMA store."]
    if spec.epilogue_aliases_ring:
        if spec.num_consumers > 1:
            lines += [
                "        # The staging tile aliases the ring: wait until every consumer group's wgmmas are done",
                "        # reading it (all TMA loads completed before the last `full` wait).",
                "        cute.arch.barrier(barrier_id=EPILOGUE_BARRIER_ID, number_of_threads=NUM_CONSUMERS * "
                "WARP_GROUP_THREADS)",
            ]
        else:
            lines += ["        # The staging tile aliases the ring; wait_group(0) above ended this group's reads of it."]
        lines.append("        # sA and sB are contiguous 1024-aligned blocks, so a C tile larger than the A ring runs on into B.")
        lines.append("        sC = cute.make_tensor(cute.recast_ptr(sA.iterator, c_smem_layout.inner, dtype=C_DTYPE), "
                     "c_smem_layout.outer)")
    else:
        lines.append("        sC = storage.sC.get_tensor(c_smem_layout.outer, swizzle=c_smem_layout.inner)")
    body = '''
        r2s_atom = sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, C_DTYPE, ACC_DTYPE)  # stmatrix
        r2s = cute.make_tiled_copy_C(r2s_atom, tiled_mma)
        tRS_sC = r2s.get_slice(consumer_tidx).partition_D(sC)
        tRS_acc = r2s.retile(acc)
        tRS_rC = cute.make_rmem_tensor_like(tRS_acc, C_DTYPE)
        tRS_rC.store(tRS_acc.load().to(C_DTYPE))
        cute.copy(r2s, tRS_rC, tRS_sC)
        # Generic-proxy smem writes must be visible to the async proxy (TMA) before the store reads them.
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=EPILOGUE_BARRIER_ID, number_of_threads=NUM_CONSUMERS * WARP_GROUP_THREADS)
        if warp_idx == WARP_GROUP_THREADS // 32:
            tCsC, tCgC = cpasync.tma_partition(
                tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), cute.group_modes(gC, 0, 2)
            )
            cute.copy(tma_c, tCsC, tCgC)
            cute.arch.cp_async_bulk_commit_group()
            # Shared memory must outlive the store's reads of it: wait before the CTA exits.
            cute.arch.cp_async_bulk_wait_group(0, read=True)
    '''
    return "\n".join(lines) + "\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8)


_HOST = '''
@cute.jit
def host(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
    """Build the wgmma tiling, the swizzled smem layouts and the TMA atoms; launch one CTA per C tile."""
    # Cooperative: NUM_CONSUMERS m64 wgmma atoms stacked along M, each warp group owning BM/NUM_CONSUMERS rows.
    tiled_mma = sm90_utils.make_trivial_tiled_mma(
        A_DTYPE, B_DTYPE, OperandMajorMode.K, OperandMajorMode.K, ACC_DTYPE,
        (NUM_CONSUMERS, 1, 1), tiler_mn=(64, BN),
    )
    a_smem_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BM, BN, BK), A_DTYPE, AB_DEPTH)
    b_smem_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BM, BN, BK), B_DTYPE, AB_DEPTH)
    c_smem_layout = cute.slice_(
        sm90_utils.make_smem_layout_epi(C_DTYPE, LayoutEnum.ROW_MAJOR, (BM, BN), 1), (None, None, 0)
    )
    tma_a, tma_mA = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileG2SOp(), mA, cute.slice_(a_smem_layout, (None, None, 0)), (BM, BK)
    )
    tma_b, tma_mB = cpasync.make_tiled_tma_atom(
        cpasync.CopyBulkTensorTileG2SOp(), mB, cute.slice_(b_smem_layout, (None, None, 0)), (BN, BK)
    )
    tma_c, tma_mC = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mC, c_smem_layout, (BM, BN))
    grid = (cute.size(mC, mode=[0]) // BM, cute.size(mC, mode=[1]) // BN, 1)
    gemm_kernel(
        tma_a, tma_mA, tma_b, tma_mB, tma_c, tma_mC, tiled_mma, a_smem_layout, b_smem_layout, c_smem_layout
    ).launch(
        grid=grid,
        block=(NUM_THREADS, 1, 1),
        smem=SharedStorage.size_in_bytes(),
        # One CTA per SM: without it ptxas ignores setmaxnreg (warning C7508).
        min_blocks_per_mp=1,
    )
'''

_FAKE_ARGS = '''
def make_fake_args():
    """Fake row-major A (M×K), B (N×K), C (M×N) to compile `host` without a GPU."""
    m, n, k = {fakeM}, {fakeN}, {fakeK}
    a = make_fake_compact_tensor(A_DTYPE, (m, k), stride_order=(1, 0), assumed_align=16)
    b = make_fake_compact_tensor(B_DTYPE, (n, k), stride_order=(1, 0), assumed_align=16)
    c = make_fake_compact_tensor(C_DTYPE, (m, n), stride_order=(1, 0), assumed_align=16)
    return [a, b, c]
'''
