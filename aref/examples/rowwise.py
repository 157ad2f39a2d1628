"""Row-wise kernels with no tensor-core work: layer norm and softmax over rows of width N ≤ one tile.

Each CTA owns ROWS consecutive rows and loops over them BM at a time: the loop streams row blocks through
an aref, normalizes each in registers and stores it inside the loop. Layer norm's weight and bias (one per
column) are loaded once before the loop and broadcast over the rows.
"""
import math

import torch

import aref
from aref import aref_kernel

LOG2E = math.log2(math.e)


@aref_kernel(grid=lambda X, ROWS, **_: (-(-X.shape[0] // ROWS),))
def layer_norm(X, W, B, Y, *, BM: int = 64, ROWS: int = 256, eps: float = 1e-5):
    pid = aref.program_id(0)
    N = X.shape[1]
    # weight and bias stay 16-bit rows (1, N), widened where they are used: held as float32 column vectors
    # they took a quarter of their columns per thread (64 registers each at N = 256), and beside the block's
    # float32 x (128) and its float16 store tile they overflowed a warp group's 256 registers
    w = aref.load(W, (0,), (N,))[None, :]
    b = aref.load(B, (0,), (N,))[None, :]
    per = ROWS // BM
    xs = aref.channel(depth=2)
    for i in aref.range(aref.minimum(per, -(-X.shape[0] // BM) - pid * per)):
        xs.put(aref.load(X, (pid * per + i, 0), (BM, N)))
        x = xs.get().to(aref.float32)
        xs.consumed()
        mean = aref.rowsum(x) * (1.0 / N)
        xc = x - mean[:, None]
        rstd = aref.rsqrt(aref.rowsum(xc * xc) * (1.0 / N) + eps)
        y = xc * rstd[:, None] * w.to(aref.float32) + b.to(aref.float32)
        aref.store(Y, (pid * per + i, 0), y.to(Y.dtype))


@aref_kernel(grid=lambda X, ROWS, **_: (-(-X.shape[0] // ROWS),))
def softmax(X, Y, *, BM: int = 64, ROWS: int = 256):
    pid = aref.program_id(0)
    per = ROWS // BM
    xs = aref.channel(depth=2)
    for i in aref.range(aref.minimum(per, -(-X.shape[0] // BM) - pid * per)):
        xs.put(aref.load(X, (pid * per + i, 0), (BM, X.shape[1])))
        x = xs.get().to(aref.float32)
        xs.consumed()
        p = aref.exp2((x - aref.rowmax(x)[:, None]) * LOG2E)
        aref.store(Y, (pid * per + i, 0), (p / aref.rowsum(p)[:, None]).to(Y.dtype))


def example_inputs(size: str = "small", M: int | None = None, N: int | None = None, seed: int = 0,
                   **constexprs):
    """Small: 512 rows × 64; large: 65536 rows × 256 (float16)."""
    dims = {"small": (512, 64), "large": (65536, 256)}[size]
    M, N = dims[0] if M is None else M, N or dims[1]
    g = torch.Generator().manual_seed(seed)
    return {"X": torch.randn(M, N, generator=g).half(), "W": (1 + 0.1 * torch.randn(N, generator=g)).half(),
            "B": (0.1 * torch.randn(N, generator=g)).half(), "Y": torch.zeros(M, N, dtype=torch.float16),
            **constexprs}


def reference(X, W, B, Y, eps: float = 1e-5, **_):
    y = torch.nn.functional.layer_norm(X.float(), (X.shape[1],), W.float(), B.float(), eps)
    return {"Y": y.to(Y.dtype)}


def baseline(X, W, B, Y, eps: float = 1e-5, **_):
    """torch's fused layer norm on the same float16 tensors, as a function that runs it once."""
    return lambda: {"Y": torch.nn.functional.layer_norm(X, (X.shape[1],), W, B, eps)}


def example_inputs_softmax(size: str = "small", **overrides):
    inputs = example_inputs(size, **overrides)
    return {"X": inputs["X"], "Y": inputs["Y"], **{k: v for k, v in inputs.items() if k not in "XWBY"}}


def reference_softmax(X, Y, **_):
    return {"Y": torch.softmax(X.float(), dim=-1).to(Y.dtype)}


def baseline_softmax(X, Y, **_):
    """torch's fused softmax (float32 inside, float16 out), as a function that runs it once."""
    return lambda: {"Y": torch.softmax(X, dim=-1)}
