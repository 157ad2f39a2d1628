"""Lower bounds on the initiation interval: ResMII (unit throughput), RecMII (recurrences) and the
warp groups' instruction streams (group occupancy: the ops' issue cycles spread over the groups).

RecMII is the maximum cycle ratio ``sum(delay) / sum(distance)`` over dependence cycles, rounded up.
It is the smallest integer II at which the graph with edge weights ``delay - II * distance`` has no
positive cycle; we binary-search that II with a Bellman-Ford longest-path test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
import math

from .graph import Graph


class RecurrenceError(ValueError):
    """A dependence cycle with zero total distance and positive delay: no II can satisfy it."""

    def __init__(self, cycle: list[str], delay: int):
        self.cycle = cycle
        self.delay = delay
        super().__init__(f"dependence cycle {' -> '.join(cycle + cycle[:1])} has distance 0 and total "
                         f"delay {delay} > 0: no schedule exists at any II")


@dataclass
class Bounds:
    """ResMII and RecMII with the resources / recurrence that bind them."""

    res_mii: int
    rec_mii: int
    res_unit: str | None = None
    rec_cycle: list[str] = field(default_factory=list)
    rec_ratio: Fraction | None = None
    rec_exclusive_mii: int = 0
    rec_exclusive_cycle: list[str] = field(default_factory=list)
    rec_exclusive_ratio: Fraction | None = None
    occupancy_mii: int = 0
    occupancy_reason: str = ""

    @property
    def lower_bound(self) -> int:
        return max(self.res_mii, self.rec_mii, self.rec_exclusive_mii, self.occupancy_mii, 1)

    def reasons(self, graph: Graph) -> list[str]:
        """Human-readable justification of the lower bound."""
        out = []
        if self.res_unit is not None:
            total = sum(op.usage.get(self.res_unit, 0) for op in graph.ops.values())
            users = sum(1 for op in graph.ops.values() if self.res_unit in op.usage)
            out.append(f"ResMII {self.res_mii}: unit {self.res_unit!r} is busy {total} cycles per "
                       f"iteration ({users} ops) with capacity {graph.units[self.res_unit]}")
        if self.rec_cycle:
            out.append(f"RecMII {self.rec_mii}: recurrence {' -> '.join(self.rec_cycle + self.rec_cycle[:1])} "
                       f"has delay/distance ratio {self.rec_ratio}")
        if self.rec_exclusive_cycle:
            cyc = " -> ".join(self.rec_exclusive_cycle + self.rec_exclusive_cycle[:1])
            out.append(f"II >= {self.rec_exclusive_mii}: recurrence {cyc} has ratio "
                       f"{self.rec_exclusive_ratio} once ops sharing a one-instance unit wait for "
                       "each other")
        if self.occupancy_mii > max(self.res_mii, self.rec_mii, self.rec_exclusive_mii):
            out.append(f"II >= {self.occupancy_mii}: {self.occupancy_reason}")
        return out

    def to_json(self) -> dict:
        return {"res_mii": self.res_mii, "rec_mii": self.rec_mii, "res_unit": self.res_unit,
                "rec_cycle": self.rec_cycle,
                "rec_ratio": None if self.rec_ratio is None else str(self.rec_ratio),
                "rec_exclusive_mii": self.rec_exclusive_mii, "rec_exclusive_cycle": self.rec_exclusive_cycle,
                "occupancy_mii": self.occupancy_mii}


def res_mii(graph: Graph) -> tuple[int, str | None]:
    """``max over units ceil(sum usage / capacity)`` and the binding unit (None if no usage)."""
    best, unit = 0, None
    for name, capacity in graph.units.items():
        total = sum(op.usage.get(name, 0) for op in graph.ops.values())
        need = math.ceil(total / capacity)
        if need > best:
            best, unit = need, name
    return best, unit


def _positive_cycle(nodes: list[str], arcs: list[tuple[str, str, int, int]], ii: int) -> list[str] | None:
    """A cycle with positive total weight ``delay - ii * distance``, or None (Bellman-Ford)."""
    dist = {v: 0 for v in nodes}
    pred: dict[str, tuple[str, int] | None] = {v: None for v in nodes}
    changed_node = None
    for _ in range(len(nodes)):
        changed_node = None
        for k, (u, v, d, delta) in enumerate(arcs):
            w = d - ii * delta
            if dist[u] + w > dist[v]:
                dist[v] = dist[u] + w
                pred[v] = (u, k)
                changed_node = v
        if changed_node is None:
            return None
    # Still relaxing after |V| rounds, so the predecessor graph contains a (positive) cycle.
    for start in [changed_node, *nodes]:
        seen: dict[str, int] = {}
        path: list[str] = []
        v: str | None = start
        while v is not None and v not in seen:
            seen[v] = len(path)
            path.append(v)
            v = pred[v][0] if pred[v] is not None else None
        if v is not None:
            cycle = path[seen[v]:]
            cycle.reverse()
            return cycle
    raise AssertionError("Bellman-Ford kept relaxing but no predecessor cycle exists")


def _cycle_totals(cycle: list[str], arcs: list[tuple[str, str, int, int]], ii: int) -> tuple[int, int]:
    """Delay and distance of the heaviest arcs along ``cycle`` at ``ii``."""
    total_d = total_delta = 0
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):
        best = max((arc for arc in arcs if arc[0] == a and arc[1] == b), key=lambda x: x[2] - ii * x[3])
        total_d += best[2]
        total_delta += best[3]
    return total_d, total_delta


def exclusive_delay(graph: Graph, src: str, dst: str, delay: int) -> int:
    """Delay of an edge tightened by unit exclusivity.

    When both ends occupy a unit with one instance and the delay makes ``dst`` take the unit no
    earlier than ``src`` does, ``dst`` cannot take it while ``src`` still holds it, so the edge
    effectively needs ``src``'s occupancy (shifted by the two ops' offsets into the unit).  Only for
    one piece each: ``dst`` may take the unit in a gap between ``src``'s segments.
    """
    if delay < 0:
        return delay
    a, b = graph.ops[src], graph.ops[dst]
    shared = []
    for u in a.usage:
        if u in b.usage and graph.units[u] == 1 and len(a.spans(u)) == len(b.spans(u)) == 1:
            (oa, ca), (ob, _) = a.spans(u)[0], b.spans(u)[0]
            if delay + ob >= oa:
                shared.append(oa + ca - ob)
    return max([delay, *shared])


def _max_ratio(nodes: list[str], arcs: list[tuple[str, str, int, int]]) -> tuple[int, list[str], Fraction | None]:
    if not arcs:
        return 0, [], None
    # At a huge II every cycle with distance >= 1 is negative, so a positive one has distance 0.
    huge = sum(abs(d) for _, _, d, _ in arcs) + 1
    cycle = _positive_cycle(nodes, arcs, huge)
    if cycle is not None:
        raise RecurrenceError(cycle, _cycle_totals(cycle, arcs, huge)[0])
    if _positive_cycle(nodes, arcs, 0) is None:
        return 0, [], None
    lo, hi = 0, huge  # positive cycle at lo, none at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _positive_cycle(nodes, arcs, mid) is None:
            hi = mid
        else:
            lo = mid
    cycle = _positive_cycle(nodes, arcs, lo)
    d, delta = _cycle_totals(cycle, arcs, lo)
    return hi, cycle, Fraction(d, delta)


def rec_mii(graph: Graph) -> tuple[int, list[str], Fraction | None]:
    """RecMII, a binding recurrence (op names) and its exact ratio; raises :class:`RecurrenceError`."""
    return _max_ratio(list(graph.ops), [(e.src, e.dst, e.delay, e.distance) for e in graph.edges])


def rec_mii_exclusive(graph: Graph) -> tuple[int, list[str], Fraction | None]:
    """RecMII with edge delays tightened by :func:`exclusive_delay` (still a lower bound on II)."""
    arcs = [(e.src, e.dst, exclusive_delay(graph, e.src, e.dst, e.delay), e.distance) for e in graph.edges]
    return _max_ratio(list(graph.ops), arcs)


def occupancy_mii(graph: Graph) -> tuple[int, str]:
    """II needed by the warp groups' instruction streams, and why.

    Variable-latency ops share one group; the other ops spread over the remaining groups at best
    evenly, plus the receive cost of every channel that must cross from the variable-latency group.
    No op's issue can exceed II.
    """
    vl = [op for op in graph.ops.values() if op.variable_latency]
    fixed = [op for op in graph.ops.values() if not op.variable_latency]
    groups = graph.machine.max_groups - (1 if vl and fixed else 0)
    best, why = 0, ""
    longest = max(graph.ops.values(), key=lambda op: op.issue)
    if longest.issue:
        best, why = longest.issue, f"op {longest.name} holds its warp group {longest.issue} cycles"
    received = 0
    if vl:
        vl_names = {op.name for op in vl}
        sent = sum(op.send_cost for op in vl if any(e.data and e.dst not in vl_names
                                                    for e in graph.out_edges(op.name)))
        need = sum(op.issue for op in vl) + sent
        if need > best:
            best, why = need, (f"the variable-latency group issues {need} cycles of "
                               f"{', '.join(op.name for op in vl)}")
        channels = {op.channel_key for op in vl
                    if any(e.data and e.dst not in vl_names for e in graph.out_edges(op.name))}
        received = sum(graph.channel_receive_cost(c) for c in channels)
    if groups >= 1 and fixed:
        work = sum(op.issue + op.stream for op in fixed) + received
        need = math.ceil(work / groups)
        if need > best:
            best, why = need, (f"{work} cycles of issue and hand-offs on {groups} warp group(s) "
                               "(each group is one instruction stream)")
    return best, why


def compute_bounds(graph: Graph) -> Bounds:
    """All lower bounds of ``graph``; raises :class:`RecurrenceError` if no II can work."""
    res, unit = res_mii(graph)
    rec, cycle, ratio = rec_mii(graph)
    excl, excl_cycle, excl_ratio = rec_mii_exclusive(graph)
    bounds = Bounds(res, rec, unit if res > 0 else None, cycle, ratio)
    if excl > rec:
        bounds.rec_exclusive_mii, bounds.rec_exclusive_cycle = excl, excl_cycle
        bounds.rec_exclusive_ratio = excl_ratio
    bounds.occupancy_mii, bounds.occupancy_reason = occupancy_mii(graph)
    return bounds
