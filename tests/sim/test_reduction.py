"""The exhaustive exploration's partial-order reduction (`aref.sim.reduction`) and the happens-before analysis
of waits a kernel could do without (`aref.sim.implied`): the reduced search finds every planted bug the full
one finds, visits no more states, and proves the same kernels clean; an implied wait is one whose deletion
every schedule survives."""
import dataclasses

import pytest
from sim_kernels import gemm_ws

from aref import sim
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from aref.ir import OpKind
from aref.sim.implied import implied_ops
from aref.sim.mutants import mutants, planted
from example_paths import example_path

BUGS = [dict(bug="producer_parity"), dict(bug="consumer_parity", trip=3, K=192), dict(bug="no_expect_tx", trip=2),
        dict(bug="no_release", trip=4), dict(bug="release_early", trip=3, K=192), dict(bug="double_release"),
        dict(depth=1, mma_depth=1), dict(producer_trip=3), dict(bug="cast_before_wait", mma_depth=1),
        dict(bug="turn_threads", consumers=2, pingpong=True)]


@pytest.mark.parametrize("kwargs", BUGS, ids=[",".join(f"{k}={v}" for k, v in b.items()) for b in BUGS])
def test_reduced_search_finds_every_planted_bug(kwargs):
    full = sim.explore(gemm_ws(**kwargs), cta=(0, 0), reduce=False)
    reduced = sim.explore(gemm_ws(**kwargs), cta=(0, 0))
    assert full.violations and reduced.violations
    assert reduced.violations[0].kind == full.violations[0].kind


@pytest.mark.parametrize("kwargs", [dict(depth=2, trip=5, K=320), dict(depth=2, consumers=2, trip=5, K=320),
                                    dict(depth=2, consumers=2, pingpong=True, trip=3, K=192)])
def test_reduced_search_proves_clean_kernels_in_fewer_states(kwargs):
    full = sim.explore(gemm_ws(**kwargs), cta=(1, 0), reduce=False)
    reduced = sim.explore(gemm_ws(**kwargs), cta=(1, 0))
    assert full.ok and full.completed and reduced.ok and reduced.completed
    assert reduced.states <= full.states


def test_reduced_search_of_a_blackwell_kernel():
    """Blackwell GEMM (one-warp load and MMA roles, an epilogue group), one CTA: the reduced search completes in
    fewer states than the full one."""
    ex = load_example(example_path("gemm"))
    inputs = ex.inputs(arch="sm_100a", M=128, N=128, K=192, STAGES=2)
    ws = lower_to(ex.kernel.specialize(**inputs), "barrier", CompileOptions(arch="sm_100a"))
    reduced = sim.explore(ws, inputs, max_states=100_000)
    full = sim.explore(ws, inputs, max_states=100_000, reduce=False)
    assert reduced.ok and reduced.completed and full.ok and full.completed
    assert reduced.states < full.states


def compiled(name, arch, **sizes):
    ex = load_example(example_path(name))
    inputs = ex.inputs(arch=arch, **sizes)
    return ex, inputs, lower_to(ex.kernel.specialize(**inputs), "barrier", CompileOptions(arch=arch))


def test_implied_waits_are_the_ones_whose_deletion_every_schedule_survives():
    """GEMM on sm_90a, one CTA, one K-step per tile, with consumer0's first `full` wait doubled (the copy is
    implied by the original): every implied wait's deletion survives the exhaustive exploration of one tile and
    of a persistent CTA walking three tiles, and some wait that is not implied is needed. (`sim.equivalent`
    explores the persistent CTA over enough tiles that every ring wraps twice, which does not complete here.)"""
    ex, inputs, ws = compiled("gemm", "sm_90a", M=128, N=128, K=64)
    prologue = dict(next(gp for gp in ws.groups if gp.group.name == "consumer0").regions())["prologue"]
    at, wait = next((i, op) for i, op in enumerate(prologue.ops) if op.kind is OpKind.MBAR_WAIT)
    prologue.ops.insert(at + 1, dataclasses.replace(wait))
    implied = implied_ops(ws, inputs)
    assert implied is not None and implied.runs > 0
    verdicts = {True: [], False: []}
    for m in mutants(ws, kinds=("delete-wait",)):
        op = dict(ws.groups[m.group].regions())[m.region].ops[m.index]
        needed = not implied.implied(op)
        with planted(ws, m):
            runs = [sim.explore(ws, inputs, max_states=100_000),
                    sim.explore(ws, inputs, max_states=100_000, cta=(0,), trips=1,
                                launch=sim.Launch(persistent=True, min_tiles=3))]
        if not needed:                                                      # implied => harmless
            assert all(r.ok and r.completed for r in runs), m.describe(ws)
        verdicts[needed].append(any(r.violations for r in runs))
    assert verdicts[False] == [False]                                       # the copy, not the original
    assert any(verdicts[True])


def test_the_blackwell_v_wait_is_not_implied_and_the_o_release_wait_is():
    """FA4 forward: the MMA warp's wait on V's `full` is needed (the copy may land after K's); its wait for the
    correction group to release O is implied by the wait on the correction's rescaled O (`mul.x`), which the
    correction puts after its release."""
    ex, inputs, ws = compiled("attention_fwd", "sm_100a", BH=1, Sq=128, Sk=512)
    implied = implied_ops(ws, inputs)
    mma = next(gp for gp in ws.groups if gp.group.name == "mma")
    waits = [op for op in mma.loop.body.ops if op.kind is OpKind.MBAR_WAIT]
    v_wait = next(op for op in waits if op.attrs.channel == "vc")
    o_wait = next(op for op in waits if op.attrs.channel == "o0.x" and op.attrs.which == "empty")
    assert not implied.implied(v_wait) and implied.implied(o_wait)
