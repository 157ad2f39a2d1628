"""Barrier IR from the optimal (solver) partitioner: generic "consumer" groups found by what they do,
shared-memory hand-offs between consumer groups (store channels: row vectors, 16-bit P tiles read by a
wgmma, float32 tiles), staging of a store in a released channel slot."""
import pytest

from aref.backend.cute import BackendError, compile_barrier, generate_source
from tests.backend.conftest import barrier_ir, with_budgets

EXAMPLES = ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_optimal_budgets_below_the_tiles_are_refused_clearly(example):
    ws = barrier_ir(example, "optimal")
    with pytest.raises(BackendError, match=r"holds up to \d+ registers per thread of tiles at once .* over its "
                                           r"register budget of \d+ \(setmaxnreg\): ptxas would spill"):
        generate_source(ws)


@pytest.mark.parametrize("example", EXAMPLES)
def test_optimal_schedule_compiles_with_workable_budgets(example, backend_cache):
    ws = barrier_ir(example, "optimal")
    consumers = len(ws.groups) - 1
    ws = with_budgets(ws, 232 if consumers == 2 else 240)
    result = compile_barrier(ws, cache_dir=backend_cache)
    ins = result.instructions
    assert result.spill_bytes == 0, result.ptxas_log
    assert ins["mbarrier.init"] == 2 * sum(ch.depth for ch in ws.channels)
    assert ins["wgmma.mma_async"] > 0 and ins["cp.async.bulk.tensor"] > 0
    source = result.source_path.read_text()
    stores = [ch for ch in ws.channels if ch.kind == "store"]
    for ch in stores:                    # every thread of the producing group arrives on `full`
        assert f"cute.arch.mbarrier_arrive({ch.name.replace('.', '_')}_full" in source
    if example == "attention_fwd":       # P through shared memory to the P·V group, read by an SS wgmma
        assert "aref.stmatrix(" in source and 'fence_proxy("async.shared"' in source
    if example == "dual_gemm":           # the C staging tile reuses the released silu hand-off slot
        assert "aref.recast_tile(s_silu_x" in source
