"""The independent checker flags each rule it is responsible for."""

from solve import Graph, Machine, check


def graph() -> Graph:
    g = Graph({"tc": 1, "mufu": 1}, Machine(max_groups=2, registers_per_thread=16, registers_per_sm=24,
                                            threads_per_group=1, reg_granularity=4,
                                            memory={"smem": 10}))
    g.add_op("S", {"tc": 2}, footprint={"registers": 6}, transfer_cost=3)
    g.add_op("P", {"mufu": 2}, footprint={"smem": 6})
    g.add_op("O", {"tc": 2})
    g.add_edge("S", "P", 2, blocking=True)
    g.add_edge("P", "O", 2)
    g.add_edge("O", "O", 2, 1)
    return g


def test_valid_schedule_passes_and_reports_peaks():
    rep = check(graph(), 4, {"S": 0, "P": 2, "O": 6}, {"S": 0, "P": 0, "O": 0})
    assert rep.ok, rep.violations
    assert rep.register_peak == {0: 6} and rep.register_alloc == {0: 8}
    assert rep.memory_peak == {"smem": 6} and rep.length == 8


def test_dependence_and_unit_violations():
    rep = check(graph(), 4, {"S": 0, "P": 1, "O": 4}, {"S": 0, "P": 0, "O": 0})
    assert any("dependence S -> P" in v for v in rep.violations)
    assert any("unit tc over capacity" in v for v in rep.violations)


def test_transfer_cost_applies_across_groups():
    start = {"S": 0, "P": 2, "O": 6}
    rep = check(graph(), 4, start, {"S": 0, "P": 1, "O": 1})
    assert any("dependence S -> P" in v for v in rep.violations)  # needs 2 + 3 cycles
    g = graph()
    g.machine.allow_transfers = False
    assert any("forbidden" in v for v in check(g, 4, {"S": 0, "P": 5, "O": 9}, {"S": 0, "P": 1, "O": 1}).violations)


def test_blocking_consumer_cannot_start_inside_a_running_op_of_its_group():
    g = graph()
    g.add_unit("fma", 1)
    g.add_op("X", {"fma": 2})
    start = {"S": 0, "P": 2, "O": 6, "X": 1}
    bad = check(g, 4, start, {"S": 0, "P": 0, "O": 0, "X": 0})
    assert any("blocking op P starts while X" in v for v in bad.violations)
    assert check(g, 4, start, {"S": 0, "P": 0, "O": 0, "X": 1}).ok
    # Starting in the same cycle as another op is allowed.
    start["X"] = 2
    assert not any("blocking" in v for v in check(g, 8, start, {"S": 0, "P": 0, "O": 0, "X": 0}).violations)


def test_register_and_memory_limits():
    g = graph()
    g.ops["S"].footprint["registers"] = 14  # rounded up to 16: fits one group, not a second one
    assert check(g, 4, {"S": 0, "P": 2, "O": 6}, {"S": 0, "P": 0, "O": 0}).ok
    g.add_op("T", {"mufu": 1}, footprint={"registers": 9})
    g.add_edge("T", "O", 0)
    rep = check(g, 4, {"S": 0, "P": 2, "O": 6, "T": 0}, {"S": 0, "P": 0, "O": 0, "T": 1})
    assert any("registers per SM" in v for v in rep.violations)
    g.ops["P"].footprint["smem"] = 11
    rep = check(g, 4, {"S": 0, "P": 2, "O": 6, "T": 0}, {"S": 0, "P": 0, "O": 0, "T": 0})
    assert any("smem over capacity" in v for v in rep.violations)
    assert any("group 0 needs 32 registers" in v for v in rep.violations)  # T wraps twice


def test_group_count_and_variable_latency_group():
    g = graph()
    g.add_op("L", {"tc": 1}, variable_latency=True)
    rep = check(g, 8, {"S": 0, "P": 2, "O": 6, "L": 3}, {"S": 0, "P": 1, "O": 2, "L": 0})
    assert any("3 warp groups used" in v for v in rep.violations)
    rep = check(g, 8, {"S": 0, "P": 2, "O": 6, "L": 3}, {"S": 0, "P": 0, "O": 0, "L": 0})
    assert any("variable-latency" in v for v in rep.violations)


def test_group_occupancy_one_stream_per_group_and_its_handoffs():
    g = graph()
    g.ops["S"].issue, g.ops["P"].issue, g.ops["O"].issue = 1, 1, 1
    one = {"S": 0, "P": 0, "O": 0}
    rep = check(g, 5, {"S": 0, "P": 4, "O": 7}, one)
    assert rep.ok and rep.occupancy == {0: 3}
    # P at 2 holds the stream in the cycle O issues in (7 mod 5 = 2)
    rep = check(g, 5, {"S": 0, "P": 2, "O": 7}, one)
    assert rep.violations == ["ops of group 0 overlap on its instruction stream"]
    # a two-cycle P wraps onto S's cycle; S's wait for P's blocking read makes the group too busy
    g.ops["P"].issue, g.ops["S"].wait_cost = 2, 2
    rep = check(g, 5, {"S": 0, "P": 4, "O": 7}, one)
    assert rep.violations == ["group 0 is busy 6 cycles per iteration (II 5)",
                              "ops of group 0 overlap on its instruction stream"]
    # S's registers go to the other group: its group pays the send, the other the receive (no wait)
    g.ops["P"].issue, g.ops["S"].send_cost, g.ops["S"].receive_cost = 1, 2, 1
    rep = check(g, 8, {"S": 0, "P": 5, "O": 10}, {"S": 0, "P": 1, "O": 1})
    assert rep.ok and rep.occupancy == {0: 1 + 2, 1: 1 + 1 + 1}


def test_a_stream_adds_up_in_its_group_at_no_stated_time():
    """`Op.stream`: cycles of the group's stream per iteration that hold it at no stated time (Blackwell's
    own-stream graph): they add up with the group's other ops within II, but take no window and leave the
    op's duration alone."""
    g = graph()
    g.ops["P"].stream, g.ops["O"].stream = 3, 2
    assert g.ops["P"].duration == 2 and g.occupies()
    rep = check(g, 5, {"S": 0, "P": 2, "O": 7}, {"S": 0, "P": 0, "O": 0})
    assert rep.violations == [] and rep.occupancy == {0: 5}
    rep = check(g, 4, {"S": 0, "P": 2, "O": 6}, {"S": 0, "P": 0, "O": 0})
    assert rep.violations == ["group 0 is busy 5 cycles per iteration (II 4)"]
    rep = check(g, 4, {"S": 0, "P": 2, "O": 6}, {"S": 0, "P": 0, "O": 1})
    assert rep.ok and rep.occupancy == {0: 3, 1: 2}


def test_handoff_channels_take_a_slot_per_pipeline_step():
    """S (registers) handed to P in another group: its channel keeps one slot per pipeline step from S's
    step to P's release (P's step plus its hold); a post-loop hand-off between groups takes one slot."""
    g = Graph({"tc": 1, "mufu": 1}, Machine(max_groups=2, memory={"smem": 10}))
    g.add_op("S", {"tc": 2}, footprint={"registers": 4}, handoff={"smem": 3})
    g.add_op("P", {"mufu": 2})
    e = g.add_edge("S", "P", 2)
    same, apart = {"S": 0, "P": 0}, {"S": 0, "P": 1}
    assert check(g, 4, {"S": 0, "P": 2}, same).memory_peak == {"smem": 0}
    assert check(g, 4, {"S": 0, "P": 2}, apart).memory_peak == {"smem": 3}          # one step: one slot
    assert check(g, 4, {"S": 0, "P": 4}, apart).memory_peak == {"smem": 6}          # P a step later
    assert check(g, 4, {"S": 1, "P": 5}, apart).memory_peak == {"smem": 6}          # steps from the first op
    e.hold = 1
    rep = check(g, 4, {"S": 0, "P": 4}, apart)
    assert rep.memory_peak == {"smem": 9} and rep.ok
    g.add_post_handoff("P", "S", {"smem": 2})
    rep = check(g, 4, {"S": 0, "P": 4}, apart)
    assert rep.memory_peak == {"smem": 11} and any("memory smem over capacity" in v for v in rep.violations)
    assert check(g, 4, {"S": 0, "P": 4}, same).memory_peak == {"smem": 0}


def test_operand_registers_count_in_the_consumers_group_while_it_runs():
    """P reads S's registers into its own group (a received tile): group 1 holds them during P's 2 cycles."""
    g = graph()
    g.edges[0].operand_registers = 6
    start, group = {"S": 0, "P": 5, "O": 10}, {"S": 0, "P": 1, "O": 0}
    rep = check(g, 8, start, group)
    assert rep.ok, rep.violations
    assert rep.register_peak == {0: 6, 1: 6}
    g.edges[0].operand_registers = 17                     # over the group's 16, wherever P runs
    assert any("group 1 needs 20 registers" in v for v in check(g, 8, start, group).violations)
    assert any("group 0 needs" in v for v in check(g, 8, start, {"S": 0, "P": 0, "O": 0}).violations)
