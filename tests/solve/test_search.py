"""Search behaviour: time-outs, progress reporting, options, JSON output."""

import json

import pytest

from randgraphs import random_graph
from solve import Graph, Machine, Schedule, SolveOptions, check, solve
from solve.attention import fa_forward_blackwell, fa_forward_hopper


def test_time_out_is_reported_never_claimed_optimal():
    # (how closely the limit is kept is a figure of bench/solver_time_limit.py, not a unit test). The limit is far
    # below what the proof takes (~1 s on an idle core since the search was reworked, issue 27)
    g = fa_forward_blackwell(allow_transfers=False)
    r = solve(g, time_limit=0.2)
    assert r.status in ("timeout", "feasible-timeout") and not r.proven_optimal
    if r.ii is not None:  # a schedule was found but smaller IIs were not all ruled out
        assert r.gap > 0 and check(g, r.ii, r.schedule, r.assignment).ok


def test_progress_callback_sees_the_search():
    events = []
    r = solve(fa_forward_hopper(), progress=events.append)
    kinds = [e.kind for e in events]
    assert kinds[0] == "bounds" and kinds[-1] == "done" and "try" in kinds and "feasible" in kinds
    assert all(e.lower_bound == r.lower_bound for e in events[1:])
    assert [e.elapsed for e in events] == sorted(e.elapsed for e in events)


def test_options_object_and_overrides():
    g = random_graph(7)
    a = solve(g, SolveOptions(time_limit=10, objectives=("length",)))
    b = solve(g, time_limit=10, objectives=("length",))
    assert (a.ii, a.length) == (b.ii, b.length)
    with pytest.raises(ValueError, match="unknown objectives"):
        solve(g, objectives=("speed",))
    with pytest.raises(ValueError, match="unknown encoding"):
        solve(g, encoding="smt")


def test_secondary_objectives_are_lexicographic():
    g = fa_forward_blackwell()
    full = solve(g)
    groups_first = solve(g, objectives=("groups",))
    assert groups_first.ii == full.ii
    assert groups_first.objectives["groups"] <= full.objectives["groups"]
    assert full.objectives["mma_waits"] <= groups_first.objectives["mma_waits"]


def test_result_json_is_plain_data():
    g = fa_forward_hopper()
    r = solve(g)
    data = json.loads(json.dumps(r.to_json()))
    for key in ("ii", "lower_bound", "res_mii", "rec_mii", "proven_optimal", "solve_seconds", "length",
                "assignment", "schedule", "stage", "encoding", "infeasible", "status"):
        assert key in data
    assert data["encoding"] == "interval" and data["status"] == "optimal"
    # Anyone holding the graph JSON and the answer can re-check it.
    again = Graph.from_json(json.loads(json.dumps(g.to_json())))
    assert check(again, data["ii"], data["schedule"], data["assignment"]).ok
    assert isinstance(Schedule(**{**r.__dict__}).to_json(), dict)


def test_infeasibility_entries_serialize():
    g = Graph({"u": 1}, Machine(max_groups=1))
    g.add_op("a", {"u": 2})
    g.add_op("b", {"u": 2})
    g.add_edge("a", "b", 1)
    g.add_edge("b", "a", 0)  # zero-distance positive cycle
    r = solve(g)
    assert r.status == "infeasible" and "distance 0" in r.message
    data = json.loads(json.dumps(r.to_json()))
    assert data["infeasible"][0]["families"] == ["recurrence"]
