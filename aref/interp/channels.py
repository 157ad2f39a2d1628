"""Channel-level execution of warp-specialized kernels (partitioned and pipelined levels).

Each group runs as a Python generator that yields when a channel op cannot proceed; groups take turns
round-robin (or in a seeded random order). Channels follow aref semantics on logical items: a put of item k
needs item k−depth released by every consumer; a get of item k needs item k put; consumed releases it.
This checks loop distribution and pipelining before aref lowering; the Barrier IR, with real mbarrier
phases, is executed by `aref.sim`.
"""
from __future__ import annotations

import itertools
import random

from aref.errors import ArefError
from aref.interp.tile import evaluate, round_result
from aref.ir import Op, OpKind
from aref.ir.ws import GroupProgram, WSKernel

UNDEF = object()


class ChannelDeadlock(ArefError):
    kind = "deadlock"


def run_ws(kernel: WSKernel, tensors: dict, seed: int | None = None) -> None:
    """Run every CTA; outputs are written into `tensors` in place. Raises ChannelDeadlock on a deadlock."""
    rng = random.Random(seed) if seed is not None else None
    for cta in itertools.product(*(range(g) for g in kernel.grid)):
        _run_cta(kernel, tensors, cta, rng)


def _run_cta(kernel: WSKernel, tensors, cta, rng) -> None:
    state = {"items": {}, "released": {}}
    chans = {id(c.value): c for c in kernel.channels}
    gens = {gp.group.name: _group(gp, kernel, tensors, cta, state, chans) for gp in kernel.groups}
    blocked: dict[str, Op] = {}
    live = dict(gens)
    while live:
        progressed = False
        names = list(live)
        if rng is not None:
            rng.shuffle(names)
        for name in names:
            try:
                op = next(live[name])
            except StopIteration:
                del live[name]
                blocked.pop(name, None)
                progressed = True
                continue
            if op is None:
                progressed = True
                blocked.pop(name, None)
            else:
                blocked[name] = op
        if not progressed:
            detail = "; ".join(f"{g} waits at {op.kind.value} (line {op.loc.line})" for g, op in blocked.items())
            raise ChannelDeadlock(f"every group is blocked: {detail}", next(iter(blocked.values())).loc)


def _group(gp: GroupProgram, kernel: WSKernel, tensors, cta, state, chans):
    env: dict[int, object] = {id(p.value): tensors[p.name] for p in kernel.params}
    items, released = state["items"], state["released"]

    def run(ops):
        for op in ops:
            if op.pred is not None and not env[id(op.pred)]:
                for r in op.results:
                    env[id(r)] = UNDEF
                continue
            vals = [env.get(id(v), v) for v in op.operands]
            if op.kind is OpKind.SELECT:              # reads only the value it picks
                vals = [vals[0], vals[1] if vals[0] else vals[2], vals[1] if vals[0] else vals[2]]
            if any(x is UNDEF for x in vals):
                raise ArefError(f"{op.kind.value} in group {gp.group.name} reads a value of a skipped op", op.loc)
            if op.kind in (OpKind.PUT, OpKind.GET, OpKind.CONSUMED):
                ch = chans[id(op.operands[0])]
                k = int(vals[1])
                key = (id(ch.value), k)
                if op.kind is OpKind.PUT:
                    while k >= ch.depth and len(released.get((id(ch.value), k - ch.depth), ())) < len(
                            ch.consumers):
                        yield op
                    items[key] = tuple(t.clone() for t in vals[2:])
                elif op.kind is OpKind.GET:
                    while key not in items:
                        yield op
                    for r, t in zip(op.results, items[key]):
                        env[id(r)] = t
                else:
                    released.setdefault(key, set()).add(gp.group.id)
                yield None
                continue
            out = evaluate(op, vals, cta)
            if op.results:
                env[id(op.result)] = round_result(out, op.result) if op.kind is not OpKind.SELECT else out

    yield from run(gp.pre.ops)
    yield from run(gp.prologue.ops)
    lp = gp.loop
    if lp is not None:
        carried = [env[id(v)] for v in lp.inits]
        for t in range(int(env[id(lp.trip_count)])):
            env[id(lp.iv)] = t
            for v, x in zip(lp.carried, carried):
                env[id(v)] = x
            yield from run(lp.body.ops)
            carried = [env[id(v)] for v in lp.yields]
        for v, x in zip(lp.results, carried):
            env[id(v)] = x
    yield from run(gp.epilogue.ops)
    yield from run(gp.post.ops)
