"""Every example's Barrier IR compiles for sm_100a through the Blackwell templates, with both partitioners:
ptxas reports no spills, and the PTX has what the schedule implies — tcgen05 MMAs into tensor memory, its
allocation and release, tcgen05.ld (and .st where a group writes tensor memory), tcgen05.commit for every
mma_commit of the IR, TMA bulk copies and parity waits, one mbarrier.init per ring barrier."""
import pytest
import torch

import aref
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.ir import OpKind
from tests.backend.sm100_helpers import EXAMPLES, PARTITIONS, sm100_compiled

# and the examples beyond the core set that the Blackwell templates generate: index tiles (causal masks from
# `arange`), a one-warp MMA group waiting for its own MMAs, pipeline steps guarded at run time, a bias read from
# its shared-memory slot (gemm_epilogue)
CASES = [(e, p) for e in EXAMPLES + ["linear_attention", "gemm_epilogue", "attention_causal"] for p in PARTITIONS]
# sizes other than the example's default: causal attention at 256 queries visits at most 2 key blocks, so the
# optimal schedule's steady-state loop (trip count - 2) never runs, LLVM removes it and its commits would be
# missing from the count below; 512 queries run it
SIZE = {("attention_causal", "optimal"): {"Sq": 512}}


def _count(ws, kind):
    return sum(op.kind is kind for gp in ws.groups for op in gp.all_ops())


@pytest.mark.parametrize("example, partition", CASES, ids=[f"{e}-{p}" for e, p in CASES])
def test_example_compiles_for_blackwell_without_spills(backend_cache, example, partition):
    ws, result = sm100_compiled(backend_cache, example, partition, **SIZE.get((example, partition), {}))
    ins = result.instructions
    ptx = result.ptx_path.read_text()
    assert result.arch == "sm_100a" and ".target sm_100a" in ptx
    assert result.spill_bytes == 0, result.ptxas_log
    for opcode in ("tcgen05.mma", "tcgen05.alloc", "tcgen05.dealloc", "tcgen05.relinquish_alloc_permit",
                   "tcgen05.ld", "tcgen05.commit", "tcgen05.wait::ld", "tcgen05.fence", "cp.async.bulk.tensor",
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


@pytest.mark.parametrize("partition, roles", [("heuristic", ("mma", "softmax", "correction")),
                                               ("optimal", ("mma", "softmax"))])
def test_attention_forward_keeps_fa4s_roles_and_warp_layout(backend_cache, partition, roles):
    """FA4's roles: the heuristic's MMA warp, softmax and correction groups. The solver's partition (II 1056,
    the MUFU bound, with tensor memory counted as the lowering plans it) rescales each O on its softmax
    group instead of a correction group of its own, at the same simulated speed."""
    ws, result = sm100_compiled(backend_cache, "attention_fwd", partition)
    src = result.source_path.read_text()
    assert set(roles) <= {gp.group.role for gp in ws.groups}
    for role in roles:
        assert f"def {role}" in src             # softmax0( where the softmax groups differ
    assert "sm100.umma(" in src and "sm100.commit(" in src and "sm100.tmem_load(" in src
    # O is rescaled in tensor memory: tcgen05.ld, multiply, tcgen05.st into the same columns
    assert "sm100.tmem_store(" in src
    assert result.instructions["tcgen05.st"] > 0


def test_fp8_and_bf16_gemm_compile(backend_cache):
    for dtype in ("bfloat16", "float8_e4m3"):
        ws, result = sm100_compiled(backend_cache, "gemm", "heuristic", dtype=dtype)
        assert result.spill_bytes == 0 and result.instructions["tcgen05.mma"] > 0
        assert "kind::f8f6f4" in result.ptx_path.read_text() if dtype.startswith("float8") else True


def test_software_exp2_takes_its_share_of_the_softmax_off_the_mufu(backend_cache):
    """`exp2_fma=0.25`: a quarter of each softmax row's exp2 runs on the FMA units (FA4's emulation)."""
    from aref.backend.cute import compile_barrier
    from tests.backend.sm100_helpers import sm100_ir
    ws = sm100_ir("attention_fwd", "heuristic")
    plain = compile_barrier(ws, cache_dir=backend_cache)
    mixed = compile_barrier(ws, cache_dir=backend_cache, exp2_fma=0.25)
    assert mixed.cache_key != plain.cache_key and mixed.spill_bytes == 0
    ptx = mixed.ptx_path.read_text()
    emulated = ptx.count("add.rm.ftz.f32")
    # two softmax groups x 64 elements per thread (64-row sub-tiles: half a row) x 1/4
    assert emulated == 32 and plain.instructions["ex2.approx"] - mixed.instructions["ex2.approx"] == emulated


def test_software_exp2_algorithm_is_accurate():
    """The emulation's arithmetic, replayed in float32: floor by the 1.5·2^23 add, the cubic for 2^frac, and
    floor(x) added to the exponent bits — relative error below 1e-4 wherever the result is a normal float."""
    import numpy as np
    from aref.backend.cute.sm100.support import EXP2_POLY
    x = np.linspace(-126.9, 126.9, 200001).astype(np.float32)
    xr = np.float32(1.5 * 2 ** 23) + np.floor(x)              # what add.rm.ftz gives (spacing 1 there)
    frac = (x - (xr - np.float32(1.5 * 2 ** 23))).astype(np.float32)
    a1, a2, a3 = (np.float32(c) for c in EXP2_POLY)
    p = ((frac * a3 + a2) * frac + a1) * frac + np.float32(1.0)
    bits = (xr.view(np.int32).astype(np.int64) << 23).astype(np.int32) + p.astype(np.float32).view(np.int32)
    got = bits.view(np.float32).astype(np.float64)
    want = np.exp2(x.astype(np.float64))
    normal = x >= -125                 # below, results are denormal: flushed like ex2.approx.ftz (≈ 0 for P)
    assert np.max(np.abs(got - want)[normal] / want[normal]) < 1e-4
    assert np.max(np.abs(got - want)[~normal]) < 2.0 ** -124


@pytest.mark.parametrize("partition", PARTITIONS)
def test_layer_norm_broadcasts_column_vectors_in_the_row_layout(backend_cache, partition):
    """Layer norm's weight and bias (`w[None, :]`) are held as the columns of each thread's row (64-row tiles:
    the half a thread holds, found through the tcgen05.ld partition); no tensor-core work, no spills."""
    ws, result = sm100_compiled(backend_cache, "rowwise", partition)
    assert result.arch == "sm_100a" and result.spill_bytes == 0, result.ptxas_log
    assert result.instructions["cp.async.bulk.tensor"] > 0 and result.instructions["tcgen05.mma"] == 0
    assert "sm100.col_index(64, 64, tidx, c)" in result.source_path.read_text()


@aref.aref_kernel(grid=lambda A, B, BM, BN, **_: (-(-A.shape[0] // BM), -(-B.shape[0] // BN)))
def _gemm_rowsum(A, B, C, rowsum, *, BM: int = 128, BN: int = 128, BK: int = 64):
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=3)
    for k in aref.range(-(-A.shape[1] // BK)):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    out = aref.maximum(acc, 0.0)
    aref.store(C, (pid_m, pid_n), out.to(C.dtype))
    aref.store(rowsum, (pid_m,), aref.rowsum(out), reduce="add")


@pytest.mark.parametrize("partition", PARTITIONS)
def test_row_vector_store_is_a_tma_reduce_add(backend_cache, partition):
    """A rank-1 store of a row vector (reduce="add") goes through a rank-1 staging tile, each thread writing
    its row's value, and one TMA reduce-add (cp.reduce.async.bulk.tensor.1d … .add)."""
    from aref.backend.cute import compile_barrier
    args = dict(A=torch.zeros(256, 128, dtype=torch.float16), B=torch.zeros(256, 128, dtype=torch.float16),
                C=torch.zeros(256, 256, dtype=torch.float16), rowsum=torch.zeros(256))
    ws = lower_to(_gemm_rowsum.specialize(**args), "barrier", CompileOptions(arch="sm_100a", partition=partition))
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.spill_bytes == 0, result.ptxas_log
    assert result.instructions["tcgen05.mma"] > 0
    assert "cp.reduce.async.bulk.tensor.1d.global.shared::cta.add" in result.ptx_path.read_text()
    assert "sm100.row_to_smem(" in result.source_path.read_text()
