"""Regression (issue 9): a slot handed to a group after the loop is released only after the last read of any
view of its tiles.

Causal attention on sm_100a (mask from `arange` + `program_id`, one Q tile per CTA) normalizes with
`o / l[:, None]`: the correction group received `l` through a post-loop channel and read it only through the
view `l[:, None]`. Loop distribution released the slot after the view op itself, before the division read
it (`read-after-release … channel l.x`). The release now follows the readers of every view of the tiles.
"""
import math

import pytest
import torch

import aref
from aref import aref_kernel
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.ir import OpKind
from aref.sim import check

LOG2E = math.log2(math.e)


@aref_kernel(grid=lambda Q, BM, **_: (Q.shape[1] // BM, Q.shape[0]))
def causal_attention(Q, K, V, O, *, BM: int = 128, BN: int = 128):
    pid_m, bh = aref.program_id(0), aref.program_id(1)
    qk_scale = LOG2E / math.sqrt(Q.shape[2])
    q = aref.load(Q, (bh, pid_m, 0), (BM, Q.shape[2]))
    o = aref.zeros((BM, Q.shape[2]), aref.float32)
    m = aref.full((BM,), -math.inf, aref.float32)
    l = aref.zeros((BM,), aref.float32)
    rows = aref.arange(BM) + pid_m * BM
    kc = aref.channel(depth=2)
    vc = aref.channel(depth=2)
    for j in aref.range(K.shape[1] // BN):
        kc.put(aref.load(K, (bh, j, 0), (BN, Q.shape[2])))
        vc.put(aref.load(V, (bh, j, 0), (BN, Q.shape[2])))
        k = kc.get()
        v = vc.get()
        cols = aref.arange(BN) + j * BN
        s = aref.where(cols[None, :] <= rows[:, None], aref.mma(q, k.T) * qk_scale, -math.inf)
        m_new = aref.maximum(m, aref.rowmax(s))
        p = aref.exp2(s - m_new[:, None])
        alpha = aref.exp2(m - m_new)
        l = l * alpha + aref.rowsum(p)
        o = aref.mma(p.to(Q.dtype), v, o * alpha[:, None])
        m = m_new
        kc.consumed()
        vc.consumed()
    aref.store(O, (bh, pid_m, 0), (o / l[:, None]).to(O.dtype))


def inputs():
    g = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(2, 256, 64, generator=g).half() for _ in range(3))
    return {"Q": Q, "K": K, "V": V, "O": torch.zeros(2, 256, 64, dtype=torch.float16)}


def reference(Q, K, V, O, **_):
    s = Q.float() @ K.float().transpose(1, 2) / math.sqrt(Q.shape[2])
    s = s.masked_fill(~torch.ones(256, 256, dtype=torch.bool).tril(), float("-inf"))
    return {"O": (torch.softmax(s, -1) @ V.float()).half()}


@pytest.mark.parametrize("options", [CompileOptions(arch="sm_100a"),
                                     CompileOptions(arch="sm_100a", partition="optimal"),
                                     CompileOptions(arch="sm_90a", consumers="plain")],
                         ids=["sm_100a-heuristic", "sm_100a-optimal", "sm_90a-plain"])
def test_causal_attention_simulates_without_read_after_release(options):
    x = inputs()
    kernel = lower_to(causal_attention.specialize(**x), "barrier", options)
    report = check(kernel, x, reference, seeds=20)
    assert report.ok, [str(v) for v in report.violations]


def test_post_loop_release_follows_the_reader_of_the_view():
    x = inputs()
    ws = lower_to(causal_attention.specialize(**x), "barrier", CompileOptions(arch="sm_100a"))
    for gp in ws.groups:
        ops = list(gp.post.ops)
        for i, op in enumerate(ops):
            if op.kind is OpKind.SLOT_READ and op.result.type.shape == (128,):
                release = next(j for j, r in enumerate(ops) if r.kind is OpKind.MBAR_ARRIVE
                               and r.attrs.which == "empty" and r.attrs.channel == op.attrs.channel)
                views = {id(op.result)}
                readers = []
                for j, u in enumerate(ops):
                    if any(id(v) in views for v in u.operands):
                        readers.append(j)
                        if u.kind is OpKind.EXPAND_DIMS:
                            views.add(id(u.result))
                assert readers and max(readers) < release, (gp.group.name, readers, release)
