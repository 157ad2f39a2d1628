"""Common views and casts computed once: a program that writes `ds.to(aref.float16)` twice (or `x[:, None]`
twice) gets one op, so the warp group that runs it holds one register tile, not two.

Only side-effect-free views and casts are merged (`MERGED`), within one block (pre-loop, loop body or
post-loop), when kind, attributes and operands are equal. Constant tiles are never merged: two accumulators
that both start at zero are two tiles.
"""
from __future__ import annotations

import copy

from aref.ir import Kernel, OpKind

MERGED = frozenset({OpKind.CAST, OpKind.TRANSPOSE, OpKind.EXPAND_DIMS, OpKind.SLICE})


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
