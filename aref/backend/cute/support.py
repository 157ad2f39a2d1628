"""Device helpers that every generated kernel imports (`from aref.backend.cute import support as aref`).

These are the small, expert-written building blocks the role templates are made of: barrier ring setup, one
wgmma commit group, slot release, register views and coordinates of wgmma accumulators and the epilogue's
register → shared memory → TMA store path. Generated modules call them by name, so a kernel reads as its
schedule rather than as a page of layout algebra. They are `@cute.jit` functions: the DSL traces (inlines)
them into the calling kernel, so they cost nothing at run time.

Conventions shared with the generated code:
  * A register tile of shape (R, C) in a consumer warp group is held in the accumulator layout of a wgmma
    with N = C; `rows_view` shows it as (rows of this thread, columns of this thread). Row vectors (R,) hold
    one value per row of this thread, in the same row order, so `tile_rc[i, j]` and `vec[i]` line up.
  * A row of a wgmma accumulator is spread over the 4 threads of a quad: row reductions finish with a
    butterfly shuffle across lanes 1 and 2 apart. A column is spread over 8 lanes of each of the 4 warps:
    column reductions shuffle across lanes 4, 8, 16 apart and meet the other warps in a shared exchange tile.
  * Column vectors (C,) hold one value per column of this thread (index c); `row_index` / `col_index`
    give the tile coordinates of this thread's register indices (see `aref.resources.layout`).
"""
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import warpgroup
from cutlass.tensor_utils import LayoutEnum

WARP_GROUP_THREADS = 128


@cute.jit
def init_ring(full, empty, depth: cutlass.Constexpr, full_arrivals: cutlass.Constexpr,
              empty_arrivals: cutlass.Constexpr):
    """Initialise the `full` and `empty` mbarrier of every slot of one aref ring (one elected thread).

    Unrolled so the PTX holds exactly one mbarrier.init per barrier.
    """
    for slot in cutlass.range_constexpr(depth):
        cute.arch.mbarrier_init(full + slot, full_arrivals)
        cute.arch.mbarrier_init(empty + slot, empty_arrivals)


@cute.jit
def wgmma(tiled_mma: cute.TiledMma, acc: cute.Tensor, a: cute.Tensor, b: cute.Tensor,
          accumulate: cutlass.Constexpr):
    """Issue one MMA of the Barrier IR as one wgmma commit group: acc (+)= a · b over every k-block.

    `accumulate=False` starts from zero (the first k-block overwrites acc), so score tiles need no fill.
    A fresh atom carries the ACCUMULATE flag, leaving the caller's tiled MMA unchanged across loop trips.
    """
    warpgroup.fence()
    atom = cute.make_mma_atom(tiled_mma.op)
    atom.set(warpgroup.Field.ACCUMULATE, accumulate)
    for kb in cutlass.range_constexpr(cute.size(a, mode=[2])):
        cute.gemm(atom, acc, a[None, None, kb], b[None, None, kb], acc)
        atom.set(warpgroup.Field.ACCUMULATE, True)
    warpgroup.commit_group()


@cute.jit
def arrive_once(bar, warp_in_group):
    """One arrival for the whole warp group (the Barrier IR's count=1 per consumer group).

    Callers order it after the group's reads of the slot: wgmma.wait_group for tensor-core reads (the wgmma
    is warp-group collective, so one warp observing completion covers the group), plus a warp-group barrier
    when CUDA cores of several warps read the slot too.
    """
    if warp_in_group == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive(bar)


@cute.jit
def arrive_cluster(bar, warp_in_group):
    """`arrive_once` on the same barrier of both CTAs of a 2-CTA cluster (ranks 0 and 1; the own one is reached
    through its cluster address too): a slot that TMA multicast refills in both is released in both."""
    if warp_in_group == 0:
        with cute.arch.elect_one():
            for rank in cutlass.range_constexpr(2):
                cute.arch.mbarrier_arrive(bar, rank)


@cute.jit
def rows_view(acc: cute.Tensor):
    """View a wgmma accumulator ((2 cols, 2 rows, N/8), MMA_M, MMA_N) as this thread's (rows, cols)."""
    compact = cute.make_layout(acc.layout.shape)
    s, d = compact.shape, compact.stride
    rows_cols = cute.make_layout(
        ((s[0][1], s[1]), (s[0][0], s[0][2], s[2])),
        stride=((d[0][1], d[1]), (d[0][0], d[0][2], d[2])),
    )
    return cute.make_tensor(acc.iterator, cute.composition(acc.layout, rows_cols))


@cute.jit
def as_operand_a(p: cute.Tensor):
    """View a 16-bit tile held in accumulator layout as the register A operand of a following wgmma.

    For 16-bit types a thread's A fragment of one k16 block is two adjacent column groups of its C
    fragment, so ((2, 2, N/8), MMA_M, MMA_N) regroups to ((2, 2, 2), MMA_M, (N/16, MMA_N)) without moving
    data (the FA3 trick that keeps P in registers for P·V).
    """
    div = cute.logical_divide(p.layout, ((None, None, 2), None, None))
    s, d = div.shape, div.stride
    frg = cute.make_layout(
        ((s[0][0], s[0][1], s[0][2][0]), s[1], (s[0][2][1], s[2])),
        stride=((d[0][0], d[0][1], d[0][2][0]), d[1], (d[0][2][1], d[2])),
    )
    return cute.make_tensor(p.iterator, frg)


@cute.jit
def row_index(group_tidx, r: cutlass.Constexpr):
    """The tile row of this thread's accumulator row index `r` (m64nNk16 D fragment, 2 rows per atom)."""
    return (r // 2) * 64 + (r % 2) * 8 + (group_tidx // 32) * 16 + (group_tidx % 32) // 4


@cute.jit
def col_index(group_tidx, c: cutlass.Constexpr):
    """The tile column of this thread's accumulator column index `c` (2 adjacent columns of every 8)."""
    return (c // 2) * 8 + (group_tidx % 4) * 2 + c % 2


@cute.jit
def rounded(x, dtype: cutlass.Constexpr):
    """`x` rounded to `dtype` (to nearest even; fp8 saturates) and widened back to float32, as the
    interpreter rounds every result of a narrow float type.

    For fp8 the value first passes an `fmax(x, x)` (exact): the DSL otherwise folds an int → float32 → fp8
    chain into one int → fp8 conversion that NVVM cannot lower (fp8 is an i8 there)."""
    if cutlass.const_expr(dtype.width == 8):
        x = cute.arch.fmax(x, x)
    return cutlass.Float32(dtype(x))


@cute.jit
def exchange_view(xchg: cute.Tensor, rows: cutlass.Constexpr, cols: cutlass.Constexpr,
                  transposed: cutlass.Constexpr, dtype: cutlass.Constexpr):
    """A (rows, cols) row-major view of `dtype` over the group's exchange tile, or its (cols, rows) transpose."""
    base = cute.recast_ptr(xchg.iterator, dtype=dtype)
    if cutlass.const_expr(transposed):
        return cute.make_tensor(base, cute.make_layout((cols, rows), stride=(1, cols)))
    return cute.make_tensor(base, cute.make_layout((rows, cols), stride=(cols, 1)))


@cute.jit
def exchange_vector(xchg: cute.Tensor, n: cutlass.Constexpr, dtype: cutlass.Constexpr):
    """The group's exchange tile as `n` values of `dtype` (32-bit types)."""
    return cute.make_tensor(cute.recast_ptr(xchg.iterator, dtype=dtype), cute.make_layout(n))


@cute.jit
def stage_tile(tiled_mma: cute.TiledMma, frag: cute.Tensor, dst: cute.Tensor, group_tidx):
    """Write a register tile held in the accumulator layout of `tiled_mma` to a shared tile: stmatrix for
    16-bit types, per-element stores otherwise (fp8, 32-bit)."""
    if cutlass.const_expr(frag.element_type.width == 16):
        stmatrix(tiled_mma, frag, dst, group_tidx)
    else:
        cute.autovec_copy(frag, tiled_mma.get_slice(group_tidx).partition_C(dst))


@cute.jit
def store_tile(tiled_mma: cute.TiledMma, frag: cute.Tensor, staging: cute.Tensor, group_tidx,
               barrier_id: cutlass.Constexpr):
    """Registers → shared memory staging tile (stmatrix), visible to the TMA unit.

    `frag` is a 16-bit tile in the accumulator layout of `tiled_mma`. The fence orders this group's
    generic-proxy writes before the async-proxy read of the TMA store; the named barrier (this warp group
    only) makes every warp's part visible before one thread issues the store.
    """
    stmatrix(tiled_mma, frag, staging, group_tidx)
    cute.arch.fence_proxy("async.shared", space="cta")
    cute.arch.barrier(barrier_id=barrier_id, number_of_threads=WARP_GROUP_THREADS)


@cute.jit
def store_tile_f32(tiled_mma: cute.TiledMma, frag: cute.Tensor, staging: cute.Tensor, group_tidx,
                   barrier_id: cutlass.Constexpr):
    """Like `store_tile` for 32-bit tiles (no stmatrix): plain shared-memory stores of the accumulator."""
    staged = tiled_mma.get_slice(group_tidx).partition_C(staging)
    cute.autovec_copy(frag, staged)
    cute.arch.fence_proxy("async.shared", space="cta")
    cute.arch.barrier(barrier_id=barrier_id, number_of_threads=WARP_GROUP_THREADS)


@cute.jit
def issue_store(tma_atom: cute.CopyAtom, staging_part: cute.Tensor, gmem_part: cute.Tensor, warp_in_group):
    """One thread issues the TMA store of a staged tile and commits it as a bulk-async group."""
    if warp_in_group == 0:
        cute.copy(tma_atom, staging_part, gmem_part)
        cute.arch.cp_async_bulk_commit_group()


@cute.jit
def staging_free(warp_in_group):
    """Wait until this group's earlier TMA stores have read their staging tiles (before reuse or exit)."""
    if warp_in_group == 0:
        cute.arch.cp_async_bulk_wait_group(0, read=True)


@cute.jit
def stmatrix(tiled_mma: cute.TiledMma, frag: cute.Tensor, dst: cute.Tensor, group_tidx):
    """Write a 16-bit tile held in the accumulator layout of `tiled_mma` to a shared tile with stmatrix."""
    r2s = cute.make_tiled_copy_C(sm90_utils.get_smem_store_op(LayoutEnum.ROW_MAJOR, frag.element_type,
                                                               cutlass.Float32), tiled_mma)
    cute.copy(r2s, r2s.retile(frag), r2s.get_slice(group_tidx).partition_D(dst))


@cute.jit
def row_block(ring: cute.Tensor, rows: cutlass.Constexpr, cols: cutlass.Constexpr, block: cutlass.Constexpr):
    """Rows [block·rows, (block+1)·rows) of every slot of a (R, C, depth) ring: a cooperative group's A rows."""
    return cute.flat_divide(ring, (rows, cols))[None, None, block, 0, None]


@cute.jit
def transposed(ring: cute.Tensor, rows: cutlass.Constexpr, cols: cutlass.Constexpr, depth: cutlass.Constexpr):
    """The (C, R, depth) view of a row-major (R, C, depth) ring: an MN-major wgmma operand."""
    return cute.composition(ring, cute.make_ordered_layout((cols, rows, depth), order=(1, 0, 2)))


@cute.jit
def recast_tile(buffer: cute.Tensor, layout: cute.ComposedLayout, dtype: cutlass.Constexpr,
                offset: cutlass.Constexpr = 0):
    """A staging tile of `dtype` and `layout` placed over the storage of an idle shared buffer, `offset`
    elements (of the buffer's type; a multiple of the 1024-byte swizzle period) from its start."""
    return cute.make_tensor(cute.recast_ptr(buffer.iterator + offset, layout.inner, dtype=dtype), layout.outer)


@cute.jit
def recast_vector(buffer: cute.Tensor, layout: cute.Layout, dtype: cutlass.Constexpr, offset: cutlass.Constexpr = 0):
    """`recast_tile` for a staging tile with a plain, unswizzled layout (rank 1, or 2-D of partial swizzle atoms)."""
    return cute.make_tensor(cute.recast_ptr(buffer.iterator + offset, dtype=dtype), layout)


@cute.jit
def where(cond, a, b):
    """Elementwise select of two float32 values (`cond` may be an element of a Boolean register tensor, which
    holds its bools as bytes: made an i1 again here)."""
    return cutlass.Float32(cutlass.select_(cutlass.Boolean(cond), cutlass.Float32(a), cutlass.Float32(b)))


@cute.jit
def inside(crd, shape):
    """Is coordinate `crd` inside `shape` (every mode 0 ≤ c < extent)? The bounds of TMA's zero fill."""
    ok = cute.elem_less(crd, shape)
    for i in cutlass.range_constexpr(cute.rank(shape)):
        ok = ok & (cute.get(crd, mode=[i]) >= 0)
    return ok


@cute.jit
def load_box(src: cute.Tensor, dst: cute.Tensor, box: cutlass.Constexpr, tile, valid, lane):
    """Ordinary loads of box `tile` (of static shape `box`) of `src` into the shared tile `dst` by the 32 lanes
    of one warp, with TMA's semantics: elements outside `src` (or the whole box when `valid` is false: a leading
    coordinate out of range) read as zero. Lanes walk the box row by row, so a warp reads consecutive
    addresses. Every lane fences its writes for the async proxy (wgmma, TMA stores) and the warp syncs, so one
    lane's arrive publishes them all."""
    gtile = cute.local_tile(src, box, tile)
    gcrd = cute.local_tile(cute.make_identity_tensor(src.shape), box, tile)
    cols = box[cute.rank(box) - 1]
    for e in cutlass.range(lane, cute.size(gtile), 32, unroll=1):
        crd = e
        if cutlass.const_expr(cute.rank(box) == 2):
            crd = (e // cols, e % cols)
        v = dst.element_type(0)
        if valid and inside(gcrd[crd], src.shape):
            v = gtile[crd]
        dst[crd] = v
    cute.arch.fence_proxy("async.shared", space="cta")
    cute.arch.sync_warp()


@cute.jit
def zero_box(dst: cute.Tensor, box: cutlass.Constexpr, lane):
    """`load_box` of a box entirely out of bounds: zeros, fenced and synced like a load."""
    for e in cutlass.range(lane, cute.size(box), 32, unroll=1):
        dst[cute.idx2crd(e, box)] = dst.element_type(0)
    cute.arch.fence_proxy("async.shared", space="cta")
    cute.arch.sync_warp()


@cute.jit
def store_box(tiled_mma: cute.TiledMma, frag: cute.Tensor, dst: cute.Tensor, shape: cutlass.Constexpr, tile, valid,
              group_tidx, reduce: cutlass.Constexpr):
    """Stores from registers (a `shape` tile in the accumulator layout of `tiled_mma`) into box `tile` of `dst`,
    the elements outside `dst` dropped as a TMA store drops them; `reduce` adds atomically (a TMA reduce-add)."""
    thr = tiled_mma.get_slice(group_tidx)
    gtile = thr.partition_C(cute.local_tile(dst, shape, tile))
    gcrd = thr.partition_C(cute.local_tile(cute.make_identity_tensor(dst.shape), shape, tile))
    for i in cutlass.range_constexpr(cute.size(frag)):
        if valid and inside(gcrd[i], dst.shape):
            if cutlass.const_expr(reduce):
                cute.arch.atomic_add(gtile.iterator + cute.crd2idx(i, gtile.layout), frag[i])
            else:
                gtile[i] = frag[i]


@cute.jit
def store_rows(tiled_mma: cute.TiledMma, vec: cute.Tensor, dst: cute.Tensor, rows: cutlass.Constexpr,
               cols: cutlass.Constexpr, tile, valid, group_tidx, reduce: cutlass.Constexpr):
    """A row vector (one value per row this thread holds, see `row_index`) into box `tile` of the rank-1 `dst`,
    out-of-bounds rows dropped; the first thread of each quad writes (the others hold the same values)."""
    gtile = cute.local_tile(dst, (rows,), (tile,))
    gcrd = cute.local_tile(cute.make_identity_tensor(dst.shape), (rows,), (tile,))
    for r in cutlass.range_constexpr(cute.size(vec)):
        row = row_index(group_tidx, r)
        if valid and group_tidx % 4 == 0 and inside(gcrd[row], dst.shape):
            if cutlass.const_expr(reduce):
                cute.arch.atomic_add(gtile.iterator + row, vec[r])
            else:
                gtile[row] = vec[r]


@cute.jit
def store_column(vec: cute.Tensor, dst: cute.Tensor, rows: cutlass.Constexpr, tile, valid, group_tidx,
                 reduce: cutlass.Constexpr):
    """`store_rows` into the (rows, 1) box `tile` of a 2-D `dst`: a (R, 1) column tile, held in registers as a
    row vector (one value per row this thread holds)."""
    gtile = cute.local_tile(dst, (rows, 1), tile)
    gcrd = cute.local_tile(cute.make_identity_tensor(dst.shape), (rows, 1), tile)
    for r in cutlass.range_constexpr(cute.size(vec)):
        row = row_index(group_tidx, r)
        if valid and group_tidx % 4 == 0 and inside(gcrd[row, 0], dst.shape):
            if cutlass.const_expr(reduce):
                cute.arch.atomic_add(gtile.iterator + cute.crd2idx((row, 0), gtile.layout), vec[r])
            else:
                gtile[row, 0] = vec[r]


@cute.jit
def stage_rows(tiled_mma: cute.TiledMma, vec: cute.Tensor, staging: cute.Tensor, rows: cutlass.Constexpr,
               cols: cutlass.Constexpr, group_tidx, barrier_id: cutlass.Constexpr):
    """A row vector into a rank-1 shared staging tile for a TMA store (one thread per quad writes each row),
    fenced for the async proxy and synced over the warp group like `store_tile`."""
    for r in cutlass.range_constexpr(cute.size(vec)):
        if group_tidx % 4 == 0:
            staging[row_index(group_tidx, r)] = vec[r]
    cute.arch.fence_proxy("async.shared", space="cta")
    cute.arch.barrier(barrier_id=barrier_id, number_of_threads=WARP_GROUP_THREADS)
