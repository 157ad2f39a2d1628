"""Hand-checkable loops and brute-force optimality on tiny random loops."""

from hypothesis import example, given, settings, strategies as st

from brute import brute_force_ii
from randgraphs import random_graph
from solve import Graph, Machine, check, solve


def figure1() -> Graph:
    """Twill Figure 1: S = gemm, P = exp(S), O += gemm(P); both units one cycle, II = 2."""
    g = Graph({"tc": 1, "mufu": 1}, Machine(max_groups=1))
    g.add_op("S", {"tc": 1})
    g.add_op("P", {"mufu": 1})
    g.add_op("O", {"tc": 1})
    g.add_edge("S", "P", 1)
    g.add_edge("P", "O", 1)
    g.add_edge("O", "O", 1, 1)
    return g


def test_figure1_recovers_the_fa3_pipeline():
    r = solve(figure1())
    assert r.status == "optimal" and r.proven_optimal and r.gap == 0
    assert (r.ii, r.length, r.lower_bound) == (2, 4, 2)
    # O waits a cycle for the tensor core, so the next iteration's S (at cycle II = 2) runs before
    # this iteration's O: S is hoisted into the prologue, as in Figure 1(f).
    assert (r.schedule["S"], r.schedule["O"]) == (0, 3) and r.schedule["P"] in (1, 2)
    assert r.stages == 2 and r.stage["O"] == 1
    assert r.infeasible == []


def test_one_instruction_stream_per_warp_group():
    # Figure 1 where each op costs its group's stream a cycle: one group cannot issue three cycles
    # of work every 2 cycles, so the occupancy bound says 3; two groups reach II 2 while handing
    # P over is free, and not once the hand-offs cost stream cycles too.
    g = figure1()
    for op in g.ops.values():
        op.issue = 1
    r = solve(g)
    assert (r.lower_bound, r.ii) == (3, 3) and r.proven_optimal
    assert any("3 cycles of issue and hand-offs on 1 warp group" in reason for reason in r.bound_reasons)
    g.machine.max_groups = 2
    r = solve(g)
    assert r.ii == 2 and len(set(r.assignment.values())) == 2
    assert sorted(check(g, r.ii, r.schedule, r.assignment).occupancy.values()) == [1, 2]
    for op in g.ops.values():
        op.send_cost = op.receive_cost = 1
    r = solve(g)
    assert (r.lower_bound, r.ii) == (2, 3) and r.proven_optimal
    assert r.infeasible[0].ii == 2 and r.infeasible[0].families == ["occupancy"]
    assert "group occupancy" in r.infeasible[0].reasons[0]
    t = solve(g, encoding="time-indexed")
    assert t.ii == 3 and check(g, t.ii, t.schedule, t.assignment).ok


def test_stream_order_off_keeps_only_the_per_group_sum():
    """A and B share one group (two issue cycles each) and B starts one or two cycles after A: with the
    stream order, B's window may not overlap A's, which takes II 5; with only the per-group sum (4
    cycles of issue) II 4 holds, with the windows overlapping, in both encodings and the checker."""
    g = Graph({"fma": 1, "mufu": 1}, Machine(max_groups=1))
    g.add_op("A", {"fma": 1}, issue=2)
    g.add_op("B", {"mufu": 1}, issue=2)
    g.add_edge("A", "B", 1)
    g.add_edge("B", "A", 3, 1)          # B no later than II - 3 after A
    r = solve(g)
    assert (r.lower_bound, r.ii) == (4, 5) and r.proven_optimal
    assert r.schedule["B"] - r.schedule["A"] == 2
    g.machine.stream_order = False
    assert Graph.from_json(g.dumps()).machine.stream_order is False
    for encoding in ("interval", "time-indexed"):
        r = solve(g, encoding=encoding)
        assert r.ii == 4 and r.proven_optimal, encoding
        rep = check(g, r.ii, r.schedule, r.assignment)
        assert rep.ok and rep.occupancy == {0: 4}
    g.machine.stream_order = True
    assert "ops of group 0 overlap on its instruction stream" in check(g, 4, r.schedule, r.assignment).violations
    g.ops["B"].issue = 3                # the sum still holds without the order
    g.machine.stream_order = False
    assert solve(g).ii == 5


def figure2(groups: int) -> Graph:
    """Twill Figure 2: an ADD waits synchronously for a GEMM while an EXP runs on the same warp."""
    g = Graph({"tc": 1, "mufu": 1, "fma": 1}, Machine(max_groups=groups))
    g.add_op("gemm", {"tc": 3})
    g.add_op("exp", {"mufu": 3})
    g.add_op("add", {"fma": 1})
    g.add_edge("gemm", "exp", 1)
    g.add_edge("exp", "gemm", 1, 1)  # the exp lands strictly inside the GEMM's window
    g.add_edge("gemm", "add", 3, blocking=True)
    return g


def test_figure2_blocking_wait_splits_the_work_over_two_groups():
    r = solve(figure2(2))
    assert r.ii == 3 and r.proven_optimal
    assert r.assignment["add"] != r.assignment["exp"]
    # On one group the GEMM and the EXP keep it busy at every residue but their own starts.
    r1 = solve(figure2(1))
    assert r1.ii == 4 and r1.proven_optimal
    assert r1.infeasible[0].ii == 3 and "blocking:add" in r1.infeasible[0].families


def test_chain_runs_at_the_resource_bound():
    g = Graph({"alu": 1, "mem": 1}, Machine(max_groups=1))
    g.add_op("load", {"mem": 3})
    g.add_op("add", {"alu": 2})
    g.add_op("store", {"mem": 2})
    g.add_edge("load", "add", 3)
    g.add_edge("add", "store", 2)
    r = solve(g)
    assert (r.ii, r.lower_bound, r.res_mii) == (5, 5, 5)
    # The store cannot start at 5: modulo 5 it would share the memory port with the load, so it
    # takes the free slot [3, 5) of the next stage.
    assert (r.schedule["load"], r.schedule["store"], r.length) == (0, 8, 10)
    assert 3 <= r.schedule["add"] <= 6


def test_recurrence_binds_rec_mii():
    g = Graph({"alu": 2}, Machine(max_groups=1))
    g.add_op("a", {"alu": 1})
    g.add_op("b", {"alu": 1})
    g.add_edge("a", "b", 4)
    g.add_edge("b", "a", 3, 1)
    r = solve(g)
    assert (r.res_mii, r.rec_mii, r.ii) == (1, 7, 7) and r.proven_optimal
    assert any("RecMII 7" in reason for reason in r.bound_reasons)


def test_two_instances_of_a_unit_halve_the_resource_bound():
    g = Graph({"tc": 2}, Machine(max_groups=1))
    for n in "abcd":
        g.add_op(n, {"tc": 3})
    r = solve(g)
    assert r.ii == 6 and r.res_mii == 6


def test_resource_conflicts_can_push_ii_above_the_bounds():
    # Two 3-cycle ops on one unit pinned exactly 4 cycles apart: modulo 6 the second wraps onto
    # the first, so II = 7 is the optimum.  The negative ordering delay makes feasibility
    # non-monotone in II, so the search steps II one by one.
    g = Graph({"u": 1}, Machine(max_groups=1))
    g.add_op("a", {"u": 3})
    g.add_op("b", {"u": 3})
    g.add_edge("a", "b", 4)
    g.add_edge("b", "a", -4, data=False)
    r = solve(g)
    assert r.lower_bound == 6
    assert r.ii == 7 and r.proven_optimal
    assert r.infeasible[0].ii == 6 and "unit:u" in r.infeasible[0].families
    assert check(g, r.ii, r.schedule, r.assignment).ok


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.booleans())
@example(15, False)            # infeasible: every run checks that case too
@example(4719, False)          # an op longer than II is in flight at its own residue (the checker missed that)
@example(177, True)            # a send-only stream window of size 0 inside another op's (CP-SAT's no-overlap
                               # rejects empty intervals strictly inside others)
def test_optimal_ii_matches_brute_force_on_tiny_loops(seed, occupancy):
    g = random_graph(seed, n_ops=3, occupancy=occupancy)
    g.machine.max_groups = min(g.machine.max_groups, 2)
    r = solve(g, time_limit=20, explain=False)
    assert r.status in ("optimal", "infeasible")
    if r.status == "infeasible":
        # the solver rules out every II up to the sequential one (within its stage bound); enumeration
        # confirms the two smallest (the whole range would take minutes)
        assert r.infeasible and r.infeasible[0].ii == r.lower_bound and r.infeasible[-1].proven
        upper = min(r.lower_bound + 1, max(e.ii_max for e in r.infeasible))
        assert brute_force_ii(g, r.stage_bound, r.lower_bound, upper) is None
        return
    assert check(g, r.ii, r.schedule, r.assignment).ok
    assert brute_force_ii(g, r.stage_bound, r.lower_bound, r.ii) == r.ii


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
@example(7)                    # the channel's slots push the II from 3 to 4
@example(9)                    # infeasible only for the channels' shared memory
def test_optimal_ii_matches_brute_force_with_handoff_channels(seed):
    """Hand-offs between groups take shared-memory slots (one per pipeline step they span): the solver's II is
    still the smallest any schedule reaches."""
    g = random_graph(seed, n_ops=3, handoff=True)
    g.machine.max_groups = min(g.machine.max_groups, 2)
    r = solve(g, time_limit=20, explain=False)
    assert r.status in ("optimal", "infeasible")
    if r.status == "infeasible":
        upper = min(r.lower_bound + 1, max(e.ii_max for e in r.infeasible))
        assert brute_force_ii(g, r.stage_bound, r.lower_bound, upper) is None
        return
    assert check(g, r.ii, r.schedule, r.assignment).ok
    assert brute_force_ii(g, r.stage_bound, r.lower_bound, r.ii) == r.ii


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000))
@example(1)                    # schedulable at II 6 without the held operands, at no II with them
def test_optimal_ii_matches_brute_force_with_operand_registers(seed):
    """Consumers hold registers of the values they read while they run (`Edge.operand_registers`): the
    solver's II is still the smallest any schedule reaches, counted by the unrolled oracle."""
    g = random_graph(seed, n_ops=3, operands=True)
    g.machine.max_groups = min(g.machine.max_groups, 2)
    r = solve(g, time_limit=20, explain=False)
    assert r.status in ("optimal", "infeasible")
    if r.status == "infeasible":
        upper = min(r.lower_bound + 1, max(e.ii_max for e in r.infeasible))
        assert brute_force_ii(g, r.stage_bound, r.lower_bound, upper) is None
        return
    assert check(g, r.ii, r.schedule, r.assignment).ok
    assert brute_force_ii(g, r.stage_bound, r.lower_bound, r.ii) == r.ii


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.booleans())
@example(3, False)
@example(4017, True)           # an op in flight longer than the II beside an op that may block (the implied
                               # run/flight no-overlap laid the flight's copies over one another)
def test_optimal_ii_matches_brute_force_with_segments(seed, occupancy):
    """Ops that take a unit in pieces with gaps (`Op.segments`, a reservation table): the solver's II is
    still the smallest any schedule reaches, and other ops may use the unit in the gaps."""
    g = random_graph(seed, n_ops=3, occupancy=occupancy, segments=True)
    g.machine.max_groups = min(g.machine.max_groups, 2)
    r = solve(g, time_limit=20, explain=False)
    assert r.status in ("optimal", "infeasible")
    if r.status == "infeasible":
        upper = min(r.lower_bound + 1, max(e.ii_max for e in r.infeasible))
        assert brute_force_ii(g, r.stage_bound, r.lower_bound, upper) is None
        return
    assert check(g, r.ii, r.schedule, r.assignment).ok
    assert brute_force_ii(g, r.stage_bound, r.lower_bound, r.ii) == r.ii


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10_000))
@example(9)
def test_optimal_ii_matches_brute_force_with_detached_ops(seed):
    """Fire-and-forget ops (`Op.detached`: a TMA store) hold a blocking op of their group back only while
    they issue: the solver's II is still the smallest any schedule reaches."""
    g = random_graph(seed, n_ops=3, occupancy=True, detached=True)
    g.machine.max_groups = min(g.machine.max_groups, 2)
    r = solve(g, time_limit=20, explain=False)
    assert r.status in ("optimal", "infeasible")
    if r.status == "infeasible":
        upper = min(r.lower_bound + 1, max(e.ii_max for e in r.infeasible))
        assert brute_force_ii(g, r.stage_bound, r.lower_bound, upper) is None
        return
    assert check(g, r.ii, r.schedule, r.assignment).ok
    assert brute_force_ii(g, r.stage_bound, r.lower_bound, r.ii) == r.ii


def test_detached_store_lets_a_blocking_op_start_during_its_copy():
    """One group issues an MMA, waits for it (blocking) to run math, then stages and stores the result. Waited
    for, the store's 8 cycles in flight keep the next iteration's math out: II 10. Fire and forget
    (`detached`), only its 2 cycles of staging do: II 7, the math of the next iteration starting during the
    copy. Both encodings agree, the checker still refuses math inside the staging, and the JSON keeps it."""
    def graph(detached: bool) -> Graph:
        g = Graph({"tc": 1, "tma": 1, "fma": 1}, Machine(max_groups=1))
        g.add_op("mma", {"tc": 4}, issue=1, offset={"tc": 1})
        g.add_op("math", {"fma": 2}, issue=2)
        g.add_op("store", {"tma": 6}, issue=2, offset={"tma": 2}, detached=detached)
        g.add_edge("mma", "math", 5, blocking=True)
        g.add_edge("math", "store", 2)
        return g
    waited, forgotten = graph(False), graph(True)
    w, f = solve(waited), solve(forgotten)
    assert w.ii == 10 and f.ii == 7 and w.proven_optimal and f.proven_optimal
    assert solve(forgotten, encoding="time-indexed", time_limit=30).ii == 7
    assert check(forgotten, f.ii, f.schedule, f.assignment).ok
    assert not check(waited, f.ii, f.schedule, f.assignment).ok
    # math starting one cycle into the staging of the store of an earlier iteration (11 + 1 ≡ 5 mod 7)
    inside = {"mma": 0, "math": 5, "store": 11}
    assert any("math starts while store" in v for v in check(forgotten, 7, inside, f.assignment).violations)
    again = Graph.from_json(forgotten.dumps())
    assert again.ops["store"].detached and again.ops["store"].flight == 2 and not waited.ops["store"].detached


def test_segments_let_another_op_use_the_gap():
    """A reservation table: `a` takes the unit for 2 cycles, leaves it for 4, takes it again for 2; `b` (4
    cycles on the same unit) fits in the gap, so both run in an II of 8 — with `a` holding the unit for its
    whole 8-cycle window, II 12. The checker counts the pieces too, and the JSON keeps them."""
    def graph(pieces: bool) -> Graph:
        g = Graph({"fma": 1}, Machine(max_groups=1))
        if pieces:
            g.add_op("a", {"fma": 4}, segments={"fma": [(0, 2), (6, 2)]})
        else:
            g.add_op("a", {"fma": 8})
        g.add_op("b", {"fma": 4})
        g.add_edge("a", "b", 2)
        g.add_edge("b", "a", 4, 1)
        return g
    seg, whole = graph(True), graph(False)
    r, w = solve(seg), solve(whole)
    assert r.ii == 8 and r.proven_optimal and w.ii == 12
    assert r.schedule["b"] - r.schedule["a"] == 2
    assert check(seg, r.ii, r.schedule, r.assignment).ok
    assert not check(seg, r.ii, {"a": 0, "b": 5}, r.assignment).ok        # b over a's second piece
    again = Graph.from_json(seg.dumps())
    assert again.ops["a"].spans("fma") == [(0, 2), (6, 2)] and again.ops["a"].duration == 8
    t = solve(seg, encoding="time-indexed", time_limit=30)
    assert t.ii == 8


def test_a_flight_longer_than_the_ii_shares_a_group_with_an_op_that_may_block():
    """`a` is in flight 4 cycles (its tensor-core piece starts 2 cycles in) and issues in 1; `b` reads its
    register result, so it would wait (block) were it in another group, but one group holds both. Issue
    and units allow II 2 (a at 0, b at 1): the flight spans two IIs, which the implied constraint that keeps
    a blocking op's run apart from other flights must not turn into "a overlaps itself" (it did: II 4)."""
    g = Graph({"tc": 1, "fma": 1}, Machine(max_groups=1))
    g.add_op("a", {"tc": 2}, issue=1, offset={"tc": 2}, footprint={"registers": 1})
    g.add_op("b", {"fma": 1}, issue=1)
    g.add_edge("a", "b", 0)
    assert g.ops["a"].flight == 4 and g.may_block("b")
    assert check(g, 2, {"a": 0, "b": 1}, {"a": 0, "b": 0}).ok
    for encoding in ("interval", "time-indexed"):
        r = solve(g, encoding=encoding, time_limit=30)
        assert r.ii == 2 and r.proven_optimal, encoding

def test_segments_must_add_up_and_not_overlap():
    g = Graph({"fma": 1}, Machine(max_groups=1))
    for bad in ([(0, 2), (1, 2)], [(0, 2), (4, 1)], [(3, 2), (0, 2)]):
        try:
            g.add_op("a", {"fma": 4}, segments={"fma": bad})
        except ValueError as exc:
            assert "segments" in str(exc)
        else:
            raise AssertionError(f"accepted {bad}")


def test_post_staging_keeps_a_store_with_its_host():
    """Two ops of 4 issue cycles each: in two groups II 4, in one 8. After the loop `b`'s group stages a store
    of 4 bytes with 3 to spare, unless `a` runs in its group (`Graph.add_post_staging`: `a`'s idle tile holds
    it): the staging forces one group, II 8, in both encodings; with room for it, two groups again."""
    def graph(smem: int) -> Graph:
        g = Graph({"fma": 1, "mufu": 1}, Machine(max_groups=2, memory={"smem": smem}))
        g.add_op("a", {"fma": 4}, issue=4)
        g.add_op("b", {"mufu": 4}, issue=4)
        g.add_post_staging("b", {"smem": 4}, [["a"]])
        return g
    tight, roomy = solve(graph(3)), solve(graph(4))
    assert (tight.ii, roomy.ii) == (8, 4) and tight.proven_optimal and roomy.proven_optimal
    assert tight.assignment["a"] == tight.assignment["b"] and roomy.assignment["a"] != roomy.assignment["b"]
    assert solve(graph(3), encoding="time-indexed", time_limit=30).ii == 8
    assert check(graph(3), tight.ii, tight.schedule, tight.assignment).ok
    assert not check(graph(3), roomy.ii, roomy.schedule, roomy.assignment).ok
