"""The solver's tensor-core order across Hopper consumer groups (`pipeline.order`) and each group's own
release of a ring slot (`pipeline.order.own_releases`), on linear_attention at its large size: the
solver plans the state MMA (consumer1) after consumer2's q·S and q·kᵀ although its operands land before them;
issued when ready it took their turn on the tensor core (2243 cycles per iteration against the II 1912)."""
import pytest

from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from aref.interp.tile import longest_cta
from aref.ir import OpKind
from aref.target.machine import machine_for
from aref.sim.timing import simulate_timing

STATE_LINE, SCORES_LINE, CAST_LINE = 32, 29, 28          # examples/linear_attention.py


@pytest.fixture(scope="module")
def lowered():
    # the graph whose stores hold their group until the copy ends: the schedule the timing guard keeps for
    # linear_attention on sm_90a (its fire-and-forget graph's schedule runs slower, tests/test_cli_compare.py)
    ex = load_example("examples/linear_attention.py")
    inputs = ex.inputs("large")
    kernel = ex.kernel.specialize(**inputs)
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_90a", partition="optimal", solver_detached_stores=False))
    return kernel, inputs, ws


def _group_with_mma(ws, line):
    return next(gp for gp in ws.groups
                if any(op.kind is OpKind.MMA_ASYNC and op.loc.line == line for op in gp.all_ops()))


def test_state_mma_waits_for_the_other_groups_scores_mma(lowered):
    _, _, ws = lowered
    turns = [nb for nb in ws.named_barriers if "tensor-core turn" in nb.purpose]
    assert len(turns) == 1 and turns[0].threads == 256
    bar = turns[0].id
    syncing, arriving = _group_with_mma(ws, STATE_LINE), _group_with_mma(ws, SCORES_LINE)
    assert syncing is not arriving
    syncs = arrives = 0
    for gp, line, kind, step in ((syncing, STATE_LINE, OpKind.NAMED_BAR_SYNC, -1),
                                 (arriving, SCORES_LINE, OpKind.NAMED_BAR_ARRIVE, 1)):
        for _, block in gp.regions():
            for i, op in enumerate(block.ops):
                if op.kind is OpKind.MMA_ASYNC and op.loc.line == line:
                    # every pipeline step's copy takes its turn, under the MMA's own predicate
                    turn = block.ops[i + step]
                    assert turn.kind is kind and turn.attrs.id == bar and turn.pred is op.pred
                    syncs += kind is OpKind.NAMED_BAR_SYNC
                    arrives += kind is OpKind.NAMED_BAR_ARRIVE
    assert syncs and arrives


def test_state_group_releases_its_slot_before_the_state_cast(lowered):
    """Consumer1 arrives on qkv's empty barrier once its state MMA retired, not after the cast and hand-off
    of the state (the slot's last reader, consumer2's P·V, ends later: its arrival frees the slot)."""
    _, _, ws = lowered
    body = _group_with_mma(ws, STATE_LINE).loop.body.ops
    release = next(i for i, op in enumerate(body) if op.kind is OpKind.MBAR_ARRIVE and op.attrs.channel == "qkv")
    cast = next(i for i, op in enumerate(body) if op.kind is OpKind.CAST and op.loc.line == CAST_LINE)
    assert release < cast


def test_the_lowered_program_keeps_the_solvers_tensor_core_order(lowered):
    kernel, inputs, ws = lowered
    tensors = {p.name: inputs[p.name] for p in ws.params}
    report = simulate_timing(ws, tensors, machine_for("sm_90a"), cta=longest_cta(kernel))
    assert report.ok
    assert report.cycles_per_iter < 2100          # 2243 with the state MMA issued when ready (II 1912 then; 1952
    #                                               since the graph states the qkv item's round trip)
    tc = sorted((e.start, e.line) for e in report.timeline if e.unit == "tc")
    n = len(tc) // 2
    steady = [line for _, line in tc[n:n + 8]]
    # in the steady state the state MMA runs right after the scores MMA, as the solver ordered them
    for i, line in enumerate(steady[:-1]):
        if line == SCORES_LINE:
            assert steady[i + 1] == STATE_LINE


def test_a_turn_without_a_pacing_path_is_refused(lowered):
    """The reverse turn (consumer2's q·S after consumer1's state MMA) would let consumer1 arrive for the next
    iteration before consumer2 synced for this one (consumer1 needs nothing of consumer2's iteration j to
    issue its state MMA of iteration j + 1): a named barrier would then pair the wrong iterations, and
    `tensor_core_turns` leaves it out. The solver's own turn is kept."""
    import copy

    from pipeline import PipelineOptions, _schedules
    from pipeline.order import tensor_core_turns
    kernel, _, _ = lowered
    part = lower_to(kernel, "partitioned", CompileOptions(arch="sm_90a", partition="optimal",
                                                           solver_detached_stores=False))
    origin = {}
    for gp in part.groups:
        for op in gp.loop.body.ops if gp.loop is not None else ():
            if op.kind is OpKind.MMA:
                origin[op.loc.line] = gp.origin[op]
    for turn, kept in (((origin[28], origin[STATE_LINE]), 0), ((origin[STATE_LINE], origin[SCORES_LINE]), 1)):
        ws = copy.deepcopy(part)
        scheds, _ = _schedules(ws, PipelineOptions(), ws.anchors)
        assert tensor_core_turns(ws, scheds, {("tc_after", turn[0]): turn[1]}) == kept
        assert len(ws.tc_turns) == kept
        # a refused turn leaves the loops as they were
        assert not any(op.kind in (OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE)
                       for gp in ws.groups if gp.loop is not None for op in gp.loop.body.ops)


def test_an_mma_in_two_turns_keeps_both(tmp_path):
    """Random program 7473196 (found by the hypothesis test), optimal partition on sm_90a (the schedule of the
    graph whose stores hold their group until the copy ends, one the timing guard lowers too: the
    fire-and-forget graph's, since it states the ring items' round trips, makes one turn): consumer1's MMA
    waits for consumer2's turn (X of one turn) and consumer2's next MMA waits for it (P of another). Marking
    it for the second turn replaced the marker the first had recorded, so consumer1 never synced on the
    first turn's barrier while consumer2 arrived on it: at one iteration a generation never completed (an
    arrive underflow the simulator found), at more the arrivals paired with the wrong iterations. Every turn
    is now a sync in one group and an arrive in the other, and every interleaving at one iteration runs."""
    import sys
    import os
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from aref import sim
    from random_programs import random_program
    prog = random_program(7473196, directory=str(tmp_path))
    small = prog.with_shape(trips=1, one_cta=True)
    ws = lower_to(prog.kernel.specialize(**small), "barrier",
                  CompileOptions(arch="sm_90a", partition="optimal", solver_detached_stores=False))
    turns = {nb.id for nb in ws.named_barriers if nb.purpose.startswith("tensor-core turn")}
    assert len(turns) >= 2, [nb.purpose for nb in ws.named_barriers]
    # one MMA is X of one turn and P of the other
    assert any(x[1] is p[3] for x in ws.tc_turns for p in ws.tc_turns), ws.tc_turns
    for bar in turns:
        kinds = {(gp.group.name, op.kind) for gp in ws.groups for op in gp.all_ops()
                 if op.kind in (OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE) and op.attrs.id == bar}
        assert {k for _, k in kinds} == {OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE}, (bar, kinds)
    res = sim.explore(ws, {p.name: small[p.name] for p in ws.params}, max_states=1500)
    assert not res.violations, res.violations[:1]
