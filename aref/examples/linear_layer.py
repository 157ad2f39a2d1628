"""A linear layer's three GEMMs, the kernels behind `aref.nn.linear` (defined in `aref.nn.kernels`):

    linear_fwd          Y = X·Wᵀ (+ bias), X: M×K, W: N×K (torch's weight layout)
    linear_grad_input   dX = dY·W   (W read as the MMA's N-major B operand: no transposed copy)
    linear_grad_weight  dW = dYᵀ·X  (the reduction runs along M: A is the transpose of a loaded dY block)

Run one with `aref run examples/linear_layer.py:linear_grad_weight`.
"""
import torch

from aref.nn.kernels import linear_fwd, linear_grad_input, linear_grad_weight

__all__ = ["linear_fwd", "linear_grad_input", "linear_grad_weight"]


def _dims(size, M, N, K):
    d = {"small": (256, 256, 256), "large": (8192, 4096, 4096)}[size]
    return M or d[0], N or d[1], d[2] if K is None else K


def _randn(shape, g, dtype):
    return (torch.randn(*shape, generator=g) * 0.5).to(dtype)


def example_inputs(size: str = "small", M: int | None = None, N: int | None = None, K: int | None = None,
                   dtype: str = "float16", seed: int = 0, **constexprs):
    """Y = X·Wᵀ + bias with M tokens, K input and N output features (small 256³, large 8192 × 4096 × 4096)."""
    M, N, K = _dims(size, M, N, K)
    g, t = torch.Generator().manual_seed(seed), getattr(torch, dtype)
    constexprs.setdefault("HAS_BIAS", True)
    return {"X": _randn((M, K), g, t), "W": _randn((N, K), g, t), "Bias": _randn((N,), g, t),
            "Y": torch.zeros(M, N, dtype=t), **constexprs}


def reference(X, W, Bias, Y, HAS_BIAS: bool = False, **_):
    y = X.float() @ W.float().T
    return {"Y": (y + Bias.float() if HAS_BIAS else y).to(Y.dtype)}


def tolerance(X, Y, **_):
    """fp32 accumulation over K, one rounding of Y (the bias adds one fp32 rounding, far below Y's)."""
    from aref.precision import matmul_tolerance
    return {"Y": matmul_tolerance(X.dtype, Y.dtype, X.shape[1])}


def baseline(X, W, Bias, Y, HAS_BIAS: bool = False, **_):
    return lambda: {"Y": torch.nn.functional.linear(X, W, Bias if HAS_BIAS else None)}


def example_inputs_linear_grad_input(size: str = "small", M: int | None = None, N: int | None = None,
                                     K: int | None = None, dtype: str = "float16", seed: int = 0, **constexprs):
    M, N, K = _dims(size, M, N, K)
    g, t = torch.Generator().manual_seed(seed), getattr(torch, dtype)
    return {"dY": _randn((M, N), g, t), "W": _randn((N, K), g, t), "dX": torch.zeros(M, K, dtype=t), **constexprs}


def reference_linear_grad_input(dY, W, dX, **_):
    return {"dX": (dY.float() @ W.float()).to(dX.dtype)}


def tolerance_linear_grad_input(dY, dX, **_):
    from aref.precision import matmul_tolerance
    return {"dX": matmul_tolerance(dY.dtype, dX.dtype, dY.shape[1])}


def baseline_linear_grad_input(dY, W, **_):
    return lambda: {"dX": dY @ W}


def example_inputs_linear_grad_weight(size: str = "small", M: int | None = None, N: int | None = None,
                                      K: int | None = None, dtype: str = "float16", seed: int = 0, **constexprs):
    M, N, K = _dims(size, M, N, K)
    g, t = torch.Generator().manual_seed(seed), getattr(torch, dtype)
    return {"dY": _randn((M, N), g, t), "X": _randn((M, K), g, t), "dW": torch.zeros(N, K, dtype=t), **constexprs}


def reference_linear_grad_weight(dY, X, dW, **_):
    return {"dW": (dY.float().T @ X.float()).to(dW.dtype)}


def tolerance_linear_grad_weight(dY, dW, **_):
    from aref.precision import matmul_tolerance
    return {"dW": matmul_tolerance(dY.dtype, dW.dtype, dY.shape[0])}


def baseline_linear_grad_weight(dY, X, **_):
    return lambda: {"dW": dY.T @ X}
