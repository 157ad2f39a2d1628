"""Verifier of Tile IR invariants: SSA scoping, typed attributes, result types, the loop, and the aref
channel protocol. It runs after tracing and between passes in tests; every failure names the op's line.
"""
from __future__ import annotations

from aref import typing_rules as rules
from aref.errors import ChannelError, SrcInfo, VerifyError
from aref.ir import (ATTRS_OF, ArefType, BINARY_FNS, COMPARE_FNS, DType, Kernel, Op, OpKind, REDUCE_FNS,
                     SCALAR_FNS, SCALAR_PREDICATES, ScalarType, Space, TensorType, TileType, UNARY_FNS, Value)


def verify(kernel: Kernel) -> None:
    """Raise `VerifyError` (or `ChannelError`) on the first broken invariant."""
    scope: set[int] = {id(p.value) for p in kernel.params}
    for p in kernel.params:
        if not isinstance(p.value.type, TensorType):
            raise VerifyError(f"parameter {p.name} must be a global tensor, got {p.value.type}", kernel.loc)
    _check_block(kernel.pre.ops, scope, "pre")
    loop = kernel.loop
    if loop is not None:
        if id(loop.trip_count) not in scope or loop.trip_count.type != ScalarType(DType.int32):
            raise VerifyError("the loop's trip count must be an i32 value defined before the loop", loop.loc)
        if not (len(loop.inits) == len(loop.carried) == len(loop.yields) == len(loop.results)):
            raise VerifyError("loop inits, carried values, yields and results differ in number", loop.loc)
        for init in loop.inits:
            _use(init, scope, loop.loc, "loop init")
        body_scope = set(scope) | {id(loop.iv)} | {id(c) for c in loop.carried}
        _check_block(loop.body.ops, body_scope, "loop")
        for i, (a, b, c, d) in enumerate(zip(loop.inits, loop.carried, loop.yields, loop.results)):
            _use(c, body_scope, loop.loc, "loop yield")
            if not (a.type == b.type == c.type == d.type):
                raise VerifyError(f"loop-carried value #{i} changes type: init {a.type}, carried {b.type}, "
                                  f"yield {c.type}, result {d.type}", loop.loc)
        scope |= {id(r) for r in loop.results}
        check_channel_protocol(kernel)
    _check_block(kernel.post.ops, scope, "post")
    for op in kernel.all_ops():
        if op.kind in (OpKind.PUT, OpKind.GET, OpKind.CONSUMED) and (loop is None or op not in loop.body.ops):
            raise ChannelError(f"{op.kind.value} outside the loop", op.loc,
                               hint="arefs hand values between iterations' producers and consumers")


def _use(v: Value, scope: set[int], loc: SrcInfo, what: str) -> None:
    if id(v) not in scope:
        raise VerifyError(f"{what} uses %{v.name or v.id}, which is not defined before it in scope", loc)


def _check_block(ops: list[Op], scope: set[int], region: str) -> None:
    for op in ops:
        expected = ATTRS_OF[op.kind]
        if type(op.attrs) is not expected:
            raise VerifyError(f"{op.kind.value} must carry {expected.__name__}, got {type(op.attrs).__name__}",
                              op.loc)
        for v in op.operands:
            _use(v, scope, op.loc, op.kind.value)
        want = expected_result_types(op)
        got = tuple(r.type for r in op.results)
        if want is not None and got != want:
            raise VerifyError(f"{op.kind.value} should produce {', '.join(map(str, want)) or 'nothing'} but "
                              f"produces {', '.join(map(str, got)) or 'nothing'}", op.loc)
        if op.kind is OpKind.CHANNEL and region != "pre":
            raise ChannelError("channels are created before the loop", op.loc,
                               hint="move `aref.channel(...)` above the loop")
        scope.update(id(r) for r in op.results)


def _fn(op: Op, allowed) -> str:
    if op.attrs.fn not in allowed:
        raise VerifyError(f"{op.kind.value} has unknown function '{op.attrs.fn}'", op.loc)
    return op.attrs.fn


def expected_result_types(op: Op):
    """The result types an op must have given its operands and attributes (None: not checked here)."""
    k, loc, a = op.kind, op.loc, op.attrs
    ts = [v.type for v in op.operands]
    i32 = ScalarType(DType.int32)
    if k is OpKind.CONST:
        return (op.results[0].type,) if isinstance(op.results[0].type, ScalarType) else (i32,)
    if k is OpKind.PROGRAM_ID:
        return (i32,)
    if k is OpKind.SCALAR_BINARY:
        _fn(op, SCALAR_FNS + SCALAR_PREDICATES)
        if ts != [i32, i32]:
            raise VerifyError(f"scalar {a.fn} needs two i32 operands", loc)
        return (ScalarType(DType.bool_),) if a.fn in SCALAR_PREDICATES else (i32,)
    if k is OpKind.SELECT:
        if ts[0] != ScalarType(DType.bool_) or ts[1] != ts[2]:
            raise VerifyError("select takes an i1 condition and two values of one type", loc)
        return (ts[1],)
    if k is OpKind.LOAD:
        t = ts[0]
        if not isinstance(t, TensorType) or any(x != i32 for x in ts[1:]):
            raise VerifyError("load takes a tensor and i32 coordinates", loc)
        return (rules.load_type(t.shape, t.dtype, a.tile_shape, len(ts) - 1, loc),)
    if k is OpKind.STORE:
        t, tile = ts[0], ts[-1]
        if not isinstance(t, TensorType) or not isinstance(tile, TileType) or any(x != i32 for x in ts[1:-1]):
            raise VerifyError("store takes a tensor, i32 coordinates and a tile", loc)
        rules.load_type(t.shape, t.dtype, a.tile_shape, len(ts) - 2, loc)
        if tile.shape != a.tile_shape or tile.dtype != t.dtype:
            raise VerifyError(f"store of {tile} into {t} with tile shape {a.tile_shape}", loc)
        return ()
    if k is OpKind.FULL:
        return (TileType(a.shape, a.dtype, Space.RMEM),)
    if k is OpKind.ARANGE:
        return (TileType((a.n,), DType.int32, Space.RMEM),)
    if k is OpKind.TRANSPOSE:
        return (rules.transpose_type(ts[0], loc),)
    if k is OpKind.EXPAND_DIMS:
        return (rules.expand_dims_type(ts[0], a.axis, loc),)
    if k is OpKind.SLICE:
        return (rules.slice_type(ts[0], a.axis, a.start, a.size, loc),)
    if k is OpKind.MMA:
        if len(ts) not in (2, 3):
            raise VerifyError("mma takes a, b and an optional accumulator", loc)
        return (rules.mma_type(ts[0], ts[1], ts[2] if len(ts) == 3 else None, loc),)
    if k is OpKind.UNARY:
        _fn(op, UNARY_FNS)
        return (rules.elementwise(ts, ts[0].dtype, loc),)
    if k in (OpKind.BINARY, OpKind.COMPARE):
        _fn(op, BINARY_FNS if k is OpKind.BINARY else COMPARE_FNS)
        dtype = rules.promote(ts[0].dtype, ts[1].dtype, loc)
        return (rules.elementwise(ts, dtype if k is OpKind.BINARY else DType.bool_, loc),)
    if k is OpKind.WHERE:
        if ts[0].dtype is not DType.bool_:
            raise VerifyError("where needs a boolean condition", loc)
        return (rules.elementwise(ts, rules.promote(ts[1].dtype, ts[2].dtype, loc), loc),)
    if k is OpKind.REDUCE:
        _fn(op, REDUCE_FNS)
        return (rules.reduce_type(ts[0], a.axis, loc),)
    if k is OpKind.CAST:
        return (rules.elementwise(ts, a.dtype, loc),)
    if k is OpKind.CHANNEL:
        t = op.results[0].type
        if not isinstance(t, ArefType) or t.depth != a.depth or t.depth < 1:
            raise VerifyError(f"channel '{a.name}' must have an aref type of depth {a.depth}", loc)
        return (t,)
    if k is OpKind.PUT:
        ch = ts[0]
        if not isinstance(ch, ArefType) or tuple(t.with_space(Space.SMEM) for t in ts[1:]) != ch.payload:
            raise VerifyError(f"put payload {[str(t) for t in ts[1:]]} does not match {ch}", loc)
        return ()
    if k is OpKind.GET:
        if not isinstance(ts[0], ArefType):
            raise VerifyError("get takes a channel", loc)
        return ts[0].payload
    if k is OpKind.CONSUMED:
        if not isinstance(ts[0], ArefType):
            raise VerifyError("consumed takes a channel", loc)
        return ()
    return None


_VIEWS = (OpKind.TRANSPOSE, OpKind.EXPAND_DIMS, OpKind.SLICE)


def check_channel_protocol(kernel: Kernel) -> None:
    """Per iteration, each channel's ops must form a valid FIFO: put before get before consumed, never more
    outstanding puts than slots, balanced counts at the end of the body, and no use of a borrowed tile after
    the consumed() that released its slot."""
    loop = kernel.loop
    for ch_op in kernel.channels():
        ch = ch_op.result
        name, depth = ch_op.attrs.name, ch_op.attrs.depth
        puts: list[Op] = []
        gets: list[Op] = []
        cons: list[Op] = []
        borrowed: dict[int, tuple[Op, int]] = {}   # value id -> (its get, index of that get)
        released: dict[int, Op] = {}               # get index -> the consumed() that released it
        for op in loop.body.ops:
            for v in op.operands:
                owner = borrowed.get(id(v))
                if owner is not None and owner[1] in released and op.kind is not OpKind.CONSUMED:
                    rel = released[owner[1]]
                    raise ChannelError(
                        f"a tile from {name}.get() (line {owner[0].loc.line}) is used after {name}.consumed() "
                        f"(line {rel.loc.line}) released its slot", op.loc,
                        hint=f"move {name}.consumed() after the last use of the tile")
            if op.kind in _VIEWS and id(op.operands[0]) in borrowed:
                borrowed[id(op.result)] = borrowed[id(op.operands[0])]
            if not op.operands or op.operands[0] is not ch or op.kind not in (OpKind.PUT, OpKind.GET,
                                                                              OpKind.CONSUMED):
                continue
            if op.kind is OpKind.PUT:
                if len(puts) - len(cons) >= depth:
                    pending = puts[len(cons)]
                    raise ChannelError(
                        f"put into channel '{name}' (depth {depth}) while all its slots are taken: the put on "
                        f"line {pending.loc.line} has not been consumed", op.loc,
                        hint=f"get and consume before putting again, or deepen the channel "
                             f"(aref.channel(depth={depth + 1}))")
                puts.append(op)
            elif op.kind is OpKind.GET:
                if len(gets) >= len(puts):
                    raise ChannelError(f"get on channel '{name}' before any put in this iteration", op.loc,
                                       hint=f"call {name}.put(...) earlier in the loop body")
                for r in op.results:
                    borrowed[id(r)] = (op, len(gets))
                gets.append(op)
            else:
                if len(cons) >= len(gets):
                    raise ChannelError(f"{name}.consumed() without a get before it", op.loc,
                                       hint=f"call {name}.get() first; consumed() releases the slot a get "
                                            f"borrowed")
                released[len(cons)] = op
                cons.append(op)
        if not puts:
            raise ChannelError(f"channel '{name}' is never put to in the loop", ch_op.loc,
                               hint="put into it in the loop, or remove it")
        if len(gets) != len(puts):
            raise ChannelError(f"channel '{name}' has {len(puts)} put(s) but {len(gets)} get(s) per iteration",
                               (puts[len(gets)] if len(gets) < len(puts) else gets[-1]).loc,
                               hint="every value put into a channel must be taken out in the same iteration")
        if len(cons) != len(gets):
            raise ChannelError(f"the slot taken by {name}.get() is never released with {name}.consumed()",
                               gets[len(cons)].loc, hint=f"call {name}.consumed() after the last use")
        for y in loop.yields:
            if id(y) in borrowed:
                raise ChannelError(f"a tile borrowed from channel '{name}' is carried to the next iteration",
                                   loop.loc, hint="copy it into registers (e.g. with arithmetic) first")
