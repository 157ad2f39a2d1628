"""Whole-GPU predictions (`aref.tune.perf`): FLOP counts, waves, persistence, the L2 working set of a wave."""
import torch
from example_paths import EXAMPLES

from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from aref.target.machine import H100, H100_DATASHEET, with_parameters
from aref.tune.perf import kernel_flops, occupancy, predict, problem_machine, wave_footprint


def lowered(name, **overrides):
    ex = load_example(f"{EXAMPLES}/{name}.py")
    with torch.device("meta"):
        inputs = ex.inputs("large", **overrides)
    kernel = ex.kernel.specialize(**inputs)
    return kernel, lower_to(kernel, "barrier", CompileOptions())


def test_flops_and_waves_of_a_gemm():
    kernel, ws = lowered("gemm", BN=128, BK=64, STAGES=3)
    assert kernel_flops(kernel) == 2 * 4096 ** 3
    assert ws.grid == (32, 32) and occupancy(ws, H100) == 1
    p = predict(ws, H100, flops=kernel_flops(kernel))
    assert p.ok and p.waves == 8 and p.ctas_per_sm == 1                # 1024 tiles over 132 SMs
    assert p.seconds == p.waves * (H100.cta_overhead_cycles + p.cta_cycles) / (H100.clock_ghz * 1e9)
    assert p.tflops == kernel_flops(kernel) / p.seconds / 1e12
    # persistent over every SM: the same waves (no epilogue overlap yet); over half of them: twice as many
    assert predict(ws, H100, persistent=True).seconds == p.seconds
    half = predict(ws, H100, persistent=True, ctas=66)
    assert half.waves == 16 and abs(half.seconds - 2 * p.seconds) < 1e-12


def test_wave_footprint_follows_the_grid_axes_of_each_load():
    _, ws = lowered("gemm", BN=256, BK=64, STAGES=3)
    # grid (32, 16), x fastest: one wave of 132 CTAs covers every M block (all of A) and 5 of 16 N blocks of B
    assert ws.grid == (32, 16)
    mb = 4096 * 4096 * 2
    assert wave_footprint(ws, 132) == mb + mb * 5 // 16
    assert wave_footprint(ws, 32) == mb + mb // 16
    # rasterized in groups of 16 rows (aref.backend.tile_order): the wave covers 16 M blocks and 9 N blocks
    assert wave_footprint(ws, 132, raster=16) == mb * 16 // 32 + mb * 9 // 16 < wave_footprint(ws, 132)
    _, att = lowered("attention_fwd")
    # attention: K and V of the heads one wave touches (5 of 16), Q's blocks of those CTAs only
    per_tensor = 16 * 4096 * 128 * 2
    assert wave_footprint(att, 132) == per_tensor * 132 // 512 + 2 * per_tensor * 5 // 16


def test_l2_misses_slow_the_copies_of_large_problems_only():
    m = with_parameters(H100_DATASHEET, {"l2_miss_penalty": 0.5, "tma_bytes_per_clk": 40})
    _, small = lowered("gemm", BN=256, BK=64, STAGES=3)
    _, big = lowered("gemm", M=8192, N=8192, K=8192, BN=256, BK=64, STAGES=3)
    assert problem_machine(small, m, 132) is m                          # 42 MB fits the 50 MB L2
    slowed = problem_machine(big, m, 132)
    miss = 1 - m.l2_bytes / wave_footprint(big, 132)
    assert slowed.tma_bytes_per_clk == round(40 / (1 + 0.5 * miss)) < 40
    assert problem_machine(big, H100_DATASHEET, 132) is H100_DATASHEET  # no penalty calibrated: no change
