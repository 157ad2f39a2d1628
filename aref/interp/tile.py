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

from aref import ops
from aref.errors import ChannelError
from aref.ir import Kernel, Op, OpKind, ScalarType, Value

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


def trip_counts(kernel: Kernel) -> dict[tuple[int, ...], int]:
    """The loop's trip count in every CTA of the grid (a run-time count depends on the program ids: causal
    block skipping, split-K), from the pre-loop scalar math evaluated as `run_cta` does."""
    out: dict[tuple[int, ...], int] = {}
    if kernel.loop is None:
        return out
    for cta in itertools.product(*(range(g) for g in kernel.grid)):
        env: dict[int, object] = {}
        for op in kernel.pre.ops:
            if op.results and all(isinstance(r.type, ScalarType) for r in op.results) and all(
                    id(v) in env for v in op.operands):
                env[id(op.result)] = _round(evaluate(op, [env[id(v)] for v in op.operands], cta), op.result)
        out[cta] = int(env[id(kernel.loop.trip_count)])
    return out


def longest_cta(kernel: Kernel) -> tuple[int, ...]:
    """A CTA that runs the most loop iterations (the first CTA when the count does not depend on it)."""
    counts = trip_counts(kernel)
    first = tuple(0 for _ in kernel.grid)
    return max(counts, key=lambda c: (counts[c], c == first)) if counts else first


def _round(x, v: Value):
    """Round a computed result to the type of `v` (the registry's rounding policy)."""
    return ops.round_to(x, v.type)


def evaluate(op: Op, vals: list, cta: tuple[int, ...]):
    """The value of a compute or memory op (everything but channel ops) given its operand values.

    The rule is the op's registry entry (`aref.ops`); the interpreter and the simulator both call this, so
    they execute the same numerics.
    """
    return ops.interpret(op, vals, cta)


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
