"""Infeasibility reasons on constructed cases."""

import pytest

from solve import Graph, Machine, solve
from solve.explain import explain


def chains(n: int, groups: int = 3, regs: int = 160) -> Graph:
    """n independent chains a -> b; each a holds 100 registers for the 6 cycles until b starts."""
    g = Graph({"tc": 1, "fma": 1}, Machine(max_groups=groups, registers_per_thread=regs,
                                            threads_per_group=1, registers_per_sm=10_000))
    for x in range(n):
        g.add_op(f"a{x}", {"tc": 2}, footprint={"registers": 100})
        g.add_op(f"b{x}", {"fma": 2})
        g.add_edge(f"a{x}", f"b{x}", 6)
    return g


def families(result) -> set[str]:
    return {f for entry in result.infeasible for f in entry.families}


def test_register_limit_forbids_overlap():
    # Below II 6 two iterations' copies of a's value overlap: 200 > 160 registers.
    r = solve(chains(1))
    assert r.status == "optimal" and (r.lower_bound, r.ii) == (2, 6)
    covered = [ii for e in r.infeasible if e.proven for ii in range(e.ii, e.ii_max + 1)]
    assert covered == [2, 3, 4, 5]
    entry = r.infeasible[0]
    assert "registers:g0" in entry.families
    assert any("registers of warp group 0" in reason for reason in entry.reasons)


def test_too_few_groups():
    assert solve(chains(2, groups=2)).ii == 6  # one chain per group
    r = solve(chains(2, groups=1))
    assert r.ii == 12  # the two values must take turns in one register file
    assert {"registers:g0", "groups"} <= families(r)


def test_forbidden_cross_group_transfer():
    # A third op links the two chains through register values: with transfers forbidden all of
    # them share one group, whose registers then serialize the three 100-register values.
    g = chains(2, groups=3, regs=255)
    g.add_op("link", {"fma": 2}, footprint={"registers": 100})
    g.add_edge("a0", "link", 6)
    g.add_edge("link", "b1", 6)
    g.add_edge("link", "a1", 0, data=False)
    assert solve(g).ii == 6
    g.machine.allow_transfers = False
    r = solve(g)
    assert r.ii == 14 and r.proven_optimal and len(set(r.assignment.values())) == 1
    assert all("no-transfer" in e.families for e in r.infeasible)


def test_cross_group_cost_and_blocking_show_up():
    # Figure 2's loop with a recurrence: the blocking add must leave the exp's group, but then a
    # register value crosses groups and its 2-cycle transfer breaks the recurrence at II 3.
    g = Graph({"tc": 1, "mufu": 1, "fma": 1}, Machine(max_groups=2))
    g.add_op("gemm", {"tc": 3}, footprint={"registers": 1}, transfer_cost=2)
    g.add_op("exp", {"mufu": 3})
    g.add_op("add", {"fma": 1})
    g.add_edge("gemm", "exp", 1)
    g.add_edge("exp", "gemm", 1, 1)
    g.add_edge("gemm", "add", 3, blocking=True)
    g.add_edge("add", "gemm", 0, 1, data=False)
    r = solve(g)
    assert r.lower_bound == 3 and r.ii > 3 and r.proven_optimal
    first = r.infeasible[0]
    assert first.ii == 3 and {"transfer-cost", "blocking:add"} <= set(first.families)
    assert any("cross-group transfer cost" in reason for reason in first.reasons)
    with pytest.raises(ValueError, match="nothing to explain"):
        explain(g, r.ii, r.stage_bound)


def test_infeasible_everywhere_is_reported_not_hung():
    g = Graph({"u": 1}, Machine(max_groups=1, registers_per_thread=8, threads_per_group=1))
    g.add_op("a", {"u": 1}, footprint={"registers": 20})
    g.add_op("b", {"u": 1})
    g.add_edge("a", "b", 1)
    r = solve(g, time_limit=20)
    assert r.status == "infeasible" and r.ii is None and not r.proven_optimal
    assert r.infeasible and r.infeasible[-1].proven
    assert "registers:g0" in families(r)
