"""The interval model and the paper-literal time-indexed model agree on the optimal II.

The comparison runs on a fixed set of random graphs (tests/solve/randgraphs.py, seeds 0–71): every graph the
interval model schedules must get the same II from the literal model, which finishes each of them within a
few seconds (the slowest, seed 48, in about 4 s; with group-occupancy costs, seed 12 in about 8 s), so a time-out is a failure, not a reason to skip. Graphs the
interval model proves infeasible are left out: proving that for every II up to the sequential one takes the
literal model minutes (that is the point of the comparison); `test_small.py` checks those answers by
enumeration.
"""

from randgraphs import random_graph
from solve import Graph, Machine, check, solve

SEEDS = range(72)
MIN_COMPARED = 60           # 64 of the 72 graphs have a schedule
OCCUPANCY_SEEDS = range(30)  # the same graphs with group-occupancy costs (25 have a schedule)
HANDOFF_SEEDS = range(30)    # ... with shared-memory slots for their hand-off channels (20 have a schedule)
MIN_HANDOFF = 18
OPERAND_SEEDS = range(30)
MIN_OPERAND = 1    # ... with registers their consumers hold while they run
SEGMENT_SEEDS = range(20)
MIN_SEGMENTS = 16  # ... with units taken in pieces (17 of the 20 have a schedule)
DETACHED_SEEDS = (11, 61, 65)  # ... with group-occupancy costs and fire-and-forget ops: graphs (of seeds 0-79)
                               # whose II the detached ops lower by one


def test_interval_and_time_indexed_find_the_same_ii():
    assert len(compare(SEEDS, occupancy=False)) >= MIN_COMPARED


def test_encodings_agree_with_group_occupancy():
    assert len(compare(OCCUPANCY_SEEDS, occupancy=True)) >= 24


def test_encodings_agree_with_handoff_channels():
    assert len(compare(HANDOFF_SEEDS, occupancy=False, handoff=True)) >= MIN_HANDOFF


def test_encodings_agree_with_operand_registers():
    """Both encodings count the registers a consumer holds while it runs (`Edge.operand_registers`), and on
    some of these graphs that changes the answer (a larger II, or no schedule), so the rule is exercised."""
    changed = 0
    for seed in OPERAND_SEEDS:
        plain, held = random_graph(seed), random_graph(seed, operands=True)
        a, b = solve(plain, time_limit=20, explain=False), solve(held, time_limit=20, explain=False)
        if b.status == "optimal":
            assert check(held, b.ii, b.schedule, b.assignment).ok, seed
        changed += (a.status, a.ii) != (b.status, b.ii)
    assert len(compare(OPERAND_SEEDS, occupancy=False, operands=True)) >= MIN_OPERAND
    assert changed >= 1


def test_encodings_agree_with_segments():
    """Both encodings book a unit used in pieces (`Op.segments`) piece by piece."""
    assert len(compare(SEGMENT_SEEDS, occupancy=False, segments=True)) >= MIN_SEGMENTS


def test_encodings_agree_with_detached_ops():
    """Both encodings let a blocking op start while a fire-and-forget op of its group (`Op.detached`) is past
    its issue (on these graphs that lowers the II, so an encoding that ignored it would disagree)."""
    for seed in DETACHED_SEEDS:
        waited = solve(random_graph(seed, occupancy=True), time_limit=20, explain=False)
        assert waited.status == "optimal", seed
        assert compare([seed], occupancy=True, detached=True) == [seed]
        assert solve(random_graph(seed, occupancy=True, detached=True), time_limit=20, explain=False).ii < waited.ii


def compare(seeds, occupancy: bool, handoff: bool = False, operands: bool = False,
            segments: bool = False, detached: bool = False) -> list[int]:
    """Seeds whose interval-model answer the literal model matched (it must match every schedulable one)."""
    compared = []
    for seed in seeds:
        g = random_graph(seed, occupancy=occupancy, handoff=handoff, operands=operands, segments=segments,
                         detached=detached)
        a = solve(g, time_limit=20, explain=False)
        assert a.status in ("optimal", "infeasible"), (seed, a.status)
        if a.status == "infeasible":
            continue
        b = solve(g, encoding="time-indexed", time_limit=60, explain=False)
        assert a.encoding == "interval" and b.encoding == "time-indexed"
        assert b.normalization is not None and b.normalization["exact"], seed  # small costs: identity
        assert b.status == "optimal", (seed, b.status, b.solve_seconds)
        assert a.ii == b.ii, (seed, a.ii, b.ii)
        assert check(g, b.ii, b.schedule, b.assignment).ok, seed
        compared.append(seed)
    return compared


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
