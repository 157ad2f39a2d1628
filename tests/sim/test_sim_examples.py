"""Rung 2 of the verification ladder on every example: the compiled Barrier IR (sm_90a and sm_100a), run by
the simulator, equals the example's reference over 50 interleavings, every interleaving at trip counts 0, 1
and D is clean (and the first 20 000 states at D+1 and 2D+1), and the timing model runs it without a schedule
error."""
import pytest
import torch
from example_paths import EXAMPLE_NAMES, EXPLORE_CTA, TRIP_KNOB, example_path, trip_inputs

from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from aref.interp.tile import longest_cta, run_kernel
from aref.ir import OpKind
from aref.target.machine import machine_for
from aref.sim import check, explore, simulate
from aref.sim.timing import simulate_timing

ARCHS = ("sm_90a", "sm_100a")
# Exploration budget (states). Trip counts 0, 1 and D must be covered completely (the largest: Blackwell
# attention forward at D, 293K states, ~85 s: its MMA warp issues both Q·Kᵀ before the P·Vs, so the softmax
# groups overlap more); D+1 and 2D+1 are explored up to a smaller budget to keep the suite fast: completing
# them takes up to ~100K states (Blackwell attention backward: 97K at D+1, 101K at 2D+1, over 100 s each on a
# loaded 2-core machine).
FULL_BUDGET, BOUNDED_BUDGET = 350_000, 20_000

_cache = {}


# attention backward with 64-key blocks: one consumer group, so the sequential program is what runs (a
# 128-key block is split over two groups, which adds dQ in another order: simulated below)
KNOBS = {"attention_bwd": {"BN": 64}}


def barrier(name, arch, trips=None, **overrides):
    key = (name, arch, trips, tuple(sorted(overrides.items())))
    if key not in _cache:
        ex = load_example(example_path(name))
        inputs = (ex.inputs(**{**KNOBS.get(name, {}), **overrides}) if trips is None
                  else trip_inputs(ex, name, trips, one_cta=True))
        kernel = lower_to(ex.kernel.specialize(**inputs), "barrier", CompileOptions(arch=arch))
        _cache[key] = (ex, inputs, kernel)
    return _cache[key]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_simulator_equals_reference_over_50_interleavings(name, arch):
    ex, inputs, kernel = barrier(name, arch)
    assert kernel.level == "barrier" and len(kernel.groups) >= 2
    report = check(kernel, inputs, ex.reference_fn, seeds=50, tolerance=ex.tolerance(inputs))
    out = report.to_json()
    assert out["ok"], [str(v) for v in report.violations] or out
    assert out["interleavings"] == 50 and out["deadlocks"] == 0


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_simulator_equals_interpreter_bit_for_bit(name, arch):
    # the simulator evaluates every op with aref.interp.tile's numerics, in the program's order: the warp-
    # specialized kernel computes exactly what the sequential tile program computes, whatever the schedule
    ex, inputs, kernel = barrier(name, arch)
    _bit_for_bit(kernel, ex.kernel.specialize(**inputs), inputs, seeds=5)


def _bit_for_bit(kernel, tile_ir, inputs, seeds):
    """The simulated Barrier IR writes exactly what `tile_ir` run sequentially writes, for several schedules."""
    expected = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    run_kernel(tile_ir, expected)
    for seed in range(seeds):
        got = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        assert simulate(kernel, got, seed=seed).ok
        for k in expected:
            assert torch.equal(got[k], expected[k]), (k, seed)


@pytest.mark.parametrize("trips", ["0", "1", "D", "D+1", "2D+1"])
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_interleavings_at_critical_trip_counts(name, arch, trips):
    depth = max(c.depth for c in barrier(name, arch, TRIP_KNOB[name][2])[2].channels)
    n = {"0": 0, "1": 1, "D": depth, "D+1": depth + 1, "2D+1": 2 * depth + 1}[trips]
    ex, inputs, kernel = barrier(name, arch, n)
    cta = EXPLORE_CTA[name](n) if name in EXPLORE_CTA else None
    if cta is None:
        assert all(g <= 1 for g in kernel.grid), kernel.grid
    elif n == 0:
        assert 0 in kernel.grid            # nothing to run: no CTA
        return
    full = trips in ("0", "1", "D")
    result = explore(kernel, inputs, cta=cta, max_states=FULL_BUDGET if full else BOUNDED_BUDGET)
    assert result.ok, [str(v) for v in result.violations]
    if full:
        assert result.completed, f"{result.states} states"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_timing_model_runs_every_example(name, arch):
    ex, inputs, kernel = barrier(name, arch)
    cta = longest_cta(ex.kernel.specialize(**inputs))      # causal attention: the CTA visiting every key block
    report = simulate_timing(kernel, inputs, machine_for(arch), seed=1, cta=cta)
    assert report.ok, [str(v) for v in report.violations]
    assert report.iterations >= 2 and report.cycles_per_iter > 0
    has_mma = any(op.kind is OpKind.MMA_ASYNC for gp in kernel.groups for op in gp.all_ops())
    assert (0 < report.utilization["tc"] <= 1) if has_mma else report.utilization["tc"] == 0
    assert report.total_cycles >= report.cycles_per_iter
    groups = {g.group.name for g in kernel.groups}
    assert {e.group for e in report.timeline} == groups
    # the same program over a longer loop (the fidelity figure's steady state): every group's loop, and the
    # iterations its pipeline peels, follow the larger trip count
    longer = simulate_timing(kernel, None, machine_for(arch), seed=1, cta=cta, extra_trips=5)
    assert longer.ok, [str(v) for v in longer.violations]
    assert {g: len(s) + 5 for g, s in report.iteration_starts.items() if len(s) > 1} == \
        {g: len(s) for g, s in longer.iteration_starts.items() if len(s) > 1}


def test_key_split_runs_its_split_program_bit_for_bit():
    """Attention backward with a 128-key block: the keys are split over two consumer groups (each adds
    its part of dQ); the simulated kernel equals the split Tile IR run sequentially, bit for bit, and the
    reference within tolerance."""
    from aref.passes.cse import cse
    from partition.heuristic import HeuristicOptions, heuristic_partition
    ex = load_example(example_path("attention_bwd"))
    inputs = ex.inputs(BH=1, Sq=128, Sk=128, BN=128)
    tile_ir = ex.kernel.specialize(**inputs)
    kernel = lower_to(tile_ir, "barrier", CompileOptions(arch="sm_90a"))
    assert [g.group.name for g in kernel.groups] == ["producer", "consumer0", "consumer1"]
    split, _ = heuristic_partition(cse(tile_ir), "sm_90a", HeuristicOptions("cooperative"))
    _bit_for_bit(kernel, split, inputs, seeds=3)
    report = check(kernel, inputs, ex.reference_fn, seeds=10, tolerance=getattr(ex.module, "TOLERANCE", None))
    assert report.ok, report.to_json()
