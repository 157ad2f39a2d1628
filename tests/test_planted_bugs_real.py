"""Planted bugs in kernels the compiler really produced: each is caught by the simulator with the right kind,
op and user line (complementing tests/sim/test_planted_bugs.py, which plants them in hand-built Barrier IR)."""
import copy

import pytest

from aref import sim
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from aref.ir import ConstAttrs, DType, FnAttrs, Op, OpKind, ScalarType, Value
from aref.lower import lower
from example_paths import example_path, source_line

GEMM = example_path("gemm")
PUT = source_line(GEMM, "ab.put(")              # the producer's side of channel ab
GET = source_line(GEMM, "a, b = ab.get()")      # the consumer's side
CHANNEL = source_line(GEMM, "ab = aref.channel(depth=STAGES or")

I32 = ScalarType(DType.int32)


@pytest.fixture(scope="module")
def gemm():
    ex = load_example(GEMM)
    inputs = ex.inputs(K=7 * 64, M=128, N=128, STAGES=3)  # 7 iterations: the 3-slot ring wraps twice
    kernel = ex.kernel.specialize(**inputs)
    return ex, inputs, kernel


def run(ws, ex, inputs, seeds=5):
    report = sim.check(ws, inputs, ex.reference_fn, seeds=seeds)
    assert not report.ok, "the planted bug went unnoticed"
    return report.violations[0]


def barrier(kernel, **opts):
    return lower_to(kernel, "barrier", CompileOptions(consumers="plain", **opts))


def group(ws, name):
    return next(g for g in ws.groups if g.group.name == name)


def flip_parity(block_ops, op):
    """Make `op` (an mbarrier wait) wait with the opposite parity: parity' = 1 − parity."""
    one, flipped = Value(I32), Value(I32)
    i = block_ops.index(op)
    block_ops[i:i] = [Op(OpKind.CONST, (), (one,), ConstAttrs(1), op.loc),
                      Op(OpKind.SCALAR_BINARY, (one, op.operands[2]), (flipped,), FnAttrs("sub"), op.loc)]
    op.operands = (op.operands[0], op.operands[1], flipped)


def test_correct_kernel_is_clean(gemm):
    ex, inputs, kernel = gemm
    assert sim.check(barrier(kernel), inputs, ex.reference_fn, seeds=10).ok


def test_wrong_parity_on_the_producer_wait(gemm):
    ex, inputs, kernel = gemm
    ws = barrier(kernel)
    body = group(ws, "producer").loop.body.ops
    wait = next(op for op in body if op.kind is OpKind.MBAR_WAIT)
    flip_parity(body, wait)
    v = run(ws, ex, inputs)
    assert v.kind in ("deadlock", "write-to-borrowed-slot", "wait-never-completes")
    assert v.group == "producer" and v.line == PUT and "mbarrier_wait" in v.op


def test_wrong_parity_on_the_consumer_wait(gemm):
    ex, inputs, kernel = gemm
    ws = barrier(kernel)
    body = group(ws, "consumer").loop.body.ops
    wait = next(op for op in body if op.kind is OpKind.MBAR_WAIT)
    flip_parity(body, wait)
    report = sim.check(ws, inputs, ex.reference_fn, seeds=10)
    assert not report.ok
    # a premature pass reads a slot before its TMA landed; other interleavings end in a deadlock instead
    assert any(v.kind == "read-unpublished-slot" and v.group == "consumer" and v.line == GET
               for v in report.violations), [v.kind for v in report.violations]


def test_missing_arrive_on_a_register_channel():
    """Blackwell GEMM hands the accumulator from the MMA warp to the epilogue through a tensor-memory channel;
    drop the MMA warp's tcgen05.commit on `full` and the epilogue waits for a phase that can never complete."""
    ex = load_example(GEMM)
    inputs = ex.inputs(M=128, N=128)
    ws = lower_to(ex.kernel.specialize(**inputs), "barrier", CompileOptions(arch="sm_100a"))
    mma = group(ws, "mma")
    arrive = next(op for op in mma.post.ops if op.kind is OpKind.MMA_COMMIT and op.attrs.which == "full")
    mma.post.ops.remove(arrive)
    v = run(ws, ex, inputs)
    assert v.kind in ("wait-never-completes", "deadlock")
    assert v.group == "epilogue" and "acc.x.full" in v.op


def test_consumed_dropped(gemm):
    """Drop one release at the pipelined level: the producer runs out of free slots."""
    ex, inputs, kernel = gemm
    piped = lower_to(kernel, "pipelined", CompileOptions(consumers="plain"))
    consumer = group(piped, "consumer")
    consumer.loop.body.ops = [op for op in consumer.loop.body.ops if op.kind is not OpKind.CONSUMED]
    v = run(lower(piped), ex, inputs)
    assert v.kind in ("wait-never-completes", "deadlock", "arrive-underflow")
    assert v.group == "producer" and v.line == PUT


def test_depth_one_where_the_schedule_needs_two(gemm):
    """The consumer releases a slot one step after its MMA (MMA depth 1), so the ring needs two slots; with one
    the producer and the consumer wait for each other."""
    ex, inputs, kernel = gemm
    piped = lower_to(kernel, "pipelined", CompileOptions(consumers="plain"))
    piped = copy.deepcopy(piped)
    piped.channel("ab").depth = 1
    v = run(lower(piped), ex, inputs)
    assert v.kind == "deadlock"
    assert {v.group} <= {"producer", "consumer"} and v.line in (PUT, GET)


def test_producer_exits_early(gemm):
    ex, inputs, kernel = gemm
    ws = barrier(kernel)
    producer = group(ws, "producer")
    short = Value(I32)
    one = Value(I32)
    producer.pre.ops += [Op(OpKind.CONST, (), (one,), ConstAttrs(1), producer.loop.loc),
                         Op(OpKind.SCALAR_BINARY, (producer.loop.trip_count, one), (short,), FnAttrs("sub"),
                            producer.loop.loc)]
    producer.loop.trip_count = short
    v = run(ws, ex, inputs)
    assert v.kind == "wait-never-completes"
    assert v.group == "consumer" and v.line == GET and "ab.full" in v.op


def test_compile_time_check_rejects_a_user_depth_that_would_deadlock(gemm):
    ex, inputs, kernel = gemm
    from aref.errors import ChannelError
    with pytest.raises(ChannelError) as info:
        lower_to(kernel, "pipelined", CompileOptions(consumers="plain", mma_depth=3))
    assert info.value.loc.line == CHANNEL
