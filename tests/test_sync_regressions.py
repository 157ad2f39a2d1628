"""Regression tests for synchronization and rewrite bugs the simulator found in programs outside the
examples (issue 9), each fixed at its rule:

* a channel's release must follow every reader of its tiles, views included (`x[:, None]`, a row slice):
  a bias tile loaded after the loop in cooperative consumers, and Blackwell's correction group reading `l`;
* the cooperative row split cuts every op with a row extent to the replica's rows, and index tiles keep
  their global values (`arange(M)` in replica j is j·M/2 + arange(M/2));
* integer scalar math of any spelling (`aref.maximum` on program ids, comparisons, `where`, `abs`) is index
  math that every stage accepts and every group recomputes.
"""
import math

import pytest
import torch

import aref
from aref import aref_kernel, sim
from aref.compiler import CompileOptions, lower_to
from aref.interpret import run_kernel
from aref.ir import OpKind
from partition.rowsplit import row_split

LOG2E = math.log2(math.e)


@aref_kernel
def gemm_bias_after_loop(A, B, bias, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    bt = aref.load(bias, (pid_m, pid_n), (BM, BN))           # loaded after the loop, read through a row slice
    aref.store(C, (pid_m, pid_n), aref.maximum(acc + bt.to(aref.float32), 0.0).to(C.dtype))


def bias_inputs(M=256, N=128, K=128):
    g = torch.Generator().manual_seed(0)
    return {"A": torch.randn(M, K, generator=g).half(), "B": torch.randn(N, K, generator=g).half(),
            "bias": torch.randn(M, N, generator=g).half(), "C": torch.zeros(M, N).half()}


@aref_kernel(grid=lambda Q, BM, **_: (Q.shape[1] // BM, Q.shape[0]))
def causal(Q, K, V, O, *, BM: int = 128, BN: int = 128):
    pid_m, bh = aref.program_id(0), aref.program_id(1)
    D = Q.shape[2]
    q = aref.load(Q, (bh, pid_m, 0), (BM, D))
    o = aref.zeros((BM, D), aref.float32)
    m = aref.full((BM,), -1e30, aref.float32)
    l = aref.zeros((BM,), aref.float32)
    rows = aref.arange(BM) + pid_m * BM                      # an index tile with a row extent
    kc = aref.channel(depth=2)
    vc = aref.channel(depth=2)
    for j in aref.range(K.shape[1] // BN):
        kc.put(aref.load(K, (bh, j, 0), (BN, D)))
        vc.put(aref.load(V, (bh, j, 0), (BN, D)))
        k = kc.get()
        v = vc.get()
        cols = aref.arange(BN) + j * BN
        s = aref.where(rows[:, None] >= cols[None, :], aref.mma(q, k.T) * (LOG2E / math.sqrt(D)), -1e30)
        m_new = aref.maximum(m, aref.rowmax(s))
        p = aref.exp2(s - m_new[:, None])
        alpha = aref.exp2(m - m_new)
        l = l * alpha + aref.rowsum(p)
        o = aref.mma(p.to(Q.dtype), v, o * alpha[:, None])
        m = m_new
        kc.consumed()
        vc.consumed()
    aref.store(O, (bh, pid_m, 0), (o / l[:, None]).to(O.dtype))


def causal_inputs(S=256, D=64):
    g = torch.Generator().manual_seed(1)
    Q, K, V = (torch.randn(1, S, D, generator=g).half() for _ in range(3))
    return {"Q": Q, "K": K, "V": V, "O": torch.zeros(1, S, D).half()}


def causal_reference(Q, K, V, O, **_):
    S = Q.shape[1]
    s = (Q.float() @ K.float().transpose(1, 2) / math.sqrt(Q.shape[2])).masked_fill(
        ~torch.ones(S, S, dtype=torch.bool).tril(), -math.inf)
    return {"O": (torch.softmax(s, -1) @ V.float()).to(O.dtype)}


@aref_kernel(grid=(4,))
def scalar_index_math(A, C, *, BM: int = 64, W: int = 64):
    pid_m = aref.program_id(0)
    start = aref.maximum(pid_m * BM - W, 0) // BM               # the line
    n = aref.where(pid_m > 1, aref.minimum(pid_m + 1, 3) - start, abs(-pid_m) + 1 - start)
    acc = aref.zeros((BM, 64), aref.float32)
    for j in aref.range(n):
        acc = acc + aref.load(A, (start + j, 0), (BM, 64)).to(aref.float32)
    aref.store(C, (pid_m, 0), acc)


def scalar_reference(A, C, **_):
    out = torch.zeros_like(C)
    for p in range(4):
        start = max(p * 64 - 64, 0) // 64
        n = min(p + 1, 3) - start if p > 1 else abs(-p) + 1 - start
        for j in range(n):
            out[p * 64:(p + 1) * 64] += A[(start + j) * 64:(start + j + 1) * 64].float()
    return {"C": out}


def _explore_small(kernel_fn, inputs, options, **knobs):
    ws = lower_to(kernel_fn.specialize(**inputs, **knobs), "barrier", options)
    res = sim.explore(ws, {p.name: inputs[p.name] for p in ws.params}, max_states=60_000)
    assert not res.violations, [str(v) for v in res.violations]
    return res


@pytest.mark.parametrize("arch,consumers", [("sm_90a", "cooperative"), ("sm_90a", "plain"), ("sm_100a", "auto")])
def test_bias_tile_loaded_after_the_loop(arch, consumers):
    inputs = bias_inputs()
    ws = lower_to(gemm_bias_after_loop.specialize(**inputs), "barrier", CompileOptions(arch=arch,
                                                                                         consumers=consumers))
    ref = {"C": torch.relu(inputs["A"].float() @ inputs["B"].float().T + inputs["bias"].float()).half()}
    report = sim.check(ws, inputs, lambda **_: ref, seeds=10)
    assert report.ok, report.to_json()
    for trips in (0, 1, 2, 3):
        _explore_small(gemm_bias_after_loop, bias_inputs(M=128, K=64 * trips),
                       CompileOptions(arch=arch, consumers=consumers))


def test_release_follows_the_readers_of_a_view():
    """In each cooperative consumer the bias slot is released after the cast that reads its row slice."""
    inputs = bias_inputs()
    ws = lower_to(gemm_bias_after_loop.specialize(**inputs), "partitioned", CompileOptions(consumers="cooperative"))
    for gp in ws.groups[1:]:
        post = gp.post.ops
        get = next(i for i, op in enumerate(post) if op.kind is OpKind.GET)
        views = {id(post[get].result)}
        last_reader = 0
        for i, op in enumerate(post):
            if any(id(v) in views for v in op.operands):
                last_reader = i
                if op.kind is OpKind.SLICE:
                    views.add(id(op.result))
        release = next(i for i, op in enumerate(post) if op.kind is OpKind.CONSUMED)
        assert post[last_reader].kind is OpKind.CAST and release > last_reader


@pytest.mark.parametrize("arch,consumers", [("sm_90a", "cooperative"), ("sm_90a", "plain"), ("sm_100a", "auto")])
def test_causal_attention_with_index_masks(arch, consumers):
    inputs = causal_inputs()
    ws = lower_to(causal.specialize(**inputs), "barrier", CompileOptions(arch=arch, consumers=consumers))
    if consumers == "cooperative":
        assert len(ws.groups) == 3
    report = sim.check(ws, inputs, causal_reference, seeds=10)
    assert report.ok, report.to_json()
    for trips in (0, 1, 2, 3):
        _explore_small(causal, {**causal_inputs(S=128 * max(trips, 1)), "K": causal_inputs(S=128 * trips)["K"],
                                "V": causal_inputs(S=128 * trips)["V"]} if trips else
                       {**causal_inputs(S=128), "K": torch.zeros(1, 0, 64).half(),
                        "V": torch.zeros(1, 0, 64).half()}, CompileOptions(arch=arch, consumers=consumers))


def test_row_split_keeps_index_tiles_global():
    """The row-split kernel computes exactly what the original does, and replica j's arange starts at its
    first row (not at 0)."""
    inputs = causal_inputs()
    kernel = causal.specialize(**inputs)
    split, replica = row_split(kernel, 2)
    expected, got = ({k: v.clone() for k, v in inputs.items()} for _ in range(2))
    run_kernel(kernel, expected)
    run_kernel(split, got)
    assert torch.equal(expected["O"], got["O"])
    aranges = [op for op in split.pre.ops if op.kind is OpKind.ARANGE]
    assert [op.attrs.n for op in aranges] == [64, 64]
    offsets = [op for op in split.pre.ops if op.kind is OpKind.BINARY and op.operands[0] is aranges[1].result]
    assert offsets and next(c.attrs.value for c in split.pre.ops if c.results and c.result is
                            offsets[0].operands[1]) == 64


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
def test_scalar_min_max_where_abs_on_program_ids(arch, partition):
    A = torch.randn(256, 64).half()
    inputs = {"A": A, "C": torch.zeros(256, 64)}
    kernel = scalar_index_math.specialize(**inputs)
    fns = {op.attrs.fn for op in kernel.pre.ops if op.kind is OpKind.SCALAR_BINARY}
    assert {"max", "min", "gt"} <= fns and any(op.kind is OpKind.SELECT for op in kernel.pre.ops)
    got = {k: v.clone() for k, v in inputs.items()}
    scalar_index_math(**got)
    torch.testing.assert_close(got["C"], scalar_reference(**inputs)["C"])
    ws = lower_to(kernel, "barrier", CompileOptions(arch=arch, partition=partition, solver_time_limit=10))
    report = sim.check(ws, inputs, scalar_reference, seeds=5)
    assert report.ok, report.to_json()
