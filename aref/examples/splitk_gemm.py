"""Split-K GEMM: C = A·Bᵀ with the K dimension split over SPLIT CTAs that add their parts (reduce-add).

Program id 2 picks the K slice; each CTA runs over its share of the K blocks — a run-time trip count from
scalar program-id arithmetic (`aref.minimum` / `aref.maximum`), so a ragged last slice (or an empty one)
just runs fewer iterations — and adds its partial product into C with a reduce-add store. C must start at
zero (float32).
"""
import torch

import aref
from aref import aref_kernel


@aref_kernel(grid=lambda A, B, BM, BN, SPLIT, **_: (-(-A.shape[0] // BM), -(-B.shape[0] // BN), SPLIT))
def splitk_gemm(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64, SPLIT: int = 4):
    pid_m, pid_n, pid_k = aref.program_id(0), aref.program_id(1), aref.program_id(2)
    blocks = -(-A.shape[1] // BK)
    per = -(-blocks // SPLIT)
    first = pid_k * per
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=3)
    for k in aref.range(aref.maximum(aref.minimum(blocks - first, per), 0)):
        ab.put(aref.load(A, (pid_m, first + k), (BM, BK)), aref.load(B, (pid_n, first + k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    aref.store(C, (pid_m, pid_n), acc, reduce="add")


def example_inputs(size: str = "small", M: int | None = None, N: int | None = None, K: int | None = None,
                   seed: int = 0, **constexprs):
    """Small: 128 × 128 × 1024 (4 slices of 4 blocks); large: 2048 × 2048 × 16384."""
    dims = {"small": (128, 128, 1024), "large": (2048, 2048, 16384)}[size]
    M, N, K = M or dims[0], N or dims[1], dims[2] if K is None else K
    g = torch.Generator().manual_seed(seed)
    A = (torch.randn(M, K, generator=g) * 0.25).half()
    B = (torch.randn(N, K, generator=g) * 0.25).half()
    return {"A": A, "B": B, "C": torch.zeros(M, N, dtype=torch.float32), **constexprs}


def reference(A, B, C, **_):
    return {"C": C + A.float() @ B.float().T}


def baseline(A, B, C, **_):
    """torch: one cuBLAS GEMM with fp16 inputs and a float32 output that adds C's contents in its epilogue
    (`addmm` with `out_dtype`, CUDA only; cuBLAS picks its own split-K), as a function that runs it once.
    On the CPU, the same sum in float32."""
    if A.is_cuda:
        return lambda: {"C": torch.addmm(C, A, B.T, out_dtype=torch.float32)}
    return lambda: {"C": torch.addmm(C, A.float(), B.float().T)}
