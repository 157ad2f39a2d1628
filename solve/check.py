"""Independent checker: does a (II, start, group) triple satisfy every rule of the machine model?

It re-derives everything cycle by cycle from the graph, without any solver, so a schedule printed by
``aref solve --json`` can be re-checked by anyone.  The rules (shared by both encodings):

* dependences: ``start[dst] + distance*II >= start[src] + delay`` (+ ``transfer_cost`` of the source
  when a transfer edge crosses groups; crossing is forbidden when the machine disallows transfers);
* units: at every residue modulo II, ops occupying a unit number at most its capacity;
* groups: at most ``max_groups``; variable-latency ops all share one group holding nothing else;
* registers: per group, live register footprints (and the operands its ops hold while they run,
  ``Edge.operand_registers``) at every residue plus ``base_registers``, rounded
  up to ``reg_granularity``, fit ``registers_per_thread``; all groups fit ``registers_per_sm``;
* SM memories: live footprints at every residue plus streaming buffers plus the hand-off channels'
  slots (``Graph.handoff_memory``, pipeline steps counted from the earliest start) fit the capacity;
* group occupancy: ops of one group hold its instruction stream (``issue`` cycles from their
  start, then ``send_cost`` when their result leaves the group) one at a time modulo II (where the
  machine states ``stream_order``), and per group the issue cycles plus the hand-off costs the
  assignment implies (``Graph.handoff_costs``) fit in II;
* blocking: a consumer with a blocking input (or a crossing transfer input) does not start while
  another op of its group is in flight, strictly after the start of some iteration's copy of that op
  and before its end (an op longer than II is in flight at its own start residue too); a detached op
  (``Op.detached``: a fire-and-forget TMA store) is in flight only while it issues.  Starting in the same
  cycle is allowed, which keeps the problem invariant under scaling every cycle count (the premise of
  Twill's cost normalization).

It also measures the objectives: ``channels`` (distinct (value, consuming group) pairs across
groups) and ``mma_waits`` (blocking consumers times the ``mma_units`` their group issues ops on).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .graph import REGISTERS, Graph


def _fold(ii: int) -> list[int]:
    return [0] * (ii + 1)


def _add(diff: list[int], ii: int, start: int, length: int, amount: int) -> None:
    """Add ``amount`` over ``[start, start + length)`` folded modulo ``ii`` (difference array)."""
    if length <= 0 or amount == 0:
        return
    turns, rest = divmod(length, ii)
    if turns:
        diff[0] += turns * amount
        diff[ii] -= turns * amount
    a = start % ii
    if rest:
        if a + rest <= ii:
            diff[a] += amount
            diff[a + rest] -= amount
        else:
            diff[a] += amount
            diff[ii] -= amount
            diff[0] += amount
            diff[a + rest - ii] -= amount


def _peak(diff: list[int], ii: int) -> int:
    level, best = 0, 0
    for t in range(ii):
        level += diff[t]
        best = max(best, level)
    return best


def in_flight(offset: int, ii: int, duration: int) -> bool:
    """Whether some iteration's copy of an op started ``offset`` cycles (mod II) earlier is still in flight.

    Copies start ``offset + k * II`` cycles before; one is in flight when that lies strictly inside
    ``(0, duration)``.  The nearest positive candidate is ``offset mod II``, or a whole II when the
    offset is a multiple of II: an op longer than II overlaps the same residue of the next iteration.
    """
    nearest = offset % ii or ii
    return nearest < duration


@dataclass
class Report:
    """Violations (empty when the schedule is valid) and measured resource peaks."""

    violations: list[str] = field(default_factory=list)
    register_peak: dict[int, int] = field(default_factory=dict)
    register_alloc: dict[int, int] = field(default_factory=dict)
    memory_peak: dict[str, int] = field(default_factory=dict)
    occupancy: dict[int, int] = field(default_factory=dict)
    length: int = 0
    channels: int = 0
    mma_waits: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations


def lifetime_end(graph: Graph, name: str, memory: str, ii: int, start: dict[str, int]) -> int:
    """Start of the last consumer of ``name``'s result in ``memory`` (the end of its lifetime)."""
    ends = [start[e.dst] + e.distance * ii for e in graph.readers(name, memory)]
    return max([start[name], *ends])


def check(graph: Graph, ii: int, start: dict[str, int], group: dict[str, int],
          mma_units: tuple[str, ...] = ("tc",)) -> Report:
    """Check a modulo schedule with warp assignment against every rule; never raises on bad input."""
    rep = Report()
    bad = rep.violations
    mach = graph.machine
    missing = [n for n in graph.ops if n not in start or n not in group]
    if missing or ii < 1:
        bad.append(f"schedule incomplete (missing {missing}) or II {ii} < 1")
        return rep
    rep.length = max(start[n] + op.duration for n, op in graph.ops.items())
    for n, s in start.items():
        if s < 0:
            bad.append(f"op {n} starts at negative cycle {s}")

    def crosses(e) -> bool:
        return group[e.src] != group[e.dst]

    for e in graph.edges:
        need = start[e.src] + e.delay
        if e.transfer and crosses(e):
            if not mach.allow_transfers:
                bad.append(f"transfer {e.src} -> {e.dst} crosses groups but transfers are forbidden")
            need += graph.transfer_cost(e)
        if start[e.dst] + e.distance * ii < need:
            bad.append(f"dependence {e.src} -> {e.dst} (delay {e.delay}, distance {e.distance}) violated")

    for unit, cap in graph.units.items():
        diff = _fold(ii)
        for n, op in graph.ops.items():
            for offset, cycles in op.spans(unit):
                _add(diff, ii, start[n] + offset, cycles, 1)
        if _peak(diff, ii) > cap:
            bad.append(f"unit {unit} over capacity ({_peak(diff, ii)} > {cap})")

    used = sorted(set(group.values()))
    if len(used) > mach.max_groups:
        bad.append(f"{len(used)} warp groups used, machine allows {mach.max_groups}")
    vl_groups = {group[n] for n, op in graph.ops.items() if op.variable_latency}
    fixed_groups = {group[n] for n, op in graph.ops.items() if not op.variable_latency}
    if len(vl_groups) > 1 or vl_groups & fixed_groups:
        bad.append("variable-latency ops must share one group that holds no other op")

    gran = mach.reg_granularity
    for k in used:
        diff = _fold(ii)
        for n, op in graph.ops.items():
            if group[n] == k and graph.has_lifetime(op, REGISTERS):
                _add(diff, ii, start[n], lifetime_end(graph, n, REGISTERS, ii, start) - start[n], op.registers)
        for (src, dst), amount in graph.operand_registers().items():
            if group[dst] == k:
                _add(diff, ii, start[dst], graph.ops[dst].duration, amount)
        rep.register_peak[k] = _peak(diff, ii)
        need = rep.register_peak[k] + mach.base_registers
        rep.register_alloc[k] = -(-need // gran) * gran
        if rep.register_alloc[k] > mach.group_register_cap:
            bad.append(f"group {k} needs {rep.register_alloc[k]} registers per thread "
                       f"(cap {mach.group_register_cap})")
    total = sum(rep.register_alloc.values()) * mach.threads_per_group
    if total > mach.registers_per_sm:
        bad.append(f"groups need {total} registers per SM (limit {mach.registers_per_sm})")

    reserved = graph.reserved_memory()
    first = min(start.values())            # pipeline steps count from the earliest start
    handoff = graph.handoff_memory({n: (s - first) // ii for n, s in start.items()}, group)
    for memory, cap in mach.memory.items():
        diff = _fold(ii)
        for n, op in graph.ops.items():
            if graph.has_lifetime(op, memory):
                _add(diff, ii, start[n], lifetime_end(graph, n, memory, ii, start) - start[n],
                     op.footprint[memory])
        rep.memory_peak[memory] = _peak(diff, ii) + reserved[memory] + handoff[memory]
        if rep.memory_peak[memory] > cap:
            bad.append(f"memory {memory} over capacity ({rep.memory_peak[memory]} > {cap})")

    if graph.occupies():
        handoffs = graph.handoff_costs(group)
        for k in used:
            mine = [n for n in graph.ops if group[n] == k]
            rep.occupancy[k] = sum(graph.ops[n].issue + graph.ops[n].stream for n in mine) + handoffs[k]
            if rep.occupancy[k] > ii:
                bad.append(f"group {k} is busy {rep.occupancy[k]} cycles per iteration (II {ii})")
            if not graph.machine.stream_order:
                continue
            diff = _fold(ii)
            for n in mine:
                _add(diff, ii, start[n], graph.stream_window(n, group), 1)
            if _peak(diff, ii) > 1:
                bad.append(f"ops of group {k} overlap on its instruction stream")

    feeds = {u: {group[n] for n, op in graph.ops.items() if u in op.usage} for u in mma_units}
    for v in graph.ops:
        blocks = any(e.blocking or (e.transfer and crosses(e)) for e in graph.in_edges(v))
        if not blocks:
            continue
        rep.mma_waits += sum(group[v] in groups for groups in feeds.values())
        for o, op in graph.ops.items():
            if o != v and group[o] == group[v] and in_flight(start[v] - start[o], ii, op.flight):
                bad.append(f"blocking op {v} starts while {o} of the same group is in flight")
    rep.channels = len({(e.src, group[e.dst]) for e in graph.edges if e.src != e.dst and crosses(e)})
    return rep
