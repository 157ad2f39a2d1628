"""Two user programs unlike the examples, written the way a FlashAttention or CUTLASS user would, through the
whole compiler on both archs and both partitions: grouped-query attention (3-D tensors, four query heads
reading one key/value head through `h // G` in the load coordinates, bf16, exp2, the log-sum-exp stored as
a row vector) and a GEMM whose B is stored K × N (an N-major wgmma / tcgen05 operand) with a bias row and
ReLU at ragged M and N. Each: interpreter == torch reference, simulator == interpreter, CuTe DSL compile
with no spills."""
import math

import pytest
import torch

import aref
from aref import aref_kernel
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.interp.tile import run_kernel
from aref.sim import simulate


@aref_kernel(grid=lambda Q, BM, **_: (Q.shape[1] // BM, Q.shape[0]))
def gqa_attention(Q, K, V, O, LSE, *, BM: int = 64, BN: int = 128, G: int = 4):
    pm, h = aref.program_id(0), aref.program_id(1)
    D = Q.shape[2]
    q = aref.load(Q, (h, pm, 0), (BM, D))
    m = aref.full((BM,), -1e30, aref.float32)
    l = aref.zeros((BM,), aref.float32)
    o = aref.zeros((BM, D), aref.float32)
    kv = aref.channel(depth=2)
    for j in aref.range(K.shape[1] // BN):
        kv.put(aref.load(K, (h // G, j, 0), (BN, D)), aref.load(V, (h // G, j, 0), (BN, D)))
        k, v = kv.get()
        s = aref.mma(q, k.T) * (1.4426950408889634 / math.sqrt(D))
        m_new = aref.maximum(m, aref.rowmax(s))
        p = aref.exp2(s - m_new[:, None])
        alpha = aref.exp2(m - m_new)
        l = l * alpha + aref.rowsum(p)
        o = aref.mma(p.to(aref.bfloat16), v, o * alpha[:, None])
        m = m_new
        kv.consumed()
    aref.store(O, (h, pm, 0), (o / l[:, None]).to(O.dtype))
    aref.store(LSE, (h, pm), (m + aref.log2(l)) * 0.6931471805599453)


def gqa_reference(Q, K, V, O, LSE, G=4, **_):
    s = Q.float() @ K.float().repeat_interleave(G, 0).transpose(1, 2) / math.sqrt(Q.shape[2])
    return {"O": (torch.softmax(s, -1) @ V.float().repeat_interleave(G, 0)).to(O.dtype),
            "LSE": torch.logsumexp(s, -1)}


@aref_kernel(grid=lambda A, B, BM, BN, **_: (-(-A.shape[0] // BM), -(-B.shape[1] // BN)))
def nmajor_bias_relu(A, B, bias, C, *, BM: int = 128, BN: int = 64, BK: int = 64):
    pm, pn = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ch = aref.channel(depth=3)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        ch.put(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (k, pn), (BK, BN)))
        a, b = ch.get()
        acc = aref.mma(a, b, acc)
        ch.consumed()
    bv = aref.load(bias, (pn,), (BN,)).to(aref.float32)
    aref.store(C, (pm, pn), aref.maximum(acc + bv[None, :], 0.0).to(C.dtype))


def nmajor_reference(A, B, bias, C, **_):
    return {"C": torch.relu(A.float() @ B.float() + bias.float()).to(C.dtype)}


def _inputs(name):
    g = torch.Generator().manual_seed(0)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).bfloat16()
    if name == "gqa_attention":        # 8 query heads over 2 key/value heads
        return dict(Q=r(8, 256, 64), K=r(2, 256, 64), V=r(2, 256, 64), O=torch.zeros(8, 256, 64, dtype=torch.bfloat16),
                    LSE=torch.zeros(8, 256))
    # ragged: M = 200, N = 136 (the last column block is 8 wide), K = 192
    return dict(A=r(200, 192, scale=0.3), B=r(192, 136, scale=0.3), bias=r(136), C=torch.zeros(200, 136,
                                                                                               dtype=torch.bfloat16))


PROGRAMS = {"gqa_attention": (gqa_attention, gqa_reference), "nmajor_bias_relu": (nmajor_bias_relu, nmajor_reference)}
TOLERANCE = {"O": 2e-2, "LSE": 1e-3, "C": 2e-2}


def _copy(args):
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}


@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_user_program_runs_and_compiles(backend_cache, name, arch, partition):
    from aref.backend.cute import compile_barrier
    kernel, reference = PROGRAMS[name]
    args = _inputs(name)
    tile_ir = kernel.specialize(**args)
    interp = _copy(args)
    run_kernel(tile_ir, interp)
    for key, want in reference(**args).items():
        err = (interp[key].float() - want.float()).abs().max().item()
        assert err <= TOLERANCE[key] * max(1.0, want.float().abs().max().item()), (key, err)
    ws = lower_to(tile_ir, "barrier", CompileOptions(arch=arch, partition=partition, solver_time_limit=20))
    for seed in (1, 2):
        sim = _copy(args)
        result = simulate(ws, sim, seed=seed)
        assert not result.violations, [str(v) for v in result.violations]
        for key in reference(**args):
            assert torch.equal(sim[key], interp[key]), key
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.spill_bytes == 0, result.ptxas_log
    mma = "wgmma.mma_async" if arch == "sm_90a" else "tcgen05.mma"
    assert result.instructions[mma] > 0
