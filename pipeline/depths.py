"""Channel depths and the kernel-wide check of the groups' schedules: how many slots each channel needs for
the pipeline steps its consumers hold (`required_depths`, `choose_depths`), puts held back where a ring
cannot be deepened (`delay_puts`), and whether the groups' schedules together can deadlock
(`global_conflict` over `global_edges`)."""
from __future__ import annotations

from aref.errors import ChannelError
from aref.ir import Op, OpKind, index_math
from aref.ir.ws import WSKernel
from pipeline import sm100
from pipeline.schedule import GroupSchedule, _propagate, body_edges, slack_steps, step_order

def required_depths(kernel: WSKernel, schedules: dict[int, GroupSchedule]) -> dict[str, int]:
    """Per loop channel: 1 + the most steps between an item's put and its last release — at least the steps
    a consumer holds the slot (get to consumed); with groups on different stages, also how far the release
    trails the put (the producer must not need the slot again before it is free)."""
    need: dict[str, int] = {}
    put_stage: dict[int, int] = {}
    staged = [(gp, schedules[gp.group.id]) for gp in kernel.groups
              if gp.loop is not None and gp.group.id in schedules]
    for gp, sched in staged:
        for op in gp.loop.body.ops:
            if op.kind is OpKind.PUT:
                put_stage[id(op.operands[0])] = min(put_stage.get(id(op.operands[0]), 1 << 30), sched.stage[op])
    for gp, sched in staged:
        for op in gp.loop.body.ops:
            if op.kind is OpKind.CONSUMED:
                ch = kernel.channel_of(op.operands[0])
                gets = [g for g in gp.loop.body.ops if g.kind is OpKind.GET and g.operands[0] is op.operands[0]]
                held = sched.stage[op] - min(sched.stage[g] for g in gets)
                # a TMA producer runs ahead freely (it only waits for free slots); a staged producer of
                # register tiles must find the slot free when its later stage puts the next item
                trail = 0 if ch.kind == "tma" else sched.stage[op] - put_stage.get(id(ch.value), sched.stage[op])
                need[ch.name] = max(need.get(ch.name, 1), (max(held, trail) + 1) * max(ch.items_per_iter, 1))
    return need


def delay_puts(kernel: WSKernel, schedules: dict[int, GroupSchedule]) -> list[tuple]:
    """Fit a user channel's fixed depth by prefetching less: a slot is busy from the step that puts an item
    to the step of its last release, so when a consumer releases more than `depth − 1` steps after the put
    (a solver's schedule may stage a consumer late), the put — and what feeds it in its group — moves to a
    later stage, no later than the earliest get of the item. Without this the producer would wait for a slot
    that a consumer frees only after waiting on the producer (see `global_conflict`). Returns (channel,
    depth it needs) for the user channels still too shallow."""
    short = []
    for ch in kernel.channels:
        if not ch.user or ch.region != "loop" or ch.producer not in schedules:
            continue
        prod = next(gp for gp in kernel.groups if gp.group.id == ch.producer)
        sched = schedules[ch.producer]
        puts = [op for op in prod.loop.body.ops if op.kind is OpKind.PUT and op.operands[0] is ch.value]
        gets, releases = [], []
        for gp in kernel.groups:
            if gp.group.id not in ch.consumers or gp.group.id not in schedules:
                continue
            for op in gp.loop.body.ops:
                if op.kind in (OpKind.GET, OpKind.CONSUMED) and op.operands[0] is ch.value:
                    (gets if op.kind is OpKind.GET else releases).append(schedules[gp.group.id].stage[op])
        if not puts or not releases:
            continue
        late = max(releases) - slack_steps(ch) - min(sched.stage[p] for p in puts)
        room = min(gets, default=0) - max(sched.stage[p] for p in puts)
        if late > 0 and room > 0:
            edges = body_edges(prod)
            made = {id(r): op for op in prod.loop.body.ops for r in op.results}
            for p in puts:
                at = sched.stage[p] + min(late, room)
                # the put and the loads it publishes move together (a TMA put issues their copies)
                for op in [p] + [made[id(v)] for v in p.operands[1:] if id(v) in made
                                 and made[id(v)].kind is OpKind.LOAD]:
                    sched.stage[op] = max(sched.stage[op], at)
            _propagate(edges, sched.stage, index_math(prod.all_ops()))
            sched.order = step_order(list(prod.loop.body.ops), sched.stage, edges)
        if late > room:
            short.append((ch, (slack_steps(ch) + 1 + late - max(room, 0)) * max(ch.items_per_iter, 1)))
    return short


def choose_depths(kernel: WSKernel, schedules: dict[int, GroupSchedule], tma_depth: int = 2) -> None:
    """Set every channel's depth: user channels keep theirs (an error if too small), compiler channels get
    what the schedule needs (TMA rings at least `tma_depth`, to hide load latency)."""
    need = required_depths(kernel, schedules)
    for ch in kernel.channels:
        req = need.get(ch.name, 1)
        if sm100.tmem_ring_depth(ch, kernel) is not None:
            ch.depth = sm100.tmem_ring_depth(ch, kernel)
            continue
        if ch.user:
            if ch.depth < req:
                raise ChannelError(
                    f"channel '{ch.name}' has depth {ch.depth}, but the schedule holds its slots across {req - 1} "
                    f"pipeline step(s): with fewer than {req} slots the producer would wait for a slot the "
                    f"consumer releases only later, and the pipeline deadlocks", ch.loc,
                    hint=f"use aref.channel(depth={req})")
            continue
        if ch.region == "loop":
            ch.depth = max(req, tma_depth if ch.kind == "tma" else 1)
        else:
            ch.depth = 1


# ----------------------------------------------------------------------------- cross-group consistency
def global_conflict(kernel: WSKernel, schedules: dict[int, GroupSchedule], extra=()) -> str | None:
    """Check that the groups' schedules fit together: with op (o, iteration i) at pipeline step i + stage(o),
    every dependence — inside a group (program order, data) and between groups (a put before its get, a
    release before the put that reuses the slot; `extra` (u, v, distance) ones) — must point forward in steps,
    and the dependences within one step must be acyclic. Otherwise groups wait on each other in a cycle.
    Returns why, or None."""
    nodes, stage, edges = global_edges(kernel, schedules)
    edges += list(extra)
    for u, v, d in edges:
        if stage[u] > stage[v] + d:
            return (f"{v.kind.value} (line {v.loc.line}) runs {stage[u] - stage[v] - d} step(s) before the "
                    f"{u.kind.value} (line {u.loc.line}) it waits for")
    succ: dict[Op, list[Op]] = {op: [] for op in nodes}
    indeg = {op: 0 for op in nodes}
    for u, v, d in edges:
        if stage[u] == stage[v] + d and u is not v:
            succ[u].append(v)
            indeg[v] += 1
    ready = [op for op in nodes if indeg[op] == 0]
    seen = 0
    while ready:
        op = ready.pop()
        seen += 1
        for v in succ[op]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    if seen != len(nodes):
        stuck = next(op for op in nodes if indeg[op] > 0)
        return f"groups wait on each other in a cycle through {stuck.kind.value} (line {stuck.loc.line})"
    return None


def global_edges(kernel: WSKernel, schedules: dict[int, GroupSchedule]) -> tuple[list, dict, list]:
    """(ops, their stages, dependences (u, v, distance): v of iteration i + distance waits for u of iteration
    i) of all groups' loops: program order within and across steps, data, and the channels' hand-offs."""
    nodes: list[Op] = []
    stage: dict[Op, int] = {}
    edges: list[tuple[Op, Op, int]] = []
    # per (channel, group): its puts / gets / releases in step order (item j of an iteration ↔ j-th op)
    table: dict[tuple, list[Op]] = {}
    for gp in kernel.groups:
        sched = schedules.get(gp.group.id)
        if gp.loop is None or sched is None:
            continue
        order = sched.order
        nodes += order
        stage.update(sched.stage)
        for a, b in zip(order, order[1:]):                    # program order within a step
            edges.append((a, b, sched.stage[a] - sched.stage[b]))
        if order:                                              # ... and into the next step
            edges.append((order[-1], order[0], sched.stage[order[-1]] - sched.stage[order[0]] + 1))
        edges += body_edges(gp)
        for op in gp.loop.body.ops:
            if op.kind in (OpKind.PUT, OpKind.GET, OpKind.CONSUMED):
                table.setdefault((op.kind, id(op.operands[0]), gp.group.id), []).append(op)
    for ch in kernel.channels:
        if ch.region != "loop":
            continue
        m = max(ch.items_per_iter, 1)
        ps = table.get((OpKind.PUT, id(ch.value), ch.producer), [])
        for g in ch.consumers:
            for j, get in enumerate(table.get((OpKind.GET, id(ch.value), g), [])):
                if j < len(ps):                     # (a put `lead` iterations ahead of its item)
                    edges.append((ps[j], get, ch.lead))
            for j, rel in enumerate(table.get((OpKind.CONSUMED, id(ch.value), g), [])):
                if (j + ch.depth) % m < len(ps):
                    edges.append((rel, ps[(j + ch.depth) % m], (j + ch.depth) // m - ch.lead))
    return nodes, stage, edges

