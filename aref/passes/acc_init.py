"""On Blackwell, a loop-carried accumulator's non-zero starting value is added after the loop.

`acc = aref.load(C).to(aref.float32) * beta` before the loop and `acc = aref.mma(a, b.T, acc)` (or
`acc = acc + aref.mma(a, b.T)`) in it: on sm_100a the accumulator lives in tensor memory, where the MMA
warp's tcgen05 MMAs start from the tensor core's zero fill, and no warp group can hand a register tile into
it before the loop (nor can a register tile carried by a CUDA-core group enter the loop through a channel,
which hands over shared-memory tiles). So, as CUTLASS does with β·C, the loop starts from zeros and the
starting value is added to the loop's result after it; the pre-loop ops that compute that value (the load
of C, casts, scales) move after the loop where nothing else reads them, so no tile is held across the loop.
The result is the same sum, up to the order of the fp32 additions.

`hoist_accumulator_init(kernel)` is a pure function of Tile IR (a new kernel, or `kernel` when nothing applies).
"""
from __future__ import annotations

import copy

from aref.ir import FnAttrs, FullAttrs, Kernel, Op, OpKind, TileType, Value
from aref.ops import CUDA_CORE_KINDS, ELEMENTWISE_KINDS, VIEWS

# ops that may move from before the loop to after it: they only read global memory and registers
_MOVABLE = (CUDA_CORE_KINDS & ELEMENTWISE_KINDS) | VIEWS | {OpKind.LOAD, OpKind.FULL, OpKind.CONST, OpKind.ARANGE,
                                                            OpKind.SCALAR_BINARY}


def _users(kernel: Kernel) -> dict[int, list[Op]]:
    out: dict[int, list[Op]] = {}
    for op in kernel.all_ops():
        for v in op.operands:
            out.setdefault(id(v), []).append(op)
    return out


def _zero_fill(op: Op | None) -> bool:
    return op is not None and op.kind is OpKind.FULL and op.attrs.value == 0.0


def _accumulates(c: Value, y: Value, users: dict[int, list[Op]]) -> bool:
    """Is the loop's next value `y` the carried `c` plus products only: a chain of in-place MMAs
    (`mma(a, b, acc)`) and adds (`acc + mma(...)`), each step read by nothing but the next?"""
    v = c
    for _ in range(64):
        if v is y:
            return True
        us = users.get(id(v), [])
        if len(us) != 1:
            return False
        u = us[0]
        if u.kind is OpKind.MMA and len(u.operands) > 2 and u.operands[2] is v and u.operands[0] is not v \
                and u.operands[1] is not v:
            v = u.result
        elif u.kind is OpKind.BINARY and u.attrs.fn == "add" and sum(o is v for o in u.operands) == 1 \
                and u.result.type == v.type:
            v = u.result
        else:
            return False
    return False


def hoist_accumulator_init(kernel: Kernel) -> Kernel:
    """`kernel` with every accumulator that starts from a computed tile starting from zeros, that tile added
    to the loop's result after the loop (see the module docstring)."""
    lp = kernel.loop
    if lp is None:
        return kernel
    prod = {id(r): op for op in kernel.all_ops() for r in op.results}
    users = _users(kernel)
    body = set(lp.body.ops)
    todo = [i for i, (init, c, y) in enumerate(zip(lp.inits, lp.carried, lp.yields))
            if isinstance(c.type, TileType) and c.type.dtype.is_float and init.type == c.type
            and id(init) in prod and prod[id(init)] in kernel.pre.ops and prod[id(init)].kind in _MOVABLE
            and not _zero_fill(prod[id(init)])
            and all(u in kernel.post.ops for u in users.get(id(init), []))    # read after the loop at most
            and _accumulates(c, y, {k: [u for u in us if u in body] for k, us in users.items()})
            and sum(x is init for x in lp.inits) == 1]
    if not todo:
        return kernel
    out = copy.deepcopy(kernel)
    lp = out.loop
    prod = {id(r): op for op in out.all_ops() for r in op.results}
    users = _users(out)
    inits = list(lp.inits)
    post_front: list[Op] = []
    moved: set[int] = set()
    for i in todo:
        init, result = inits[i], lp.results[i]
        zero = Value(init.type, f"{init.name or 'acc'}.zero")
        out.pre.ops.append(Op(OpKind.FULL, (), (zero,), FullAttrs(init.type.shape, 0.0, init.type.dtype),
                              prod[id(init)].loc))
        inits[i] = zero
        # the ops computing the starting value that nothing else reads go after the loop, in their order
        chain = {id(prod[id(init)])}
        for op in reversed(out.pre.ops):
            if id(op) in chain or op.kind not in _MOVABLE or id(op) in moved:
                continue
            readers = [u for r in op.results for u in users.get(id(r), [])]
            if readers and all(id(u) in chain for u in readers) and not any(r is x for r in op.results
                                                                           for x in inits):
                chain.add(id(op))
        post_front += [op for op in out.pre.ops if id(op) in chain]
        moved |= chain
        total = Value(result.type, result.name)
        add = Op(OpKind.BINARY, (result, init), (total,), FnAttrs("add"), prod[id(init)].loc)
        for op in out.post.ops:
            if any(v is result for v in op.operands):
                op.operands = tuple(total if v is result else v for v in op.operands)
        post_front.append(add)
    out.pre.ops = [op for op in out.pre.ops if id(op) not in moved]
    lp.inits = tuple(inits)
    out.post.ops = post_front + out.post.ops
    return out
