"""`aref.nn.attention` and `aref.nn.linear`: PyTorch operators with autograd, built from the kernels of
`aref.nn.kernels`.

Each is a functional operator of the `aref` namespace (`torch.ops.aref.attention`, `torch.ops.aref.linear`
and their `*_backward`), defined with `torch.library` (schema, CPU and CUDA implementations that call the aref
kernels — the interpreter on the CPU, the compiled kernels on a GPU — a fake implementation for meta tensors
and torch.compile's tracing) and differentiated with `torch.library.register_autograd`, whose backward calls
the `*_backward` operator. So they work eagerly, under `torch.compile(fullgraph=True)` forward and backward,
inside DistributedDataParallel / FSDP (which only see ordinary operators and their gradients) and in CUDA
graphs (the kernels run on torch's current stream).

What is supported (anything else is refused with an `ArefTypeError` saying what to change):
- attention: q, k, v of shape (batch, heads, seq, head_dim) as `scaled_dot_product_attention` takes them,
  one dtype, float16 or bfloat16 (the tensor core's inputs; float32 is refused, also on the CPU, since the
  kernels' MMAs take 16-bit operands), head_dim 64 or 128, k and v with the same sequence length, q's batch
  and heads equal to k's (no grouped-query broadcasting), any sequence lengths ≥ 1 (ragged ones masked);
  `causal=True` masks key j > query i (top-left aligned, as SDPA's `is_causal`). Returns the output only; the
  log-sum-exp is saved for the backward.
- linear: x (..., in_features), weight (out_features, in_features), optional bias (out_features,), one dtype,
  float16 or bfloat16. The bias gradient is a torch column sum (float32) of the output gradient.
"""
from __future__ import annotations

import math

import torch

from aref.errors import ArefTypeError
from aref.runtime.torch_library import library

DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (64, 128)

_DEFINED = False


def _refuse(message: str, hint: str) -> None:
    from aref.lang.trace import user_loc
    raise ArefTypeError(message, user_loc(), hint=hint)


# ----------------------------------------------------------------------------------------------- attention
def _check_attention(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            _refuse(f"aref.nn.attention: {name} must be a torch tensor, got {type(t).__name__}",
                    "pass (batch, heads, seq, head_dim) tensors")
        if t.dim() != 4:
            _refuse(f"aref.nn.attention: {name} has shape {tuple(t.shape)}; it takes (batch, heads, seq, "
                    f"head_dim) tensors", "add the missing dimensions with .unsqueeze / .view")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        _refuse(f"aref.nn.attention: q, k, v have dtypes {q.dtype}, {k.dtype}, {v.dtype}; the kernels take "
                f"float16 or bfloat16 (one dtype: the tensor core's 16-bit inputs)",
                "cast with .half() or .bfloat16(); for float32 use torch's scaled_dot_product_attention")
    if q.shape[3] not in HEAD_DIMS or k.shape[3] != q.shape[3] or v.shape[3] != q.shape[3]:
        _refuse(f"aref.nn.attention: head dims {q.shape[3]}, {k.shape[3]}, {v.shape[3]}; supported: "
                f"{' and '.join(map(str, HEAD_DIMS))} (one for q, k and v)", "pad or project to head_dim 64 or 128")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2]:
        _refuse(f"aref.nn.attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: k and v must "
                f"have one shape and q the same batch and heads", "repeat k and v per head for grouped-query "
                                                                  "attention (k.repeat_interleave(g, dim=1))")
    if q.shape[2] == 0 or k.shape[2] == 0:
        _refuse("aref.nn.attention: a sequence has length 0", "pass at least one query and one key")
    if len({q.device, k.device, v.device}) != 1:
        _refuse(f"aref.nn.attention: q, k, v are on {q.device}, {k.device}, {v.device}",
                "put them on one device")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              softmax_scale: float | None = None) -> torch.Tensor:
    """softmax(q·kᵀ·scale [causal mask])·v for (batch, heads, seq, head_dim) tensors, differentiable; the
    scale defaults to 1/√head_dim. See the module docstring for what is supported."""
    _check_attention(q, k, v)
    if softmax_scale is not None and softmax_scale == 0:
        _refuse("aref.nn.attention: softmax_scale is 0", "pass a nonzero scale, or None for 1/sqrt(head_dim)")
    scale = float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(q.shape[3])
    return torch.ops.aref.attention(q, k, v, bool(causal), scale)[0]


def _flat(t: torch.Tensor) -> torch.Tensor:
    """(batch, heads, seq, dim) as the kernels' contiguous (batch·heads, seq, dim)."""
    return t.contiguous().view(t.shape[0] * t.shape[1], t.shape[2], t.shape[3])


def _attention_impl(q, k, v, causal: bool, scale: float):
    from aref.nn.kernels import attention_fwd_lse
    Q, K, V = _flat(q), _flat(k), _flat(v)
    O = torch.empty_like(Q)
    lse = torch.empty(Q.shape[:2], dtype=torch.float32, device=q.device)
    attention_fwd_lse(Q, K, V, O, lse, CAUSAL=causal, sm_scale=scale)
    return O.view(q.shape), lse.view(q.shape[:3])


def _attention_fake(q, k, v, causal: bool, scale: float):
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


def _attention_backward_impl(grad, q, k, v, out, lse, causal: bool, scale: float):
    from aref.nn.kernels import attention_bwd_lse, attention_delta, convert_rows
    Q, K, V, O, dO = _flat(q), _flat(k), _flat(v), _flat(out), _flat(grad.to(q.dtype))
    lse2 = lse.contiguous().view(Q.shape[:2])
    delta = torch.empty(Q.shape[:2], dtype=torch.float32, device=q.device)
    attention_delta(O, dO, delta)
    dq_acc = torch.zeros(Q.shape, dtype=torch.float32, device=q.device)
    dK, dV = torch.empty_like(K), torch.empty_like(V)
    attention_bwd_lse(Q, K, V, dO, lse2, delta, dq_acc, dK, dV, CAUSAL=causal, sm_scale=scale)
    dQ = torch.empty_like(Q)
    convert_rows(dq_acc, dQ)
    return dQ.view(q.shape), dK.view(k.shape), dV.view(v.shape)


def _attention_backward_fake(grad, q, k, v, out, lse, causal: bool, scale: float):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _attention_setup(ctx, inputs, output):
    q, k, v, causal, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.causal, ctx.scale = causal, scale
    ctx.mark_non_differentiable(lse)


def _attention_grad(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.aref.attention_backward(grad_out, q, k, v, out, lse, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None


# -------------------------------------------------------------------------------------------------- linear
def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x·weightᵀ (+ bias) like `torch.nn.functional.linear`, differentiable (see the module docstring)."""
    for name, t in (("x", x), ("weight", weight)) + ((("bias", bias),) if bias is not None else ()):
        if not isinstance(t, torch.Tensor):
            _refuse(f"aref.nn.linear: {name} must be a torch tensor, got {type(t).__name__}", "pass tensors")
    if x.dim() < 1 or weight.dim() != 2 or x.shape[-1] != weight.shape[1]:
        _refuse(f"aref.nn.linear: x {tuple(x.shape)} and weight {tuple(weight.shape)} do not fit: weight must "
                f"be (out_features, in_features) with in_features = x.shape[-1]", "check the layer's sizes")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        _refuse(f"aref.nn.linear: bias has shape {tuple(bias.shape)}, expected ({weight.shape[0]},)",
                "pass one bias per output feature")
    dtypes = {x.dtype, weight.dtype} | ({bias.dtype} if bias is not None else set())
    if len(dtypes) != 1 or x.dtype not in DTYPES:
        _refuse(f"aref.nn.linear: dtypes {sorted(map(str, dtypes))}; the kernels take float16 or bfloat16 (one "
                f"dtype for x, weight and bias)", "cast with .half() or .bfloat16()")
    return torch.ops.aref.linear(x, weight, bias)


def _linear_impl(x, weight, bias):
    from aref.nn.kernels import linear_fwd
    X = x.reshape(-1, x.shape[-1]).contiguous()
    Y = torch.empty(X.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)
    b = bias.contiguous() if bias is not None else torch.zeros(weight.shape[0], dtype=x.dtype, device=x.device)
    linear_fwd(X, weight.contiguous(), b, Y, HAS_BIAS=bias is not None)
    return Y.view(*x.shape[:-1], weight.shape[0])


def _linear_fake(x, weight, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _linear_backward_impl(grad, x, weight):
    from aref.nn.kernels import linear_grad_input, linear_grad_weight
    G = grad.to(x.dtype).reshape(-1, weight.shape[0]).contiguous()
    X = x.reshape(-1, x.shape[-1]).contiguous()
    W = weight.contiguous()
    dX, dW = torch.empty_like(X), torch.empty_like(W)
    linear_grad_input(G, W, dX)
    linear_grad_weight(G, X, dW)
    return dX.view(x.shape), dW


def _linear_backward_fake(grad, x, weight):
    return x.new_empty(x.shape), weight.new_empty(weight.shape)


def _linear_setup(ctx, inputs, output):
    x, weight, bias = inputs
    ctx.save_for_backward(x, weight)
    ctx.bias_dtype = bias.dtype if bias is not None else None


def _linear_grad(ctx, grad):
    x, weight = ctx.saved_tensors
    dx, dw = torch.ops.aref.linear_backward(grad, x, weight)
    db = None
    if ctx.bias_dtype is not None:
        db = grad.reshape(-1, grad.shape[-1]).float().sum(0).to(ctx.bias_dtype)
    return dx, dw, db


# ---------------------------------------------------------------------------------------------- registering
def define() -> None:
    """Register the operators (once per process; `import aref.nn` does it)."""
    global _DEFINED
    if _DEFINED:
        return
    lib = library()
    ops = [
        ("attention(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> (Tensor, Tensor)",
         _attention_impl, _attention_fake),
        ("attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, bool causal, "
         "float scale) -> (Tensor, Tensor, Tensor)", _attention_backward_impl, _attention_backward_fake),
        ("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor", _linear_impl, _linear_fake),
        ("linear_backward(Tensor grad, Tensor x, Tensor weight) -> (Tensor, Tensor)", _linear_backward_impl,
         _linear_backward_fake),
    ]
    for schema, impl, fake in ops:
        name = schema.split("(", 1)[0]
        lib.define(schema)
        lib.impl(name, impl, "CPU")
        lib.impl(name, impl, "CUDA")
        torch.library.register_fake(f"aref::{name}", fake, lib=lib)
    torch.library.register_autograd("aref::attention", _attention_grad, setup_context=_attention_setup, lib=lib)
    torch.library.register_autograd("aref::linear", _linear_grad, setup_context=_linear_setup, lib=lib)
    _DEFINED = True
