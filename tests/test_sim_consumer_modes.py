"""Every example under each Hopper consumer organisation that applies — plain, cooperative (rows split across
two consumer groups) and ping-pong (sub-tiles taking turns on the tensor core) — lowered to Barrier IR and run
in the simulator over 50 random interleavings, equal to the reference; exhaustively at small trip counts."""
import pytest

from aref import sim
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from example_paths import example_path

# plain consumers hold every accumulator: with 64-wide blocks they fit one group's registers (the resource
# model refuses the default 128-wide ones at the lowering)
CONFIGS = [
    ("gemm", "plain", {}), ("gemm", "cooperative", {}),
    ("dual_gemm", "plain", {"BN": 64}), ("dual_gemm", "cooperative", {}),
    ("gemm_reduce", "plain", {}), ("gemm_reduce", "cooperative", {}),
    ("attention_fwd", "plain", {"BN": 64}), ("attention_fwd", "pingpong", {}),
    ("attention_fwd", "cooperative", {"SUBTILE": 1}),
    ("attention_bwd", "plain", {"BN": 64}), ("attention_bwd", "cooperative", {"BN": 128}),
]


@pytest.mark.parametrize("name,consumers,knobs", CONFIGS, ids=[f"{n}-{c}" for n, c, _ in CONFIGS])
def test_fifty_interleavings(name, consumers, knobs):
    ex = load_example(example_path(name))
    inputs = ex.inputs(**knobs)
    ws = lower_to(ex.kernel.specialize(**inputs), "barrier", CompileOptions(consumers=consumers))
    expected = {"plain": 2, "cooperative": 3, "pingpong": 3}[consumers]
    assert len(ws.groups) == expected
    report = sim.check(ws, inputs, ex.reference_fn, seeds=50)
    assert report.ok and report.interleavings == 50, report.to_json()


@pytest.mark.parametrize("consumers", ["plain", "cooperative"])
@pytest.mark.parametrize("trips", [0, 1, 3])
def test_every_interleaving_of_a_gemm_cta(consumers, trips):
    ex = load_example(example_path("gemm"))
    inputs = ex.inputs(M=128, N=128, K=64 * trips)
    ws = lower_to(ex.kernel.specialize(**inputs), "barrier", CompileOptions(consumers=consumers))
    result = sim.explore(ws, {p.name: inputs[p.name] for p in ws.params}, max_states=60_000)
    assert result.completed and not result.violations, (result.states, result.violations[:1])
