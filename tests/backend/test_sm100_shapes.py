"""Shapes that do not divide the tile, K = 0, single-tile problems and run-time trip counts of 0 on sm_100a.

Every tile moves by TMA on Blackwell: a box over the tensor's edge is zero-filled on load and clipped on store
by the hardware — the interpreter's `load_box` / `store_box` — so a ragged extent changes the descriptors'
extents and the ceil-divided trip counts, not the code. What TMA cannot describe (a row of a size that is not a
multiple of 16 bytes, a box under 16 bytes) the load warp loads itself, zero-filled outside. A tensor with no elements is not passed at all: its loads fill
the slot with zeros.

An accumulator lives in tensor memory and starts at zero only through the first MMA's accumulate flag; a loop
that runs no trip (K = 0, or a run-time trip count that is 0 for some program ids) issues no MMA, so the MMA
warp writes the zeros itself (a zero MMA) before it publishes the tile, and a four-warp group that reads it
zeroes its registers. The simulator runs the Barrier IR, where this is the IR's own zero accumulator
(`tests/sim/test_sim_examples.py` covers trip count 0 on sm_100a); here the generated code is checked.
"""
import re

import pytest
import torch

import aref
from aref.backend.cute import compile_barrier
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.errors import ArefError
from tests.backend.sm100_helpers import PARTITIONS, sm100_compiled, sm100_ir
from tests.backend.test_example_matrix import EXAMPLES, RAGGED

# (example, partition) -> the rule the Blackwell templates refuse the cell by (at its default size too); a
# listed cell that compiles fails the test, so the list stays exact
REFUSED: dict = {}    # (example, partition) -> the refusal's words; every cell compiles today
CELLS = [(e, p) for e in EXAMPLES for p in PARTITIONS]


@pytest.mark.parametrize("example, partition", CELLS, ids=[f"{e}-{p}" for e, p in CELLS])
def test_ragged_sizes_compile_for_blackwell(backend_cache, example, partition):
    """One ragged size per example (`test_example_matrix.RAGGED`): 0 spills, TMA copies (zero-filled, clipped)
    and, where the kernel multiplies, tcgen05 MMAs into tensor memory read back by tcgen05.ld."""
    try:
        ws, result = sm100_compiled(backend_cache, example, partition, **RAGGED[example])
    except ArefError as err:
        assert (example, partition) in REFUSED, f"refused, and not listed in REFUSED: {err.render()}"
        assert REFUSED[example, partition] in str(err), err.render()
        return
    assert (example, partition) not in REFUSED, "listed in REFUSED but compiles: drop it from the list"
    ins = result.instructions
    assert result.arch == "sm_100a" and result.spill_bytes == 0, result.ptxas_log
    assert ins["cp.async.bulk.tensor"] > 0 and ins["mbarrier.try_wait.parity"] > 0
    assert ins["mbarrier.init"] >= 2 * sum(ch.depth for ch in ws.channels)
    if ws.tmem is not None:
        for opcode in ("tcgen05.mma", "tcgen05.alloc", "tcgen05.dealloc", "tcgen05.ld", "tcgen05.commit"):
            assert ins[opcode] > 0, opcode


@pytest.mark.parametrize("example, partition", CELLS, ids=[f"{e}-{p}" for e, p in CELLS])
def test_ragged_sizes_simulate_equal_to_the_reference(example, partition):
    """The same sm_100a Barrier IR at the ragged size, run by the simulator over a few interleavings, equals the
    reference: the zero-filled, clipped boxes are the semantics the kernel is generated for."""
    from aref.runtime.harness import load_example
    from aref.sim import check
    from example_paths import example_path
    name, _, kernel = example.partition(":")
    ex = load_example(example_path(name) + (f":{kernel}" if kernel else ""))
    inputs = ex.inputs(**RAGGED[example])
    report = check(sm100_ir(example, partition, **RAGGED[example]), inputs, ex.reference_fn, seeds=3,
                   tolerance=ex.tolerance(inputs))
    assert report.ok, [str(v) for v in report.violations] or report.to_json()


def _lines(src: str, function: str) -> list[str]:
    body = src[src.index(f"def {function}("):]
    return body[:body.index("\n@cute.")].splitlines()


def _publish_window(lines: list[str], channel: str) -> list[str]:
    """The lines from the tag of the last slot_store into `channel` to the commit that publishes it."""
    store = max(i for i, l in enumerate(lines) if "] slot_store " in l and f"-> %{channel}.ring0" in l)
    commit = next(i for i in range(store, len(lines)) if f"mma_commit %{channel}.full" in lines[i])
    return lines[store:commit]


@pytest.mark.parametrize("partition", PARTITIONS)
def test_empty_k_publishes_a_zero_accumulator(backend_cache, partition):
    """K = 0: A and B have no elements, so the host does not take them and their loads (in no trip) would be
    zero fills; no MMA of the loop runs, so the MMA warp writes the zero accumulator with one zero MMA before
    the commit that publishes it, and the epilogue reads zeros (the interpreter's C)."""
    ws, result = sm100_compiled(backend_cache, "gemm", partition, K=0)
    src = result.source_path.read_text()
    assert result.spill_bytes == 0, result.ptxas_log
    assert "def host(C: cute.Tensor, stream: CUstream):" in src
    assert "aref.zero_box(" in src                   # a load of an empty tensor fills zeros
    window = _publish_window(_lines(src, "mma"), "acc.x")
    assert any("sm100.zero_fill(" in l for l in window), "\n".join(window)
    assert result.instructions["tcgen05.mma"] == 1     # the zero fill: the loop's MMA runs no trip


def test_empty_k_zeroes_the_registers_of_a_group_that_multiplies_and_reads():
    """gemm_reduce's optimal partition: one four-warp group issues the MMAs and reads the accumulator into
    registers; at K = 0 it zeroes those registers after the tcgen05.ld."""
    from aref.backend.cute import generate_source
    ws = sm100_ir("gemm_reduce", "optimal", K=0)
    mixed = [gp for gp in ws.groups if gp.group.warps == 4
             and any(op.kind.name == "MMA_ASYNC" for op in gp.all_ops())]
    assert mixed, [gp.group.name for gp in ws.groups]
    src = generate_source(ws)
    lines = _lines(src, mixed[0].group.name if f"def {mixed[0].group.name}(" in src else mixed[0].group.role)
    load = next(i for i, l in enumerate(lines) if "sm100.tmem_load(t_acc, acc," in l)
    assert "acc.fill(0.0)" in lines[load + 2], "\n".join(lines[load:load + 3])


@aref.aref_kernel(grid=lambda A, B, BM, BN, **_: (-(-A.shape[0] // BM), -(-B.shape[0] // BN)))
def tri_gemm(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """Row block i of C = A[i]·Bᵀ over the first i K-blocks only: the first row of tiles runs no trip."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=3)
    for k in aref.range(pid_m):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    aref.store(C, (pid_m, pid_n), acc.to(C.dtype))


def _tri_args():
    return dict(A=torch.randn(384, 256).half(), B=torch.randn(200, 256).half(), C=torch.zeros(384, 200).half())


@pytest.mark.parametrize("partition", PARTITIONS)
def test_runtime_zero_trip_count_publishes_zeros(backend_cache, partition):
    """A trip count that is 0 for program id 0: the MMA warp zero-fills the accumulator under `if pid_m == 0`
    before the publishing commit; the first in-loop MMA still starts without accumulation (a run-time flag).
    The interpreter gives that row block zeros."""
    args = _tri_args()
    ws = lower_to(tri_gemm.specialize(**args), "barrier", CompileOptions(arch="sm_100a", partition=partition))
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.spill_bytes == 0, result.ptxas_log
    src = result.source_path.read_text()
    lines = _lines(src, "mma")
    window = _publish_window(lines, "acc.x")
    guard = next(i for i, l in enumerate(window) if l.strip().startswith("if pid_m == 0:"))
    assert "sm100.zero_fill(" in window[guard + 2], "\n".join(window)
    assert re.search(r"sm100\.umma\(.*accumulate=acc_started\)", src)
    out = {k: v.clone() for k, v in args.items()}
    tri_gemm(**out)
    assert torch.equal(out["C"][:128], torch.zeros(128, 200, dtype=torch.float16))


@aref.aref_kernel(grid=lambda A, B, BM, BN, **_: (-(-A.shape[0] // BM), -(-B.shape[0] // BN)))
def tri_rms(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """`tri_gemm` with the rows' sum of squares beside the MMAs (the optimal partition gives one four-warp
    group both the MMAs and the epilogue, which reads the accumulator into its registers)."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    sumsq = aref.zeros((BM,), aref.float32)
    ab = aref.channel(depth=3)
    for k in aref.range(pid_m):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        af = a.to(aref.float32)
        sumsq = sumsq + aref.rowsum(af * af)
        ab.consumed()
    aref.store(C, (pid_m, pid_n), (acc * aref.rsqrt(sumsq + 1.0)[:, None]).to(C.dtype))


def test_runtime_zero_trip_count_zeroes_the_registers_of_a_group_that_multiplies_and_reads(backend_cache):
    args = _tri_args()
    ws = lower_to(tri_rms.specialize(**args), "barrier", CompileOptions(arch="sm_100a", partition="optimal"))
    mixed = next(gp for gp in ws.groups if gp.group.warps == 4 and any(op.kind.name == "MMA_ASYNC"
                                                                         for op in gp.all_ops()))
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.spill_bytes == 0, result.ptxas_log
    src = result.source_path.read_text()
    lines = _lines(src, mixed.group.name if f"def {mixed.group.name}(" in src else mixed.group.role)
    load = next(i for i, l in enumerate(lines) if "sm100.tmem_load(t_acc, acc," in l)
    assert lines[load + 1].strip().startswith("if pid_m == 0:") and "acc.fill(0.0)" in lines[load + 2]


@pytest.mark.parametrize("sizes", [{"M": 64, "N": 64, "K": 64}, {"M": 1, "N": 8, "K": 8}])
def test_single_tile_problems_compile_for_blackwell(backend_cache, sizes):
    ws, result = sm100_compiled(backend_cache, "gemm", "heuristic", **sizes)
    assert result.spill_bytes == 0 and result.instructions["tcgen05.mma"] > 0
    assert tuple(ws.grid) == (1, 1)


def test_rows_tma_cannot_describe_are_loaded_by_the_load_warp(backend_cache):
    """K = 100 fp16: A's and B's rows are 200 bytes, not a multiple of 16, so no TMA descriptor exists; the load
    warp fills those slots with ordinary, bounds-checked loads (zero-filled outside, as TMA would), fences them
    for the tensor core's async proxy and arrives without transaction bytes; C still leaves by TMA."""
    ws, result = sm100_compiled(backend_cache, "gemm", "heuristic", K=100)
    assert result.spill_bytes == 0, result.ptxas_log
    src, ptx = result.source_path.read_text(), result.ptx_path.read_text()
    assert "aref.load_box(A" in src and "aref.load_box(B" in src and "fence.proxy.async" in ptx
    assert result.instructions["tcgen05.mma"] > 0 and result.instructions["cp.async.bulk.tensor"] > 0


def test_stores_tma_cannot_describe_are_refused_by_the_tma_rule():
    """N = 100 fp16: C's rows are 200 bytes; the Blackwell epilogue stores with TMA only and says so at the
    store's line (sm_90a stores such boxes from registers, masked)."""
    from aref.backend.cute import BackendError, generate_source
    ws = sm100_ir("gemm", "heuristic", N=100)
    with pytest.raises(BackendError) as info:
        generate_source(ws)
    err = info.value
    assert "cannot be written by a TMA store" in str(err) and "stride of 200 bytes" in str(err)
    assert err.loc is not None and "gemm.py" in err.loc.file and "aref.store(C" in err.render()


@pytest.mark.parametrize("example, partition", [("gemm", "heuristic"), ("gemm", "optimal"),
                                                ("batched_gemm", "heuristic")])
def test_persistent_gemm_compiles_for_blackwell(backend_cache, example, partition):
    """Persistent sm_100a GEMM: min(148, tiles) CTAs walk the tile grid round-robin, every ring (the tensor-
    memory accumulator's included) continuing across a CTA's tiles. The accumulator gets two stages (a ring of
    two slots over twice its columns), so a tile's MMAs write one while the epilogue reads the other; the MMA
    warp acquires its stage at each tile start, before the tile's first MMA. The end-of-kernel syncs and the
    release of tensor memory run once, after the last tile; the tags still follow the Barrier IR."""
    from aref.backend.cute.sm100 import plan_kernel_sm100
    from tests.backend.test_sm100_consistency import check
    ws = sm100_ir(example, partition, M=1024, N=512)
    result = compile_barrier(ws, cache_dir=backend_cache, persistent=True, ctas=148)
    assert result.spill_bytes == 0, result.ptxas_log
    assert result.instructions["tcgen05.mma"] > 0 and result.instructions["tcgen05.dealloc"] == 1
    src = result.source_path.read_text()
    tiles = 1
    for g in ws.grid:
        tiles *= g
    assert f"NUM_TILES = {tiles}" in src and f"GRID = ({min(148, tiles)}, 1, 1)" in src
    assert check(ws, src) == []
    mma = _lines(src, "mma")
    loop = next(i for i, l in enumerate(mma) if "for tile in cutlass.range(first_tile, NUM_TILES, num_ctas" in l)
    acquire = next(i for i, l in enumerate(mma) if "mbarrier_wait(acc_x_empty" in l)
    first_mma = next(i for i, l in enumerate(mma) if "sm100.umma(" in l)
    assert loop < acquire < first_mma
    tail = mma[max(i for i, l in enumerate(mma) if l.startswith("    # after the last tile")):]
    assert any(l.startswith("    cute.arch.dealloc_tmem(tmem, 256)") for l in tail), "\n".join(tail)
    assert any(l.startswith("    cute.arch.barrier(barrier_id=") for l in tail)        # not once per tile
    # two accumulator stages: 2 x 128 columns, a 2-slot ring, the stage of the tile's ring slot on both sides
    assert "TMEM_COLUMNS = 256" in src and "aref.init_ring(acc_x_full, acc_x_empty, 2, 1, 1)" in src
    assert "acc_acc = cute.make_tensor(tmem + 0 + 128 * (acc_x_base % 2)," in src
    assert "sm100.tmem_tile(tmem, 0 + 128 * ((acc_x_base + 0) % 2), 128, 128)" in src
    assert result.instructions["mbarrier.init"] == 2 * sum(cp.ch.depth for cp in plan_kernel_sm100(
        ws, True, 148).channels) + 1
    epilogue = "\n".join(_lines(src, "epilogue"))
    assert "aref.staging_free(warp_in_group)" in epilogue.split("for tile in")[1]   # before reusing the staging


@aref.aref_kernel
def _band(X, W, O, M, *, BM: int = 64, BN: int = 64, BAND: int = 40):
    """A banded mask (two conditions), a running row max used after the loop, and a 48-column accumulator."""
    pid = aref.program_id(0)
    acc = aref.zeros((BM, 48), aref.float32)
    best = aref.full((BM,), -float("inf"))
    rows = pid * BM + aref.arange(BM)
    ch = aref.channel(depth=2)
    for j in aref.range(X.shape[1] // BN):
        ch.put(aref.load(X, (pid, j), (BM, BN)), aref.load(W, (j, 0), (BN, 48)))
        x, w = ch.get()
        cols = j * BN + aref.arange(BN)
        keep = ((rows[:, None] - cols[None, :]) <= BAND) & ((cols[None, :] - rows[:, None]) <= BAND)
        xf = aref.where(keep, x.to(aref.float32), 0.0)
        best = aref.maximum(best, aref.rowmax(xf))
        acc = aref.mma(xf.to(aref.float16), w, acc)
        ch.consumed()
    aref.store(O, (pid, 0), (acc * best[:, None]).to(O.dtype))
    aref.store(M, (pid,), best)


@pytest.mark.parametrize("partition", PARTITIONS)
def test_a_48_column_tile_in_the_row_layout_compiles(backend_cache, partition):
    """A 64-row tile of 48 columns holds 24 columns per thread: tcgen05.ld/st repeat their atom a power of two
    times, so the tiled copy repeats x8 three times (it failed in CuTe DSL with 'Repetition(24)')."""
    g = torch.Generator().manual_seed(0)
    ins = dict(X=torch.randn(192, 256, generator=g).half(), W=torch.randn(256, 48, generator=g).half(),
               O=torch.zeros(192, 48, dtype=torch.float16), M=torch.zeros(192))
    ws = lower_to(_band.specialize(**ins), "barrier", CompileOptions(arch="sm_100a", partition=partition))
    assert ws.resource_error is None
    assert compile_barrier(ws, cache_dir=backend_cache).spill_bytes == 0
