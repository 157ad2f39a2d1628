"""FlashAttention backward, single pass as in FA3: per CTA one block of BN keys, looping over query blocks.

Each iteration does five GEMMs and one exponential:
    S = Q·Kᵀ,  P = exp2(S·scale·log2e − LSE₂),  dV += Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ⊙ (dP − Δ),
    dK += dSᵀ·Q,  dQ += dS·K  (accumulated across key blocks with a reduce-add store, fp32).
LSE₂ is the forward's row log-sum-exp in log2 units and Δ = rowsum(dO ⊙ O) (FA's preprocessing step); the
example's inputs compute both with torch. With BN = 64 keys per CTA one consumer warp group holds dK and dV
(at head dim 128 without the coarse overlap of the next iteration's S·dP); BN = 128 is FA3's configuration
at head dim 128: one group cannot hold dK and dV (128 × 128 float32 each) in registers, so the compiler splits
the key block over two consumer groups (64 keys each: their own dK, dV, S, dP rows; each reduce-adds its part
of dQ) — the organisation the resource model finds to fit.
"""
import math

import torch

import aref
from aref import aref_kernel

LOG2E = math.log2(math.e)


@aref_kernel(grid=lambda K, BN, **_: (-(-K.shape[1] // BN), K.shape[0]))
def attention_bwd(Q, K, V, dO, LSE2, Delta, dQ, dK, dV, *, BM: int = 64, BN: int = 64,
                  sm_scale: float = 0.0, STAGES: int | None = None):
    pid_n, bh = aref.program_id(0), aref.program_id(1)
    D = Q.shape[2]
    scale = sm_scale or 1.0 / math.sqrt(D)
    k = aref.load(K, (bh, pid_n, 0), (BN, D))
    v = aref.load(V, (bh, pid_n, 0), (BN, D))
    dk = aref.zeros((BN, D), aref.float32)
    dv = aref.zeros((BN, D), aref.float32)
    # Q/dO ring: 3 slots cover the memory latency; at head dim 128 (FA3's 64 × 128 tiles) 2 fit beside K and V
    qdo = aref.channel(depth=STAGES or (3 if D * BN <= 64 * 128 else 2))
    for i in aref.range(aref.cdiv(Q.shape[1], BM)):
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


def tolerance(Q, K, V, dO, LSE2, Delta, dQ, dK, dV, sm_scale: float = 0.0, **_):
    """What the hardware guarantees. The tensor-core products take P and dS rounded to fp16 (as FA3 does), the
    reference keeps them in fp32. Rounding P (relative error u = 2⁻¹¹ per element) moves dV[j] = Σᵢ Pᵢⱼ·dOᵢ by
    at most u·max|dO|·maxⱼ Σᵢ Pᵢⱼ; rounding dS moves dK[j] = scale·Σᵢ dSᵢⱼ·Qᵢ by at most u·scale·max|Q|·maxⱼ
    Σᵢ |dSᵢⱼ| and dQ[i] = scale·Σⱼ dSᵢⱼ·Kⱼ by u·scale·max|K|·maxᵢ Σⱼ |dSᵢⱼ|. The column and row sums need P
    and dS, so this costs what the reference costs; fp16 outputs add 2u relative, the fp32 dQ (accumulated
    by reduce-add in any order) 2⁻²² relative."""
    from aref.precision import unit_roundoff
    if Q.shape[1] == 0 or K.shape[1] == 0:
        return None
    scale = sm_scale or 1.0 / math.sqrt(Q.shape[2])
    q, k, v, do = Q.float(), K.float(), V.float(), dO.float()
    p = torch.exp2(q @ k.transpose(1, 2) * (scale * LOG2E) - LSE2[..., None])
    ds = (p * (do @ v.transpose(1, 2) - Delta[..., None])).abs()
    u = unit_roundoff(Q.dtype)

    def m(x):
        return float(x.max())

    return {"dV": (u * m(do.abs()) * m(p.sum(1)), 2 * unit_roundoff(dV.dtype)),
            "dK": (u * scale * m(q.abs()) * m(ds.sum(1)), 2 * unit_roundoff(dK.dtype)),
            "dQ": (u * scale * m(k.abs()) * m(ds.sum(2)), 4 * unit_roundoff(dQ.dtype))}


def baseline(Q, K, V, dO, **_):
    """torch's attention backward (SDPA, default backend) from a forward run once here: the returned function
    runs only the backward pass (what `aref bench` times). Its gradients carry SDPA's default scale."""
    q, k, v = (x.detach().requires_grad_() for x in (Q, K, V))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v)

    def run():
        gq, gk, gv = torch.autograd.grad(o, (q, k, v), dO, retain_graph=True)
        return {"dQ": gq.float(), "dK": gk, "dV": gv}
    return run


# The autotuner's search space. The last entry is FA3's structure at head dim 128 (128 keys split over two
# cooperative consumer groups, partition.dimsplit).
CONFIGS = aref.configs({"BM": [64, 128], "BN": [64], "STAGES": [2, 3]}) + [
    aref.Config.of({"BM": 64, "BN": 128, "STAGES": 2}, consumers="cooperative", split_keys=True),
]
aref.autotune(configs=CONFIGS)(attention_bwd)
