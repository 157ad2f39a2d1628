"""Causal attention forward with block skipping: O = softmax(mask(Q·Kᵀ·scale))·V, query i sees keys j ≤ i.

One BM-row Q tile per CTA (program id 0). The loop visits only the key blocks that hold a visible key: its
trip count is a run-time value of the program id, `cdiv((pid_m + 1)·BM, BN)` capped at the number of key
blocks, so CTAs near the top of the matrix do less work. The mask is built from index tiles
(`arange` + `program_id`) and applied with `aref.where`; keys past the end of a ragged sequence are masked
the same way.
"""
import math

import torch

import aref
from aref import aref_kernel

LOG2E = math.log2(math.e)


@aref_kernel(grid=lambda Q, BM, **_: (-(-Q.shape[1] // BM), Q.shape[0]))
def attention_causal(Q, K, V, O, *, BM: int = 128, BN: int = 128, sm_scale: float = 0.0):
    pid_m, bh = aref.program_id(0), aref.program_id(1)
    D, Sk = Q.shape[2], K.shape[1]
    qk_scale = (sm_scale or 1.0 / math.sqrt(D)) * LOG2E
    q = aref.load(Q, (bh, pid_m, 0), (BM, D))
    o = aref.zeros((BM, D), aref.float32)
    m = aref.full((BM,), -math.inf, aref.float32)
    l = aref.zeros((BM,), aref.float32)
    # a row's last visible key: its own index, or the last key of a shorter (ragged) key sequence
    last = aref.minimum(aref.arange(BM) + pid_m * BM, Sk - 1)
    kc = aref.channel(depth=2)
    vc = aref.channel(depth=2)
    for j in aref.range(aref.minimum(((pid_m + 1) * BM + BN - 1) // BN, (Sk + BN - 1) // BN)):
        kc.put(aref.load(K, (bh, j, 0), (BN, D)))
        vc.put(aref.load(V, (bh, j, 0), (BN, D)))
        k = kc.get()
        v = vc.get()
        cols = aref.arange(BN) + j * BN                       # global key index of each column
        s = aref.where(last[:, None] >= cols[None, :], aref.mma(q, k.T) * qk_scale, -math.inf)
        m_new = aref.maximum(m, aref.rowmax(s))
        p = aref.exp2(s - m_new[:, None])
        alpha = aref.exp2(m - m_new)
        l = l * alpha + aref.rowsum(p)
        o = aref.mma(p.to(Q.dtype), v, o * alpha[:, None])
        m = m_new
        kc.consumed()
        vc.consumed()
    l_safe = aref.where(l == 0.0, 1.0, l)                     # rows past the end of Q saw no keys
    aref.store(O, (bh, pid_m, 0), (o / l_safe[:, None]).to(O.dtype))


def example_inputs(size: str = "small", BH: int | None = None, Sq: int | None = None, Sk: int | None = None,
                   D: int | None = None, dtype: str = "float16", seed: int = 0, **constexprs):
    """Small: 2 heads × 256 queries × 256 keys × 64; large: 16 × 4096 × 4096 × 128. Sk defaults to Sq. At head
    dim 256, K/V blocks of 64 keys (two slots of 128 keys for K and V would take 256 KB)."""
    dims = {"small": (2, 256, 64), "large": (16, 4096, 128)}[size]
    BH, Sq, D = BH or dims[0], dims[1] if Sq is None else Sq, D or dims[2]
    if D >= 256:
        constexprs.setdefault("BN", 64)
    Sk = Sq if Sk is None else Sk
    g = torch.Generator().manual_seed(seed)
    t = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    Q, K, V = (torch.randn(BH, n, D, generator=g).to(t) for n in (Sq, Sk, Sk))
    return {"Q": Q, "K": K, "V": V, "O": torch.zeros(BH, Sq, D, dtype=t), **constexprs}


def reference(Q, K, V, O, sm_scale: float = 0.0, **_):
    scale = sm_scale or 1.0 / math.sqrt(Q.shape[2])
    Sq, Sk = Q.shape[1], K.shape[1]
    s = Q.float() @ K.float().transpose(1, 2) * scale
    visible = torch.ones(Sq, Sk, dtype=torch.bool).tril()     # top-left aligned, as torch's is_causal
    s = s.masked_fill(~visible, -math.inf)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)              # a query that sees no key outputs 0
    return {"O": (p @ V.float()).to(O.dtype)}


def baseline(Q, K, V, O, sm_scale: float = 0.0, **_):
    """torch's fused causal attention (SDPA with `is_causal=True`, top-left aligned as the kernel's mask, its
    default backend choice) on the same (BH, S, D) tensors, as a function that runs it once."""
    scale = sm_scale or 1.0 / math.sqrt(Q.shape[2])
    if K.shape[1] == 0:                                        # no keys: every query outputs 0, as the kernel
        return lambda: {"O": torch.zeros_like(O)}
    return lambda: {"O": torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=True, scale=scale)}
