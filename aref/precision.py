"""What the hardware guarantees about a kernel's numbers: error bounds the examples' tolerances are built from.

A generated kernel differs from the fp32 torch reference in three ways, each with a known size:

* rounding to a storage dtype (an output, or a tile cast for the tensor core, e.g. attention's P): at most
  `unit_roundoff(dtype)` relative per element (round to nearest);
* fp32 accumulation in a different order than the reference: a length-K dot product's error grows like
  √K · 2⁻²⁴ times the magnitude of its partial sums (rounding errors with random signs);
* fp8 tensor-core accumulation: Hopper's wgmma with fp8 inputs does not accumulate in full fp32. It keeps about
  14 significant bits and truncates when it adds a k-step of products into the accumulator (DeepSeek-V3
  report, §3.3.2, measured on an H800; on our H100, `examples/gemm.py` at K = 4096 showed 1.4e-3 relative
  error). Truncation errors all have one sign, so they add up: (K / 32) k-steps of 32 products, each losing up
  to 2⁻¹⁴ of the partial sum, give up to (K/32)·2⁻¹⁴ of the output's magnitude (7.8e-3 at K = 4096).

The functions return tolerances in `aref.outputs.compare`'s form, (atol, rtol, scaled): allowed error
atol + rtol·|ref| + scaled·max|ref|.
"""
from __future__ import annotations

import math

FP8_ACCUMULATOR_BITS = 14        # significant bits wgmma keeps for fp8 inputs (DeepSeek-V3 §3.3.2)
FP8_K_STEP = 32                  # products one wgmma k-step adds at once for 8-bit inputs (PTX ISA: k = 32)
FP32_UNIT = 2.0 ** -24


def unit_roundoff(dtype) -> float:
    """Largest relative error of rounding to `dtype` (a torch dtype): 2^-(mantissa bits + 1)."""
    import torch
    bits = {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7, torch.float8_e4m3fn: 3,
            torch.float8_e5m2: 2}
    if dtype not in bits:
        raise ValueError(f"no rounding model for {dtype}")
    return 2.0 ** -(bits[dtype] + 1)


def matmul_tolerance(in_dtype, out_dtype, k: int) -> tuple[float, float, float]:
    """C = A·Bᵀ over length-`k` dot products with `in_dtype` inputs, stored as `out_dtype`.

    Output rounding: the kernel and the reference round nearly equal fp32 values and may land one unit apart,
    2·u(out) relative. Accumulation: fp32 (16-bit inputs) differs by √k·2⁻²⁴ of the magnitude (×4 margin);
    fp8 inputs lose up to (k/32)·2⁻¹⁴ of it to truncation (see the module docstring)."""
    import torch
    rtol = 2 * unit_roundoff(out_dtype)
    if in_dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        scaled = max(1, math.ceil(k / FP8_K_STEP)) * 2.0 ** -FP8_ACCUMULATOR_BITS
    else:
        scaled = 4 * math.sqrt(max(k, 1)) * FP32_UNIT
    return (0.0, rtol, scaled)


def rounded_operand_tolerance(operand_dtype, out_dtype, operand_bound: float, extra_roundings: int = 0
                              ) -> tuple[float, float, float]:
    """An output that is a convex combination of rows of a matrix bounded by `operand_bound`, whose weights
    are rounded to `operand_dtype` for the tensor core (attention's P·V): each weight's relative rounding
    error u moves the output by at most u·operand_bound. `extra_roundings` counts further roundings of
    that size on the way (another cast of an operand), each adding the same bound."""
    u = unit_roundoff(operand_dtype)
    return ((1 + extra_roundings) * u * operand_bound, 2 * unit_roundoff(out_dtype), 0.0)
