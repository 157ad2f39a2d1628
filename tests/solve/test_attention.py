"""Attention loops shaped like Twill section 6 (H100 / B200 cycle counts from solve.attention)."""

import pytest

from solve import check, solve
from solve.attention import (fa_backward_blackwell, fa_backward_hopper, fa_forward_blackwell,
                             fa_forward_hopper)


def groups_of(r, *ops):
    return [r.assignment[o] for o in ops]


def overlap(g, r, a: str, b: str) -> bool:
    """Whether ops a and b run at the same time in the steady state (windows modulo II)."""
    busy_a = {(r.schedule[a] + t) % r.ii for t in range(g.ops[a].duration)}
    return any((r.schedule[b] + t) % r.ii in busy_a for t in range(g.ops[b].duration))


def test_hopper_forward_is_the_fa3_ping_pong():
    g = fa_forward_hopper()
    r = solve(g, time_limit=30)
    assert r.status == "optimal" and r.proven_optimal
    assert r.ii == r.lower_bound == r.res_mii == 4 * 512  # four 64x128x128 GEMMs on the tensor core
    assert check(g, r.ii, r.schedule, r.assignment).ok
    tma = r.assignment["load_K"]
    assert r.assignment["load_V"] == tma
    assert all(r.assignment[n] != tma for n in g.ops if not n.startswith("load"))
    assert r.assignment["softmax_A"] != r.assignment["softmax_B"]
    # Ping-pong: each sub-tile's softmax runs while a GEMM of the other sub-tile holds the
    # tensor core (in the steady state, i.e. modulo II).
    for x, y in (("A", "B"), ("B", "A")):
        assert any(overlap(g, r, f"softmax_{x}", f"{gemm}_{y}") for gemm in ("qk", "pv"))


def test_blackwell_forward_is_the_fa4_strategy():
    g = fa_forward_blackwell()
    r = solve(g, time_limit=30)
    assert r.status == "optimal" and r.proven_optimal and r.ii == r.lower_bound
    assert check(g, r.ii, r.schedule, r.assignment).ok
    tma = r.assignment["load_K"]
    mma = {r.assignment[n] for n in ("qk_A", "qk_B", "pv_A", "pv_B")}
    assert len(mma) == 1 and tma not in mma  # every MMA from one group
    (mma,) = mma
    exp_a, exp_b = groups_of(r, "exp_A", "exp_B")
    assert exp_a != exp_b and mma not in (exp_a, exp_b)  # no softmax on the MMA group
    assert r.assignment["max_A"] == exp_a and r.assignment["max_B"] == exp_b
    rescale = set(groups_of(r, "rescale_A", "rescale_B"))
    assert len(rescale) == 1 and not rescale & {tma, mma, exp_a, exp_b}  # a third group
    assert r.objectives["mma_waits"] == 2  # only the unavoidable tcgen05.ld before each exp


@pytest.mark.parametrize("build", [fa_backward_hopper, fa_backward_blackwell])
def test_backward_reaches_the_tensor_core_bound(build):
    g = build()
    r = solve(g, time_limit=30)
    assert r.status == "optimal" and r.proven_optimal
    assert r.ii == r.lower_bound == 5 * 512
    assert check(g, r.ii, r.schedule, r.assignment).ok
    dq_store = [n for n in g.ops if n.startswith("dq_store")]
    assert {r.assignment[n] for n in dq_store} == {r.assignment["load_Q"]}  # variable latency


def test_hopper_backward_is_register_bound_per_group():
    r = solve(fa_backward_hopper(), time_limit=30)
    # Each consumer group holds its dK and dV accumulators plus S, dP, P, dS, dQ in flight.
    consumers = [a for gr, a in r.registers.items() if gr != r.assignment["load_Q"]]
    assert len(consumers) == 2 and min(consumers) >= 200


BASE = 2304  # Blackwell forward optimum (tests above)


def ablation(**kwargs):
    g = fa_forward_blackwell(**kwargs)
    r = solve(g, time_limit=6)
    assert r.status in ("optimal", "feasible-timeout") and r.ii > BASE
    assert check(g, r.ii, r.schedule, r.assignment).ok
    return r


def test_without_subtiling_the_recurrence_forces_a_larger_ii():
    r = ablation(subtiles=1)
    assert r.ii == r.lower_bound and r.proven_optimal
    assert any("recurrence" in reason and "one-instance unit" in reason for reason in r.bound_reasons)


def test_with_fewer_groups_ii_grows_because_of_groups_and_blocking():
    r = ablation(max_groups=2)
    first = r.infeasible[0]
    assert (first.ii, first.proven) == (BASE, True)
    assert "groups" in first.families and any(f.startswith("blocking:") for f in first.families)


def test_without_cross_group_transfers_ii_grows_because_rescale_must_block_softmax():
    r = ablation(allow_transfers=False)
    first = r.infeasible[0]
    assert (first.ii, first.proven) == (BASE, True)
    assert "no-transfer" in first.families and any(f.startswith("blocking:rescale") for f in first.families)
    covered = [e for e in r.infeasible if e.proven]
    assert covered[0].ii == BASE and all(a.ii_max + 1 == b.ii for a, b in zip(covered, covered[1:]))
