"""Small tile programs outside the examples that exercise where loads and stores may be: tiles loaded before
and after the loop, outputs stored every iteration, row-vector (rank-1) outputs, reduce-add stores, float32
outputs, boxes too small for TMA and loops whose trip count depends on the CTA.

Each kernel has `inputs(**sizes)` (torch tensors on the CPU) and `reference(**inputs)` for the interpreter.
"""
import torch

import aref
from aref import aref_kernel


def _operands(M: int, N: int, K: int, seed: int, *batch: int):
    """fp16 A (…, M, K) and B (…, N, K), and the generator for the kernel's other inputs."""
    g = torch.Generator().manual_seed(seed)
    return g, torch.randn(*batch, M, K, generator=g).half(), torch.randn(*batch, N, K, generator=g).half()


@aref_kernel
def gemm_bias_rowsum(A, B, bias, C, rowsum, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """C = A·Bᵀ + bias[:, None] in float32, and rowsum(C) accumulated over the N blocks by reduce-add (rank 1).
    The bias row vector is loaded before the loop."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    b = aref.load(bias, (pid_m,), (BM,))
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, bt = ab.get()
        acc = aref.mma(a, bt.T, acc)
        ab.consumed()
    c = acc + b[:, None]
    aref.store(C, (pid_m, pid_n), c)
    aref.store(rowsum, (pid_m,), aref.rowsum(c), reduce="add")


def gemm_bias_rowsum_inputs(M=256, N=256, K=128, seed=0):
    g, A, B = _operands(M, N, K, seed)
    return {"A": A, "B": B,
            "bias": torch.randn(M, generator=g), "C": torch.zeros(M, N), "rowsum": torch.zeros(M)}


def gemm_bias_rowsum_reference(A, B, bias, C, rowsum, **_):
    c = A.float() @ B.float().T + bias[:, None]
    return {"C": c, "rowsum": c.sum(1)}


@aref_kernel
def gemm_scale_after(A, B, scale, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """C = (A·Bᵀ) · scale[:, None], the per-row scale loaded after the loop."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, bt = ab.get()
        acc = aref.mma(a, bt.T, acc)
        ab.consumed()
    s = aref.load(scale, (pid_m,), (BM,))
    aref.store(C, (pid_m, pid_n), (acc * s[:, None]).to(C.dtype))


def gemm_scale_after_inputs(M=256, N=256, K=128, seed=0):
    g, A, B = _operands(M, N, K, seed)
    return {"A": A, "B": B,
            "scale": torch.rand(M, generator=g), "C": torch.zeros(M, N, dtype=torch.float16)}


def gemm_scale_after_reference(A, B, scale, C, **_):
    return {"C": ((A.float() @ B.float().T) * scale[:, None]).half()}


@aref_kernel
def gemm_block_scale(A, B, S, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """C = (A·Bᵀ) · S[pid_m]: one float32 scale per row block, a 4-byte box TMA cannot copy (ordinary load)."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    s = aref.load(S, (pid_m,), (1,))
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, bt = ab.get()
        acc = aref.mma(a, bt.T, acc)
        ab.consumed()
    aref.store(C, (pid_m, pid_n), (acc * s[:, None]).to(C.dtype))


def gemm_block_scale_inputs(M=256, N=256, K=128, BM=128, seed=0):
    g, A, B = _operands(M, N, K, seed)
    return {"A": A, "B": B,
            "S": torch.rand(-(-M // BM), generator=g), "C": torch.zeros(M, N, dtype=torch.float16)}


def gemm_block_scale_reference(A, B, S, C, BM=128, **_):
    scale = S.repeat_interleave(BM)[:A.shape[0]]
    return {"C": ((A.float() @ B.float().T) * scale[:, None]).half()}


@aref_kernel
def gemm_partials(A, B, P, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """P[k] = A[:, :(k+1)·BK]·B[:, :(k+1)·BK]ᵀ: the running accumulator stored every iteration."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, bt = ab.get()
        acc = aref.mma(a, bt.T, acc)
        ab.consumed()
        aref.store(P, (k, pid_m, pid_n), acc.to(P.dtype))


def gemm_partials_inputs(M=256, N=256, K=192, BK=64, seed=0):
    _, A, B = _operands(M, N, K, seed)
    return {"A": A, "B": B, "P": torch.zeros(-(-K // BK), M, N, dtype=torch.float16)}


def gemm_partials_reference(A, B, P, BK=64, **_):
    out = torch.stack([(A[:, :(k + 1) * BK].float() @ B[:, :(k + 1) * BK].float().T) for k in range(P.shape[0])])
    return {"P": out.half()}


@aref_kernel
def causal_gemm(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 128):
    """C[m-block] = Σ_{k ≤ pid_m} A[m, k-block]·B[n, k-block]ᵀ: a block-lower-triangular product whose loop
    runs pid_m + 1 times (a trip count that depends on the CTA, as causal attention's)."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(pid_m + 1):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, bt = ab.get()
        acc = aref.mma(a, bt.T, acc)
        ab.consumed()
    aref.store(C, (pid_m, pid_n), acc.to(C.dtype))


def causal_gemm_inputs(M=384, N=256, BM=128, BK=128, seed=0):
    _, A, B = _operands(M, N, -(-M // BM) * BK, seed)
    return {"A": A, "B": B, "C": torch.zeros(M, N, dtype=torch.float16)}


def causal_gemm_reference(A, B, C, BM=128, BK=128, **_):
    M = A.shape[0]
    out = torch.zeros(M, B.shape[0])
    for m0 in range(0, M, BM):
        kk = (m0 // BM + 1) * BK
        out[m0:m0 + BM] = A[m0:m0 + BM, :kk].float() @ B[:, :kk].float().T
    return {"C": out.half()}


KERNELS = {k.__name__: (k, globals()[f"{k.__name__}_inputs"], globals()[f"{k.__name__}_reference"])
           for k in (gemm_bias_rowsum, gemm_scale_after, gemm_block_scale, gemm_partials, causal_gemm)}


@aref_kernel
def batched_gemm_rank3(A, B, X, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """C[b] += A[b]·B[b]ᵀ + 2·X[b] with rank-3 boxes: X read and C reduce-added as (1, BM, BN) tiles of the
    batch's slice (the leading unit dimension indexes the batch), the accumulator lifted by `acc[None, :, :]`."""
    pid_m, pid_n, b = aref.program_id(0), aref.program_id(1), aref.program_id(2)
    x = aref.load(X, (b, pid_m, pid_n), (1, BM, BN))
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(aref.cdiv(A.shape[2], BK)):
        ab.put(aref.load(A, (b, pid_m, k), (BM, BK)), aref.load(B, (b, pid_n, k), (BN, BK)))
        a, bt = ab.get()
        acc = aref.mma(a, bt.T, acc)
        ab.consumed()
    aref.store(C, (b, pid_m, pid_n), acc[None, :, :] + x.to(aref.float32) * 2.0, reduce="add")


def batched_gemm_rank3_inputs(batch=2, M=256, N=256, K=128, seed=0):
    g, A, B = _operands(M, N, K, seed, batch)
    return {"A": A, "B": B,
            "X": torch.randn(batch, M, N, generator=g).half(), "C": torch.zeros(batch, M, N)}


def batched_gemm_rank3_reference(A, B, X, C, **_):
    return {"C": C + A.float() @ B.float().transpose(1, 2) + 2 * X.float()}


@aref_kernel
def rowsum_rank3(A, B, R, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """R[b, n-block, m-block] = row sums of each (m, n) block of A[b]·B[b]ᵀ: a row vector stored as a rank-1 box of
    a rank-3 tensor (its two leading coordinates index)."""
    pid_m, pid_n, b = aref.program_id(0), aref.program_id(1), aref.program_id(2)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(aref.cdiv(A.shape[2], BK)):
        ab.put(aref.load(A, (b, pid_m, k), (BM, BK)), aref.load(B, (b, pid_n, k), (BN, BK)))
        a, bt = ab.get()
        acc = aref.mma(a, bt.T, acc)
        ab.consumed()
    aref.store(R, (b, pid_n, pid_m), aref.rowsum(acc))


def rowsum_rank3_inputs(batch=2, M=256, N=256, K=128, BN=128, seed=0):
    _, A, B = _operands(M, N, K, seed, batch)
    return {"A": A, "B": B, "R": torch.zeros(batch, -(-N // BN), M)}


def rowsum_rank3_reference(A, B, R, BN=128, **_):
    full = A.float() @ B.float().transpose(1, 2)
    parts = torch.stack([full[:, :, n0:n0 + BN].sum(2) for n0 in range(0, full.shape[2], BN)], dim=1)
    return {"R": parts}


KERNELS.update({k.__name__: (k, globals()[f"{k.__name__}_inputs"], globals()[f"{k.__name__}_reference"])
                for k in (batched_gemm_rank3, rowsum_rank3)})
