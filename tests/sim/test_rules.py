"""Individual rules of the Barrier IR contract: mbarrier phases, predication, scoping, named barriers,
proxy fences, malformed IR."""
import pytest
from sim_kernels import (
    FILE,
    I32,
    LINE,
    gemm_inputs,
    gemm_reference,
    gemm_ws,
    scaled_gemm_ws,
    scaled_reference,
)

from aref.errors import SrcInfo
from aref.ir import MmaWaitAttrs, ConstAttrs, NoAttrs, Op, OpKind, Value
from aref.sim import MalformedIR, check, explore, simulate
from aref.sim.engine import GROUP, TMA, Engine
from aref.sim.program import Prog


def ops(kernel, group, kind):
    return [op for op in kernel.groups[group].all_ops() if op.kind is kind]


def test_mbarrier_phase_parity_and_transactions_follow_the_hardware():
    kernel = gemm_ws(trip=1, K=64)
    eng = Engine(Prog(kernel), gemm_inputs(K=64), (0, 0), compute_values=False)
    st = eng.initial()
    full0, empty0 = eng.prog.bar_base[0][0], eng.prog.bar_base[0][1]
    # producer's wait on empty with parity 1 passes on a fresh barrier (phase bit 0 != 1); consumer blocks
    assert eng.actions(st) == ([(GROUP, 0)], [])
    eng.apply(st, (GROUP, 0))                        # wait empty: passes
    eng.apply(st, (GROUP, 0))                        # arrive_expect_tx 16 KB: pending 0, tx 16384
    assert st.bars[full0] == (0, 16384, 0, 0)
    eng.apply(st, (GROUP, 0))                        # TMA A issued
    eng.apply(st, (TMA, 0))                          # lands: 8 KB of 16 KB
    assert st.bars[full0] == (0, 8192, 0, 0) and not st.slots[0].published
    eng.apply(st, (GROUP, 0))                        # TMA B issued; producer finished
    assert st.groups[0].done and eng.actions(st) == ([], [(TMA, 0)])
    eng.apply(st, (TMA, 0))                          # lands: the phase completes, the bit flips, count re-arms
    assert st.bars[full0] == (1, 0, 1, 1) and st.slots[0].published
    assert eng.actions(st) == ([(GROUP, 1)], [])     # the consumer's wait on parity 0 can now return
    while any(eng.actions(st)):
        steps, asyncs = eng.actions(st)
        eng.apply(st, (steps + asyncs)[0])
    assert st.bars[empty0] == (1, 0, 1, 1) and eng.finished(st)


def test_a_predicated_off_value_used_unpredicated_is_undefined():
    kernel = gemm_ws(mma_depth=1)
    cons = kernel.groups[1]
    arrive = next(op for op in cons.loop.body.ops if op.kind is OpKind.MBAR_ARRIVE)
    # compute the released slot only when there is a previous item, but release unconditionally
    slot_def = next(op for op in cons.loop.body.ops if arrive.operands[1] in op.results)
    slot_def.pred, arrive.pred = arrive.pred, None
    v = simulate(kernel, gemm_inputs(), seed=0).violations[0]
    assert (v.kind, v.line, v.group) == ("undefined-value", LINE["consumed"], "consumer")
    assert v.op.startswith("mbarrier_arrive %empty") and "predicated off" in v.message


def _select_after_mma(retire: bool):
    """acc_next = select(true, mma result, acc) at the end of the consumer's loop body, after an mma_wait that
    retires the MMA (`retire`) or right after the mma_async."""
    kernel = gemm_ws(mma_depth=1)
    cons = kernel.groups[1]
    body = cons.loop.body.ops
    mma = next(op for op in body if op.kind is OpKind.MMA_ASYNC)
    cond = next(op for op in body if op.kind is OpKind.COMPARE).results[0]
    sel = Value(mma.result.type, "acc_sel")
    true = Value(cond.type, "true")
    body.insert(0, Op(OpKind.CONST, (), (true,), ConstAttrs(True), SrcInfo(FILE, LINE["mma"])))
    at = body.index(mma) + 1
    merge = [Op(OpKind.MMA_WAIT, (), (), MmaWaitAttrs(0), SrcInfo(FILE, LINE["mma"]))] if retire else []
    merge.append(Op(OpKind.SELECT, (true, mma.result, cons.loop.carried[0]), (sel,), NoAttrs(),
                    SrcInfo(FILE, LINE["mma"])))
    body[at:at] = merge
    cons.loop.yields = (sel,)
    return kernel


def test_select_of_a_retired_accumulator_passes_state_through():
    # a select is a renaming of the state it passes through once the MMA that computes it retired
    report = check(_select_after_mma(retire=True), gemm_inputs(), gemm_reference, seeds=10)
    assert report.ok, report.to_json()


def test_select_of_a_running_mma_accumulator_is_a_violation():
    # in registers the merge reads both accumulators: one a wgmma still writes is a race (ptxas serializes
    # every wgmma around it), whatever the condition picks
    report = check(_select_after_mma(retire=False), gemm_inputs(), gemm_reference, seeds=3)
    v = report.violations[0]
    assert (v.kind, v.group, v.line) == ("read-running-mma", "consumer", LINE["mma"])
    assert v.op.startswith("%acc_sel = select") and "no mma_wait has retired" in v.message


def test_a_value_from_another_group_is_out_of_scope():
    kernel = gemm_ws()
    prod_pid = ops(kernel, 0, OpKind.PROGRAM_ID)[0].result
    store = ops(kernel, 1, OpKind.STORE)[0]
    store.operands = (store.operands[0], prod_pid) + store.operands[2:]
    v = simulate(kernel, gemm_inputs(), seed=0).violations[0]
    assert (v.kind, v.group, v.line) == ("undefined-value", "consumer", LINE["store"])
    assert "not defined in this group" in v.message


def test_a_loop_body_value_is_out_of_scope_after_the_loop():
    kernel = gemm_ws()
    cons = kernel.groups[1]
    slot = next(op for op in cons.loop.body.ops if op.kind is OpKind.SCALAR_BINARY).result
    store = ops(kernel, 1, OpKind.STORE)[0]
    store.operands = (store.operands[0], slot) + store.operands[2:]
    v = simulate(kernel, gemm_inputs(), seed=0).violations[0]
    assert (v.kind, v.line) == ("undefined-value", LINE["store"])


def test_proxy_fence_required_for_async_read_store_channels():
    assert check(scaled_gemm_ws(), gemm_inputs(64, 64, 192), scaled_reference, seeds=5).ok
    v = simulate(scaled_gemm_ws(fence=False), gemm_inputs(64, 64, 192), seed=0).violations[0]
    assert (v.kind, v.group, v.line) == ("missing-proxy-fence", "transform", LINE["put"])
    assert v.op.startswith("mbarrier_arrive %full")


def test_proxy_fence_checked_at_the_mma_even_if_the_channel_is_not_marked_async_read():
    kernel = scaled_gemm_ws(fence=False)
    kernel.channels[0].async_read = False
    v = explore(kernel, cta=(0, 0)).violations[0]
    assert (v.kind, v.group, v.line) == ("missing-proxy-fence", "consumer", LINE["mma"])
    assert v.op.startswith("%") and "mma_async" in v.op and "group transform" in v.message


def test_named_barrier_handshake_errors():
    v = simulate(gemm_ws(consumers=2, pingpong=True, bug="turn_extra_arrive"), gemm_inputs(), seed=1).violations[0]
    assert (v.kind, v.group, v.line) == ("arrive-underflow", "consumer1", LINE["mma"] + 1)
    assert v.op.startswith("named_barrier_arrive id=1")
    for seed in range(5):
        v = simulate(gemm_ws(consumers=2, pingpong=True, bug="turn_threads"), gemm_inputs(), seed=seed).violations[0]
        assert (v.kind, v.group, v.line) == ("deadlock", "consumer0", LINE["mma"])
        assert v.op == "named_barrier_sync id=1 threads=384" and "256 of 384 threads" in v.message


def test_mma_in_flight_at_exit():
    kernel = gemm_ws(mma_depth=1, trip=2, K=128)
    epi = kernel.groups[1].epilogue.ops
    wait = next(op for op in epi if op.kind is OpKind.MMA_WAIT)
    epi.remove(wait)
    arrive = next(op for op in epi if op.kind is OpKind.MBAR_ARRIVE)
    epi.remove(arrive)          # (releasing the last slot would be a release-while-reading first)
    post = kernel.groups[1].post.ops
    del post[:]                 # nothing reads the accumulator: only the exit check can see the lost MMA
    v = explore(kernel, cta=(0, 0)).violations[0]
    assert (v.kind, v.group, v.line) == ("mma-in-flight-at-exit", "consumer", LINE["mma"])
    assert v.op.startswith("%") and "mma_async" in v.op


def test_malformed_barrier_ir_is_rejected_before_running():
    kernel = gemm_ws()
    wait = ops(kernel, 0, OpKind.MBAR_WAIT)[0]
    wait.operands = (Value(I32, "not_a_barrier"),) + wait.operands[1:]
    with pytest.raises(MalformedIR, match="not a channel mbarrier"):
        simulate(kernel, gemm_inputs(), seed=0)
    kernel = gemm_ws()
    kernel.level = "pipelined"
    with pytest.raises(MalformedIR, match="executes Barrier IR"):
        simulate(kernel, gemm_inputs(), seed=0)


def test_slot_outside_the_ring_is_malformed():
    kernel = gemm_ws()
    mod = next(op for op in kernel.groups[0].loop.body.ops if op.kind is OpKind.SCALAR_BINARY)
    mod.attrs = type(mod.attrs)("add")          # slot = k + depth: out of range
    v = simulate(kernel, gemm_inputs(), seed=0).violations[0]
    assert v.kind == "malformed" and "outside the 2 slots" in v.message
