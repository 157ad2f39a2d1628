"""Adversarial schedules and protocol sizes in `aref.sim.check` (`aref.sim.schedules`): a missing wait is
exposed by construction — an asynchronous source completing as late as it can, a group running as early or as
late as it can — and every ring wraps at least twice whatever the inputs' size."""
import pytest
from sim_kernels import gemm_inputs, gemm_ws

from aref import sim
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from aref.ir import OpKind
from aref.sim.engine import Engine
from aref.sim.mutants import Mutant, planted
from aref.sim.program import Prog
from aref.sim.schedules import persistent_sizes, policies, protocol_sizes, sources
from example_paths import example_path


def attention(arch, **sizes):
    ex = load_example(example_path("attention_fwd"))
    inputs = ex.inputs(arch=arch, **sizes)
    return ex, inputs, lower_to(ex.kernel.specialize(**inputs), "barrier", CompileOptions(arch=arch))


def wait_mutant(ws, group, region, channel, which="full", nth=0):
    gi = next(i for i, gp in enumerate(ws.groups) if gp.group.name == group)
    ops = dict(ws.groups[gi].regions())[region].ops
    hits = [i for i, op in enumerate(ops) if op.kind is OpKind.MBAR_WAIT and op.attrs.channel == channel
            and op.attrs.which == which]
    return Mutant("delete-wait", gi, region, hits[nth])


def test_every_async_source_and_group_has_its_policies():
    ex, inputs, ws = attention("sm_100a")
    prog = Prog(ws)
    srcs = sources(prog)
    assert {("tma", c) for c, ch in enumerate(prog.chans) if ch.kind == "tma"} <= set(srcs)
    assert ("mma", next(i for i, g in enumerate(prog.groups) if g.name == "mma")) in srcs
    assert any(s[0] == "commit" for s in srcs)
    names = [p.name for p in policies(prog)]
    assert "late tma vc" in names and "late every async source" in names
    assert all(f"eager {g.name}" in names and f"lazy {g.name}" in names for g in prog.groups)
    # every ring wraps twice at the largest protocol size; every peel of the pipeline has its own
    sizes = protocol_sizes(prog)
    assert sizes[:2] == [0, 1] and sizes[-1] == 2 * max(ch.depth for ch in prog.chans) + 1
    assert set(range(max(gp.stages for gp in ws.groups) + 2)) <= set(sizes)
    # persistent CTAs: rings wrap twice across the tiles, at one iteration and at the steady loop's first
    for trip, tiles in persistent_sizes(prog):
        assert trip * tiles > 2 * max(ch.depth for ch in prog.chans) and tiles >= 3


def test_deleted_v_wait_of_the_blackwell_mma_warp_is_caught_by_the_default_check():
    """FA4 forward at Sk = 512: the MMA warp's wait on V's `full` deleted. Random interleavings let the copy
    land first; the policy that lands V's copies last makes the tensor core read V before it is there."""
    ex, inputs, ws = attention("sm_100a", BH=1, Sq=128, Sk=512)
    with planted(ws, wait_mutant(ws, "mma", "loop", "vc")):
        report = sim.check(ws, inputs, ex.reference_fn, tolerance=ex.tolerance(inputs))
    assert not report.ok
    hits = [v for v in report.violations if v.kind == "read-unpublished-slot" and v.group == "mma"]
    assert hits and "channel vc" in hits[0].message


@pytest.mark.parametrize("region", ["loop", "epilogue"])
def test_deleted_v_waits_of_the_hopper_pipeline_are_caught(region):
    """FA3 forward at Sk = 512: consumer0's wait on V's `full` in the steady loop and in the drain step."""
    ex, inputs, ws = attention("sm_90a", BH=1, Sq=128, Sk=512)
    with planted(ws, wait_mutant(ws, "consumer0", region, "vc")):
        report = sim.check(ws, inputs, ex.reference_fn, tolerance=ex.tolerance(inputs))
    assert not report.ok and any(v.kind == "read-unpublished-slot" for v in report.violations)


def late_flip(ws, depth: int):
    """The GEMM consumer's steady-state wait on `full` with its parity flipped from item `depth` on (the ring's
    first wrap): a bug only a loop that wraps the ring can show."""
    from aref.ir import ConstAttrs, DType, FnAttrs, NoAttrs, Op, ScalarType, Value
    cons = next(gp for gp in ws.groups if gp.group.name == "consumer")
    body = cons.loop.body.ops
    wait = next(op for op in body if op.kind is OpKind.MBAR_WAIT)
    i32 = ScalarType(DType.int32)
    d, one, flipped, parity = (Value(i32) for _ in range(4))
    late = Value(ScalarType(DType.bool_))
    at = body.index(wait)
    body[at:at] = [Op(OpKind.CONST, (), (d,), ConstAttrs(depth), wait.loc),
                   Op(OpKind.SCALAR_BINARY, (cons.loop.iv, d), (late,), FnAttrs("ge"), wait.loc),
                   Op(OpKind.CONST, (), (one,), ConstAttrs(1), wait.loc),
                   Op(OpKind.SCALAR_BINARY, (one, wait.operands[2]), (flipped,), FnAttrs("sub"), wait.loc),
                   Op(OpKind.SELECT, (late, flipped, wait.operands[2]), (parity,), NoAttrs(), wait.loc)]
    wait.operands = (*wait.operands[:2], parity)


def test_protocol_sizes_wrap_rings_the_inputs_do_not():
    """K = 192 on the GEMM's 5-slot ring: 3 items, no wrap. A parity flipped from the first wrap on is
    invisible to every interleaving at that size; the check's protocol size 2·D + 1 = 11 wraps the ring."""
    ex = load_example(example_path("gemm"))
    inputs = ex.inputs(M=128, N=128, K=192)
    ws = lower_to(ex.kernel.specialize(**inputs), "barrier", CompileOptions(consumers="plain"))
    assert ws.channel("ab").depth == 5
    late_flip(ws, 5)
    assert sim.explore(ws, inputs, max_states=100_000).ok                # every schedule at K = 192: clean
    report = sim.check(ws, inputs, ex.reference_fn, seeds=5)
    assert not report.ok and report.violations
    assert all("trip count 11" in v.schedule for v in report.violations)
    out = report.to_json()
    assert out["protocol_runs"] > 0 and all("trip count 11" in v["schedule"] for v in out["violations"])


def test_trip_counts_run_on_the_control_state_only():
    prog = Prog(gemm_ws(trip=3, K=192))
    with pytest.raises(ValueError, match="control state"):
        Engine(prog, gemm_inputs(K=192), (0, 0), compute_values=True).set_trips(value=5)
