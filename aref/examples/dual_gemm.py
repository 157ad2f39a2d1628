"""Dual GEMM with a SwiGLU epilogue: C = silu(A·B0ᵀ) ⊙ (A·B1ᵀ), the gated-linear-unit MLP's first layer.

Both GEMMs share the A tile, so one aref slot carries A, B0 and B1 together.
"""
import torch

import aref
from aref import aref_kernel


@aref_kernel
def dual_gemm(A, B0, B1, C, *, BM: int = 128, BN: int = 128, BK: int = 64, STAGES: int | None = None):
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    gate = aref.zeros((BM, BN), aref.float32)
    up = aref.zeros((BM, BN), aref.float32)
    abb = aref.channel(depth=STAGES or max(2, min(4, 200 * 1024 // ((BM + 2 * BN) * BK * A.dtype.nbytes))))
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        abb.put(aref.load(A, (pid_m, k), (BM, BK)),
                aref.load(B0, (pid_n, k), (BN, BK)),
                aref.load(B1, (pid_n, k), (BN, BK)))
        a, b0, b1 = abb.get()
        gate = aref.mma(a, b0.T, gate)
        up = aref.mma(a, b1.T, up)
        abb.consumed()
    silu = gate / (1.0 + aref.exp(-gate))
    aref.store(C, (pid_m, pid_n), (silu * up).to(C.dtype))


def example_inputs(size: str = "small", M: int | None = None, N: int | None = None, K: int | None = None,
                   seed: int = 0, **constexprs):
    dims = {"small": (256, 256, 256), "large": (4096, 4096, 4096)}[size]
    M, N, K = M or dims[0], N or dims[1], dims[2] if K is None else K
    g = torch.Generator().manual_seed(seed)
    A = (torch.randn(M, K, generator=g) * 0.3).half()
    B0 = (torch.randn(N, K, generator=g) * 0.3).half()
    B1 = (torch.randn(N, K, generator=g) * 0.3).half()
    return {"A": A, "B0": B0, "B1": B1, "C": torch.zeros(M, N, dtype=torch.float16), **constexprs}


def reference(A, B0, B1, C, **_):
    gate = A.float() @ B0.float().T
    up = A.float() @ B1.float().T
    return {"C": (torch.nn.functional.silu(gate) * up).to(C.dtype)}


def tolerance(A, C, **_):
    """What the hardware guarantees: both products accumulate in fp32 and SiLU's exponential runs on the MUFU
    (2⁻²² relative), so the kernel differs from the reference by C's fp16 rounding (2·2⁻¹¹ relative) and the
    fp32 accumulation-order error (√K·2⁻²⁴ of the magnitude, ×4); see `aref.precision`."""
    from aref.precision import matmul_tolerance
    return {"C": matmul_tolerance(A.dtype, C.dtype, A.shape[1])}


def baseline(A, B0, B1, C, **_):
    """torch: two cuBLAS matmuls and the SiLU·mul epilogue, as a function that runs them once."""
    return lambda: {"C": torch.nn.functional.silu(A @ B0.T) * (A @ B1.T)}


CONFIGS = aref.configs({"BN": [64, 128], "BK": [32, 64], "STAGES": [3, 4]}, consumers=["auto", "plain"])
aref.autotune(configs=CONFIGS)(dual_gemm)
