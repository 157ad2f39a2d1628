"""The interval model and the paper-literal time-indexed model agree on the optimal II."""

from hypothesis import HealthCheck, assume, given, settings, strategies as st

from randgraphs import random_graph
from solve import Graph, Machine, check, solve


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 100_000))
def test_interval_and_time_indexed_find_the_same_ii(seed):
    g = random_graph(seed)
    a = solve(g, time_limit=20, explain=False)
    assert a.status in ("optimal", "infeasible")
    # Proving infeasibility for every II up to the sequential one is slow for the literal model
    # (that is the point of the comparison); compare on the loops that have a schedule.
    assume(a.status == "optimal")
    b = solve(g, encoding="time-indexed", time_limit=20, explain=False)
    # A time-out decides nothing (the literal model needs a minute on some graphs, more on a loaded
    # machine); the comparison is on the graphs both encodings answer.
    assume(b.status != "timeout")
    assert a.encoding == "interval" and b.encoding == "time-indexed"
    assert b.normalization is not None and b.normalization["exact"]  # small costs: identity
    assert b.status == "optimal"
    assert a.ii == b.ii
    assert check(g, b.ii, b.schedule, b.assignment).ok


def test_time_indexed_uses_normalized_costs_and_reports_cycles():
    g = Graph({"tc": 1, "mufu": 1}, Machine(max_groups=2, registers_per_thread=255))
    g.add_op("S", {"tc": 1024}, footprint={"registers": 64})
    g.add_op("P", {"mufu": 1024}, footprint={"registers": 32})
    g.add_op("O", {"tc": 1024}, footprint={"registers": 64})
    g.add_edge("S", "P", 1024, blocking=True)
    g.add_edge("P", "O", 1024)
    g.add_edge("O", "O", 1024, 1)
    b = solve(g, encoding="time-indexed", time_limit=30)
    a = solve(g, time_limit=30)
    assert b.normalization["mapping"] == {"1024": 1} and b.normalization["exact"]
    assert a.ii == b.ii == 2048
    assert check(g, b.ii, b.schedule, b.assignment).ok
