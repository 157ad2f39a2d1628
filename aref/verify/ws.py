"""Verifier of the warp-specialized levels (partitioned, pipelined, barrier).

Per group: SSA scoping across pre → prologue → loop → epilogue → post, typed attributes and result types
of compute ops, predicates that are i1 scalars in scope; channel ops that name a declared channel with the
right payload and an i32 item; at the barrier level, no aref op or synchronous MMA left, every mbarrier op on
its channel's rings with consistent counts, and register budgets that fit the SM.
"""
from __future__ import annotations

from aref.errors import VerifyError
from aref.ir import (ATTRS_OF, BarrierType, DType, Op, OpKind, RingType, ScalarType, Space, TensorType, Value)
from aref.verify import expected_result_types
from aref.ir.ws import WSKernel
from aref.resources import check_budgets

I32 = ScalarType(DType.int32)
I1 = ScalarType(DType.bool_)
AREF_OPS = (OpKind.PUT, OpKind.GET, OpKind.CONSUMED)
BARRIER_ONLY = (OpKind.MBAR_WAIT, OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX, OpKind.TMA_LOAD, OpKind.SLOT_STORE,
                OpKind.SLOT_READ, OpKind.FENCE_PROXY_ASYNC, OpKind.TMEM_STORE_FENCE, OpKind.MMA_ASYNC,
                OpKind.MMA_WAIT, OpKind.MMA_COMMIT, OpKind.TMEM_ALLOC, OpKind.TMEM_DEALLOC,
                OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE, OpKind.SETMAXNREG)


def verify_ws(kernel: WSKernel) -> None:
    """Raise VerifyError on the first broken invariant of `kernel` at its level."""
    barrier = kernel.level == "barrier"
    chans = {id(c.value): c for c in kernel.channels}
    ids = [g.group.id for g in kernel.groups]
    if ids != list(range(len(ids))):
        raise VerifyError(f"group ids must be 0..n-1, got {ids}", kernel.loc)
    check_budgets([g.group for g in kernel.groups])
    for ch in kernel.channels:
        if ch.depth < 1 or ch.producer not in ids or not ch.consumers or any(c not in ids for c in ch.consumers):
            raise VerifyError(f"channel '{ch.name}' has a bad depth or group", ch.loc)
        if barrier:
            if ch.full is None or ch.full.type != BarrierType(ch.depth) or ch.empty.type != BarrierType(ch.depth):
                raise VerifyError(f"channel '{ch.name}' has no full/empty barrier rings of depth {ch.depth}", ch.loc)
            if len(ch.rings) != len(ch.payload) or any(
                    r.type != RingType(t, ch.depth) for r, t in zip(ch.rings, ch.payload)):
                raise VerifyError(f"channel '{ch.name}' buffers do not match its payload", ch.loc)
            if ch.full_count < 1 or ch.empty_count != len(ch.consumers):
                raise VerifyError(f"channel '{ch.name}' arrive counts are inconsistent", ch.loc)
    shared = {id(p.value) for p in kernel.params}
    for ch in kernel.channels:
        shared |= {id(ch.value)} | ({id(ch.full), id(ch.empty)} | {id(r) for r in ch.rings} if barrier else set())
    for gp in kernel.groups:
        scope = set(shared)
        for region, block in gp.regions():
            if region == "loop":
                lp = gp.loop
                for v in (lp.trip_count, *lp.inits):
                    _use(v, scope, lp.loc, f"loop of {gp.group.name}")
                body = scope | {id(lp.iv)} | {id(c) for c in lp.carried}
                _block(block.ops, body, kernel, chans, barrier, gp.group.name)
                for a, b, c, d in zip(lp.inits, lp.carried, lp.yields, lp.results):
                    _use(c, body, lp.loc, "yield")
                    if not a.type == b.type == c.type == d.type:
                        raise VerifyError(f"group {gp.group.name}: a loop-carried value changes type", lp.loc)
                scope |= {id(r) for r in lp.results}
            else:
                _block(block.ops, scope, kernel, chans, barrier, gp.group.name)


def _use(v: Value, scope: set[int], loc, what: str) -> None:
    if id(v) not in scope:
        raise VerifyError(f"{what} uses %{v.name or v.id}, which is not in scope", loc)


def _block(ops: list[Op], scope: set[int], kernel, chans, barrier: bool, group: str) -> None:
    for op in ops:
        if type(op.attrs) is not ATTRS_OF[op.kind]:
            raise VerifyError(f"{op.kind.value} carries {type(op.attrs).__name__}", op.loc)
        for v in op.operands:
            _use(v, scope, op.loc, f"{op.kind.value} in group {group}")
        if op.pred is not None:
            _use(op.pred, scope, op.loc, "predicate")
            if op.pred.type != I1:
                raise VerifyError(f"the predicate of {op.kind.value} must be an i1 scalar", op.loc)
        if barrier and op.kind in AREF_OPS + (OpKind.MMA,):
            raise VerifyError(f"{op.kind.value} left at the barrier level", op.loc)
        if not barrier and op.kind in BARRIER_ONLY:
            raise VerifyError(f"{op.kind.value} before aref lowering", op.loc)
        if op.kind in AREF_OPS:
            _channel_op(op, chans)
        elif op.kind not in BARRIER_ONLY:
            want = expected_result_types(op)
            got = tuple(r.type for r in op.results)
            if op.kind is OpKind.FULL and got and got[0].space is Space.TMEM:
                got = (got[0].with_space(Space.RMEM),)     # a constant written into tensor memory (sm_100a)
            if want is not None and got != want:
                raise VerifyError(f"{op.kind.value} should produce {', '.join(map(str, want))}", op.loc)
        elif op.kind in (OpKind.MBAR_WAIT, OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX, OpKind.MMA_COMMIT):
            ch = _channel_named(kernel, op.attrs.channel, op)
            bar = op.operands[0]
            which = getattr(op.attrs, "which", "full")
            if bar is not (ch.full if which == "full" else ch.empty) or op.operands[1].type != I32:
                raise VerifyError(f"{op.kind.value} is not on {ch.name}.{which}[slot]", op.loc)
        elif op.kind in (OpKind.TMA_LOAD, OpKind.SLOT_STORE, OpKind.SLOT_READ):
            ch = _channel_named(kernel, op.attrs.channel, op)
            ring = op.operands[-4] if op.kind is OpKind.TMA_LOAD else op.operands[0]
            if ring is not ch.rings[op.attrs.index]:
                raise VerifyError(f"{op.kind.value} does not use ring {op.attrs.index} of {ch.name}", op.loc)
            if op.kind is OpKind.SLOT_READ and op.result.type != ch.payload[op.attrs.index]:
                raise VerifyError(f"slot_read of {ch.name} has the wrong type", op.loc)
            if op.kind is OpKind.SLOT_STORE and op.attrs.cols:
                start, size = op.attrs.cols
                full, got = ch.payload[op.attrs.index].shape, op.operands[3].type.shape
                if len(full) != 2 or tuple(got) != (full[0], size) or start < 0 or start + size > full[1]:
                    raise VerifyError(f"slot_store of columns [{start}:{start + size}] of {ch.name}'s "
                                      f"{ch.payload[op.attrs.index]} stores a {op.operands[3].type}", op.loc)
            if op.kind is OpKind.TMA_LOAD and not isinstance(op.operands[0].type, TensorType):
                raise VerifyError("tma_load reads a global tensor", op.loc)
        scope.update(id(r) for r in op.results)


def _channel_named(kernel: WSKernel, name: str, op: Op):
    for ch in kernel.channels:
        if ch.name == name:
            return ch
    raise VerifyError(f"{op.kind.value} names unknown channel '{name}'", op.loc)


def _channel_op(op: Op, chans) -> None:
    ch = chans.get(id(op.operands[0]))
    if ch is None:
        raise VerifyError(f"{op.kind.value} on an undeclared channel", op.loc)
    if len(op.operands) < 2 or op.operands[1].type != I32:
        raise VerifyError(f"{op.kind.value} on '{ch.name}' needs an i32 item index", op.loc)
    if op.kind is OpKind.PUT:
        payload = tuple(v.type.with_space(Space.SMEM) for v in op.operands[2:])
        if payload != tuple(t.with_space(Space.SMEM) for t in ch.payload):
            raise VerifyError(f"put on '{ch.name}' carries {[str(t) for t in payload]}", op.loc)
    elif op.kind is OpKind.GET and tuple(r.type for r in op.results) != ch.payload:
        raise VerifyError(f"get on '{ch.name}' must produce its payload types", op.loc)
