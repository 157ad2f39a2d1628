"""Partitioned, pipelined and barrier levels: golden text per example and arch, the verifier between
passes, channel-level execution (aref semantics) equal to the reference, and the pipeline's errors."""
import pytest
import torch

import aref
from aref import aref_kernel
from aref.compiler import CompileOptions, print_stage
from aref.search import lower_to
from aref.errors import ArefError, ChannelError
from aref.runtime.harness import compare, load_example
from aref.ir import OpKind
from aref.interp.channels import run_ws
from example_paths import EXAMPLE_NAMES, TRIP_KNOB, example_path, poison_outputs, source_line, trip_inputs

ARCHS = ["sm_90a", "sm_100a"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_stage_goldens(name, arch, golden):
    ex = load_example(example_path(name))
    kernel = ex.kernel.specialize(**ex.inputs())
    for stage in ("partitioned", "pipelined", "barrier"):
        ir = lower_to(kernel, stage, CompileOptions(arch=arch))
        golden(f"{stage}/{name}.{arch}.txt", print_stage(ir, stage))


def _run_channels(ex, inputs, ws, seed):
    args = {k: (v.clone() if hasattr(v, "clone") else v) for k, v in inputs.items()}
    run_ws(ws, {p.name: args[p.name] for p in ws.params}, seed=seed)
    return compare(args, ex.reference_fn(**inputs))


@pytest.mark.parametrize("config", [("sm_90a", "plain"), ("sm_90a", "auto"), ("sm_100a", "auto")])
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_pipelined_program_matches_reference_at_every_trip_count(name, config):
    """Channel-level execution of the pipelined program (prologue / steady / epilogue) at 0, 1, D, D+1, 2D+1."""
    arch, consumers = config
    depth = TRIP_KNOB[name][2]
    ex = load_example(example_path(name))
    for n in (0, 1, depth, depth + 1, 2 * depth + 1):
        inputs = trip_inputs(ex, name, n)
        kernel = ex.kernel.specialize(**inputs)
        poison_outputs(ex, kernel, inputs)              # so that skipped stores fail at trip count 0
        ws = lower_to(kernel, "pipelined", CompileOptions(arch=arch, consumers=consumers))
        report = _run_channels(ex, inputs, ws, seed=n)
        assert report.ok, (n, report.to_json())


def test_heuristic_roles():
    ex = load_example(example_path("attention_fwd"))
    kernel = ex.kernel.specialize(**ex.inputs())
    hopper = lower_to(kernel, "partitioned", CompileOptions(arch="sm_90a"))
    assert [g.group.name for g in hopper.groups] == ["producer", "consumer0", "consumer1"]
    assert hopper.pingpong == (1, 2)
    blackwell = lower_to(kernel, "partitioned", CompileOptions(arch="sm_100a"))
    roles = {g.group.name: g for g in blackwell.groups}
    assert set(roles) == {"load", "mma", "epilogue", "correction", "softmax0", "softmax1"}
    kinds = {name: {op.kind for op in gp.all_ops()} for name, gp in roles.items()}
    assert OpKind.MMA in kinds["mma"] and OpKind.UNARY not in kinds["mma"]          # FA4: no softmax on MMA
    assert all(OpKind.MMA not in kinds[n] for n in ("softmax0", "softmax1", "correction"))
    assert OpKind.LOAD in kinds["load"] and OpKind.STORE in kinds["epilogue"]
    gemm = load_example(example_path("gemm"))
    coop = lower_to(gemm.kernel.specialize(**gemm.inputs()), "partitioned", CompileOptions(consumers="cooperative"))
    ab = coop.channel("ab")
    assert ab.consumers == (1, 2)              # both cooperative consumers share the producer's ring


def test_pipeline_stages_and_mma_depth():
    ex = load_example(example_path("attention_fwd"))
    inputs = ex.inputs(BM=64, SUBTILE=1)          # one 64-row sub-tile: its plain consumer fits the registers
    ws = lower_to(ex.kernel.specialize(**inputs), "pipelined", CompileOptions(consumers="plain"))
    consumer = ws.groups[1]
    mma_stages = sorted({op.stage for op in consumer.loop.body.ops if op.kind is OpKind.MMA})
    assert mma_stages == [0, 1]                # T (QKᵀ) one step ahead of U (PV)
    assert consumer.mma_depth == 1
    barrier = lower_to(ex.kernel.specialize(**inputs), "barrier", CompileOptions(consumers="plain"))
    waits = [op.attrs.pending for op in barrier.groups[1].loop.body.ops if op.kind is OpKind.MMA_WAIT]
    assert waits and max(waits) >= 1           # the steady state keeps MMAs in flight


@pytest.mark.parametrize("name", ["attention_fwd", "attention_causal"])
def test_steady_loop_carries_only_what_it_reads(name):
    """A loop-carried value made at a later stage that no op of the steady body reads (attention's O, whose next
    value accumulates into O·α) is not carried: the epilogue's fallback for it only runs when the steady loop ran
    no iteration, so its value from before the loop stands; carrying it held a copy of O beside O·α."""
    ex = load_example(example_path(name))
    ws = lower_to(ex.kernel.specialize(**ex.inputs()), "pipelined", CompileOptions(arch="sm_90a"))
    loops = [g.loop for g in ws.groups if g.loop is not None and g.stages]
    assert loops
    for lp in loops:
        read = {id(v) for op in lp.body.ops for v in op.operands} | {id(y) for y in lp.yields}
        assert all(id(c) in read for c in lp.carried), [c.name for c in lp.carried if id(c) not in read]


def test_explicit_mma_depth_too_deep_for_user_channel():
    ex = load_example(example_path("gemm"))
    kernel = ex.kernel.specialize(**ex.inputs())
    with pytest.raises(ChannelError) as info:
        lower_to(kernel, "pipelined", CompileOptions(consumers="plain", mma_depth=5))
    assert "channel 'ab' (depth 5)" in info.value.message
    assert info.value.loc.line == source_line(example_path("gemm"), "ab = aref.channel(depth=STAGES or")


def test_pingpong_needs_subtiles():
    ex = load_example(example_path("gemm"))
    with pytest.raises(ArefError, match="two independent sub-tiles"):
        lower_to(ex.kernel.specialize(**ex.inputs()), "partitioned", CompileOptions(consumers="pingpong"))


def test_cooperative_splits_attention_backward_by_keys():
    """Attention backward mixes the query rows (Pᵀ·dO, dSᵀ·Q), so the rows do not split; the key block does
    (FA3's split): each consumer group gets 64 of the 128 keys, its own dK and dV rows."""
    ex = load_example(example_path("attention_bwd"))
    ws = lower_to(ex.kernel.specialize(**ex.inputs(BN=128)), "partitioned", CompileOptions(consumers="cooperative"))
    assert [g.group.name for g in ws.groups] == ["producer", "consumer0", "consumer1"]
    for gp in ws.groups[1:]:
        accs = [op.result.type.shape for op in gp.all_ops() if op.kind is OpKind.MMA]
        assert (64, 64) in accs and all(s[0] == 64 for s in accs)       # S, dP: 64 × 64; dK, dV, dQ: 64 rows


@aref_kernel
def col_and_row_sums(A, B, R, S, *, BM: int = 128, BN: int = 128, BK: int = 64):
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    for k in aref.range(A.shape[1] // BK):
        acc = aref.mma(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)).T, acc)
    aref.store(R, (pid_n, pid_m), acc.sum(axis=1))       # row sums: each N block its own row of R
    aref.store(S, (pid_m, pid_n), acc.sum(axis=0))       # column sums: each M block its own row of S


def test_cooperative_rejects_a_kernel_no_index_space_splits():
    args = [torch.zeros(256, 128, dtype=torch.float16), torch.zeros(256, 128, dtype=torch.float16),
            torch.zeros(2, 256), torch.zeros(2, 256)]
    with pytest.raises(ArefError, match="mixes the rows.*nor does another index space split") as info:
        lower_to(col_and_row_sums.specialize(*args), "partitioned", CompileOptions(consumers="cooperative"))
    assert "without reduce" in info.value.message


def test_passes_leave_their_input_unchanged():
    ex = load_example(example_path("attention_fwd"))
    kernel = ex.kernel.specialize(**ex.inputs())
    part = lower_to(kernel, "partitioned")
    before = print_stage(part, "partitioned")
    from aref.lower import lower
    from pipeline import pipeline_kernel
    lower(pipeline_kernel(part))
    assert print_stage(part, "partitioned") == before
