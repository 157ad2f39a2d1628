"""aref.nn.attention and aref.nn.linear: outputs and gradients against torch's on small CPU shapes (the
interpreter), within the tolerances the examples state, and the refusals of what the kernels do not take."""
import math
import os

import pytest
import torch

import aref.nn
from aref.errors import ArefTypeError
from aref.runtime.harness import compare, load_module
from example_paths import EXAMPLES

LOG2E = math.log2(math.e)
TRAIN = load_module(os.path.join(EXAMPLES, "attention_train.py"))


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _torch_attention(q, k, v, do, causal):
    """float32 reference: output, gradients, and the LSE2 / Delta the tolerance bound reads."""
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    s = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    o = torch.softmax(s, -1) @ vf
    o.backward(do.float())
    lse2 = (torch.logsumexp(s, -1) * LOG2E).detach()
    return o.detach(), qf.grad, kf.grad, vf.grad, lse2, (do.float() * o.detach()).sum(-1)


@pytest.mark.parametrize("causal, D, dtype, S", [(False, 64, torch.float16, 96), (True, 64, torch.float16, 96),
                                                 (False, 128, torch.float16, 80), (True, 128, torch.float16, 80),
                                                 (True, 64, torch.bfloat16, 72)])
def test_attention_gradients_match_torch(causal, D, dtype, S):
    g = torch.Generator().manual_seed(D + S + causal)
    q, k, v = (torch.randn(1, 2, S, D, generator=g).to(dtype).requires_grad_() for _ in range(3))
    do = torch.randn(1, 2, S, D, generator=g).to(dtype)
    out = aref.nn.attention(q, k, v, causal=causal)
    out.backward(do)
    o, dq, dk, dv, lse2, delta = _torch_attention(q, k, v, do, causal)
    flat = {n: t.detach().reshape(2, S, D) for n, t in (("Q", q), ("K", k), ("V", v), ("dO", do), ("O", out))}
    grads = {"dQ": q.grad.reshape(2, S, D), "dK": k.grad.reshape(2, S, D), "dV": v.grad.reshape(2, S, D)}
    tol = TRAIN.tolerance(Q=flat["Q"], V=flat["V"], O=flat["O"])
    assert compare({"O": out.detach()}, {"O": o.to(dtype)}, tol).ok
    tol = TRAIN.tolerance_attention_bwd_lse(**{n: flat[n] for n in ("Q", "K", "V", "dO")}, LSE2=lse2.reshape(2, S),
                                            Delta=delta.reshape(2, S), **grads, CAUSAL=causal)
    report = compare(grads, {"dQ": dq.reshape(2, S, D).to(dtype), "dK": dk.reshape(2, S, D).to(dtype),
                             "dV": dv.reshape(2, S, D).to(dtype)}, tol)
    assert report.ok, report.to_json()


def test_attention_matches_sdpa_with_a_scale_and_unequal_lengths():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 1, 40, 64, generator=g).half()
    k, v = (torch.randn(2, 1, 100, 64, generator=g).half() for _ in range(2))
    out = aref.nn.attention(q, k, v, softmax_scale=0.3)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=0.3)
    assert (out.float() - ref).abs().max() < 4e-3


def test_linear_gradients_match_torch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 40, 64, generator=g).half().requires_grad_()
    w = (torch.randn(80, 64, generator=g) * 0.2).half().requires_grad_()
    b = torch.randn(80, generator=g).half().requires_grad_()
    y = aref.nn.linear(x, w, b)
    dy = torch.randn(y.shape, generator=g).half()
    y.backward(dy)
    xf, wf, bf = (t.detach().float().requires_grad_() for t in (x, w, b))
    yf = torch.nn.functional.linear(xf, wf, bf)
    yf.backward(dy.float())
    from aref.precision import matmul_tolerance
    checks = [(y, yf, 64), (x.grad, xf.grad, 80), (w.grad, wf.grad, 120), (b.grad, bf.grad, 120)]
    for got, want, k in checks:
        assert compare({"t": got.detach()}, {"t": want.detach().half()},
                       {"t": matmul_tolerance(torch.float16, torch.float16, k)}).ok
    y2 = aref.nn.linear(x.detach(), w.detach())          # no bias
    assert torch.allclose(y2.float(), x.detach().float() @ w.detach().float().T, atol=3e-2, rtol=1e-2)


@pytest.mark.parametrize("args, message", [
    (lambda t: (t.float(), t.float(), t.float()), "float16 or bfloat16"),
    (lambda t: (t[..., :32], t[..., :32], t[..., :32]), "supported: 64 and 128"),
    (lambda t: (t[0], t[0], t[0]), r"takes \(batch, heads, seq, head_dim\)"),
    (lambda t: (t, t[:, :1], t[:, :1]), "same batch and heads"),
])
def test_attention_refuses_what_the_kernels_do_not_take(args, message):
    t = torch.zeros(1, 2, 16, 64, dtype=torch.float16)
    with pytest.raises(ArefTypeError, match=message) as info:
        aref.nn.attention(*args(t))
    assert info.value.loc.file == __file__ and info.value.hint


def test_linear_refuses_float32():
    with pytest.raises(ArefTypeError, match="float16 or bfloat16"):
        aref.nn.linear(torch.zeros(4, 8), torch.zeros(3, 8))
