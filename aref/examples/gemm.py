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
    for k in aref.range(aref.cdiv(A.shape[1], BK)):  # the single pipelined loop (ceil: any K)
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


def tolerance(A, B, C, **_):
    """What the hardware guarantees. fp16 / bf16 inputs accumulate in fp32, so the kernel and the reference
    differ by at most one unit of C's rounding (2·2⁻¹¹ relative for fp16). FP8 inputs accumulate in wgmma's
    reduced-precision accumulator (about 14 bits, truncating per 32-product k-step): up to (K/32)·2⁻¹⁴ of C's
    magnitude, 7.8e-3 at K = 4096 (an H100 measured 1.4e-3). See `aref.precision`."""
    from aref.precision import matmul_tolerance
    return {"C": matmul_tolerance(A.dtype, C.dtype, A.shape[1])}


def baseline(A, B, C, **_):
    """torch's kernel for the same product (cuBLAS for 16-bit inputs, `torch._scaled_mm` for fp8), as a
    function that runs it once (what `aref bench` times)."""
    if A.dtype == torch.float8_e4m3fn:
        one = torch.ones((), device=A.device)
        return lambda: {"C": torch._scaled_mm(A, B.T, scale_a=one, scale_b=one, out_dtype=C.dtype)}
    return lambda: {"C": A @ B.T}


# The autotuner's search space (`aref tune examples/gemm.py`; a launch on a GPU tunes over it, so the signature's
# defaults, sized for the CPU tests, are not what runs there). On an H100 at 4096³ and 8192³ the 128×256×64
# tile (two consumer warp groups of 64×256) measured 0.97–1.05× cuBLAS (bench/data/). The cluster entry multicasts
# each B tile to the 2 CTAs of a cluster along M (`aref.backend.cute.cluster`; not yet timed on a GPU). The last
# promotes fp8 partial sums to fp32 every 4 k-steps (`aref.passes.promote`; a 128-wide tile, as the partial sum doubles the
# accumulator's registers); for 16-bit inputs the compiler refuses it (they accumulate in fp32) and it is pruned.
CONFIGS = aref.configs({"BN": [128, 256], "BK": [64, 128], "STAGES": [3, 4]}, consumers=["auto", "plain"]) + [
    aref.Config.of({"BN": 64, "BK": 64, "STAGES": 4}),
    aref.Config.of({"BN": 64, "BK": 128, "STAGES": 4}),
    aref.Config.of({"BM": 256, "BN": 128, "BK": 64, "STAGES": 3}),                # 128 rows per consumer
    aref.Config.of({"BN": 128, "BK": 64, "STAGES": 4}, persistent=True),
    aref.Config.of({"BN": 256, "BK": 64, "STAGES": 3}, persistent=True),
    aref.Config.of({"BN": 256, "BK": 64, "STAGES": 3}, cluster=(2, 1)),           # TMA multicast over 2 CTAs
    aref.Config.of({"BN": 256, "BK": 64, "STAGES": 3}, raster=16),                # L2-friendly tile order
    aref.Config.of({"BN": 256, "BK": 64, "STAGES": 3}, persistent=True, raster=16),
    # CUTLASS's ping-pong: two whole-tile (128x128) consumers take alternate tiles, one's epilogue under the
    # other's main loop (`aref.backend.cute.overlap`; a 128x256 tile would need 256 accumulator registers each)
    aref.Config.of({"BN": 128, "BK": 64, "STAGES": 4}, consumers="plain", persistent=True, raster=8,
                   epilogue_overlap=True),
    aref.Config.of({"BN": 128, "BK": 128, "STAGES": 4}, promote_every=4),          # fp8: fp32 every 4 k-steps
]
aref.autotune(configs=CONFIGS, key=["A", "B", "C"])(gemm)
