"""Verifier of Tile IR invariants: SSA scoping, typed attributes, result types, the loop, and the aref
channel protocol. It runs after tracing and between passes in tests; every failure names the op's line.
"""
from __future__ import annotations

from aref import ops
from aref.errors import ChannelError, SrcInfo, VerifyError
from aref.ir import ATTRS_OF, ArefType, DType, Kernel, Op, OpKind, ScalarType, TensorType, Value
from aref.ops import VIEWS


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


def expected_result_types(op: Op):
    """The result types an op must have given its operands and attributes (None: not checked here).

    The rule is the op registry's, the same one the language used to build the op (dtype gates included).
    """
    k, loc = op.kind, op.loc
    if k is OpKind.CONST:
        return (op.results[0].type,) if isinstance(op.results[0].type, ScalarType) else (ScalarType(DType.int32),)
    fn = getattr(op.attrs, "fn", None)
    try:
        d = ops.lookup(k, fn)
    except KeyError:
        raise VerifyError(f"{k.value} has unknown function '{fn}'", loc) from None
    if d.type_rule is None:
        if k is OpKind.CHANNEL:
            t = op.results[0].type
            if not isinstance(t, ArefType) or t.depth != op.attrs.depth or t.depth < 1:
                raise VerifyError(f"channel '{op.attrs.name}' must have an aref type of depth {op.attrs.depth}", loc)
            return (t,)
        return None
    return d.type_rule([v.type for v in op.operands], op.attrs, loc)


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
            if op.kind in VIEWS and id(op.operands[0]) in borrowed:
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
