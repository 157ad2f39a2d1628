"""The register layout the generated code assumes, checked on the CPU.

`support.row_index` / `col_index` (the tile coordinates of this thread's register indices, which masks,
vector reads and exchanges use) agree with CuTe's own partition of a wgmma accumulator for every thread;
and the cross-thread reduction schedule of `xthread` (lane offsets of the shuffles, then the 4 warps meeting
in the exchange tile) computes every row, column and whole-tile reduction exactly once per element, in a
Python model of the 128 threads of a warp group.
"""
import itertools

import pytest

from aref.backend.cute import xthread

THREADS = 128


def _cute_coordinates(rows: int, cols: int) -> dict:
    """(thread, r, c) -> (row, col) from CuTe's partition of an m64nNk16 accumulator (evaluated while
    tracing, where thread indices are plain integers), next to support.row_index / col_index."""
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass.cute.nvgpu import OperandMajorMode

    from aref.backend.cute import support as aref
    out = {}

    @cute.jit
    def probe():
        mma = sm90_utils.make_trivial_tiled_mma(cutlass.Float16, cutlass.Float16, OperandMajorMode.K,
                                                OperandMajorMode.K, cutlass.Float32, (1, 1, 1), tiler_mn=(64, cols))
        for t in cutlass.range_constexpr(THREADS):
            coords = aref.rows_view(mma.get_slice(t).partition_C(cute.make_identity_tensor((rows, cols))))
            for r in cutlass.range_constexpr(rows // 32):
                for c in cutlass.range_constexpr(cols // 4):
                    out[(t, r, c)] = (coords[r, c], (aref.row_index(t, r), aref.col_index(t, c)))
    cute.compile(probe, options="--gpu-arch sm_90a")
    return out


@pytest.mark.filterwarnings("ignore:This static loop")       # 128 threads unrolled while tracing, on purpose
@pytest.mark.parametrize("rows, cols", [(128, 16), (64, 72)])
def test_row_and_column_indices_match_cutes_accumulator_partition(rows, cols):
    coords = _cute_coordinates(rows, cols)
    assert len(coords) == THREADS * (rows // 32) * (cols // 4)
    for key, (cute_rc, ours) in coords.items():
        assert tuple(cute_rc) == tuple(ours), key
    # every element of the tile is held by exactly one thread
    assert len({tuple(rc) for rc, _ in coords.values()}) == rows * cols


def _row(t, r):
    return (r // 2) * 64 + (r % 2) * 8 + (t // 32) * 16 + (t % 32) // 4


def _col(t, c):
    return (c // 2) * 8 + (t % 4) * 2 + c % 2


def _butterfly(values: list, lanes) -> list:
    """Each thread combines (sums) with the thread `lane` apart in its warp, for each lane offset."""
    vals = list(values)
    for lane in lanes:
        vals = [vals[t] + vals[(t // 32) * 32 + ((t % 32) ^ lane)] for t in range(THREADS)]
    return vals


def test_reduction_schedules_count_every_element_once():
    rows, cols = 128, 24
    elem = {(i, j): 1 << ((i * cols + j) % 40) | (i * cols + j) << 40 for i in range(rows) for j in range(cols)}
    held = {t: {(r, c): elem[(_row(t, r), _col(t, c))] for r in range(rows // 32) for c in range(cols // 4)}
            for t in range(THREADS)}
    # along a row (axis 1): this thread's columns, then the quad
    for r in range(rows // 32):
        part = [sum(held[t][(r, c)] for c in range(cols // 4)) for t in range(THREADS)]
        full = _butterfly(part, xthread.ROW_LANES)
        for t in range(THREADS):
            assert full[t] == sum(elem[(_row(t, r), j)] for j in range(cols))
    # along a column (axis 0): this thread's rows, the warp's other rows, then the 4 warps' partials
    for c in range(cols // 4):
        part = [sum(held[t][(r, c)] for r in range(rows // 32)) for t in range(THREADS)]
        warp = _butterfly(part, xthread.COL_LANES)
        exchange = {}
        for t in range(THREADS):
            if t % 32 < 4:                                    # the writers of the generated code
                exchange[(t // 32, _col(t, c))] = warp[t]
        for t in range(THREADS):
            total = sum(exchange[(w, _col(t, c))] for w in range(4))
            assert total == sum(elem[(i, _col(t, c))] for i in range(rows))
    # a row vector (one value per row) to one value: local, the warp's other rows, the 4 warps
    vec = {t: [sum(elem[(_row(t, r), j)] for j in range(cols)) for r in range(rows // 32)] for t in range(THREADS)}
    warp = _butterfly([sum(vec[t]) for t in range(THREADS)], xthread.COL_LANES)
    total = sum(warp[w * 32] for w in range(4))                 # lane 0 of each warp writes its partial
    assert total == sum(elem.values())
    # a column vector to one value: local, then the quad (every warp holds every column)
    cvec = {t: [sum(elem[(i, _col(t, c))] for i in range(rows)) for c in range(cols // 4)] for t in range(THREADS)}
    full = _butterfly([sum(cvec[t]) for t in range(THREADS)], xthread.ROW_LANES)
    assert all(f == sum(elem.values()) for f in full)


def test_vector_exchange_reads_what_was_written():
    """A row vector written by coordinate and read back as a column vector (square tiles)."""
    n = 64
    written = {}
    for t, r in itertools.product(range(THREADS), range(n // 32)):
        written[_row(t, r)] = 1000 + _row(t, r)                 # every quad lane writes the same value
    for t, c in itertools.product(range(THREADS), range(n // 4)):
        assert written[_col(t, c)] == 1000 + _col(t, c)
