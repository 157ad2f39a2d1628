"""How a kernel's operator takes its arguments: the caller's compile-time constants as one JSON string (a
constant of the graph under torch.compile), the signature's defaults filled in, and the signature a prepared
GPU launch is kept under. Shared by the operator (`torch_library`) and the launch path (`fast_launch`)."""
from __future__ import annotations

import inspect
import json

from aref.errors import ArefTypeError
from aref.ir import DType

def encode_constants(given: dict) -> str:
    """The caller's compile-time constants as the operator's string argument (sorted, JSON; an aref dtype
    as {"dtype": name}): a constant of the graph under torch.compile, readable in any process."""
    items = [[k, {"dtype": v.name} if isinstance(v, DType) else v] for k, v in sorted(given.items())]
    return json.dumps(items, separators=(",", ":"))


_DECODED: dict[str, dict] = {}


def decode_constants(text: str) -> dict:
    out = _DECODED.get(text)
    if out is None:
        out = {k: DType[v["dtype"]] if isinstance(v, dict) else v for k, v in json.loads(text)}
        _DECODED[text] = out
    return out


def _with_defaults(kfn, given: dict) -> dict:
    consts = {}
    for name, default in kfn.parsed.constexpr_params.items():
        if name in given:
            consts[name] = given[name]
        elif default is inspect.Parameter.empty:
            raise ArefTypeError(f"{kfn.__name__} needs compile-time constant '{name}'", kfn.def_loc,
                                hint=f"pass it by keyword: {kfn.__name__}(..., {name}=...)")
        else:
            consts[name] = default
    return consts


def _launch_key(tensors, constants: str) -> tuple:
    """The signature a prepared GPU launch is kept under (`fast_launch.launch_op`)."""
    return (constants, *[(t.dtype, t.shape, t.stride(), t.device) for t in tensors])
