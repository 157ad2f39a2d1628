"""`aref.nn`: functional neural-network operators with autograd, built from aref kernels.

    import aref.nn
    out = aref.nn.attention(q, k, v, causal=True)        # (batch, heads, seq, head_dim), fp16 / bf16
    y = aref.nn.linear(x, weight, bias)

They are PyTorch operators (`torch.ops.aref.attention`, `torch.ops.aref.linear`, registered when this package
is imported) with a registered backward, so they compose with `torch.compile(fullgraph=True)`, DDP / FSDP
and CUDA graphs like torch's own; on CPU tensors the kernels run in aref's reference interpreter (correct,
slow: keep shapes small). The kernels are in `aref.nn.kernels`; `aref.nn.ops` says what is supported.
"""
from aref.nn.ops import attention, define, linear

define()

__all__ = ["attention", "linear"]
