"""Blackwell semantics in the simulator: tcgen05.commit (`mma_commit`) and tensor-memory residency.

Each test plants one bug the sm_100a lowering avoids by construction in a kernel it really produced, and checks
the simulator names it: an MMA issued into tensor memory another group still reads, an item overwritten
before the MMA that reads it (P written over S in the wrong order), a release that never comes, freeing tensor
memory while it is in use.
"""
import copy

import pytest

from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from aref.ir import OpKind
from aref.sim import check, explore
from example_paths import example_path


def barrier(example, partition="heuristic", **overrides):
    ex = load_example(example_path(example))
    inputs = ex.inputs(**overrides)
    ws = lower_to(ex.kernel.specialize(**inputs), "barrier", CompileOptions(arch="sm_100a", partition=partition))
    return ex, inputs, ws


def violations(ex, inputs, ws, seeds=20):
    report = check(ws, inputs, ex.reference_fn, seeds=seeds)
    return report, [(v.kind, v.group, v.message) for v in report.violations]


def mma_group(ws):
    return next(gp for gp in ws.groups if gp.group.role == "mma")


def test_the_lowered_kernels_are_clean():
    for partition in ("heuristic", "optimal"):
        ex, inputs, ws = barrier("attention_fwd", partition, BM=256, D=128)
        report, found = violations(ex, inputs, ws, seeds=10)
        assert report.ok, found


def test_mma_issued_before_its_slot_is_free_is_a_write_to_a_borrowed_slot():
    """The lowering waits for `empty` before the MMA that writes a tensor-memory slot; wait after it instead
    and the backward pass's dQ MMA overwrites the tile the dQ group is still storing."""
    ex, inputs, ws = barrier("attention_bwd", Sq=512)
    body = mma_group(ws).loop.body.ops
    commit = next(i for i, op in enumerate(body) if op.kind is OpKind.MMA_COMMIT and op.attrs.which == "full"
                  and op.attrs.channel == "dq.x")
    i = max(j for j in range(commit) if body[j].kind is OpKind.MMA_ASYNC)
    w = max(j for j in range(i) if body[j].kind is OpKind.MBAR_WAIT and body[j].attrs.channel == "dq.x")
    body.insert(i, body.pop(w))          # now: mma_async, then the wait
    report, found = violations(ex, inputs, ws, seeds=40)
    assert not report.ok
    assert any(kind == "write-to-borrowed-slot" and "tensor memory" in msg and "still held" in msg
               for kind, _, msg in found), found


def test_p_over_s_needs_the_pv_mma_issued_first():
    """With P in the top columns of S, the MMA warp must issue P·V before the next Q·Kᵀ: issue it after (with
    its releases) and the P·V reads columns the Q·Kᵀ has already overwritten."""
    ex, inputs, ws = barrier("attention_fwd", BM=256, D=128, Sk=512)
    assert any(b.alias_of for b in ws.tmem.buffers)
    body = mma_group(ws).loop.body.ops
    mmas = [i for i, op in enumerate(body) if op.kind is OpKind.MMA_ASYNC]
    pv, qk = mmas[0], mmas[1]
    assert len(body[pv].operands) == 3 and len(body[qk].operands) == 2
    # the Q·Kᵀ with what it needs (K's wait and view, the wait for S's slot) moves in front of the P·V
    start = next(j for j in range(pv, qk) if body[j].kind is OpKind.MBAR_WAIT and body[j].attrs.channel == "kc")
    while body[start - 1].kind in (OpKind.SCALAR_BINARY, OpKind.CONST):
        start -= 1
    body[:] = body[:pv] + body[start:qk + 1] + body[pv:start] + body[qk + 1:]
    report, found = violations(ex, inputs, ws, seeds=10)
    assert not report.ok
    assert any(kind == "read-after-release" and group == "mma" and "tensor memory" in msg for kind, group, msg in found), found


def test_a_missing_commit_on_empty_starves_the_producer():
    ex, inputs, ws = barrier("gemm", K=7 * 64, M=128, N=128)
    body = mma_group(ws).loop.body.ops
    commit = next(op for op in body if op.kind is OpKind.MMA_COMMIT and op.attrs.which == "empty")
    body.remove(commit)
    report, found = violations(ex, inputs, ws, seeds=5)
    assert not report.ok
    assert {kind for kind, _, _ in found} <= {"deadlock", "wait-never-completes", "arrive-underflow"}
    assert any(group == "load" for _, group, _ in found), found


def test_freeing_tensor_memory_before_its_users_are_done():
    ex, inputs, ws = barrier("gemm", M=128, N=128)
    mma = mma_group(ws)
    sync = next(op for op in mma.post.ops if op.kind is OpKind.NAMED_BAR_SYNC)
    mma.post.ops.remove(sync)                                 # no longer waits for the epilogue
    others = [gp for gp in ws.groups if any(op.kind is OpKind.NAMED_BAR_ARRIVE for op in gp.post.ops)]
    for gp in others:
        gp.post.ops = [op for op in gp.post.ops if op.kind is not OpKind.NAMED_BAR_ARRIVE]
    report, found = violations(ex, inputs, ws, seeds=30)
    assert not report.ok
    assert any("tensor memory" in msg and ("tmem_dealloc" in msg or "frees" in msg) for _, _, msg in found), found


def test_commit_fires_only_when_the_mmas_complete():
    """The epilogue may read the accumulator only after every MMA into it completed: the simulator's commit
    arrives at completion, so every interleaving (exhaustively, one CTA) reads the final sum."""
    ex, inputs, ws = barrier("gemm", M=128, N=128, K=2 * 64)
    result = explore(ws, inputs, max_states=50_000)
    assert result.ok and result.completed


@pytest.mark.parametrize("example", ["gemm", "attention_fwd"])
def test_commit_semantics_against_a_copy_without_them(example):
    """Sanity of the model: the same kernel with every commit on `full` turned into an immediate arrive
    (no waiting for the MMAs) is caught reading unfinished MMA results."""
    from aref.ir import BarrierAttrs, Op
    ex, inputs, ws = barrier(example, **({"M": 128, "N": 128} if example == "gemm" else {}))
    ws = copy.deepcopy(ws)
    mma = mma_group(ws)
    for _, block in mma.regions():
        block.ops = [Op(OpKind.MBAR_ARRIVE, op.operands, (), BarrierAttrs(op.attrs.channel, "full", 1), op.loc,
                        op.pred, op.stage) if op.kind is OpKind.MMA_COMMIT and op.attrs.which == "full" else op
                     for op in block.ops]
    report, found = violations(ex, inputs, ws, seeds=30)
    assert not report.ok, "publishing before the MMAs complete went unnoticed"
