"""Launches simulated as the backend runs them (`aref.sim.Launch`): persistent CTAs walking several tiles with
every ring continuing, epilogue overlap's two consumer copies, 2-CTA clusters with multicast loads and remote
releases. Each computes the reference, and each catches the synchronization bug only that launch exposes."""
import pytest

from aref import sim
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from aref.ir import ConstAttrs, DType, FnAttrs, Op, OpKind, ScalarType, Value
from aref.sim import Launch, LaunchError
from aref.sim.launch import doubled_accumulators, shared_loads
from aref.sim.mutants import Mutant, planted
from example_paths import example_path


def compiled(name, arch="sm_90a", consumers="auto", **overrides):
    ex = load_example(example_path(name))
    inputs = ex.inputs(arch=arch, **overrides)
    ws = lower_to(ex.kernel.specialize(**inputs), "barrier", CompileOptions(arch=arch, consumers=consumers))
    return ex, inputs, ws


def producer_wait(ws) -> Mutant:
    """Deleting the GEMM producer's wait for a free slot (the loop's only mbarrier_wait on `empty`)."""
    gi = next(i for i, gp in enumerate(ws.groups) if gp.group.name == "producer")
    body = ws.groups[gi].loop.body.ops
    i = next(i for i, op in enumerate(body) if op.kind is OpKind.MBAR_WAIT and op.attrs.which == "empty")
    return Mutant("delete-wait", gi, "loop", i)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("ctas", [1, 3])
def test_persistent_gemm_computes_the_reference(arch, ctas):
    ex, inputs, ws = compiled("gemm", arch)                       # 2 x 2 tiles
    report = sim.check(ws, inputs, ex.reference_fn, seeds=3, launch=Launch(persistent=True, ctas=ctas),
                       tolerance=ex.tolerance(inputs))
    assert report.ok, report.to_json()
    assert report.runs == 3 and report.max_abs_err < 0.05


def test_persistent_gemm_catches_a_deleted_first_use_empty_wait():
    """The GEMM producer's wait for a free slot, left out on each slot's first use within a tile (the item
    index below the ring's depth): within one tile those waits pass at once, so the mutant is harmless in a
    one-tile launch, at every trip count (every schedule explored at K = 256 and 704). A persistent CTA's
    next tile refills slots the previous tile's consumers may still read: the default check catches it."""
    ex, inputs, ws = compiled("gemm", "sm_90a", consumers="plain")
    producer = next(gp for gp in ws.groups if gp.group.name == "producer")
    body = producer.loop.body.ops
    wait = next(op for op in body if op.kind is OpKind.MBAR_WAIT and op.attrs.which == "empty")
    depth, i32 = ws.channel("ab").depth, ScalarType(DType.int32)
    d, later = Value(i32), Value(ScalarType(DType.bool_))
    body[0:0] = [Op(OpKind.CONST, (), (d,), ConstAttrs(depth), wait.loc),
                 Op(OpKind.SCALAR_BINARY, (producer.loop.iv, d), (later,), FnAttrs("ge"), wait.loc)]
    wait.pred = later
    for k in (4, 11):                        # (the control state of the same program at K = 64·k)
        single = sim.explore(ws, inputs, cta=(0, 0), trips=k, max_states=100_000)
        assert single.ok and single.completed, (k, single.states)
    report = sim.check(ws, inputs, ex.reference_fn, tolerance=ex.tolerance(inputs))
    assert not report.ok
    v = report.violations[0]
    assert v.kind in ("write-to-borrowed-slot", "arrive-overflow") and "persistent CTA" in v.schedule
    assert all("persistent CTA" in v.schedule for v in report.violations)
    # a persistent launch's own check, values and all, catches it too
    assert not sim.check(ws, inputs, ex.reference_fn, seeds=5, launch=Launch(persistent=True, ctas=1)).ok


def test_persistent_blackwell_gemm_catches_a_deleted_accumulator_wait():
    """sm_100a: the MMA warp waits after its loop for the epilogue to release the accumulator's tensor memory
    (its first and only use in a tile); a persistent launch doubles the accumulator and acquires it at each
    tile start, and without the wait the third tile's MMAs overwrite what the first tile's epilogue reads."""
    ex, inputs, ws = compiled("gemm", "sm_100a")
    gi = next(i for i, gp in enumerate(ws.groups) if gp.group.name == "mma")
    post = ws.groups[gi].post.ops
    i = next(i for i, op in enumerate(post) if op.kind is OpKind.MBAR_WAIT and op.attrs.which == "empty")
    with planted(ws, Mutant("delete-wait", gi, "post", i)):
        assert sim.explore(ws, inputs, cta=(0, 0), max_states=50_000).ok       # one tile: harmless
        report = sim.check(ws, inputs, ex.reference_fn, tolerance=ex.tolerance(inputs))
        assert not report.ok and report.violations[0].kind == "write-to-borrowed-slot"


@pytest.mark.parametrize("name", ["gemm", "attention_fwd", "attention_causal", "linear_attention"])
def test_doubled_accumulators_are_the_backends(name):
    from aref.backend.cute.sm100.plan import plan_kernel_sm100
    ex, inputs, ws = compiled(name, "sm_100a")
    plan = plan_kernel_sm100(ws, persistent=True)
    assert doubled_accumulators(ws, True) == set(plan.doubled.values())


def test_persistent_pingpong_turns_go_round_robin_across_tiles(monkeypatch):
    """Attention forward's ping-pong consumers on a persistent launch: the turn the last consumer hands the
    first before its loop, and the first's balancing turn after it, run once per CTA (`aref.lower.turn_once`,
    which the backend emits). Run per tile, the second consumer's hand-over for its next tile can arrive
    before the first's balancing sync and complete the barrier alone: a deadlock the simulator finds."""
    ex, inputs, ws = compiled("attention_fwd", "sm_90a")
    assert ws.pingpong
    launch = Launch(persistent=True, ctas=1)
    assert sim.check(ws, inputs, ex.reference_fn, seeds=3, launch=launch, tolerance=ex.tolerance(inputs)).ok
    import aref.sim.program as program
    monkeypatch.setattr(program, "turn_once", lambda *_: None)
    report = sim.check(ws, inputs, ex.reference_fn, seeds=3, launch=launch)
    assert not report.ok
    assert report.violations[0].kind in ("deadlock", "wait-never-completes", "arrive-overflow")


def test_backend_emits_the_once_per_cta_turns():
    from aref.backend.cute import generate_source
    _, _, ws = compiled("attention_fwd", "sm_90a")
    source = generate_source(ws, persistent=True, ctas=2)
    first = source[source.index("def consumer1"):]
    assert "if tile_count == 0:" in first.split("def ")[1]
    last = source[source.index("def consumer0"):]
    assert "if tile + num_ctas >= NUM_TILES:" in last.split("def ")[1]
    plain = generate_source(ws)
    assert "tile_count == 0" not in plain


def test_epilogue_overlap_copies_compute_the_reference_and_take_turns(monkeypatch):
    ex, inputs, ws = compiled("gemm", "sm_90a", consumers="plain", M=512)      # 4 x 2 tiles
    launch = Launch(persistent=True, ctas=2, epilogue_overlap=True)
    from aref.sim.program import Prog
    assert [g.name for g in Prog(ws, launch).groups] == ["producer", "consumer", "consumer_1"]
    report = sim.check(ws, inputs, ex.reference_fn, seeds=5, launch=launch, tolerance=ex.tolerance(inputs))
    assert report.ok, report.to_json()
    # the copies' main loops must take turns: a copy that does not pass its main-loop turn stalls the other
    import aref.sim.program as program
    broken = dict(program.TURNS)
    broken[(1, "main", "pass")] = "has_next"
    monkeypatch.setattr(program, "TURNS", broken)
    assert not sim.check(ws, inputs, ex.reference_fn, seeds=5, launch=launch).ok


def test_epilogue_overlap_needs_one_consumer():
    _, _, ws = compiled("gemm", "sm_90a")                   # two cooperative consumers
    with pytest.raises(LaunchError):
        sim.explore(ws, launch=Launch(persistent=True, epilogue_overlap=True))


@pytest.mark.parametrize("cluster, shared", [((2, 1), "B"), ((1, 2), "A")])
def test_cluster_gemm_multicasts_and_computes_the_reference(cluster, shared):
    ex, inputs, ws = compiled("gemm", "sm_90a", consumers="plain")
    loads = shared_loads(ws, cluster.index(2))
    names = {op.operands[0] for gp in ws.groups for op in gp.all_ops() if id(op) in loads}
    assert {p.name for p in ws.params if p.value in names} == {shared}
    report = sim.check(ws, inputs, ex.reference_fn, seeds=5, launch=Launch(cluster=cluster),
                       tolerance=ex.tolerance(inputs))
    assert report.ok, report.to_json()


def test_shared_loads_are_the_backends():
    from aref.backend.cute.analysis import plan_kernel
    from aref.backend.cute.cluster import plan_cluster
    for name, cluster in (("gemm", (2, 1)), ("gemm", (1, 2)), ("dual_gemm", (2, 1)), ("attention_fwd", (2, 1))):
        _, _, ws = compiled(name, "sm_90a")
        assert shared_loads(ws, cluster.index(2)) == plan_cluster(plan_kernel(ws), cluster).shared, name


def test_cluster_needs_the_remote_release(monkeypatch):
    """Without the consumers' remote arrive on the other CTA's `empty` barrier (whose count doubled), a slot
    of the multicast ring is never released in both CTAs: the producers wait for ever."""
    ex, inputs, ws = compiled("gemm", "sm_90a", consumers="plain", K=512)
    import aref.sim.program as program
    original = program.Prog._cluster

    def no_remote(self):
        original(self)
        for code in self.programs:
            for ins in code:
                ins.remote = False
    monkeypatch.setattr(program.Prog, "_cluster", no_remote)
    report = sim.check(ws, inputs, ex.reference_fn, seeds=2, launch=Launch(cluster=(2, 1)))
    assert not report.ok and report.violations[0].kind in ("wait-never-completes", "deadlock")


def test_cluster_catches_a_read_before_the_peers_half_lands():
    """A consumer that does not wait on `full` reads a multicast slot whose halves (one from each CTA) have not
    both landed."""
    ex, inputs, ws = compiled("gemm", "sm_90a", consumers="plain", K=512)
    gi = next(i for i, gp in enumerate(ws.groups) if gp.group.name == "consumer")
    body = ws.groups[gi].loop.body.ops
    i = next(i for i, op in enumerate(body) if op.kind is OpKind.MBAR_WAIT and op.attrs.which == "full")
    with planted(ws, Mutant("delete-wait", gi, "loop", i)):
        report = sim.check(ws, inputs, ex.reference_fn, seeds=3, launch=Launch(cluster=(2, 1)))
    assert not report.ok and report.violations[0].kind == "read-unpublished-slot"


def test_cluster_refuses_what_the_backend_refuses():
    _, _, ws = compiled("attention_fwd", "sm_90a")
    with pytest.raises(LaunchError, match="no loaded tile is the same"):
        sim.explore(ws, launch=Launch(cluster=(1, 2)))
    with pytest.raises(ValueError, match="not persistent"):
        Launch(persistent=True, cluster=(2, 1))
