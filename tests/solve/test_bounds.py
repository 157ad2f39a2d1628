"""ResMII / RecMII against hand-checked graphs and brute force on random graphs."""

from fractions import Fraction
import math

from hypothesis import given, settings, strategies as st
import networkx as nx
import pytest

from solve import Graph, Machine, RecurrenceError, compute_bounds, rec_mii, res_mii
from solve.bounds import occupancy_mii, rec_mii_exclusive


def test_res_mii_is_max_over_units_of_ceil_usage_over_capacity():
    g = Graph({"tc": 1, "mufu": 2})
    g.add_op("a", {"tc": 3, "mufu": 5})
    g.add_op("b", {"tc": 2, "mufu": 4})
    assert res_mii(g) == (5, "tc")  # tc: 5/1; mufu: ceil(9/2) = 5 (ties keep the first)
    g.add_op("c", {"mufu": 3})
    assert res_mii(g) == (6, "mufu")


def test_rec_mii_of_a_two_iteration_recurrence_rounds_up():
    g = Graph({"alu": 4})
    for n in "abc":
        g.add_op(n, {"alu": 1})
    g.add_edge("a", "b", 3)
    g.add_edge("b", "c", 2)
    g.add_edge("c", "a", 2, 2)  # ratio 7/2
    ii, cycle, ratio = rec_mii(g)
    assert (ii, ratio) == (4, Fraction(7, 2))
    assert set(cycle) == {"a", "b", "c"}


def test_zero_distance_positive_cycle_is_an_error():
    g = Graph({"alu": 1})
    g.add_op("a", {"alu": 1})
    g.add_op("b", {"alu": 1})
    g.add_edge("a", "b", 1)
    g.add_edge("b", "a", 0)
    with pytest.raises(RecurrenceError, match="distance 0 and total delay 1"):
        compute_bounds(g)


def test_exclusivity_tightens_a_recurrence_through_a_shared_unit():
    g = Graph({"tc": 1, "fma": 1})
    g.add_op("mma", {"tc": 5})
    g.add_op("use", {"fma": 1})
    g.add_op("next", {"tc": 5})
    g.add_edge("mma", "use", 5)
    g.add_edge("use", "next", 1)
    g.add_edge("next", "mma", 0, 1)  # mma(i+1) waits for next(i) to leave the tensor core
    assert rec_mii(g)[0] == 6
    assert rec_mii_exclusive(g)[0] == 11
    assert compute_bounds(g).lower_bound == 11


def test_occupancy_bound_spreads_issue_over_the_groups():
    g = Graph({"tc": 1, "fma": 1, "tma": 1}, Machine(max_groups=3))
    g.add_op("load", {"tma": 2}, streaming=True, issue=1, receive_cost=4)
    g.add_op("mma", {"tc": 4}, issue=1)
    g.add_op("softmax", {"fma": 2}, issue=7)
    g.add_op("store", {"fma": 1}, issue=3)
    g.add_edge("load", "mma", 0)
    g.add_edge("mma", "softmax", 4, blocking=True)
    g.add_edge("softmax", "store", 7)
    # the load's group is apart; 1 + 7 + 3 cycles plus one receive of the load spread over 2 groups
    b = compute_bounds(g)
    assert (b.res_mii, b.occupancy_mii, b.lower_bound) == (4, 8, 8)
    assert b.reasons(g)[-1] == ("II >= 8: 15 cycles of issue and hand-offs on 2 warp group(s) "
                                "(each group is one instruction stream)")
    g.ops["softmax"].issue = 9        # one op alone
    assert occupancy_mii(g) == (9, "op softmax holds its warp group 9 cycles")


def brute_force_rec_mii(g: Graph) -> int:
    """Max over simple cycles (in the multigraph) of ceil(sum delay / sum distance)."""
    multi = nx.MultiDiGraph()
    multi.add_nodes_from(g.ops)
    for k, e in enumerate(g.edges):
        multi.add_edge(e.src, e.dst, key=k, d=e.delay, delta=e.distance)
    best = 0
    for cycle in nx.simple_cycles(nx.DiGraph(multi)):
        pairs = list(zip(cycle, cycle[1:] + cycle[:1]))
        # Every choice of parallel edge along the cycle is a cycle of the multigraph.
        choices = [[(a["d"], a["delta"]) for a in multi.get_edge_data(u, v).values()] for u, v in pairs]
        totals = [(0, 0)]
        for options in choices:
            totals = [(d + od, s + os) for d, s in totals for od, os in options]
        for d, s in totals:
            if s == 0:
                assert d <= 0
            else:
                best = max(best, math.ceil(d / s))
    return best


@st.composite
def recurrence_graphs(draw):
    n = draw(st.integers(1, 5))
    g = Graph({"alu": 1})
    for i in range(n):
        g.add_op(f"v{i}", {"alu": draw(st.integers(1, 3))})
    for _ in range(draw(st.integers(1, 8))):
        u, v = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        # Forward edges may have distance 0; backward edges need distance >= 1 (else a cycle
        # could have distance 0, which is the error case tested above).
        distance = draw(st.integers(0, 2)) if u < v else draw(st.integers(1, 3))
        g.add_edge(f"v{u}", f"v{v}", draw(st.integers(0, 9)), distance)
    return g


@settings(max_examples=60, deadline=None)
@given(recurrence_graphs())
def test_rec_mii_matches_brute_force(g):
    assert rec_mii(g)[0] == brute_force_rec_mii(g)
    assert rec_mii_exclusive(g)[0] >= rec_mii(g)[0]
