"""The items of a dependence graph (`solve.graph`): its ops, edges, post-loop hand-offs and staging buffers,
and the machine limits it is scheduled against. The module docstring of `solve.graph` says what each field
means to the schedule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

REGISTERS = "registers"


class GraphError(ValueError):
    """The graph or machine description is malformed; the message says what and where."""


@dataclass
class Op:
    """One tile-level operation of the loop body.

    ``variable_latency`` ops (e.g. TMA loads) run on one dedicated warp group that holds nothing
    else.  ``streaming`` ops are variable-latency ops without incoming data: they run ``depth``
    iterations ahead, so the caller gives their out-edges zero delay and their SM-memory footprint is
    reserved ``depth`` times for the whole loop.  ``transfer_cost`` is the latency of handing this
    op's register result to another warp group through shared memory.

    Group occupancy (module docstring): ``issue`` cycles of the group's stream from the op's start;
    ``send_cost`` once on its group when its result goes to another group; ``receive_cost`` on each
    other group consuming it, once per ``channel`` (ops sharing a channel name hand over together;
    empty: the op's own); ``wait_cost`` on its own group when a consumer there waits for it.

    ``stream``: cycles of its group's stream per iteration, at no stated time and with no effect on its
    ``duration`` (Blackwell's own-stream graph: a node's ops, waits and hand-offs one after another); they
    add up with its group's other costs within II.

    ``detached``: an asynchronous op whose completion no wait of its group waits for (a TMA store: its
    group stages the tile during ``issue``, then the copy engine runs it, fire and forget).  For the
    blocking rule it is in flight only while it holds the stream (``issue`` cycles), not ``duration``.
    """

    name: str
    usage: dict[str, int] = field(default_factory=dict)
    footprint: dict[str, int] = field(default_factory=dict)
    variable_latency: bool = False
    streaming: bool = False
    depth: int = 2
    transfer_cost: int = 0
    kind: str = ""
    issue: int = 0
    send_cost: int = 0
    receive_cost: int = 0
    wait_cost: int = 0
    stream: int = 0
    channel: str = ""
    offset: dict[str, int] = field(default_factory=dict)
    handoff: dict[str, int] = field(default_factory=dict)
    segments: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    detached: bool = False

    @property
    def duration(self) -> int:
        """Cycles the op is in flight: until its last unit or stream occupancy ends (at least one)."""
        return max([1, self.issue, *(o + c for u in self.usage for o, c in self.spans(u))])

    @property
    def flight(self) -> int:
        """Cycles from its start in which a blocking op of its group may not start (strictly after the
        start): its whole ``duration``, or only its ``issue`` when ``detached``."""
        return max(1, self.issue) if self.detached else self.duration

    def spans(self, unit: str) -> list[tuple[int, int]]:
        """The (first cycle after the start, cycles) pieces in which the op occupies ``unit``, in order
        (none: not at all)."""
        if unit not in self.usage:
            return []
        if unit in self.segments:
            return list(self.segments[unit])
        return [(self.offset.get(unit, 0), self.usage[unit])]

    @property
    def channel_key(self) -> str:
        """The hand-off this op's result travels in (its own unless it shares a channel)."""
        return self.channel or self.name

    @property
    def registers(self) -> int:
        return self.footprint.get(REGISTERS, 0)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "usage": dict(self.usage)}
        if self.footprint:
            out["footprint"] = dict(self.footprint)
        if self.variable_latency:
            out["variable_latency"] = True
        if self.streaming:
            out["streaming"] = True
            out["depth"] = self.depth
        if self.transfer_cost:
            out["transfer_cost"] = self.transfer_cost
        if self.kind:
            out["kind"] = self.kind
        for key in OCCUPANCY_FIELDS:
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.offset:
            out["offset"] = dict(self.offset)
        if self.handoff:
            out["handoff"] = dict(self.handoff)
        if self.segments:
            out["segments"] = {u: [list(p) for p in ps] for u, ps in self.segments.items()}
        if self.detached:
            out["detached"] = True
        return out


OCCUPANCY_FIELDS = ("issue", "send_cost", "receive_cost", "wait_cost", "stream", "channel")
_OCCUPANCY_CYCLES = OCCUPANCY_FIELDS[:-1]


@dataclass
class Edge:
    """Dependence ``dst[i + distance].start >= src[i].start + delay``.

    ``data`` edges carry ``src``'s result (they extend its lifetime); ordering-only edges (buffer
    reuse, barriers) do not.  ``blocking``: the consumer waits synchronously for the result (wgmma
    wait, tcgen05.ld).  ``transfer``: if the two ends run on different warp groups the value moves
    through shared memory, which adds ``transfer_cost`` cycles (default: the source op's) and a
    blocking wait at ``dst``.  ``memories`` names the parts of a multi-memory result the consumer
    reads (default: all), so e.g. a softmax's statistics in registers can outlive its P in tensor
    memory.  ``operand_registers``: registers per thread of the source's value that ``dst``'s group holds
    while ``dst`` runs (it reads the value into registers: a tile received from another group's slot, or
    its own group's value past the lifetime's end at ``dst``'s start), wherever the two ends run.
    """

    src: str
    dst: str
    delay: int
    distance: int = 0
    data: bool = True
    blocking: bool = False
    transfer: bool = False
    transfer_cost: int | None = None
    memories: tuple[str, ...] | None = None
    hold: int = 0
    operand_registers: int = 0

    def reads(self, memory: str) -> bool:
        """Whether this edge keeps the source's result in ``memory`` alive."""
        return self.data and (self.memories is None or memory in self.memories)

    def to_json(self) -> dict[str, Any]:
        out = {"src": self.src, "dst": self.dst, "delay": self.delay, "distance": self.distance,
               "data": self.data, "blocking": self.blocking, "transfer": self.transfer}
        if self.transfer_cost is not None:
            out["transfer_cost"] = self.transfer_cost
        if self.memories is not None:
            out["memories"] = list(self.memories)
        if self.hold:
            out["hold"] = self.hold
        if self.operand_registers:
            out["operand_registers"] = self.operand_registers
        return out


@dataclass
class PostHandoff:
    """The loop's final value of ``src`` goes, after the loop, to the group of ``dst``: when the two run
    in different groups it takes one slot of ``footprint`` (per SM memory) for the whole kernel."""

    src: str
    dst: str
    footprint: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"src": self.src, "dst": self.dst, "footprint": dict(self.footprint)}


@dataclass
class PostStaging:
    """A buffer ``dst``'s group needs after the loop (a TMA store's staging tile): it takes ``footprint`` (per
    SM memory) for the whole kernel unless, for one of ``hosts``, every op of that host runs in ``dst``'s
    group (then a buffer only that group uses holds it: a tile loaded before the loop that only its readers
    there read, or an earlier store's staging tile of the group)."""

    dst: str
    footprint: dict[str, int]
    hosts: tuple[tuple[str, ...], ...] = ()

    def taken(self, group: dict[str, int]) -> bool:
        """Does the buffer take its own memory under the assignment ``group`` (op -> group)?"""
        return not any(all(group[n] == group[self.dst] for n in host) for host in self.hosts)

    def to_json(self) -> dict[str, Any]:
        return {"dst": self.dst, "footprint": dict(self.footprint), "hosts": [list(h) for h in self.hosts]}


@dataclass
class Machine:
    """Machine-level limits the schedule must respect (the caller supplies the numbers).

    Registers: each used warp group gets an allocation (per thread) that is a multiple of
    ``reg_granularity`` (setmaxnreg steps), covers ``base_registers`` plus the group's peak live
    register footprint, and is at most ``registers_per_thread``; all allocations together times
    ``threads_per_group`` fit in ``registers_per_sm``.

    ``stream_order``: a group's ops also hold its instruction stream one at a time modulo II (their
    windows do not overlap); False states only the per-group sum (issue and hand-offs fit in II), a
    linear constraint over the assignment that keeps large models quick to solve.
    """

    max_groups: int = 4
    registers_per_thread: int = 255
    registers_per_sm: int = 65536
    threads_per_group: int = 128
    reg_granularity: int = 8
    base_registers: int = 0
    memory: dict[str, int] = field(default_factory=dict)
    allow_transfers: bool = True
    stream_order: bool = True

    @property
    def group_register_cap(self) -> int:
        """Largest allocation one group may receive (a granularity multiple)."""
        return self.registers_per_thread // self.reg_granularity * self.reg_granularity

    def to_json(self) -> dict[str, Any]:
        return {"max_groups": self.max_groups, "registers_per_thread": self.registers_per_thread,
                "registers_per_sm": self.registers_per_sm, "threads_per_group": self.threads_per_group,
                "reg_granularity": self.reg_granularity, "base_registers": self.base_registers,
                "memory": dict(self.memory), "allow_transfers": self.allow_transfers,
                "stream_order": self.stream_order}


def _positive_int(value: Any, what: str, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise GraphError(f"{what} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise GraphError(f"{what} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value
