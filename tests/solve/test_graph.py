"""Graph construction, validation messages and the public JSON contract."""

import json

import pytest

from solve import Graph, GraphError, Machine


def small_graph() -> Graph:
    g = Graph({"tc": 1, "mufu": 1}, Machine(max_groups=2, memory={"smem": 1024}))
    g.add_op("S", {"tc": 4}, footprint={"registers": 8}, transfer_cost=2, kind="gemm")
    g.add_op("P", {"mufu": 3}, footprint={"registers": 4, "smem": 64})
    g.add_op("O", {"tc": 4})
    g.add_edge("S", "P", 4, blocking=True)
    g.add_edge("P", "O", 3, memories=["smem"])
    g.add_edge("O", "O", 4, 1)
    return g


def test_duration_and_defaults():
    g = small_graph()
    assert g.ops["S"].duration == 4
    assert g.ops["S"].registers == 8
    # A data edge out of a register-holding op transfers by default; one reading only smem does not.
    assert g.edges[0].transfer and not g.edges[1].transfer
    assert g.transfer_cost(g.edges[0]) == 2
    assert g.readers("P", "registers") == [] and g.readers("P", "smem") == [g.edges[1]]


@pytest.mark.parametrize("build, message", [
    (lambda g: g.add_op("S", {"tc": 1}), "already in the graph"),
    (lambda g: g.add_op("X", {"sfu": 1}), "not declared"),
    (lambda g: g.add_op("X", {"tc": 0}), "must be > 0"),
    (lambda g: g.add_op("X", {"tc": 1}, footprint={"tmem": 4}), "declares no capacity"),
    (lambda g: g.add_op("X", {"tc": 1}, streaming=True, footprint={"registers": 4}), "streaming"),
    (lambda g: g.add_edge("S", "nope", 1), "unknown op 'nope'"),
    (lambda g: g.add_edge("S", "P", -1), "negative delay"),
    (lambda g: g.add_edge("S", "P", 1, -1), "distance"),
    (lambda g: g.add_edge("S", "P", 1, data=False, transfer=True), "only data edges"),
    (lambda g: g.add_edge("S", "P", 1, memories=["smem"]), "must be footprints"),
])
def test_validation_errors_say_what_is_wrong(build, message):
    with pytest.raises(GraphError, match=message):
        build(small_graph())


def test_streaming_ops_take_no_data_and_need_their_own_group():
    g = Graph({"tma": 1, "tc": 1}, Machine(max_groups=1, memory={"smem": 100}))
    g.add_op("load", {"tma": 1}, footprint={"smem": 10}, streaming=True, depth=3)
    g.add_op("mma", {"tc": 2})
    with pytest.raises(GraphError, match="no incoming data"):
        g.add_edge("mma", "load", 0)
    g.add_edge("load", "mma", 0)
    assert g.reserved_memory() == {"smem": 30}
    with pytest.raises(GraphError, match="own warp group"):
        g.validate()


def test_streaming_buffers_must_fit():
    g = Graph({"tma": 1}, Machine(max_groups=2, memory={"smem": 100}))
    g.add_op("load", {"tma": 1}, footprint={"smem": 60}, streaming=True, depth=2)
    with pytest.raises(GraphError, match="streaming buffers need 120"):
        g.validate()


def test_json_round_trip_keeps_everything():
    g = small_graph()
    data = json.loads(json.dumps(g.to_json()))
    assert set(data) >= {"units", "ops", "edges", "machine"}
    assert data["units"] == {"tc": 1, "mufu": 1}
    assert data["ops"][0]["usage"] == {"tc": 4}
    assert {"src", "dst", "delay", "distance"} <= set(data["edges"][0])
    back = Graph.from_json(data)
    assert back.to_json() == g.to_json()
    assert Graph.from_json(g.dumps()).to_json() == g.to_json()


def test_minimal_public_schema_is_enough():
    data = {"units": {"tc": 1}, "ops": [{"name": "a", "usage": {"tc": 2}}, {"name": "b", "usage": {"tc": 1}}],
            "edges": [{"src": "a", "dst": "b", "delay": 2, "distance": 0}]}
    g = Graph.from_json(data)
    assert g.ops["a"].usage == {"tc": 2} and g.edges[0].delay == 2


def test_malformed_json_is_reported():
    with pytest.raises(GraphError, match="'units' and 'ops'"):
        Graph.from_json({"ops": []})
    with pytest.raises(GraphError, match="lacks key"):
        Graph.from_json({"units": {}, "ops": [{"usage": {}}]})
    with pytest.raises(GraphError, match="unknown machine keys"):
        Graph.from_json({"units": {}, "ops": [], "machine": {"warps": 3}})


def test_scaled_graph_maps_every_cycle_count():
    g = small_graph()
    half = g.scaled({c: c * 2 for c in g.cycle_costs()})
    assert half.ops["S"].usage == {"tc": 8} and half.edges[1].delay == 6
    assert half.ops["S"].transfer_cost == 4


def test_group_occupancy_fields_round_trip_and_scale():
    g = small_graph()
    g.add_op("X", {"mufu": 2}, issue=5, send_cost=3, receive_cost=2, wait_cost=1, channel="c")
    assert g.ops["X"].duration == 5            # the group is busy longer than its unit
    assert g.ops["X"].channel_key == "c" and g.ops["S"].channel_key == "S"
    data = json.loads(g.dumps())
    assert {"issue": 5, "send_cost": 3, "receive_cost": 2, "wait_cost": 1, "channel": "c"}.items() \
        <= data["ops"][-1].items()
    assert "issue" not in data["ops"][0]        # zero costs stay out of the JSON
    assert Graph.from_json(data).to_json() == g.to_json()
    doubled = g.scaled({c: 2 * c for c in g.cycle_costs()})
    assert (doubled.ops["X"].issue, doubled.ops["X"].send_cost, doubled.ops["X"].wait_cost) == (10, 6, 2)
    with pytest.raises(GraphError, match="issue of op 'Y' must be >= 0"):
        g.add_op("Y", {"tc": 1}, issue=-1)


def test_segments_round_trip_and_scale():
    """A reservation table survives JSON; scaling maps each piece, and pieces a coarse mapping makes
    touch are joined (the usage follows), so the scaled graph stays valid."""
    g = small_graph()
    g.add_op("X", {"mufu": 6}, segments={"mufu": [(0, 2), (3, 4)]})
    assert g.ops["X"].spans("mufu") == [(0, 2), (3, 4)] and g.ops["X"].duration == 7
    assert g.ops["S"].spans("tc") == [(0, 4)] and g.ops["S"].spans("mufu") == []
    assert Graph.from_json(g.dumps()).to_json() == g.to_json()
    doubled = g.scaled({c: 2 * c for c in g.cycle_costs()})
    assert doubled.ops["X"].spans("mufu") == [(0, 4), (6, 8)] and doubled.ops["X"].usage["mufu"] == 12
    coarse = g.scaled({c: {3: 2}.get(c, c) for c in g.cycle_costs()})      # the gap closes
    assert coarse.ops["X"].spans("mufu") == [(0, 6)] and coarse.ops["X"].usage["mufu"] == 6
    with pytest.raises(GraphError, match="add up to 6 cycles, not its usage 5"):
        g.add_op("Y", {"mufu": 5}, segments={"mufu": [(0, 2), (3, 4)]})
    with pytest.raises(GraphError, match="does not use"):
        g.add_op("Z", {"tc": 2}, segments={"mufu": [(0, 2)]})


def test_handoff_costs_follow_the_assignment():
    g = Graph({"tc": 1, "fma": 1, "tma": 1}, Machine(max_groups=3))
    g.add_op("la", {"tma": 1}, streaming=True, receive_cost=5, channel="ring")
    g.add_op("lb", {"tma": 1}, streaming=True, receive_cost=5, channel="ring")
    g.add_op("mma", {"tc": 4}, issue=1, send_cost=7, receive_cost=3, wait_cost=2)
    g.add_op("exp", {"fma": 4}, issue=4)
    g.add_op("sum", {"fma": 1}, issue=1)
    for src, dst in (("la", "mma"), ("lb", "mma"), ("lb", "exp")):
        g.add_edge(src, dst, 0)
    g.add_edge("mma", "exp", 4, blocking=True)
    g.add_edge("mma", "sum", 4, blocking=True)
    # one group for the MMA and its consumers: one wait for the MMA, one receive of the ring
    assert g.handoff_costs({"la": 0, "lb": 0, "mma": 1, "exp": 1, "sum": 1}) == {0: 0, 1: 5 + 2}
    # exp and sum elsewhere: the MMA's group sends once, the other group receives it once
    assert g.handoff_costs({"la": 0, "lb": 0, "mma": 1, "exp": 2, "sum": 2}) == {0: 0, 1: 5 + 7, 2: 5 + 3}


def test_handoff_memory_round_trips_and_is_checked():
    g = small_graph()
    g.ops["S"].handoff = {"smem": 256}
    g.edges[0].hold = 1
    g.add_post_handoff("O", "S", {"smem": 128})
    data = json.loads(g.dumps())
    assert data["ops"][0]["handoff"] == {"smem": 256} and data["edges"][0]["hold"] == 1
    assert data["post_handoffs"] == [{"src": "O", "dst": "S", "footprint": {"smem": 128}}]
    back = Graph.from_json(data)
    assert back.to_json() == g.to_json() and back.scaled({c: c for c in g.cycle_costs()}).to_json() == g.to_json()
    # S's value crosses to P (stage 1, held a step longer): slots for steps 0..2; O stays with S
    assert g.handoff_memory({"S": 0, "P": 1, "O": 2}, {"S": 0, "P": 1, "O": 0}) == {"smem": 3 * 256}
    assert g.handoff_memory({"S": 0, "P": 1, "O": 2}, {"S": 0, "P": 0, "O": 1}) == {"smem": 128}
    with pytest.raises(GraphError, match="declares no capacity"):
        g.add_op("T", {"tc": 1}, handoff={"tmem": 4})
    with pytest.raises(GraphError, match="unknown op 'Z'"):
        g.add_post_handoff("S", "Z", {"smem": 1})


def test_post_staging_is_taken_unless_a_host_runs_wholly_with_it():
    """A store's staging after the loop (`Graph.add_post_staging`): its own bytes, unless every op of one of
    its hosts runs in its group (a tile only that group reads, or an earlier store's staging tile there)."""
    g = small_graph()
    g.add_post_staging("O", {"smem": 64}, [["S", "P"], ["P"]])
    g.add_post_staging("S", {"smem": 32})                      # no host: always its own
    data = json.loads(g.dumps())
    assert data["post_staging"][0] == {"dst": "O", "footprint": {"smem": 64}, "hosts": [["S", "P"], ["P"]]}
    assert Graph.from_json(data).to_json() == g.to_json()
    stage = {"S": 0, "P": 0, "O": 0}
    assert g.handoff_memory(stage, {"S": 0, "P": 1, "O": 1}) == {"smem": 32}       # P is with O
    assert g.handoff_memory(stage, {"S": 0, "P": 0, "O": 0}) == {"smem": 32}
    assert g.handoff_memory(stage, {"S": 1, "P": 0, "O": 1}) == {"smem": 64 + 32}  # S with O, P apart
    with pytest.raises(GraphError, match="unknown op 'Z'"):
        g.add_post_staging("O", {"smem": 1}, [["Z"]])
