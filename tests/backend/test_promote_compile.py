"""FP8 accumulator promotion (`promote_every`) compiles through the CuTe backend: on sm_90a the promoted GEMM
keeps its wgmma pipeline and adds the fp32 promotion in registers with no spills; on sm_100a, where tcgen05
accumulates fp8 in fp32, the option leaves the kernel (and so its compiled code) as it was."""
import pytest

from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from aref.ir import OpKind
from tests.backend.sm100_helpers import sm100_compiled


def _ws(arch, every, consumers="auto", **kw):
    ex = load_example("examples/gemm.py")
    kernel = ex.kernel.specialize(**ex.inputs("small", K=448, dtype="float8_e4m3", **kw))
    return lower_to(kernel, "barrier", CompileOptions(arch=arch, consumers=consumers, promote_every=every))


@pytest.mark.parametrize("consumers,kw", [("auto", {}), ("plain", {"BN": 64}),
                                          ("auto", {"BN": 128, "BK": 128, "STAGES": 4})])
def test_sm90a_promoted_gemm_compiles_without_spills(backend_cache, consumers, kw):
    from aref.backend.cute import compile_barrier
    ws = _ws("sm_90a", 4, consumers, **kw)
    assert ws.resource_error is None
    result = compile_barrier(ws, cache_dir=backend_cache)
    ins = result.instructions
    assert ".target sm_90a" in result.ptx_path.read_text() and result.spill_bytes == 0, result.ptxas_log
    assert "serializ" not in result.ptxas_log, result.ptxas_log
    assert ins["wgmma.mma_async"] > 0 and ins["cp.async.bulk.tensor"] > 0
    assert ins["wgmma.commit_group"] == sum(op.kind is OpKind.MMA_ASYNC for gp in ws.groups for op in gp.all_ops())
    src = result.source_path.read_text()
    assert "% 4) == 3" in src and "aref.where(" in src          # the promotion: select on k % 4 == 3
    assert src.count("part") > 0 and "part.fill(0.0)" in src


def test_sm90a_promoted_dual_gemm_compiles_without_spills(backend_cache):
    from aref.backend.cute import compile_barrier
    from tests.test_promote import fp8_dual_gemm
    _, kernel = fp8_dual_gemm()
    ws = lower_to(kernel, "barrier", CompileOptions(promote_every=2))
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.spill_bytes == 0 and result.instructions["wgmma.mma_async"] > 0, result.ptxas_log
    assert result.source_path.read_text().count("aref.where(") >= 4


def test_sm100a_compiles_the_program_as_written(backend_cache):
    from aref.backend.cute import cache_key
    ws = _ws("sm_100a", 4)
    _, plain = sm100_compiled(backend_cache, "gemm", "heuristic", dtype="float8_e4m3", K=448)
    assert cache_key(ws, "ptx") == plain.cache_key and plain.spill_bytes == 0
    assert plain.instructions["tcgen05.mma"] > 0


@pytest.mark.parametrize("program", ["hand_promoted", "two_readers"])
def test_sm100a_tile_rewritten_in_place_for_two_readers_compiles(backend_cache, program):
    """The in-place tile two groups read (tests/test_sync_regressions.py): the group that writes it back waits
    on the MMA result's empty barrier, as the MMA warp does, and the kernel compiles with no spills."""
    from aref.backend.cute import compile_barrier
    from tests.test_promote import fp8_gemm, hand_promoted
    from tests.test_sync_regressions import two_readers
    if program == "hand_promoted":
        inputs, kernel = fp8_gemm(K=448, BN=64)[0], hand_promoted
    else:
        inputs, kernel = load_example("examples/gemm.py").inputs("small", K=448, BN=64), two_readers
    ws = lower_to(kernel.specialize(**inputs), "barrier", CompileOptions(arch="sm_100a"))
    assert ws.resource_error is None
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.spill_bytes == 0 and result.instructions["tcgen05.mma"] > 0, result.ptxas_log
    commits = sum(op.kind in (OpKind.MMA_COMMIT, OpKind.MMA_WAIT) for gp in ws.groups for op in gp.all_ops())
    assert result.instructions["tcgen05.commit"] == commits      # mma_wait: a commit to the group's own barrier
    src = result.source_path.read_text()
    waits = [line.split("(")[0] for line in src.splitlines() if "mbarrier_wait(part_1_x_empty" in line]
    assert len(waits) == 2, src        # the MMA warp before it accumulates, the writer before it rewrites
