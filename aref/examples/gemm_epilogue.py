"""GEMM with epilogue operands and a row-vector output: C = relu(A·Bᵀ + bias), rowsum(C) accumulated.

The bias (one value per output column) is loaded after the loop, for the epilogue only. Besides the C tile,
each CTA adds its block's row sums into a per-row vector with a reduce-add store (the CTAs of one block row
all contribute to the same entries, as a TMA reduce-add does).
"""
import torch

import aref
from aref import aref_kernel


@aref_kernel(grid=lambda A, B, BM, BN, **_: (-(-A.shape[0] // BM), -(-B.shape[0] // BN)))
def gemm_epilogue(A, B, bias, C, rowsum, *, BM: int = 128, BN: int = 128, BK: int = 64):
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=3)
    for k in aref.range(-(-A.shape[1] // BK)):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    bn = aref.load(bias, (pid_n,), (BN,))                      # an epilogue operand, loaded after the loop
    out = aref.maximum(acc + bn.to(aref.float32)[None, :], 0.0)
    aref.store(C, (pid_m, pid_n), out.to(C.dtype))
    aref.store(rowsum, (pid_m,), aref.rowsum(out), reduce="add")


def example_inputs(size: str = "small", M: int | None = None, N: int | None = None, K: int | None = None,
                   seed: int = 0, **constexprs):
    dims = {"small": (256, 256, 256), "large": (4096, 4096, 4096)}[size]
    M, N, K = M or dims[0], N or dims[1], dims[2] if K is None else K
    g = torch.Generator().manual_seed(seed)
    A = (torch.randn(M, K, generator=g) * 0.1).half()
    B = (torch.randn(N, K, generator=g) * 0.1).half()
    bias = torch.randn(N, generator=g).half()
    return {"A": A, "B": B, "bias": bias, "C": torch.zeros(M, N, dtype=torch.float16),
            "rowsum": torch.zeros(M, dtype=torch.float32), **constexprs}


def reference(A, B, bias, C, rowsum, **_):
    out = torch.relu(A.float() @ B.float().T + bias.float()[None, :])
    return {"C": out.to(C.dtype), "rowsum": rowsum + out.sum(1)}     # reduce-add: onto rowsum's contents


def baseline(A, B, bias, C, rowsum, **_):
    """torch: cuBLAS(Lt) with the bias and ReLU in its epilogue (`torch._addmm_activation`), then the row
    sums added onto rowsum's contents, as a function that runs them once (what `aref bench` times)."""
    def run():
        c = torch._addmm_activation(bias, A, B.T)
        return {"C": c, "rowsum": rowsum + c.sum(1, dtype=torch.float32)}
    return run


TOLERANCE = {"rowsum": (5e-2, 1e-3)}       # sums over N columns of float32 values, in another order
