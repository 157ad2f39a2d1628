"""Attention for training, the kernels behind `aref.nn.attention` (defined in `aref.nn.kernels`):

    attention_fwd_lse   O and the row log-sum-exp LSE2 (log2 units), causal or not (`CAUSAL`)
    attention_delta     FlashAttention's pre-pass Δ = rowsum(dO ⊙ O)
    attention_bwd_lse   dQ (float32, reduce-add over key blocks), dK, dV; the causal variant starts each key
                        block at the first query block that sees it
    convert_rows        the float32 dQ accumulator to the inputs' dtype

Run one with `aref run examples/attention_train.py:attention_bwd_lse --set CAUSAL=True`. Tensors are
(batch·heads, sequence, head dim) as in `examples/attention_fwd.py`.
"""
import math

import torch

from aref.nn.kernels import attention_bwd_lse, attention_delta, attention_fwd_lse, convert_rows

LOG2E = math.log2(math.e)
__all__ = ["attention_fwd_lse", "attention_delta", "attention_bwd_lse", "convert_rows"]


def _qkv(size, BH, Sq, Sk, D, dtype, seed):
    dims = {"small": (2, 256, 256, 64), "large": (16, 4096, 4096, 128)}[size]
    BH, Sq = BH or dims[0], dims[1] if Sq is None else Sq
    Sk, D = Sq if Sk is None else Sk, D or dims[3]
    g = torch.Generator().manual_seed(seed)
    t = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    return [torch.randn(BH, n, D, generator=g).to(t) for n in (Sq, Sk, Sk, Sq)]


def _scores(Q, K, causal, sm_scale):
    s = Q.float() @ K.float().transpose(1, 2) * (sm_scale or 1.0 / math.sqrt(Q.shape[2]))
    if causal:
        s = s.masked_fill(torch.ones(s.shape[1:], dtype=torch.bool).triu(1), -math.inf)
    return s


def example_inputs(size: str = "small", BH: int | None = None, Sq: int | None = None, Sk: int | None = None,
                   D: int | None = None, dtype: str = "float16", seed: int = 0, **constexprs):
    """The forward's: small 2 × 256 × 256 × 64, large 16 × 4096 × 4096 × 128 (Sk defaults to Sq)."""
    Q, K, V, _ = _qkv(size, BH, Sq, Sk, D, dtype, seed)
    return {"Q": Q, "K": K, "V": V, "O": torch.zeros_like(Q), "LSE2": torch.zeros(Q.shape[:2]), **constexprs}


def reference(Q, K, V, O, LSE2, CAUSAL: bool = False, sm_scale: float = 0.0, **_):
    s = _scores(Q, K, CAUSAL, sm_scale)
    return {"O": (torch.softmax(s, -1) @ V.float()).to(O.dtype), "LSE2": torch.logsumexp(s, -1) * LOG2E}


def tolerance(Q, V, O, **_):
    """As `examples/attention_fwd.py` (P rounded to the input dtype for P·V); LSE2 in float32 from the
    float32 running max and sum."""
    from aref.precision import rounded_operand_tolerance
    bound = float(V.float().abs().max()) if V.numel() else 0.0
    return {"O": rounded_operand_tolerance(Q.dtype, O.dtype, bound), "LSE2": (1e-4, 1e-5)}


def baseline(Q, K, V, O, CAUSAL: bool = False, sm_scale: float = 0.0, **_):
    scale = sm_scale or 1.0 / math.sqrt(Q.shape[2])
    return lambda: {"O": torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=CAUSAL, scale=scale)}


def _backward_inputs(size, BH, Sq, Sk, D, dtype, seed, causal, sm_scale):
    Q, K, V, dO = _qkv(size, BH, Sq, Sk, D, dtype, seed)
    s = _scores(Q, K, causal, sm_scale)
    O = (torch.softmax(s, -1) @ V.float()).to(Q.dtype)
    return Q, K, V, dO, O, torch.logsumexp(s, -1) * LOG2E


def example_inputs_attention_bwd_lse(size: str = "small", BH: int | None = None, Sq: int | None = None,
                                     Sk: int | None = None, D: int | None = None, dtype: str = "float16",
                                     seed: int = 0, **constexprs):
    Q, K, V, dO, O, lse2 = _backward_inputs(size, BH, Sq, Sk, D, dtype, seed, constexprs.get("CAUSAL", False),
                                            constexprs.get("sm_scale", 0.0))
    return {"Q": Q, "K": K, "V": V, "dO": dO, "LSE2": lse2, "Delta": (dO.float() * O.float()).sum(-1),
            "dQ": torch.zeros(Q.shape), "dK": torch.zeros_like(K), "dV": torch.zeros_like(V), **constexprs}


def reference_attention_bwd_lse(Q, K, V, dO, dQ, dK, dV, CAUSAL: bool = False, sm_scale: float = 0.0, **_):
    q, k, v = (x.float().requires_grad_() for x in (Q, K, V))
    s = q @ k.transpose(1, 2) * (sm_scale or 1.0 / math.sqrt(Q.shape[2]))
    if CAUSAL:
        s = s.masked_fill(torch.ones(s.shape[1:], dtype=torch.bool).triu(1), -math.inf)
    (torch.softmax(s, -1) @ v).backward(dO.float())
    return {"dQ": q.grad.to(dQ.dtype), "dK": k.grad.to(dK.dtype), "dV": v.grad.to(dV.dtype)}


def tolerance_attention_bwd_lse(Q, K, V, dO, LSE2, Delta, dQ, dK, dV, CAUSAL: bool = False, sm_scale: float = 0.0,
                                **_):
    """`examples/attention_bwd.py`'s bound (P and dS rounded to the input dtype for the tensor core), with
    the masked scores' P = 0 (the mask only removes terms)."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention_bwd.py")
    spec = importlib.util.spec_from_file_location("aref_attention_bwd_tolerance", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.tolerance(Q, K, V, dO, LSE2, Delta, dQ, dK, dV, sm_scale=sm_scale)


def baseline_attention_bwd_lse(Q, K, V, dO, CAUSAL: bool = False, sm_scale: float = 0.0, **_):
    """torch's attention backward (SDPA) from a forward run once here: the function runs the backward only."""
    scale = sm_scale or 1.0 / math.sqrt(Q.shape[2])
    q, k, v = (x.detach().requires_grad_() for x in (Q, K, V))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=CAUSAL, scale=scale)

    def run():
        gq, gk, gv = torch.autograd.grad(o, (q, k, v), dO, retain_graph=True)
        return {"dQ": gq.float(), "dK": gk, "dV": gv}
    return run


def example_inputs_attention_delta(size: str = "small", BH: int | None = None, Sq: int | None = None,
                                   D: int | None = None, dtype: str = "float16", seed: int = 0, **constexprs):
    Q, _, _, dO = _qkv(size, BH, Sq, None, D, dtype, seed)
    return {"O": Q, "dO": dO, "Delta": torch.zeros(Q.shape[:2]), **constexprs}


def reference_attention_delta(O, dO, **_):
    return {"Delta": (O.float() * dO.float()).sum(-1)}


def tolerance_attention_delta(O, **_):
    """float32 products and sums of D terms in any order: D·2⁻²³ relative to Σ|o·do| (bounded by rtol)."""
    return {"Delta": (1e-5, 1e-5 * O.shape[2])}


def baseline_attention_delta(O, dO, **_):
    return lambda: {"Delta": (O.float() * dO.float()).sum(-1)}


def example_inputs_convert_rows(size: str = "small", BH: int | None = None, Sq: int | None = None,
                                D: int | None = None, dtype: str = "float16", seed: int = 0, **constexprs):
    Q, _, _, _ = _qkv(size, BH, Sq, None, D, dtype, seed)
    return {"X": Q.float() * 3, "Y": torch.zeros_like(Q), **constexprs}


def reference_convert_rows(X, Y, **_):
    return {"Y": X.to(Y.dtype)}


def baseline_convert_rows(X, Y, **_):
    return lambda: {"Y": X.to(Y.dtype)}


def tolerance_convert_rows(**_):
    """Rounding float32 to the output dtype is exact and the same in torch: no difference allowed."""
    return {"Y": (0.0, 0.0)}
