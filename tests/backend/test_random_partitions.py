"""Robustness: Barrier IR of arbitrary partitions (loads in one group, every other op in a random group,
generic "compute" roles) either becomes code whose tags follow the IR and which compiles without spills, or
is refused with a BackendError — never a crash or a DSL error.

Each case must produce a minimum number of generated and compiled kernels (a backend that refused every
partition would otherwise pass), and a refusal the backend calls internal (an inconsistency it found in the
Barrier IR it was given) must be one the simulator confirms: the backend may refuse a racy program, never a
correct one."""
import random

import pytest

from aref import sim
from aref.backend.cute import BackendError, compile_barrier, generate_source
from aref.errors import ArefError
from aref.runtime.harness import load_example
from aref.ir import OpKind
from example_paths import SHALLOW_RINGS
from aref.lower import lower
from aref.resources import ResourceError
from partition.custom import assignable_ops, custom_partition
from partition.distribute import distribute
from pipeline import pipeline_kernel
from tests.backend.test_consistency import check

SEEDS = range(16)
MIN_GENERATED = 5           # of the 16 partitions per case (7, 7 and 11 generate today)
COMPILED = 2                # compiling every one would take too long


def _random_barrier_irs(ex, kernel, seeds: range):
    ops = assignable_ops(kernel)
    for seed in seeds:
        rnd = random.Random(seed)
        n = rnd.randint(1, 3)
        try:
            part = custom_partition(kernel, [0 if op.kind is OpKind.LOAD else 1 + rnd.randrange(n) for op in ops])
            yield seed, lower(pipeline_kernel(distribute(kernel, part, "sm_90a")))
        except ArefError:
            continue                        # a partition the middle end rejects is not the backend's case


# Attention at its default tiles never fits a random partition (the softmax state split over groups with an
# even share of registers, tiles handed through shared memory); 64×64 tiles without sub-tiling leave room.
CASES = [("gemm", {}), ("gemm_reduce", {}), ("attention_fwd", {"BM": 64, "BN": 64, "SUBTILE": 1})]


@pytest.mark.parametrize("example, dims", CASES, ids=[c[0] for c in CASES])
def test_random_partitions_generate_or_refuse_clearly(example, dims, backend_cache):
    ex = load_example(f"examples/{example}.py")
    inputs = ex.inputs(**dims, **SHALLOW_RINGS[example])
    kernel = ex.kernel.specialize(**inputs)
    generated, compiled, internal = [], [], []
    for seed, ws in _random_barrier_irs(ex, kernel, SEEDS):
        try:
            source = generate_source(ws)
        except ResourceError:
            continue                        # the resource model's refusal at the lowering (registers, shared memory)
        except BackendError as err:
            if err.message.startswith("internal:"):
                internal.append((seed, ws, err.message))
            continue
        generated.append(seed)
        assert check(ws, source) == [], seed
        if len(compiled) < COMPILED:
            result = compile_barrier(ws, cache_dir=backend_cache)
            assert result.ptx_path is not None and result.instructions["wgmma.mma_async"] > 0, seed
            assert result.spill_bytes == 0, (seed, result.ptxas_log)
            compiled.append(seed)
    assert len(generated) >= MIN_GENERATED, f"only partitions {generated} of {list(SEEDS)} became code"
    assert len(compiled) == COMPILED
    for seed, ws, message in internal:
        report = sim.check(ws, inputs, ex.reference_fn, seeds=5)
        assert not report.ok, f"seed {seed}: the backend refused a Barrier IR the simulator runs cleanly: {message}"
