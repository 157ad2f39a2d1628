"""Common views and casts computed once: a program that writes `ds.to(aref.float16)` twice (or `x[:, None]`
twice) gets one op, so the warp group that runs it holds one register tile, not two. And values nothing
reads are not computed (`drop_dead`): a cast or load a program leaves unused would otherwise be partitioned
like live work — a warp group of its own, registers, a slot it holds.

Only side-effect-free views and casts are merged (`MERGED`), within one block (pre-loop, loop body or
post-loop), when kind, attributes and operands are equal. Constant tiles are never merged: two accumulators
that both start at zero are two tiles.
"""
from __future__ import annotations

import copy

from aref.ir import Kernel, OpKind
from aref.ops import EFFECT_FREE, VIEWS

MERGED = VIEWS | {OpKind.CAST}
# ops without effects beyond their results (a load reads global memory only): the registry's
PURE = EFFECT_FREE
CHANNEL_USES = (OpKind.PUT, OpKind.GET, OpKind.CONSUMED)


def cse(kernel: Kernel) -> Kernel:
    """`kernel` with duplicate views and casts merged (a new kernel; the input is left as it was)."""
    out = copy.deepcopy(kernel)
    repl: dict[int, object] = {}

    def sub(v):
        return repl.get(id(v), v)

    for _, block in out.blocks():
        seen: dict[tuple, object] = {}
        kept = []
        for op in block.ops:
            op.operands = tuple(sub(v) for v in op.operands)
            if op.kind in MERGED and op.pred is None:
                key = (op.kind, op.attrs, tuple(id(v) for v in op.operands), op.result.type)
                if key in seen:
                    repl[id(op.result)] = seen[key]
                    continue
                seen[key] = op.result
            kept.append(op)
        block.ops = kept
        if out.loop is not None and block is out.loop.body:
            lp = out.loop
            lp.yields = tuple(sub(v) for v in lp.yields)
        if block is out.pre and out.loop is not None:
            lp = out.loop
            lp.inits = tuple(sub(v) for v in lp.inits)
            lp.trip_count = sub(lp.trip_count)
    return out


def drop_dead(kernel: Kernel) -> Kernel:
    """`kernel` without the pure ops (`PURE`) whose results nothing reads: no op, loop bound, loop init or
    yield, and without the channels whose items nobody reads (their put, get and consumed: a channel has no
    effect but its items), repeated until none is left (a dead cast's load dies with it). A new kernel when
    anything goes."""
    def live_ids(k: Kernel) -> set[int]:
        ids = {id(v) for op in k.all_ops() for v in op.operands}
        if k.loop is not None:
            ids |= {id(v) for v in (k.loop.trip_count, *k.loop.inits, *k.loop.yields)}
        return ids

    def dead(k: Kernel, live: set[int]) -> list:
        out = [op for op in k.all_ops() if op.kind in PURE and op.results
               and not any(id(r) in live for r in op.results)]
        for ch in k.channels():
            uses = [op for op in k.all_ops() if op.operands and op.operands[0] is ch.result]
            if all(op.kind in CHANNEL_USES for op in uses) and not any(
                    id(r) in live for op in uses if op.kind is OpKind.GET for r in op.results):
                out += uses + [ch]
        return out
    if not dead(kernel, live_ids(kernel)):
        return kernel
    out = copy.deepcopy(kernel)
    while True:
        gone = {id(op) for op in dead(out, live_ids(out))}
        if not gone:
            return out
        for _, block in out.blocks():
            block.ops = [op for op in block.ops if id(op) not in gone]
