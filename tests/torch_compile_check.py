"""Run in a fresh process by tests/test_torch_compile.py: torch.compile(fullgraph=True) over a function that
calls an aref kernel, and over aref.nn.attention / aref.nn.linear forward and backward; prints one JSON line.

    python tests/torch_compile_check.py BACKEND
"""
import json
import os
import sys

import torch

torch.set_num_threads(1)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import aref.nn  # noqa: E402
from aref.runtime.harness import load_example  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402


def kernel_call(backend: str) -> dict:
    gemm = load_example(os.path.join(os.path.dirname(__file__), "..", "examples", "gemm.py")).kernel

    def f(a, b):
        c = torch.empty(a.shape[0], b.shape[0], dtype=a.dtype)
        gemm(a * 2, b, c, BN=64)                      # an intermediate in, a fresh output written in place
        return c.float().relu() + 1

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, 64, generator=g).half(), torch.randn(64, 64, generator=g).half()
    compiled = torch.compile(f, fullgraph=True, backend=backend)
    out = {"equal": bool(torch.equal(compiled(a, b), f(a, b)))}
    a2 = torch.randn(256, 64, generator=g).half()                 # another shape: a second graph
    out["equal_second_shape"] = bool(torch.equal(compiled(a2, b), f(a2, b)))
    return out


def attention(backend: str, causal: bool) -> dict:
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 64, 64, generator=g).half() for _ in range(3))
    w = torch.randn(64, 64, generator=g).half()

    def f(q, k, v, w):
        o = aref.nn.attention(q, k, v, causal=causal)
        y = aref.nn.linear(o.transpose(1, 2).reshape(64, 128).view(64, 2, 64)[:, 0], w)
        return (y.float() ** 2).sum()

    def run(fn):
        xs = [x.clone().requires_grad_() for x in (q, k, v, w)]
        loss = fn(*xs)
        loss.backward()
        return loss, [x.grad for x in xs]

    compiled = torch.compile(f, fullgraph=True, backend=backend)
    lc, gc = run(compiled)
    le, ge = run(f)
    return {"equal_loss": bool(torch.equal(lc, le)),
            "equal_grads": all(bool(torch.equal(a, b)) for a, b in zip(gc, ge))}


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "aot_eager"
    result = {"kernel_call": kernel_call(backend), "attention": attention(backend, False),
              "attention_causal": attention(backend, True)}
    result["graph_breaks"] = sum(counters["graph_break"].values())
    result["frames"] = counters["stats"]["unique_graphs"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
