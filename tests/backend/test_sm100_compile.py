"""Every example's Barrier IR compiles for sm_100a through the Blackwell templates, with both partitioners:
ptxas reports no spills, and the PTX has what the schedule implies — tcgen05 MMAs into tensor memory, its
allocation and release, tcgen05.ld (and .st where a group writes tensor memory), tcgen05.commit for every
mma_commit of the IR, TMA bulk copies and parity waits, one mbarrier.init per ring barrier."""
import pytest

from aref.ir import OpKind
from tests.backend.sm100_helpers import EXAMPLES, PARTITIONS, sm100_compiled

CASES = [(e, p) for e in EXAMPLES for p in PARTITIONS]


def _count(ws, kind):
    return sum(op.kind is kind for gp in ws.groups for op in gp.all_ops())


@pytest.mark.parametrize("example, partition", CASES, ids=[f"{e}-{p}" for e, p in CASES])
def test_example_compiles_for_blackwell_without_spills(backend_cache, example, partition):
    ws, result = sm100_compiled(backend_cache, example, partition)
    ins = result.instructions
    ptx = result.ptx_path.read_text()
    assert result.arch == "sm_100a" and ".target sm_100a" in ptx
    assert result.spill_bytes == 0, result.ptxas_log
    for opcode in ("tcgen05.mma", "tcgen05.alloc", "tcgen05.dealloc", "tcgen05.relinquish_alloc_permit",
                   "tcgen05.ld", "tcgen05.commit", "tcgen05.wait::ld", "cp.async.bulk.tensor",
                   "mbarrier.try_wait.parity", "setmaxnreg"):
        assert ins[opcode] > 0, opcode
    assert ins["wgmma.mma_async"] == 0
    assert ins["mbarrier.init"] == 2 * sum(ch.depth for ch in ws.channels) + sum(
        any(op.kind is OpKind.MMA_WAIT for op in gp.all_ops()) for gp in ws.groups)
    # every mma_commit of the IR is a tcgen05.commit (plus one per mma_wait of a group that also computes)
    assert ins["tcgen05.commit"] >= _count(ws, OpKind.MMA_COMMIT) > 0
    writes_tmem = any(op.kind is OpKind.TMEM_STORE_FENCE for gp in ws.groups for op in gp.all_ops())
    assert (ins["tcgen05.st"] > 0) == writes_tmem and (ins["tcgen05.wait::st"] > 0) == writes_tmem
    assert ws.tmem is not None and result.register_budgets


def test_attention_forward_keeps_fa4s_roles_and_warp_layout(backend_cache):
    ws, result = sm100_compiled(backend_cache, "attention_fwd", "optimal")
    src = result.source_path.read_text()
    roles = {gp.group.role for gp in ws.groups}
    assert {"mma", "softmax", "correction"} <= roles
    for function in ("def mma(", "def softmax(", "def correction("):
        assert function in src
    assert "sm100.umma(" in src and "sm100.commit(" in src and "sm100.tmem_load(" in src
    # the correction group rescales O in tensor memory: tcgen05.ld, multiply, tcgen05.st into the same columns
    assert "sm100.tmem_store(" in src
    assert result.instructions["tcgen05.st"] > 0


def test_fp8_and_bf16_gemm_compile(backend_cache):
    for dtype in ("bfloat16", "float8_e4m3"):
        ws, result = sm100_compiled(backend_cache, "gemm", "heuristic", dtype=dtype)
        assert result.spill_bytes == 0 and result.instructions["tcgen05.mma"] > 0
        assert "kind::f8f6f4" in result.ptx_path.read_text() if dtype.startswith("float8") else True
