"""Attention inputs and fp32 references for the GPU benchmarks, in plain torch (no aref import, so the FA4
worker can use it from its own environment).

Long sequences do not fit a full fp32 score matrix (16 heads × 16k × 16k × 4 B = 16 GB), so the references
walk query blocks: each block's scores are formed, softmaxed (or, backward, turned into P and dS) and
reduced before the next, in fp32.
"""
from __future__ import annotations

import math

import torch

LOG2E = math.log2(math.e)
CHUNK = 1024          # query rows per reference block


def inputs(bh: int, seq: int, d: int, dtype, device="cuda", seed: int = 0, grad: bool = False) -> dict:
    """Q, K, V (bh, seq, d) and, with `grad`, dO: random normal in `dtype`."""
    g = torch.Generator(device=device).manual_seed(seed)
    names = ("Q", "K", "V", "dO") if grad else ("Q", "K", "V")
    return {n: torch.randn(bh, seq, d, generator=g, device=device, dtype=torch.float32).to(dtype) for n in names}


def _scores(q, k, scale, causal, start):
    s = q @ k.transpose(1, 2) * scale
    if causal:
        rows = torch.arange(start, start + q.shape[1], device=q.device)[:, None]
        cols = torch.arange(k.shape[1], device=q.device)[None, :]
        s = s.masked_fill(cols > rows, float("-inf"))
    return s


def forward(Q, K, V, causal: bool = False, scale: float | None = None):
    """(O in Q's dtype, LSE in natural log, fp32) of softmax(Q·Kᵀ·scale)·V, block by block."""
    scale = scale or 1.0 / math.sqrt(Q.shape[-1])
    k, v = K.float(), V.float()
    out = torch.empty_like(Q)
    lse = torch.empty(Q.shape[:2], device=Q.device, dtype=torch.float32)
    for i in range(0, Q.shape[1], CHUNK):
        s = _scores(Q[:, i:i + CHUNK].float(), k, scale, causal, i)
        lse[:, i:i + CHUNK] = torch.logsumexp(s, dim=-1)
        out[:, i:i + CHUNK] = (torch.softmax(s, dim=-1) @ v).to(Q.dtype)
    return out, lse


def backward(Q, K, V, dO, causal: bool = False, scale: float | None = None) -> dict:
    """dQ (fp32), dK, dV (Q's dtype) of attention for the upstream gradient dO, block by block:
    P = exp(S − LSE), dV = Pᵀ·dO, dS = P ⊙ (dO·Vᵀ − rowsum(dO ⊙ O)), dQ = dS·K·scale, dK = dSᵀ·Q·scale."""
    scale = scale or 1.0 / math.sqrt(Q.shape[-1])
    O, lse = forward(Q, K, V, causal, scale)
    k, v = K.float(), V.float()
    dq = torch.empty(Q.shape, device=Q.device, dtype=torch.float32)
    dk = torch.zeros(K.shape, device=Q.device, dtype=torch.float32)
    dv = torch.zeros(V.shape, device=Q.device, dtype=torch.float32)
    for i in range(0, Q.shape[1], CHUNK):
        q, do = Q[:, i:i + CHUNK].float(), dO[:, i:i + CHUNK].float()
        p = torch.exp(_scores(q, k, scale, causal, i) - lse[:, i:i + CHUNK, None])
        delta = (do * O[:, i:i + CHUNK].float()).sum(-1, keepdim=True)
        ds = p * (do @ v.transpose(1, 2) - delta)
        dv += p.transpose(1, 2) @ do
        dk += ds.transpose(1, 2) @ q * scale
        dq[:, i:i + CHUNK] = ds @ k * scale
    return {"dQ": dq, "dK": dk.to(K.dtype), "dV": dv.to(V.dtype), "O": O, "LSE": lse}


def flops(bh: int, seq: int, d: int, causal: bool, backward_pass: bool = False) -> float:
    """FLOP counted the way FlashAttention's benchmarks count them (causal: half; backward: 2.5× forward)."""
    f = 4 * bh * seq * seq * d / (2 if causal else 1)
    return f * 2.5 if backward_pass else f
