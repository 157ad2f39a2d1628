"""GEMM C = A·Bᵀ with an explicit aref pipeline (A: M×K, B: N×K, both K-major; C: M×N).

The producer loads an A and a B tile per K step into a ring of STAGES slots (default: up to 5 in 160 KB, so copies in
flight cover the memory latency, as CUTLASS's stage count); the consumer multiplies them into a float32 accumulator.
"""
import torch

import aref
from aref import aref_kernel


@aref_kernel
def gemm(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64, STAGES: int | None = None):
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=STAGES or max(2, min(5, 160 * 1024 // ((BM + BN) * BK * A.dtype.nbytes))))  # ring
    for k in aref.range(A.shape[1] // BK):           # the single pipelined loop
        ab.put(aref.load(A, (pid_m, k), (BM, BK)),   # TMA-style tile loads published together
               aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)                  # loop-carried by plain reassignment
        ab.consumed()
    aref.store(C, (pid_m, pid_n), acc.to(C.dtype))


_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float8_e4m3": torch.float8_e4m3fn}


def example_inputs(size: str = "small", M: int | None = None, N: int | None = None, K: int | None = None,
                   dtype: str = "float16", seed: int = 0, **constexprs):
    """Kernel arguments. `size="large"` gives a 4096³ problem (for GPUs and the simulator's timing)."""
    dims = {"small": (256, 256, 256), "large": (4096, 4096, 4096)}[size]
    M, N, K = M or dims[0], N or dims[1], dims[2] if K is None else K
    g = torch.Generator().manual_seed(seed)
    in_dtype = _DTYPES[dtype]
    out_dtype = torch.float16 if dtype == "float8_e4m3" else in_dtype
    A = (torch.randn(M, K, generator=g) * 0.5).to(in_dtype)
    B = (torch.randn(N, K, generator=g) * 0.5).to(in_dtype)
    C = torch.zeros(M, N, dtype=out_dtype)
    return {"A": A, "B": B, "C": C, **constexprs}


def reference(A, B, C, **_):
    return {"C": (A.float() @ B.float().T).to(C.dtype)}
