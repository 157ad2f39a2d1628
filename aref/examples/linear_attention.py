"""Chunked causal linear attention: a recurrent D×D state carried across the loop.

Per head, o_t = Σ_{s ≤ t} (q_t·k_s)·v_s. The sequence is processed in chunks of BC tokens; the state
S = Σ kᵀ·v over the previous chunks is loop-carried in registers (float32). Each chunk's output is
    o = q·S  +  causal(q·kᵀ)·v          (inter-chunk part through the state, intra-chunk part masked)
and is stored inside the loop, then the state absorbs the chunk: S += kᵀ·v.
"""
import math

import torch

import aref
from aref import aref_kernel


@aref_kernel(grid=lambda Q, **_: (Q.shape[0],))
def linear_attention(Q, K, V, O, *, BC: int = 64, scale: float = 0.0):
    bh = aref.program_id(0)
    D = Q.shape[2]
    qs = scale or 1.0 / math.sqrt(D)
    state = aref.zeros((D, D), aref.float32)
    causal = aref.arange(BC)[:, None] >= aref.arange(BC)[None, :]
    qkv = aref.channel(depth=2)
    for c in aref.range(-(-Q.shape[1] // BC)):
        qkv.put(aref.load(Q, (bh, c, 0), (BC, D)), aref.load(K, (bh, c, 0), (BC, D)),
                aref.load(V, (bh, c, 0), (BC, D)))
        q, k, v = qkv.get()
        inter = aref.mma(q, state.to(Q.dtype))                  # q·S: the state is an operand in registers
        scores = aref.where(causal, aref.mma(q, k.T) * qs, 0.0)
        o = aref.mma(scores.to(Q.dtype), v, inter * qs)
        aref.store(O, (bh, c, 0), o.to(O.dtype))
        state = aref.mma(k.T, v, state)                         # S += kᵀ·v
        qkv.consumed()


def example_inputs(size: str = "small", BH: int | None = None, S: int | None = None, D: int | None = None,
                   seed: int = 0, **constexprs):
    """Small: 2 heads × 256 tokens × 64; large: 32 heads × 4096 tokens × 128."""
    dims = {"small": (2, 256, 64), "large": (32, 4096, 128)}[size]
    BH, S, D = BH or dims[0], dims[1] if S is None else S, D or dims[2]
    g = torch.Generator().manual_seed(seed)
    Q, K, V = ((torch.randn(BH, S, D, generator=g) * 0.25).half() for _ in range(3))
    return {"Q": Q, "K": K, "V": V, "O": torch.zeros(BH, S, D, dtype=torch.float16), **constexprs}


def reference(Q, K, V, O, scale: float = 0.0, **_):
    qs = scale or 1.0 / math.sqrt(Q.shape[2])
    S = Q.shape[1]
    a = (Q.float() @ K.float().transpose(1, 2) * qs).masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), 0.0)
    return {"O": (a @ V.float()).to(O.dtype)}


def baseline(Q, K, V, O, scale: float = 0.0, BC: int = 64, **_):
    """torch's chunked form of the same recurrence (torch has no fused linear attention): per chunk of BC
    tokens the state kᵀ·v by a batched matmul, an exclusive prefix sum over chunks (float32), then
    q·S + causal(q·kᵀ)·v by batched matmuls, as a function that runs it once. O(S·BC·D + S·D²) work like the
    kernel, not the O(S²·D) of the reference."""
    qs = scale or 1.0 / math.sqrt(Q.shape[2])
    BH, S, D = Q.shape
    pad = -S % BC                                               # a ragged last chunk: zero tokens add nothing
    q, k, v = (torch.nn.functional.pad(t, (0, 0, 0, pad)).view(BH, -1, BC, D) for t in (Q, K, V))
    causal = torch.ones(BC, BC, dtype=torch.bool, device=Q.device).tril()

    def run():
        kv = (k.transpose(-1, -2) @ v).float()                  # (BH, chunks, D, D): each chunk's kᵀ·v
        state = (kv.cumsum(1) - kv).to(Q.dtype)                 # the state before each chunk
        scores = (q @ k.transpose(-1, -2)).masked_fill(~causal, 0.0)
        o = (q @ state + scores @ v) * qs
        return {"O": o.view(BH, S + pad, D)[:, :S]}
    return run


TOLERANCE = {"O": (2e-2, 2e-2)}      # the state enters each chunk's q·S rounded to float16
