"""Barrier IR from the optimal (solver) partitioner: generic "consumer" groups found by what they do,
shared-memory hand-offs between consumer groups (store channels: row vectors, 16-bit P tiles read by a
wgmma, float32 tiles), staging of a store in a released channel slot."""
import pytest

from aref.backend.cute import compile_barrier
from example_paths import SHALLOW_RINGS
from tests.backend.conftest import barrier_ir

EXAMPLES = ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_optimal_schedule_compiles_with_its_own_budgets(example, backend_cache):
    """The optimal partition's register budgets (the compute groups share what the TMA group leaves) hold
    its tiles: the schedule compiles as the solver placed it, without spills."""
    ws = barrier_ir(example, "optimal", **SHALLOW_RINGS[example])
    result = compile_barrier(ws, cache_dir=backend_cache)
    ins = result.instructions
    assert result.spill_bytes == 0, result.ptxas_log
    assert ins["mbarrier.init"] == 2 * sum(ch.depth for ch in ws.channels)
    assert ins["wgmma.mma_async"] > 0 and ins["cp.async.bulk.tensor"] > 0
    source = result.source_path.read_text()
    stores = [ch for ch in ws.channels if ch.kind == "store"]
    for ch in stores:                    # every thread of the producing group arrives on `full`
        assert f"cute.arch.mbarrier_arrive({ch.name.replace('.', '_')}_full" in source
    if example == "attention_fwd":       # FA3's shape: with the groups' instruction streams in its model the
        assert not stores                # solver keeps P in the softmax group (a hand-off costs it time)
    if example == "dual_gemm":           # the C staging tile reuses the released silu hand-off slot
        assert "aref.recast_tile(s_silu_x" in source
