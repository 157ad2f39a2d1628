"""Hypothesis: random tile programs (tests/random_programs.py) × every partition — the heuristic with every
consumer organisation that applies, the optimal solver's, and random assignments of ops to 1–4 groups — ×
{sm_90a, sm_100a}, distributed, pipelined and lowered to mbarriers: the simulator runs each under seeded
random interleavings equal to the interpreter, and explores the interleavings of one CTA at the trip counts
0, 1, D and D+1, with no deadlock and no protocol violation (`tests/program_matrix.py`). A larger run of the
same check is `bench/random_sync.py`."""
import random

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aref import sim
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.lower import lower
from partition.custom import assignable_ops, custom_partition
from partition.distribute import distribute
from pipeline import pipeline_kernel
from program_matrix import run_matrix
from random_programs import ARCHS, random_program

# exploration budget per (configuration, trip count): bounded, to keep the suite's share to ~2 minutes
MAX_STATES = 1500


# programs drawn by seed (uniformly from the generator's distribution: a few examples see varied programs;
# a failing seed is its reproducer, `random_program(seed)`)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 1 << 30), st.sampled_from(ARCHS))
def test_random_program_is_race_free_under_every_partition(tmp_path_factory, seed, arch):
    prog = random_program(seed, directory=str(tmp_path_factory.getbasetemp()))
    result = run_matrix(prog, arch, random.Random(seed), seeds=2, max_states=MAX_STATES)
    assert not result.failures, (prog.path, [(o.config, o.detail) for o in result.failures])
    default = result.outcomes[0]               # the default compile path never refuses a valid program ...
    # ... except, on sm_100a, one whose MMA results live in tensor memory at once beyond its 512 columns: the
    # Blackwell lowering's plan aliases only P over S, not buffers with disjoint lifetimes (issue 11's open
    # item; ~3 of 60 random programs), and refuses naming the tiles
    over_tmem = arch == "sm_100a" and default.status == "refused" and default.detail.startswith(
        "tensor memory: the tiles of")
    assert default.status == "ok" or over_tmem, (prog.path, default.config, default.detail)
    assert all(o.explored for o in result.outcomes if o.status == "ok")


def test_heuristic_and_custom_single_group_agree():
    """One group holding everything is a legal partition too (channels within one group); it computes the same
    numbers as the heuristic partition, bit for bit (same MMAs, accumulated in the same order)."""
    from aref.runtime.harness import load_example
    from example_paths import example_path
    ex = load_example(example_path("gemm"))
    inputs = ex.inputs(K=256)
    kernel = ex.kernel.specialize(**inputs)
    part = custom_partition(kernel, [0] * len(assignable_ops(kernel)))
    single = lower(pipeline_kernel(distribute(kernel, part, "sm_90a")))
    assert len(single.groups) == 1
    heuristic = lower_to(kernel, "barrier", CompileOptions(consumers="plain"))
    assert len(heuristic.groups) == 2
    outputs = []
    for ws in (single, heuristic):
        report = sim.check(ws, inputs, ex.reference_fn, seeds=5)
        assert report.ok, report.to_json()
        args = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        assert sim.simulate(ws, {k: v for k, v in args.items() if isinstance(v, torch.Tensor)}, seed=1).ok
        outputs.append(args["C"])
    assert outputs[0].abs().max() > 0
    assert torch.equal(outputs[0], outputs[1])
