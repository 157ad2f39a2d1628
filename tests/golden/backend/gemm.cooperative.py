"""aref kernel `gemm` for sm_90a, generated from its Barrier IR by aref.backend.cute.

Problem: A 256×256 f16, B 256×256 f16, C 256×256 f16; grid (2, 2), 384 threads, 197712 bytes of shared memory.
Warp groups:
  0 producer   TMA producer; 40 registers
  1 consumer0  MMA consumer (wgmma, TMA-store epilogue); 232 registers, 2 pipeline stages, wgmma depth 1
  2 consumer1  MMA consumer (wgmma, TMA-store epilogue); 232 registers, 2 pipeline stages, wgmma depth 1
Channels (mbarrier rings; full/empty arrival counts):
  ab: depth 5, [128×64 f16, 128×64 f16], tma 32768 B, producer -> consumer0, consumer1, full 1 / empty 2

Every Barrier IR synchronisation op appears once, under a `# aref-ir[group#op]` tag, in its
group's role function and in the IR's order.
"""
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cuda.bindings.driver import CUstream
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.tensor_utils import LayoutEnum

from aref.backend.cute import support as aref


GRID = (2, 2, 1)
THREADS = 384  # 3 warp groups
BM = 128
BN = 128
BK = 64


@cute.struct
class SharedStorage:
    """Every ring's mbarriers (full, empty per slot), then its tiles and the store staging tiles."""

    ab_full: cute.struct.MemRange[cutlass.Int64, 5]
    ab_empty: cute.struct.MemRange[cutlass.Int64, 5]
    s_ab_A: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, 40960], 1024]
    s_ab_B: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, 40960], 1024]
    s_C_consumer0: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, 8192], 1024]
    s_C_consumer1: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, 8192], 1024]


@cute.jit
def producer(ab_empty, ab_full, s_ab_A, tma_A, tma_A_gmem, s_ab_B, tma_B, tma_B_gmem):
    """TMA producer: group 0 'producer' (40 registers)."""
    # aref-ir[producer#0] setmaxnreg dec 40
    cute.arch.setmaxregister_decrease(40)
    tidx, _, _ = cute.arch.thread_idx()
    warp_in_group = cute.arch.make_warp_uniform(cute.arch.warp_idx() % 4)
    block = cute.arch.block_idx()
    ab_A_tma, A_tiles = cpasync.tma_partition(
        tma_A, 0, cute.make_layout(1), cute.group_modes(s_ab_A, 0, 2),
        cute.group_modes(cute.local_tile(tma_A_gmem, (128, 64), (None, None)), 0, 2),
    )
    ab_B_tma, B_tiles = cpasync.tma_partition(
        tma_B, 0, cute.make_layout(1), cute.group_modes(s_ab_B, 0, 2),
        cute.group_modes(cute.local_tile(tma_B_gmem, (128, 64), (None, None)), 0, 2),
    )
    # one warp of the group issues every TMA load
    if warp_in_group == 0:
        pid_m = block[0]
        pid_n = block[1]
        # ---- steady state: 4 iterations
        for k in cutlass.range(4, unroll=1):
            ab_slot = k % 5
            # aref-ir[producer#11] mbarrier_wait %ab.empty[%ab.slot] parity %ab.phase^1
            cute.arch.mbarrier_wait(ab_empty + ab_slot, 1 - ((k // 5) % 2))
            # aref-ir[producer#12] mbarrier_arrive_expect_tx %ab.full[%ab.slot] tx=32768B
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(ab_full + ab_slot, 32768)
            # aref-ir[producer#13] tma_load %A[%pid_m, %k] -> %ab.ring0[%ab.slot] bar %ab.full[%ab.slot] item %k tile=(128, 64)
            cute.copy(tma_A, A_tiles[None, pid_m, k], ab_A_tma[None, ab_slot], tma_bar_ptr=ab_full + ab_slot)
            # aref-ir[producer#14] tma_load %B[%pid_n, %k] -> %ab.ring1[%ab.slot] bar %ab.full[%ab.slot] item %k tile=(128, 64)
            cute.copy(tma_B, B_tiles[None, pid_n, k], ab_B_tma[None, ab_slot], tma_bar_ptr=ab_full + ab_slot)


@cute.jit
def consumer(ab_full, s_ab_A, mma0, s_ab_B, ab_empty, s_C_consumer, tma_store_C, tma_store_C_gmem, ROW_BLOCK: cutlass.Constexpr, GROUP_BARRIER: cutlass.Constexpr):
    """MMA consumer (wgmma, TMA-store epilogue): group 1 'consumer0' (232 registers), group 2 'consumer1' (232 registers).

    Per-group constants: ROW_BLOCK, GROUP_BARRIER.
    """
    # aref-ir[consumer0#0 consumer1#0] setmaxnreg inc 232
    cute.arch.setmaxregister_increase(232)
    tidx, _, _ = cute.arch.thread_idx()
    group_tidx = tidx % aref.WARP_GROUP_THREADS
    warp_in_group = cute.arch.make_warp_uniform(cute.arch.warp_idx() % 4)
    block = cute.arch.block_idx()
    thr_mma0 = mma0.get_slice(group_tidx)
    a_ab_A_rows = mma0.make_fragment_A(thr_mma0.partition_A(aref.row_block(s_ab_A, 64, 64, ROW_BLOCK)))
    b_ab_B = mma0.make_fragment_B(thr_mma0.partition_B(s_ab_B))
    acc = cute.make_rmem_tensor(thr_mma0.partition_shape_C((64, 128)), cutlass.Float32)
    C_staged_tma, C_tiles = cpasync.tma_partition(
        tma_store_C, 0, cute.make_layout(1), cute.group_modes(s_C_consumer, 0, 2),
        cute.group_modes(cute.local_tile(tma_store_C_gmem, (64, 128), (None, None)), 0, 2),
    )
    acc_f16 = cute.make_rmem_tensor(thr_mma0.partition_shape_C((64, 128)), cutlass.Float16)
    pid_m = block[0]
    pid_n = block[1]
    # ---- prologue: pipeline fill
    # aref-ir[consumer0#12 consumer1#12] mbarrier_wait %ab.full[%11] parity %11
    cute.arch.mbarrier_wait(ab_full, 0)
    # aref-ir[consumer0#17 consumer1#17] %acc.1 = mma_async %a.r0, %12, %acc
    aref.wgmma(mma0, acc, a_ab_A_rows[None, None, None, 0], b_ab_B[None, None, None, 0], accumulate=False)
    # aref-ir[consumer0#18 consumer1#18] mma_wait pending=0
    warpgroup.wait_group(0)
    # ---- steady state: 3 iterations
    for k in cutlass.range(3, unroll=1):
        ab_slot = (k + 1) % 5
        # aref-ir[consumer0#27 consumer1#27] mbarrier_wait %ab.full[%ab.slot.1] parity %ab.phase.1
        cute.arch.mbarrier_wait(ab_full + ab_slot, ((k + 1) // 5) % 2)
        # aref-ir[consumer0#32 consumer1#32] %acc.4 = mma_async %a.r0.1, %18, %acc.3
        aref.wgmma(mma0, acc, a_ab_A_rows[None, None, None, ab_slot], b_ab_B[None, None, None, ab_slot], accumulate=True)
        # aref-ir[consumer0#34 consumer1#34] mma_wait pending=1
        warpgroup.wait_group(1)
        # aref-ir[consumer0#35 consumer1#35] mbarrier_arrive %ab.empty[%ab.slot.2] item %k.1
        aref.arrive_once(ab_empty + (k % 5), warp_in_group)
    # ---- epilogue: pipeline drain
    # aref-ir[consumer0#41 consumer1#41] mma_wait pending=0
    warpgroup.wait_group(0)
    # aref-ir[consumer0#42 consumer1#42] mbarrier_arrive %ab.empty[%ab.slot.3] item %21
    aref.arrive_once(ab_empty + 3, warp_in_group)
    # ---- after the loop
    # aref-ir[consumer0#48 consumer1#48] store %C[%27, %pid_n.1] = %23 tile=(64, 128)
    acc_f16.store(acc.load().to(cutlass.Float16))
    aref.store_tile(mma0, acc_f16, s_C_consumer, group_tidx, barrier_id=GROUP_BARRIER)
    aref.issue_store(tma_store_C, C_staged_tma, C_tiles[None, 2 * pid_m + ROW_BLOCK, pid_n], warp_in_group)
    # shared memory must outlive the TMA stores that read it
    aref.staging_free(warp_in_group)


@cute.kernel
def gemm_kernel(
    tma_A: cute.CopyAtom,
    tma_A_gmem: cute.Tensor,
    tma_B: cute.CopyAtom,
    tma_B_gmem: cute.Tensor,
    tma_store_C: cute.CopyAtom,
    tma_store_C_gmem: cute.Tensor,
    mma0: cute.TiledMma,
    s_ab_A_layout: cute.ComposedLayout,
    s_ab_B_layout: cute.ComposedLayout,
    s_C_consumer0_layout: cute.ComposedLayout,
    s_C_consumer1_layout: cute.ComposedLayout,
):
    warp_group = cute.arch.make_warp_uniform(cute.arch.warp_idx() // 4)
    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    ab_full = storage.ab_full.data_ptr()
    ab_empty = storage.ab_empty.data_ptr()
    s_ab_A = storage.s_ab_A.get_tensor(s_ab_A_layout.outer, swizzle=s_ab_A_layout.inner)
    s_ab_B = storage.s_ab_B.get_tensor(s_ab_B_layout.outer, swizzle=s_ab_B_layout.inner)
    s_C_consumer0 = storage.s_C_consumer0.get_tensor(s_C_consumer0_layout.outer, swizzle=s_C_consumer0_layout.inner)
    s_C_consumer1 = storage.s_C_consumer1.get_tensor(s_C_consumer1_layout.outer, swizzle=s_C_consumer1_layout.inner)
    if cute.arch.warp_idx() == 0:
        cpasync.prefetch_descriptor(tma_A)
        cpasync.prefetch_descriptor(tma_B)
        cpasync.prefetch_descriptor(tma_store_C)
        with cute.arch.elect_one():
            aref.init_ring(ab_full, ab_empty, 5, 1, 2)  # ab
            cute.arch.mbarrier_init_fence()
    # every role must see initialised barriers before its first wait or arrive
    cute.arch.sync_threads()
    if warp_group == 0:  # producer
        producer(ab_empty, ab_full, s_ab_A, tma_A, tma_A_gmem, s_ab_B, tma_B, tma_B_gmem)
    elif warp_group == 1:  # consumer0
        consumer(ab_full, s_ab_A, mma0, s_ab_B, ab_empty, s_C_consumer0, tma_store_C, tma_store_C_gmem, ROW_BLOCK=0, GROUP_BARRIER=1)
    elif warp_group == 2:  # consumer1
        consumer(ab_full, s_ab_A, mma0, s_ab_B, ab_empty, s_C_consumer1, tma_store_C, tma_store_C_gmem, ROW_BLOCK=1, GROUP_BARRIER=2)


@cute.jit
def host(A: cute.Tensor, B: cute.Tensor, C: cute.Tensor, stream: CUstream):
    """Build the wgmma tilings, swizzled shared layouts and TMA atoms, then launch the grid on `stream`."""
    mma0 = sm90_utils.make_trivial_tiled_mma(cutlass.Float16, cutlass.Float16, OperandMajorMode.K, OperandMajorMode.K, cutlass.Float32, (1, 1, 1), tiler_mn=(64, 128))
    s_ab_A_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (128, 1, 64), cutlass.Float16, 5)
    s_ab_B_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (128, 1, 64), cutlass.Float16, 5)
    s_C_consumer0_layout = cute.slice_(sm90_utils.make_smem_layout_epi(cutlass.Float16, LayoutEnum.ROW_MAJOR, (64, 128), 1), (None, None, 0))
    s_C_consumer1_layout = cute.slice_(sm90_utils.make_smem_layout_epi(cutlass.Float16, LayoutEnum.ROW_MAJOR, (64, 128), 1), (None, None, 0))
    tma_A, tma_A_gmem = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), A, cute.slice_(s_ab_A_layout, (None, None, 0)), (128, 64))
    tma_B, tma_B_gmem = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), B, cute.slice_(s_ab_B_layout, (None, None, 0)), (128, 64))
    tma_store_C, tma_store_C_gmem = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), C, s_C_consumer0_layout, (64, 128))
    gemm_kernel(
        tma_A, tma_A_gmem, tma_B, tma_B_gmem, tma_store_C, tma_store_C_gmem, mma0, s_ab_A_layout, s_ab_B_layout, s_C_consumer0_layout, s_C_consumer1_layout,
    ).launch(
        grid=GRID,
        block=(THREADS, 1, 1),
        smem=SharedStorage.size_in_bytes(),
        # one CTA per SM: without it ptxas ignores setmaxnreg (warning C7508)
        min_blocks_per_mp=1,
        stream=stream,
    )


def make_fake_args():
    """Fake tensors of this specialization (tiled modes first, batch modes last) and a fake stream."""
    return [
        make_fake_compact_tensor(cutlass.Float16, (256, 256), stride_order=(1, 0), assumed_align=16),  # A
        make_fake_compact_tensor(cutlass.Float16, (256, 256), stride_order=(1, 0), assumed_align=16),  # B
        make_fake_compact_tensor(cutlass.Float16, (256, 256), stride_order=(1, 0), assumed_align=16),  # C
        make_fake_stream(),  # stream
    ]
