"""Batched GEMM: C[b] = A[b]·B[b]ᵀ for every batch b (program id 2), A: Bt×M×K, B: Bt×N×K, C: Bt×M×N.

The batch index is a leading coordinate of every load and store: it selects the matrix, and the trailing
two dimensions are tiled.
"""
import torch

import aref
from aref import aref_kernel


@aref_kernel(grid=lambda A, B, BM, BN, **_: (-(-A.shape[1] // BM), -(-B.shape[1] // BN), A.shape[0]))
def batched_gemm(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    pid_m, pid_n, batch = aref.program_id(0), aref.program_id(1), aref.program_id(2)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=3)
    for k in aref.range(-(-A.shape[2] // BK)):
        ab.put(aref.load(A, (batch, pid_m, k), (BM, BK)), aref.load(B, (batch, pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    aref.store(C, (batch, pid_m, pid_n), acc.to(C.dtype))


def example_inputs(size: str = "small", Bt: int | None = None, M: int | None = None, N: int | None = None,
                   K: int | None = None, seed: int = 0, **constexprs):
    """Small: 3 × 128 × 128 × 256; large: 64 × 1024 × 1024 × 1024."""
    dims = {"small": (3, 128, 128, 256), "large": (64, 1024, 1024, 1024)}[size]
    Bt, M, N = Bt or dims[0], M or dims[1], N or dims[2]
    K = dims[3] if K is None else K
    g = torch.Generator().manual_seed(seed)
    A = (torch.randn(Bt, M, K, generator=g) * 0.5).half()
    B = (torch.randn(Bt, N, K, generator=g) * 0.5).half()
    return {"A": A, "B": B, "C": torch.zeros(Bt, M, N, dtype=torch.float16), **constexprs}


def reference(A, B, C, **_):
    return {"C": (A.float() @ B.float().transpose(1, 2)).to(C.dtype)}


def baseline(A, B, C, **_):
    """torch's batched cuBLAS GEMM (`torch.bmm`), as a function that runs it once (what `aref bench` times)."""
    return lambda: {"C": torch.bmm(A, B.transpose(1, 2))}
