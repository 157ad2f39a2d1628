"""Oracles for the solver on tiny loops: a second checker that unrolls iterations, and brute-force search.

``unrolled_violations`` states every rule of the machine model on explicit copies of the loop body
(iteration ``k`` starts each op ``k * II`` cycles later) and counts resources cycle by cycle over
one steady-state window.  It shares no code with ``solve.check`` (which folds time modulo II), so the
two checkers cross-check each other.  ``brute_force_ii`` enumerates every start vector and warp
assignment within a stage bound and returns the smallest II that has a valid one.
"""

from __future__ import annotations

import itertools
import math

from solve import REGISTERS, Graph, check


def _copies(graph: Graph, ii: int, start: dict[str, int]) -> range:
    """Iteration indices whose copies can touch the window ``[0, II)`` of iteration 0's timeline."""
    longest = max(start[n] + op.duration for n, op in graph.ops.items())
    longest = max([longest] + [start[e.dst] + e.distance * ii for e in graph.edges])
    back = math.ceil(longest / ii) + 2
    return range(-back, back + 1)


def _lifetime_end(graph: Graph, name: str, memory: str, ii: int, start: dict[str, int]) -> int:
    ends = [start[e.dst] + e.distance * ii for e in graph.edges
            if e.src == name and e.data and (e.memories is None or memory in e.memories)]
    return max([start[name]] + ends)


def _occupied(spans: list[tuple[int, int, int]], ii: int, copies: range) -> int:
    """Peak over cycles ``0..II-1`` of the summed amounts of spans ``(begin, end, amount)`` and their copies."""
    peak = 0
    for t in range(ii):
        level = 0
        for begin, end, amount in spans:
            for k in copies:
                if begin + k * ii <= t < end + k * ii:
                    level += amount
        peak = max(peak, level)
    return peak


def _channel_memory(graph: Graph, ii: int, start: dict[str, int], group: dict[str, int]) -> dict[str, int]:
    """SM memory of the hand-off channels, from the pipeline steps of iteration 0's copies (step ``t // II``
    of the timeline that starts at the earliest op): a value's slot is taken from its producer's step until
    the step each consumer in another group releases it (the consumer of iteration ``distance``, ``hold``
    steps later); the channel has one slot per step of that span. A post-loop hand-off between groups
    takes one slot."""
    first = min(start.values())
    out: dict[str, int] = {}
    for n, op in graph.ops.items():
        crossing = [e for e in graph.edges if e.src == n and e.dst != n and e.transfer and group[e.dst] != group[n]]
        if not crossing:
            continue
        made = (start[n] - first) // ii
        steps = {made}
        for e in crossing:
            released = (start[e.dst] + e.distance * ii - first) // ii + e.hold
            steps |= set(range(made, released + 1))
        for memory, amount in op.handoff.items():
            out[memory] = out.get(memory, 0) + amount * len(steps)
    for ph in graph.post_handoffs:
        if group[ph.src] != group[ph.dst]:
            for memory, amount in ph.footprint.items():
                out[memory] = out.get(memory, 0) + amount
    for ps in graph.post_staging:          # unless a host runs wholly in dst's group
        if not any(all(group[n] == group[ps.dst] for n in host) for host in ps.hosts):
            for memory, amount in ps.footprint.items():
                out[memory] = out.get(memory, 0) + amount
    return out


def unrolled_violations(graph: Graph, ii: int, start: dict[str, int], group: dict[str, int]) -> list[str]:
    """Every rule broken by the schedule, derived on unrolled iterations (names of the rules only)."""
    bad: list[str] = []
    mach = graph.machine
    copies = _copies(graph, ii, start)
    if any(s < 0 for s in start.values()):
        bad.append("negative start")
    for e in graph.edges:
        need = e.delay
        if e.transfer and group[e.src] != group[e.dst]:
            if not mach.allow_transfers:
                bad.append("transfer forbidden")
            need += graph.transfer_cost(e)
        if start[e.dst] + e.distance * ii - start[e.src] < need:
            bad.append(f"dependence {e.src}->{e.dst}")
    for unit, cap in graph.units.items():
        spans = [(start[n] + o, start[n] + o + c, 1) for n, op in graph.ops.items() if unit in op.usage
                 for o, c in _pieces(op, unit)]
        if _occupied(spans, ii, copies) > cap:
            bad.append(f"unit {unit}")
    used = set(group.values())
    if len(used) > mach.max_groups:
        bad.append("groups")
    vl = {group[n] for n, op in graph.ops.items() if op.variable_latency}
    fixed = {group[n] for n, op in graph.ops.items() if not op.variable_latency}
    if len(vl) > 1 or vl & fixed:
        bad.append("variable-latency group")
    allocs = []
    for k in used:
        spans = [(start[n], _lifetime_end(graph, n, REGISTERS, ii, start), op.registers)
                 for n, op in graph.ops.items() if group[n] == k and graph.has_lifetime(op, REGISTERS)]
        # operands a consumer holds in registers while it runs
        spans += [(start[e.dst], start[e.dst] + graph.ops[e.dst].duration, e.operand_registers)
                  for e in graph.edges if e.operand_registers and group[e.dst] == k
                  and e is max((f for f in graph.edges if (f.src, f.dst) == (e.src, e.dst)),
                               key=lambda f: f.operand_registers)]
        need = _occupied(spans, ii, copies) + mach.base_registers
        alloc = math.ceil(need / mach.reg_granularity) * mach.reg_granularity
        allocs.append(alloc)
        if alloc > mach.group_register_cap:
            bad.append(f"registers of group {k}")
    if sum(allocs) * mach.threads_per_group > mach.registers_per_sm:
        bad.append("registers per SM")
    channels = _channel_memory(graph, ii, start, group)
    for memory, cap in mach.memory.items():
        reserved = sum(op.footprint.get(memory, 0) * op.depth for op in graph.ops.values() if op.streaming)
        spans = [(start[n], _lifetime_end(graph, n, memory, ii, start), op.footprint[memory])
                 for n, op in graph.ops.items() if graph.has_lifetime(op, memory)]
        if _occupied(spans, ii, copies) + reserved + channels.get(memory, 0) > cap:
            bad.append(f"memory {memory}")
    bad += _occupancy_violations(graph, ii, start, group, copies)
    for v in graph.ops:
        blocks = any(e.blocking or (e.transfer and group[e.src] != group[e.dst])
                     for e in graph.edges if e.dst == v)
        if not blocks:
            continue
        for o, op in graph.ops.items():
            if o == v or group[o] != group[v]:
                continue
            flight = max(1, op.issue) if op.detached else op.duration     # a detached op: its issue only
            if any(start[o] + k * ii < start[v] < start[o] + k * ii + flight for k in copies):
                bad.append(f"blocking {v} inside {o}")
    return bad


def _occupancy_violations(graph: Graph, ii: int, start: dict[str, int], group: dict[str, int],
                          copies: range) -> list[str]:
    """One instruction stream per group: its ops' spans (issue, then the send of a result leaving the
    group) never overlap, and per iteration the
    issue cycles plus the hand-offs (a send per result leaving, a receive per channel and
    consuming group, a wait per source waited for inside the group) fit in II."""
    bad = []
    for k in set(group.values()):
        ops = [(n, op) for n, op in graph.ops.items() if group[n] == k]
        def window(n, op):
            leaves = any(e.src == n and e.data and e.dst != n and group[e.dst] != k for e in graph.edges)
            return op.issue + (op.send_cost if leaves else 0)
        spans = [(start[n], start[n] + window(n, op), 1) for n, op in ops if window(n, op)]
        if spans and _occupied(spans, ii, copies) > 1:
            bad.append(f"stream of group {k}")
        busy = sum(op.issue for _, op in ops)
        for n, op in graph.ops.items():
            outs = [e for e in graph.edges if e.src == n and e.data and e.dst != n]
            if group[n] == k and any(group[e.dst] != k for e in outs):
                busy += op.send_cost
            if group[n] == k and any(e.blocking and group[e.dst] == k for e in outs):
                busy += op.wait_cost
        channels = {}
        for n, op in graph.ops.items():
            channels.setdefault(op.channel or n, []).append(n)
        for members in channels.values():
            if any(group[e.dst] == k and group[e.src] != k for e in graph.edges
                   if e.src in members and e.data and e.dst != e.src):
                busy += max(graph.ops[n].receive_cost for n in members)
        if busy > ii:
            bad.append(f"occupancy of group {k}")
    return bad


def _partitions(n: int, most: int):
    """Warp assignments up to renaming the groups (restricted growth strings with at most ``most`` groups)."""
    def grow(prefix: list[int], top: int):
        if len(prefix) == n:
            yield tuple(prefix)
            return
        for k in range(min(top + 2, most)):
            yield from grow(prefix + [k], max(top, k))
    yield from grow([], -1)


def _pieces(op, unit: str) -> list:
    """The (offset, cycles) pieces of the op's use of ``unit``: its segments, else one from its offset."""
    return op.segments.get(unit) or [(op.offset.get(unit, 0), op.usage[unit])]


def _group_free_ok(graph: Graph, ii: int, start: dict[str, int]) -> bool:
    """Rules that hold whatever the warp assignment: dependences (without transfers), units."""
    for e in graph.edges:
        if start[e.dst] + e.distance * ii - start[e.src] < e.delay:
            return False
    for unit, cap in graph.units.items():
        count = [0] * ii
        for n, op in graph.ops.items():
            for o, cycles in _pieces(op, unit) if unit in op.usage else []:
                for c in range(cycles):
                    count[(start[n] + o + c) % ii] += 1
        if max(count) > cap:
            return False
    return True


def brute_force(graph: Graph, ii: int, stages: int, cross_check: bool = True):
    """A valid (start, group) pair at ``ii`` within ``stages * ii`` cycles, or None.

    With ``cross_check``, every candidate that passes the assignment-free rules is judged by both
    checkers, and a disagreement raises ``AssertionError`` naming the schedule.
    """
    names = list(graph.ops)
    horizon = stages * ii
    ranges = [range(0, horizon - graph.ops[n].duration + 1) for n in names]
    assigns = list(_partitions(len(names), graph.machine.max_groups))
    for starts in itertools.product(*ranges):
        if min(starts) != 0:
            continue
        start = dict(zip(names, starts))
        if not _group_free_ok(graph, ii, start):
            continue
        for assign in assigns:
            group = dict(zip(names, assign))
            ok = check(graph, ii, start, group).ok
            if cross_check:
                other = unrolled_violations(graph, ii, start, group)
                assert ok == (not other), (ii, start, group, check(graph, ii, start, group).violations, other)
            if ok:
                return start, group
    return None


def brute_force_ii(graph: Graph, stages: int, lower: int, upper: int, cross_check: bool = True):
    """Smallest II in ``lower..upper`` with any valid (start, group) pair within the stage bound."""
    for ii in range(lower, upper + 1):
        if brute_force(graph, ii, stages, cross_check) is not None:
            return ii
    return None
