"""Mapping between the language's dtypes and torch dtypes."""
from __future__ import annotations

import torch

from aref.errors import ArefTypeError
from aref.ir import DType

TORCH_OF: dict[DType, torch.dtype] = {
    DType.float16: torch.float16,
    DType.bfloat16: torch.bfloat16,
    DType.float8_e4m3: torch.float8_e4m3fn,
    DType.float8_e5m2: torch.float8_e5m2,
    DType.float32: torch.float32,
    DType.int32: torch.int32,
    DType.bool_: torch.bool,
}
_DTYPE_OF = {v: k for k, v in TORCH_OF.items() if k is not DType.bool_}


def from_torch(dtype: torch.dtype, what: str = "tensor", loc=None) -> DType:
    """The language dtype of a torch tensor argument; other dtypes are a clear error."""
    if dtype not in _DTYPE_OF:
        raise ArefTypeError(
            f"dtype not supported: {what} is {dtype}", loc,
            hint="kernel tensors must be float16, bfloat16, float8_e4m3fn, float8_e5m2, float32 or int32")
    return _DTYPE_OF[dtype]


def to_torch(dtype: DType) -> torch.dtype:
    return TORCH_OF[dtype]
