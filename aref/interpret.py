"""Reference interpreter: executes Tile IR sequentially for every CTA of the grid on torch CPU tensors.

Numerics follow what a GPU gives: tiles hold values rounded to their dtype, elementwise math is done in
float32 and rounded to the result dtype, MMAs multiply exactly-converted operands and accumulate in float32,
and loads/stores have TMA bounds semantics (out-of-bounds reads are zero, out-of-bounds writes dropped).
Channels behave as their sequential semantics say: a FIFO of published payloads.
"""
from __future__ import annotations

import itertools
from collections import deque

import torch

from aref.dtypes import to_torch
from aref.errors import ArefTypeError, ChannelError
from aref.ir import Kernel, Op, OpKind, TileType, Value

_UNARY = {
    "exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "abs": torch.abs, "neg": torch.neg,
}
_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum,
}
_COMPARE = {"lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}
_SCALAR = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "min": min, "max": max,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
}


def run_kernel(kernel: Kernel, tensors: dict[str, torch.Tensor]) -> None:
    """Run every CTA of the grid; stores write into `tensors` in place."""
    for p in kernel.params:
        t = tensors[p.name]
        if tuple(t.shape) != p.value.type.shape or t.device.type != "cpu":
            raise ValueError(f"argument {p.name} does not match the specialization {p.value.type} on the CPU")
    for cta in itertools.product(*(range(g) for g in kernel.grid)):
        run_cta(kernel, tensors, cta)


def run_cta(kernel: Kernel, tensors: dict[str, torch.Tensor], cta: tuple[int, ...]) -> None:
    env: dict[int, object] = {id(p.value): tensors[p.name] for p in kernel.params}
    state = _CTA(env, cta)
    state.run(kernel.pre.ops)
    loop = kernel.loop
    if loop is not None:
        carried = [env[id(v)] for v in loop.inits]
        for k in range(int(env[id(loop.trip_count)])):
            env[id(loop.iv)] = k
            for v, x in zip(loop.carried, carried):
                env[id(v)] = x
            state.run(loop.body.ops)
            carried = [env[id(v)] for v in loop.yields]
        for v, x in zip(loop.results, carried):
            env[id(v)] = x
    state.run(kernel.post.ops)


def _as_tensor(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.float() if x.dtype not in (torch.bool, torch.int32) else x
    return torch.tensor(x, dtype=torch.float32 if isinstance(x, float) else torch.int32)


def _round(x: torch.Tensor, v: Value):
    """Round a computed result to the dtype of its IR type."""
    t = v.type
    if isinstance(t, TileType):
        x = x.to(to_torch(t.dtype))
        if tuple(x.shape) != t.shape:
            x = x.expand(t.shape).clone()
        return x
    return x.item() if isinstance(x, torch.Tensor) else x


def box(tensor_shape, coords, tile_shape):
    """Per dimension: (start, stop) of the box in the tensor, clipped, and where it lands in the tile."""
    lead = len(tensor_shape) - len(tile_shape)
    out = []
    for d, (size, c) in enumerate(zip(tensor_shape, coords)):
        ts = tile_shape[d - lead] if d >= lead else 1
        start = c * ts
        lo, hi = max(start, 0), min(start + ts, size)
        out.append((lo, max(hi, lo), lo - start, ts))
    return out, lead


def evaluate(op: Op, vals: list, cta: tuple[int, ...]):
    """The value of a compute or memory op (everything but channel ops) given its operand values.

    Shared by the interpreter and the simulator, so both execute the same numerics.
    """
    k, a = op.kind, op.attrs
    if k is OpKind.CONST:
        return a.value
    if k is OpKind.PROGRAM_ID:
        return cta[a.axis] if a.axis < len(cta) else 0
    if k is OpKind.SCALAR_BINARY:
        x, y = int(vals[0]), int(vals[1])
        if y == 0 and a.fn in ("floordiv", "mod"):
            raise ArefTypeError(f"integer {'division' if a.fn == 'floordiv' else 'modulo'} by zero in index math "
                                f"(a runtime divisor is 0 in CTA {cta})", op.loc,
                                hint="make sure the divisor cannot be 0 (program ids and the loop index start "
                                     "at 0)")
        return _SCALAR[a.fn](x, y)
    if k is OpKind.LOAD:
        return load_box(vals[0], [int(c) for c in vals[1:]], a.tile_shape)
    if k is OpKind.STORE:
        return store_box(vals[0], [int(c) for c in vals[1:-1]], vals[-1], a)
    if k is OpKind.FULL:
        return torch.full(a.shape, a.value, dtype=torch.float32)
    if k is OpKind.ARANGE:
        return torch.arange(a.n, dtype=torch.int32)
    if k is OpKind.TRANSPOSE:
        return vals[0].permute(a.perm)
    if k is OpKind.EXPAND_DIMS:
        return vals[0].unsqueeze(a.axis)
    if k is OpKind.SLICE:
        return vals[0].narrow(a.axis, a.start, a.size)
    if k in (OpKind.MMA, OpKind.MMA_ASYNC):
        prod = vals[0].float() @ vals[1].float()
        return prod + vals[2] if len(vals) == 3 else prod
    if k is OpKind.UNARY:
        return _UNARY[a.fn](_as_tensor(vals[0]).float())
    if k is OpKind.BINARY:
        x, y = _as_tensor(vals[0]), _as_tensor(vals[1])
        if op.result.type.dtype.is_float:
            x, y = x.float(), y.float()
        return _BINARY[a.fn](x, y)
    if k is OpKind.COMPARE:
        return _COMPARE[a.fn](_as_tensor(vals[0]), _as_tensor(vals[1]))
    if k is OpKind.WHERE:
        return torch.where(_as_tensor(vals[0]), _as_tensor(vals[1]).float(), _as_tensor(vals[2]).float())
    if k is OpKind.REDUCE:
        x = vals[0].float()
        if a.fn == "sum":
            return x.sum(dim=a.axis)
        return x.amax(dim=a.axis) if a.fn == "max" else x.amin(dim=a.axis)
    if k is OpKind.CAST:
        return _as_tensor(vals[0]).float() if op.result.type.dtype.is_float else _as_tensor(vals[0])
    if k is OpKind.SELECT:
        return vals[1] if vals[0] else vals[2]
    raise NotImplementedError(f"no value semantics for {k.value}")


def round_result(x, v: Value):
    """Round a computed result to the dtype of its IR type (tiles) or to a Python number (scalars)."""
    return _round(x, v)


class _CTA:
    def __init__(self, env, cta):
        self.env = env
        self.cta = cta
        self.published: dict[int, deque] = {}
        self.borrowed: dict[int, deque] = {}

    def run(self, ops: list[Op]) -> None:
        env = self.env
        for op in ops:
            vals = [env[id(v)] for v in op.operands]
            out = self.eval(op, vals)
            if op.results:
                if len(op.results) == 1 and op.kind is not OpKind.GET:
                    env[id(op.result)] = _round(out, op.result)
                else:
                    for r, x in zip(op.results, out):
                        env[id(r)] = x

    def eval(self, op: Op, vals):
        k = op.kind
        if k is OpKind.CHANNEL:
            self.published[id(op.result)] = deque()
            self.borrowed[id(op.result)] = deque()
            return None
        if k is OpKind.PUT:
            self.published[id(op.operands[0])].append(tuple(t.clone() for t in vals[1:]))
            return None
        if k is OpKind.GET:
            q = self.published[id(op.operands[0])]
            if not q:
                raise ChannelError("get on an empty channel", op.loc)
            item = q.popleft()
            self.borrowed[id(op.operands[0])].append(item)
            return item
        if k is OpKind.CONSUMED:
            q = self.borrowed[id(op.operands[0])]
            if not q:
                raise ChannelError("consumed() without a borrowed slot", op.loc)
            q.popleft()
            return None
        return evaluate(op, vals, self.cta)


def load_box(tensor, coords, tile_shape):
    """TMA load semantics: the box at block `coords`, zeros where it leaves the tensor."""
    dims, lead = box(tensor.shape, coords, tile_shape)
    tile = torch.zeros(tile_shape, dtype=tensor.dtype)
    if any(hi <= lo for lo, hi, _, _ in dims):
        return tile
    src = tensor[tuple(slice(lo, hi) for lo, hi, _, _ in dims)]
    src = src.reshape(src.shape[lead:])
    dst = tuple(slice(off, off + (hi - lo)) for lo, hi, off, _ in dims[lead:])
    tile[dst] = src
    return tile


def store_box(tensor, coords, tile, attrs):
    """TMA store semantics: write (or reduce-add) the in-bounds part of the box."""
    dims, lead = box(tensor.shape, coords, attrs.tile_shape)
    if any(hi <= lo for lo, hi, _, _ in dims):
        return None
    part = tile[tuple(slice(off, off + (hi - lo)) for lo, hi, off, _ in dims[lead:])]
    view = tensor[tuple(slice(lo, hi) for lo, hi, _, _ in dims)]
    part = part.reshape(view.shape)
    if attrs.reduce == "add":
        view.copy_((view.float() + part.float()).to(tensor.dtype))
    else:
        view.copy_(part)
    return None
