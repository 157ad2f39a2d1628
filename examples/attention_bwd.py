"""FlashAttention backward, single pass as in FA3: per CTA one block of BN keys, looping over query blocks.

Each iteration does five GEMMs and one exponential:
    S = Q·Kᵀ,  P = exp2(S·scale·log2e − LSE₂),  dV += Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ⊙ (dP − Δ),
    dK += dSᵀ·Q,  dQ += dS·K  (accumulated across key blocks with a reduce-add store, fp32).
LSE₂ is the forward's row log-sum-exp in log2 units and Δ = rowsum(dO ⊙ O) (FA's preprocessing step); the
example's inputs compute both with torch. BN = 64 keys per CTA lets one consumer warp group hold dK and dV in
registers at head dim 128 (FA3 splits 128 keys over two consumer groups).
"""
import math

import torch

import aref
from aref import aref_kernel

LOG2E = math.log2(math.e)


@aref_kernel(grid=lambda K, BN, **_: (-(-K.shape[1] // BN), K.shape[0]))
def attention_bwd(Q, K, V, dO, LSE2, Delta, dQ, dK, dV, *, BM: int = 64, BN: int = 64,
                  sm_scale: float = 0.0, STAGES: int = 3):
    pid_n, bh = aref.program_id(0), aref.program_id(1)
    D = Q.shape[2]
    scale = sm_scale or 1.0 / math.sqrt(D)
    k = aref.load(K, (bh, pid_n, 0), (BN, D))
    v = aref.load(V, (bh, pid_n, 0), (BN, D))
    dk = aref.zeros((BN, D), aref.float32)
    dv = aref.zeros((BN, D), aref.float32)
    qdo = aref.channel(depth=STAGES)
    for i in aref.range(Q.shape[1] // BM):
        qdo.put(aref.load(Q, (bh, i, 0), (BM, D)), aref.load(dO, (bh, i, 0), (BM, D)),
                aref.load(LSE2, (bh, i), (BM,)), aref.load(Delta, (bh, i), (BM,)))
        q, do, lse2, delta = qdo.get()
        s = aref.mma(q, k.T)                                   # GEMM 1
        p = aref.exp2(s * (scale * LOG2E) - lse2[:, None])     # the exponential
        dv = aref.mma(p.to(Q.dtype).T, do, dv)                 # GEMM 2
        dp = aref.mma(do, v.T)                                 # GEMM 3
        ds = p * (dp - delta[:, None])
        dk = aref.mma(ds.to(Q.dtype).T, q, dk)                 # GEMM 4
        dq = aref.mma(ds.to(Q.dtype), k)                       # GEMM 5
        aref.store(dQ, (bh, i, 0), dq * scale, reduce="add")
        qdo.consumed()
    aref.store(dK, (bh, pid_n, 0), (dk * scale).to(dK.dtype))
    aref.store(dV, (bh, pid_n, 0), dv.to(dV.dtype))


def example_inputs(size: str = "small", BH: int | None = None, Sq: int | None = None, Sk: int | None = None,
                   D: int | None = None, seed: int = 0, **constexprs):
    """Small: 2 heads × 256 queries × 256 keys × 64; large: 16 × 4096 × 4096 × 128."""
    dims = {"small": (2, 256, 256, 64), "large": (16, 4096, 4096, 128)}[size]
    BH, Sq = BH or dims[0], dims[1] if Sq is None else Sq
    Sk, D = Sk or dims[2], D or dims[3]
    g = torch.Generator().manual_seed(seed)
    Q, K, V, dO = (torch.randn(BH, n, D, generator=g).half() for n in (Sq, Sk, Sk, Sq))
    scale = constexprs.get("sm_scale") or 1.0 / math.sqrt(D)
    s = Q.float() @ K.float().transpose(1, 2) * scale
    O = (torch.softmax(s, dim=-1) @ V.float()).half()
    lse2 = torch.logsumexp(s, dim=-1) * LOG2E
    delta = (dO.float() * O.float()).sum(-1)
    return {"Q": Q, "K": K, "V": V, "dO": dO, "LSE2": lse2.float(), "Delta": delta.float(),
            "dQ": torch.zeros(BH, Sq, D, dtype=torch.float32),
            "dK": torch.zeros(BH, Sk, D, dtype=torch.float16),
            "dV": torch.zeros(BH, Sk, D, dtype=torch.float16), **constexprs}


def reference(Q, K, V, dO, dQ, dK, dV, sm_scale: float = 0.0, **_):
    scale = sm_scale or 1.0 / math.sqrt(Q.shape[2])
    q, k, v = (x.float().requires_grad_() for x in (Q, K, V))
    o = torch.softmax(q @ k.transpose(1, 2) * scale, dim=-1) @ v
    o.backward(dO.float())
    return {"dQ": q.grad.to(dQ.dtype), "dK": k.grad.to(dK.dtype), "dV": v.grad.to(dV.dtype)}
