"""Device helpers of the Blackwell templates (`from aref.backend.cute.sm100 import support as sm100`).

Generated sm_100a modules call these by name, so a role reads as its schedule. They are `@cute.jit`: the DSL
inlines them into the kernel.

Row layout. A warp group holds an (R, C) register tile the way tcgen05.ld delivers it: R = 128 gives each
thread one whole row (32x32b atom, thread t of the group ↔ lane t), R = 64 half a row (16x32bx2 atom, the M = 64
tensor-memory layout: rows 16 per warp, threads t and t ^ 16 of a warp share a row). A row vector (R,) holds
one value per thread, for that thread's row. Every tile of a group — loaded from tensor or shared memory,
or computed — uses this layout, so elementwise math is per thread and a row reduction is a thread-local loop
(plus one shuffle for 64 rows). `coords(R, C)` gives each register element's (row, column).

The slice index of a thread is `tidx % 128`: a group's four warps are aligned to warp-group boundaries, and
warp w may only touch tensor-memory lanes 32·(w mod 4)…+31.
"""
import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import tcgen05

from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op
from cutlass.experimental.primitives.nvvm_wrapper import tcgen05_fence

from aref.backend.cute.support import init_ring, issue_store, staging_free, where  # noqa: F401  (shared helpers)

WARP_GROUP_THREADS = 128


@cute.jit
def acc_layout(rows: cutlass.Constexpr, cols: cutlass.Constexpr):
    """Tensor-memory layout of an (rows, cols) 32-bit tile as tcgen05 (cta_group::1, M = rows) writes it."""
    if cutlass.const_expr(rows == 128):
        return cute.make_layout(((128, cols), 1, 1), stride=((65536, 1), 0, 0))
    return cute.make_layout((((16, 4), cols), 1, 1), stride=(((65536, 2097152), 1), 0, 0))


@cute.jit
def tmem_tile(base, col: cutlass.Constexpr, rows: cutlass.Constexpr, cols: cutlass.Constexpr):
    """The (rows, cols) 32-bit tile at column `col` of the kernel's tensor memory (`base`: its first column)."""
    return cute.make_tensor(base + col, acc_layout(rows, cols))[(None, None), 0, 0]


@cute.jit
def row_copy(rows: cutlass.Constexpr, cols: cutlass.Constexpr, load: cutlass.Constexpr):
    """The tiled tcgen05.ld (or .st) of a (rows, cols) 32-bit tile in the row layout."""
    layout_only = cute.make_ptr(cutlass.Float32, 0, cute.AddressSpace.tmem, assumed_align=16)
    tile = cute.make_tensor(layout_only, acc_layout(rows, cols))[(None, None), 0, 0]
    n = cols if rows == 128 else cols // 2
    # tcgen05.ld/st repeat their atom a power of two times (1..128): the largest that divides this thread's
    # columns, at most 32, and the tiled copy repeats it over the rest (48 columns at 64 rows: 3 × x8)
    rep = tcgen05.Repetition(min(32, n & -n))
    if cutlass.const_expr(rows == 128):
        op = tcgen05.Ld32x32bOp(rep) if load else tcgen05.St32x32bOp(rep)
    else:
        op = tcgen05.Ld16x32bx2Op(rep) if load else tcgen05.St16x32bx2Op(rep)
    return tcgen05.make_tmem_copy(cute.make_copy_atom(op, cutlass.Float32), tile)


@cute.jit
def coords(rows: cutlass.Constexpr, cols: cutlass.Constexpr, tidx):
    """(row, column) of each register element of an (rows, cols) tile of this thread (flat index ↔ element)."""
    thr = row_copy(rows, cols, True).get_slice(tidx % WARP_GROUP_THREADS)
    return thr.partition_D(cute.make_identity_tensor((rows, cols)))


@cute.jit
def col_index(rows: cutlass.Constexpr, cols: cutlass.Constexpr, tidx, c: cutlass.Constexpr):
    """The tile column of this thread's register element `c` of an (rows, cols) row-layout tile."""
    return coords(rows, cols, tidx)[c][1]


@cute.jit
def row_tile(rows: cutlass.Constexpr, cols: cutlass.Constexpr, dtype: cutlass.Constexpr):
    """A register tile in the row layout: this thread's elements, viewed as (1, n)."""
    n = cols if rows == 128 else cols // 2
    return cute.make_rmem_tensor(cute.make_layout((1, n)), dtype)


@cute.jit
def tmem_load(tile: cute.Tensor, regs: cute.Tensor, rows: cutlass.Constexpr, cols: cutlass.Constexpr, tidx):
    """tcgen05.ld of a 32-bit tensor-memory tile into this thread's row-layout registers, then wait::ld."""
    copy = row_copy(rows, cols, True)
    thr = copy.get_slice(tidx % WARP_GROUP_THREADS)
    src = thr.partition_S(tile)
    frag = cute.make_tensor(regs.iterator, cute.make_layout(thr.partition_D(cute.make_identity_tensor((rows, cols))).shape))
    cute.copy(copy, src, frag)
    cute.arch.fence_view_async_tmem_load()
    tcgen05_fence("before_thread_sync")     # the reads are done before a later arrive releases the columns


@cute.jit
def tmem_store(tile: cute.Tensor, regs: cute.Tensor, rows: cutlass.Constexpr, cols: cutlass.Constexpr, tidx):
    """tcgen05.st of this thread's 32-bit row-layout registers into a tensor-memory tile (completion: the
    caller's tmem_store_fence before it publishes the tile)."""
    copy = row_copy(rows, cols, False)
    thr = copy.get_slice(tidx % WARP_GROUP_THREADS)
    dst = thr.partition_D(tile)
    frag = cute.make_tensor(regs.iterator, cute.make_layout(thr.partition_S(cute.make_identity_tensor((rows, cols))).shape))
    cute.copy(copy, frag, dst)


@cute.jit
def tmem_store_packed(tile: cute.Tensor, regs: cute.Tensor, rows: cutlass.Constexpr, cols: cutlass.Constexpr, tidx):
    """tcgen05.st of a 16-bit row-layout tile of `cols` columns into `cols // 2` 32-bit columns (two elements
    per column, low half first: how tcgen05 reads a 16-bit A operand from tensor memory). 128 rows only."""
    packed = cute.make_tensor(cute.recast_ptr(regs.iterator, dtype=cutlass.Float32), cute.make_layout((1, cols // 2)))
    tmem_store(tile, packed, rows, cols // 2, tidx)


@cute.jit
def tmem_store_fence():
    """Complete this thread's tcgen05.st before an arrive publishes the tile: wait::st, then order the
    tensor-memory writes before the thread synchronisation (tcgen05.fence::before_thread_sync)."""
    cute.arch.fence_view_async_tmem_store()
    tcgen05_fence("before_thread_sync")


@cute.jit
def after_wait():
    """Order tcgen05 operations after the mbarrier wait that published their data
    (tcgen05.fence::after_thread_sync)."""
    tcgen05_fence("after_thread_sync")


@cute.jit
def smem_rows(tile: cute.Tensor, rows: cutlass.Constexpr, cols: cutlass.Constexpr, tidx):
    """This thread's elements of an (rows, cols) shared-memory tile, in the row layout (flat index ↔ element)."""
    thr = row_copy(rows, cols, True).get_slice(tidx % WARP_GROUP_THREADS)
    return thr.partition_D(tile)


@cute.jit
def copy_rows(src: cute.Tensor, dst: cute.Tensor):
    """Element-wise copy between a row-layout register tile and its partition of a shared-memory tile (either
    direction, same flat order). A register tile of 8- or 16-bit elements is stored in 16-byte vectors (they
    are packed in its registers: stored one element at a time, an fp8 P row spilled 364 bytes); one of 32-bit
    elements a register at a time, as the resource model counts it (`aref.resources.registers`): 16-byte
    stores need their values in aligned register quads, which ptxas re-packs beside the tiles still live
    (random program 703's compute group, 193 registers of tiles, spilled 48 bytes at 248 and 72 at 256)."""
    if cutlass.const_expr(src.memspace == cute.AddressSpace.rmem and src.element_type.width < 32):
        cute.autovec_copy(cute.make_tensor(src.iterator, cute.make_layout(dst.shape)), dst)
    else:
        for i in cutlass.range_constexpr(cute.size(dst)):
            dst[i] = src[i]


@cute.jit
def umma(tiled_mma: cute.TiledMma, acc: cute.Tensor, a: cute.Tensor, b: cute.Tensor, accumulate):
    """Issue one MMA of the Barrier IR as tcgen05.mma instructions over every k-block (one thread issues:
    the DSL elects it). `accumulate` False starts from zero; it may be a run-time flag."""
    atom = cute.make_mma_atom(tiled_mma.op)
    atom.set(tcgen05.Field.ACCUMULATE, accumulate)
    for kb in cutlass.range_constexpr(cute.size(a, mode=[2])):
        cute.gemm(atom, acc, a[None, None, kb], b[None, None, kb], acc)
        atom.set(tcgen05.Field.ACCUMULATE, True)


@cute.jit
def zero_fill(tiled_mma: cute.TiledMma, acc: cute.Tensor, zeros_a: cute.Tensor, zeros_b: cute.Tensor):
    """Write zeros into a tensor-memory accumulator from the MMA warp: one tcgen05.mma of two zero tiles
    without accumulation (ordered with the warp's other MMAs; the next commit covers it)."""
    atom = cute.make_mma_atom(tiled_mma.op)
    atom.set(tcgen05.Field.ACCUMULATE, False)
    cute.gemm(atom, acc, zeros_a[None, None, 0], zeros_b[None, None, 0], acc)


@cute.jit
def commit(bar):
    """tcgen05.commit: one arrival on `bar` once every MMA this thread issued so far has completed."""
    with cute.arch.elect_one():
        tcgen05.commit(bar)


@cute.jit
def fill_zeros(tile: cute.Tensor, lane):
    """One warp zeroes a shared-memory tile (the zero fill's operands), visible to the tensor core after."""
    for i in cutlass.range(lane, cute.size(tile), 32, unroll=1):
        tile[i] = tile.element_type(0)
    cute.arch.fence_proxy("async.shared", space="cta")


@cute.jit
def rows_to_smem(regs: cute.Tensor, staging: cute.Tensor, rows: cutlass.Constexpr, cols: cutlass.Constexpr, tidx,
                 barrier_id: cutlass.Constexpr):
    """Registers (row layout) → a shared-memory staging tile for a TMA store: element stores, the proxy fence
    and a warp-group barrier so every row is there before one thread issues the store."""
    copy_rows(regs, smem_rows(staging, rows, cols, tidx))
    cute.arch.fence_proxy("async.shared", space="cta")
    cute.arch.barrier(barrier_id=barrier_id, number_of_threads=WARP_GROUP_THREADS)


@cute.jit
def row_to_smem(vec: cute.Tensor, staging: cute.Tensor, row, barrier_id: cutlass.Constexpr):
    """A row vector (one value per thread, for its row) → a rank-1 shared-memory staging tile for a TMA store,
    fenced for the async proxy and synced over the warp group (at 64 rows threads t and t ^ 16 write the same
    value)."""
    staging[row] = vec[0]
    cute.arch.fence_proxy("async.shared", space="cta")
    cute.arch.barrier(barrier_id=barrier_id, number_of_threads=WARP_GROUP_THREADS)


@cute.jit
def cols_to_smem(vec: cute.Tensor, staging: cute.Tensor, rows: cutlass.Constexpr, cols: cutlass.Constexpr,
                 rank: cutlass.Constexpr, tidx, barrier_id: cutlass.Constexpr):
    """A vector along the columns (every thread holds the entries at the columns of its row of the group's
    `rows`-row tiles, the same on every row) → a (cols,) or (1, cols) shared-memory staging tile (`rank`) for a
    TMA store: the threads holding row 0 write it (at 64 rows, threads 0 and 16 a half each), fenced for the
    async proxy and synced over the warp group."""
    crd = coords(rows, cols, tidx)
    if crd[0][0] == 0:
        for c in cutlass.range_constexpr(cute.size(vec)):
            if cutlass.const_expr(rank == 1):
                staging[crd[c][1]] = vec[c]
            else:
                staging[0, crd[c][1]] = vec[c]
    cute.arch.fence_proxy("async.shared", space="cta")
    cute.arch.barrier(barrier_id=barrier_id, number_of_threads=WARP_GROUP_THREADS)


@cute.jit
def tmem_operand_a(tiled_mma: cute.TiledMma, base, col: cutlass.Constexpr, m: cutlass.Constexpr,
                   n: cutlass.Constexpr, k: cutlass.Constexpr, dtype: cutlass.Constexpr):
    """The A operand fragment of a tcgen05 MMA (M = m, N = n, K = k) read from tensor memory at column `col`:
    K-major, 16-bit elements packed two per column (what `tmem_store_packed` writes)."""
    import cutlass.utils.blackwell_helpers as sm100_utils
    layout = sm100_utils.make_smem_layout_a(tiled_mma, (m, n, k), dtype, 1)
    tile = cute.make_tensor(cute.recast_ptr(base + col, dtype=dtype), layout.outer)
    return tiled_mma.make_fragment_A(tile)[None, None, None, 0]


# 2^f on [0, 1) as 1 + f·(a1 + f·(a2 + f·a3)): coefficients fitted for the smallest relative error (8.6e-5,
# finer than a 16-bit P keeps)
EXP2_POLY = (0.69511507, 0.2276527, 0.07705998)


@dsl_user_op
def _exp2_bits(x, loc=None, ip=None):
    """2^x for x ≥ -127 on the FMA pipe: floor(x) by a round-down add of 1.5·2^23, three FMAs for 2^frac,
    and floor(x) added to the result's exponent field with an integer add."""
    a1, a2, a3 = (_f32_hex(c) for c in EXP2_POLY)
    return cutlass.Float32(llvm.inline_asm(
        T.f32(), [cutlass.Float32(x).ir_value(loc=loc, ip=ip)],
        "{\n\t.reg .f32 xr, xf, fr, p;\n\t.reg .s32 e, pi, o;\n\t"
        "add.rm.ftz.f32 xr, $1, 0f4B400000;\n\t"           # 1.5·2^23 + floor(x): floor(x) in the low bits
        "sub.f32 xf, xr, 0f4B400000;\n\t"
        "sub.f32 fr, $1, xf;\n\t"                          # the fraction, in [0, 1)
        f"fma.rn.f32 p, fr, {a3}, {a2};\n\t"
        f"fma.rn.f32 p, p, fr, {a1};\n\t"
        "fma.rn.f32 p, p, fr, 0f3F800000;\n\t"
        "mov.b32 e, xr;\n\tshl.b32 e, e, 23;\n\t"          # floor(x) · 2^23: an exponent increment
        "mov.b32 pi, p;\n\tadd.s32 o, e, pi;\n\tmov.b32 $0, o;\n\t}",
        "=f,f", has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT))


def _f32_hex(c: float) -> str:
    import struct
    return "0f" + struct.pack(">f", c).hex().upper()


@cute.jit
def exp2_fma(x):
    """exp2 on the FMA units instead of the MUFU (FA4's emulation, to offload the special-function unit)."""
    return _exp2_bits(cute.arch.fmax(x, -127.0))


@cute.jit
def exp2_mixed(x, c: cutlass.Constexpr, period: cutlass.Constexpr, emulated: cutlass.Constexpr):
    """exp2 of element `c` of a thread's row: `emulated` of every `period` elements on the FMA units, the rest
    on the MUFU (ex2.approx)."""
    if cutlass.const_expr(c % period < emulated):
        return exp2_fma(x)
    return cute.math.exp2(x, fastmath=True)
