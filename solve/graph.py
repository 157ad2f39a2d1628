"""Dependence graph of one loop iteration plus the machine limits it is scheduled against.

An op occupies each functional unit named in its ``usage`` for that many cycles from its start cycle
(one instance of the unit each cycle), or from ``offset[unit]`` cycles after its start (a store that
stages its tile before the copy engine takes it), or in ``segments[unit]``: (offset, cycles) pieces that
add up to the usage — a reservation table, as a fused CUDA-core node that runs a tensor-memory load, a row
max on the FMA pipe, exponentials on the MUFU and a row sum on the FMA pipe again, one after another.  An edge ``(src, dst, delay, distance)`` says that ``dst`` of
iteration ``i + distance`` starts at least ``delay`` cycles after ``src`` of iteration ``i``.

A warp group is one instruction stream.  An op holds its group's stream for ``issue`` cycles from its
start (a synchronous op all its run, an asynchronous MMA or copy only its issue), then for its
``send_cost`` when its result leaves the group; no two ops of a group hold the stream at once,
modulo II (unless the machine drops ``stream_order``: then only the per-group sum below holds).  Handing results between groups costs stream time too:
``send_cost`` on the producer's group when the result leaves it, ``receive_cost`` on every other
group that consumes it (once per ``channel``), and ``wait_cost`` on the consumer's own group for a
blocking wait inside the group.  An op's ``stream``: cycles its group's stream runs it per iteration, at no
stated time (a node's own instruction stream, which its recurrence bounds alone).  Per group, all of it fits
in II ("group occupancy").  Zero costs
(the default) leave an op out of this rule, which gives Twill's model.

The result of an op occupies memory while it is live: from the op's start until the start of its
last consumer (a data edge with distance ``k`` reaches the consumer ``k`` iterations later).
``footprint["registers"]`` is per thread and counts against the warp group that runs the producer;
a consumer that reads the value into registers (``Edge.operand_registers``: a tile received from another
group's slot, or its own group's) holds that many more in its own group while it runs, wherever the
producer runs;
every other footprint key names an SM-wide memory declared in :class:`Machine.memory`
(e.g. ``"smem"`` bytes, ``"tmem"`` columns).

A result handed to another warp group travels in a channel whose slots take SM memory for the whole
loop: ``handoff[memory]`` per slot.  The lowering keeps as many slots as pipeline steps a consumer in
another group holds one: ``stage(dst) + distance + hold - stage(src) + 1`` over the crossing transfer
edges (``hold``: steps after its own that the consumer releases the slot, e.g. an asynchronous MMA
reader).  A post-loop hand-off (``post_handoffs``: the loop's final value of ``src`` read after the
loop by work placed with ``dst``) takes one slot whenever the two run in different groups.  A post-loop
staging buffer (``post_staging``: a TMA store's staging tile after the loop, stored by ``dst``'s group) takes
its memory for the whole kernel unless one of its ``hosts`` — each a set of ops — runs wholly in ``dst``'s
group (an idle buffer only that group uses then holds it).
"""

from __future__ import annotations

import json
import math
from typing import Any

from . import reservation
from .graph_items import (OCCUPANCY_FIELDS, REGISTERS, Edge, GraphError, Machine, Op,  # noqa: F401
                          PostHandoff, PostStaging, _OCCUPANCY_CYCLES, _positive_int)



class Graph:
    """Ops, dependence edges, functional units with capacities, and machine limits."""

    def __init__(self, units: dict[str, int] | None = None, machine: Machine | None = None,
                 name: str = ""):
        self.name = name
        self.units: dict[str, int] = {}
        self.ops: dict[str, Op] = {}
        self.edges: list[Edge] = []
        self.post_handoffs: list[PostHandoff] = []
        self.post_staging: list[PostStaging] = []
        self.machine = machine if machine is not None else Machine()
        for unit, capacity in (units or {}).items():
            self.add_unit(unit, capacity)

    # ----------------------------------------------------------------------------- building
    def add_unit(self, name: str, capacity: int = 1) -> None:
        """Declare functional unit ``name`` with ``capacity`` instances per SM."""
        if not isinstance(name, str) or not name:
            raise GraphError(f"unit name must be a non-empty string, got {name!r}")
        self.units[name] = _positive_int(capacity, f"capacity of unit {name!r}")

    def add_op(self, name: str, usage: dict[str, int] | None = None, *,
               footprint: dict[str, int] | None = None, variable_latency: bool = False,
               streaming: bool = False, depth: int = 2, transfer_cost: int = 0,
               kind: str = "", issue: int = 0, send_cost: int = 0, receive_cost: int = 0,
               wait_cost: int = 0, stream: int = 0, channel: str = "", offset: dict[str, int] | None = None,
               handoff: dict[str, int] | None = None,
               segments: dict[str, list[tuple[int, int]]] | None = None, detached: bool = False) -> Op:
        """Add an op; ``usage`` maps declared units to occupied cycles from the op's start (plus
        ``offset[unit]``, default 0), or in the pieces ``segments[unit]`` = [(offset, cycles), ...]
        (in order, apart, adding up to ``usage[unit]``).

        ``issue``, ``send_cost``, ``receive_cost``, ``wait_cost``, ``stream`` and ``channel`` describe its
        group occupancy (see :class:`Op`); ``handoff`` the SM memory per slot of a channel handing
        its result to another group (module docstring); ``detached`` marks a fire-and-forget op
        (see :class:`Op`).
        """
        if not isinstance(name, str) or not name:
            raise GraphError(f"op name must be a non-empty string, got {name!r}")
        if name in self.ops:
            raise GraphError(f"op {name!r} is already in the graph")
        usage = dict(usage or {})
        for unit, cycles in usage.items():
            if unit not in self.units:
                raise GraphError(f"op {name!r} uses unit {unit!r}, which is not declared "
                                 f"(declared units: {sorted(self.units) or 'none'}); call add_unit first")
            _positive_int(cycles, f"usage of unit {unit!r} by op {name!r}")
        footprint = dict(footprint or {})
        for memory, amount in footprint.items():
            _positive_int(amount, f"footprint of op {name!r} in {memory!r}", allow_zero=True)
            if memory != REGISTERS and memory not in self.machine.memory:
                raise GraphError(f"op {name!r} has a footprint in memory {memory!r}, but the machine "
                                 f"declares no capacity for it (machine.memory = {self.machine.memory})")
        if streaming and footprint.get(REGISTERS, 0):
            raise GraphError(f"streaming op {name!r} cannot hold a register result: streaming ops "
                             "run ahead on their own group and deliver into SM memory")
        _positive_int(depth, f"pipeline depth of op {name!r}")
        _positive_int(transfer_cost, f"transfer cost of op {name!r}", allow_zero=True)
        costs = {"issue": issue, "send_cost": send_cost, "receive_cost": receive_cost, "wait_cost": wait_cost,
                 "stream": stream}
        for key, value in costs.items():
            _positive_int(value, f"{key.replace('_', ' ')} of op {name!r}", allow_zero=True)
        if not isinstance(channel, str):
            raise GraphError(f"channel of op {name!r} must be a string, got {channel!r}")
        offset = {u: o for u, o in (offset or {}).items() if o}
        for unit, cycles in offset.items():
            if unit not in usage:
                raise GraphError(f"op {name!r} has an offset for unit {unit!r}, which it does not use")
            _positive_int(cycles, f"offset of unit {unit!r} in op {name!r}", allow_zero=True)
        handoff = {k: v for k, v in self._sm_amounts(handoff, f"hand-off of op {name!r}").items() if v}
        pieces = reservation.pieces(name, usage, offset, segments)
        op = Op(name, usage, {k: v for k, v in footprint.items() if v}, variable_latency or streaming,
                streaming, depth, transfer_cost, kind, channel=channel, offset=offset, handoff=handoff,
                segments=pieces, detached=bool(detached), **costs)
        self.ops[name] = op
        return op

    def add_edge(self, src: str, dst: str, delay: int, distance: int = 0, *, data: bool = True,
                 blocking: bool = False, transfer: bool | None = None,
                 transfer_cost: int | None = None, memories: tuple[str, ...] | list[str] | None = None,
                 hold: int = 0, operand_registers: int = 0) -> Edge:
        """Add dependence ``dst[i + distance]`` starts ``>= delay`` cycles after ``src[i]``.

        ``transfer`` defaults to True for data edges whose source has a register result;
        ``transfer_cost`` overrides the source op's cost for this edge (e.g. a small part of it).
        """
        for end in (src, dst):
            if end not in self.ops:
                raise GraphError(f"edge {src!r} -> {dst!r}: unknown op {end!r} (add_op it first)")
        if isinstance(delay, bool) or not isinstance(delay, int):
            raise GraphError(f"edge {src!r} -> {dst!r}: delay must be an integer, got {delay!r}")
        _positive_int(distance, f"edge {src!r} -> {dst!r}: distance", allow_zero=True)
        if data and delay < 0:
            raise GraphError(f"edge {src!r} -> {dst!r}: a data edge cannot have a negative delay "
                             f"({delay}); use data=False for ordering constraints")
        if data and self.ops[dst].streaming:
            raise GraphError(f"edge {src!r} -> {dst!r}: streaming op {dst!r} cannot consume data "
                             "(streaming ops have no incoming data dependences)")
        if memories is not None:
            memories = tuple(memories)
            missing = [m for m in memories if m not in self.ops[src].footprint]
            if missing or not data:
                raise GraphError(f"edge {src!r} -> {dst!r}: memories {list(memories)} must be footprints "
                                 f"of {src!r} ({sorted(self.ops[src].footprint)}) on a data edge")
        if transfer is None:
            transfer = data and self.ops[src].registers > 0 and (memories is None or REGISTERS in memories)
        if transfer and not data:
            raise GraphError(f"edge {src!r} -> {dst!r}: only data edges can transfer a value")
        if transfer_cost is not None:
            _positive_int(transfer_cost, f"edge {src!r} -> {dst!r}: transfer cost", allow_zero=True)
        _positive_int(hold, f"edge {src!r} -> {dst!r}: hold", allow_zero=True)
        _positive_int(operand_registers, f"edge {src!r} -> {dst!r}: operand registers", allow_zero=True)
        if operand_registers and not data:
            raise GraphError(f"edge {src!r} -> {dst!r}: only data edges bring an operand into registers")
        edge = Edge(src, dst, delay, distance, bool(data), bool(blocking), bool(transfer), transfer_cost,
                    memories, hold, operand_registers)
        self.edges.append(edge)
        return edge

    def operand_registers(self) -> dict[tuple[str, str], int]:
        """{(src, dst): registers per thread} that ``dst``'s group holds while ``dst`` runs (the most any
        edge between the two names)."""
        out: dict[tuple[str, str], int] = {}
        for e in self.edges:
            if e.operand_registers:
                out[e.src, e.dst] = max(out.get((e.src, e.dst), 0), e.operand_registers)
        return out

    def add_post_handoff(self, src: str, dst: str, footprint: dict[str, int]) -> PostHandoff:
        """After the loop, ``src``'s final value goes to ``dst``'s group (see :class:`PostHandoff`)."""
        for end in (src, dst):
            if end not in self.ops:
                raise GraphError(f"post-loop hand-off {src!r} -> {dst!r}: unknown op {end!r}")
        ph = PostHandoff(src, dst, self._sm_amounts(footprint, f"post-loop hand-off {src!r} -> {dst!r}"))
        self.post_handoffs.append(ph)
        return ph

    def add_post_staging(self, dst: str, footprint: dict[str, int],
                         hosts: list[list[str]] | tuple = ()) -> PostStaging:
        """After the loop, ``dst``'s group needs a buffer of ``footprint`` unless a host holds it (see
        :class:`PostStaging`)."""
        for end in [dst] + [n for h in hosts for n in h]:
            if end not in self.ops:
                raise GraphError(f"post-loop staging of {dst!r}: unknown op {end!r}")
        ps = PostStaging(dst, self._sm_amounts(footprint, f"post-loop staging of {dst!r}"),
                         tuple(tuple(h) for h in hosts if h))
        self.post_staging.append(ps)
        return ps

    def _sm_amounts(self, amounts: dict[str, int] | None, what: str) -> dict[str, int]:
        amounts = dict(amounts or {})
        for memory, amount in amounts.items():
            _positive_int(amount, f"{what} in {memory!r}", allow_zero=True)
            if memory not in self.machine.memory:
                raise GraphError(f"{what} takes memory {memory!r}, but the machine declares no capacity for "
                                 f"it (machine.memory = {self.machine.memory})")
        return amounts

    # ----------------------------------------------------------------------------- queries
    def in_edges(self, name: str) -> list[Edge]:
        return [e for e in self.edges if e.dst == name]

    def out_edges(self, name: str) -> list[Edge]:
        return [e for e in self.edges if e.src == name]

    def data_out_edges(self, name: str) -> list[Edge]:
        return [e for e in self.edges if e.src == name and e.data]

    def transfer_cost(self, edge: Edge) -> int:
        """Cycles added to ``edge`` when it crosses warp groups (0 unless it transfers a value)."""
        if not edge.transfer:
            return 0
        return self.ops[edge.src].transfer_cost if edge.transfer_cost is None else edge.transfer_cost

    def may_block(self, name: str) -> bool:
        """Whether the op can need a blocking wait (a blocking input, or a transfer input)."""
        return any(e.blocking or e.transfer for e in self.in_edges(name))

    def always_blocks(self, name: str) -> bool:
        return any(e.blocking for e in self.in_edges(name))

    def handoff_edges(self, name: str) -> list[Edge]:
        """Transfer edges along which ``name``'s result may leave its group in a channel with slots."""
        return [e for e in self.edges if e.src == name and e.transfer and e.dst != name] \
            if self.ops[name].handoff else []

    def handoff_slots(self, name: str, stage: dict[str, int], group: dict[str, int]) -> int:
        """Slots of the channel handing ``name``'s result to other groups (0 if it stays in its group)."""
        return max([0] + [max(1, stage[e.dst] + e.distance + e.hold - stage[name] + 1)
                          for e in self.handoff_edges(name) if group[e.dst] != group[name]])

    def handoff_memory(self, stage: dict[str, int], group: dict[str, int]) -> dict[str, int]:
        """SM memory the channels of hand-offs between groups take under a schedule (module docstring)."""
        out = {m: 0 for m in self.machine.memory}
        for n, op in self.ops.items():
            slots = self.handoff_slots(n, stage, group) if op.handoff else 0
            for memory, amount in op.handoff.items():
                out[memory] += amount * slots
        for ph in self.post_handoffs:
            if group[ph.src] != group[ph.dst]:
                for memory, amount in ph.footprint.items():
                    out[memory] += amount
        for ps in self.post_staging:
            if ps.taken(group):
                for memory, amount in ps.footprint.items():
                    out[memory] += amount
        return out

    def reserved_memory(self) -> dict[str, int]:
        """SM memory held for the whole loop by streaming ops' ``depth``-deep buffers."""
        out = {m: 0 for m in self.machine.memory}
        for op in self.ops.values():
            if op.streaming:
                for memory, amount in op.footprint.items():
                    out[memory] += amount * op.depth
        return out

    def readers(self, name: str, memory: str) -> list[Edge]:
        """Edges that keep ``name``'s result in ``memory`` alive."""
        return [e for e in self.edges if e.src == name and e.reads(memory)]

    def has_lifetime(self, op: Op, memory: str) -> bool:
        """Whether the op's result occupies ``memory`` for a schedule-dependent lifetime."""
        return not op.streaming and op.footprint.get(memory, 0) > 0 and bool(self.readers(op.name, memory))

    def lifetimes(self) -> list[tuple[str, str]]:
        """(op, memory) pairs whose occupancy depends on the schedule."""
        return [(n, m) for n, op in self.ops.items() for m in op.footprint if self.has_lifetime(op, m)]

    def occupies(self) -> bool:
        """Whether any op states group-occupancy costs (else the rule is vacuous)."""
        return any(getattr(op, key) for op in self.ops.values() for key in _OCCUPANCY_CYCLES)

    def handoff_costs(self, group: dict[str, int]) -> dict[int, int]:
        """Per group: cycles of hand-offs the assignment ``group`` (op -> group) implies.

        The producer's group pays ``send_cost`` once when a data edge leaves it; each other group
        consuming the result pays ``receive_cost`` once per channel; a blocking edge inside a
        group costs that group the source's ``wait_cost`` once per source.
        """
        out = {k: 0 for k in set(group.values())}
        sent: set[str] = set()
        received: set[tuple[str, int]] = set()
        waited: set[tuple[str, int]] = set()
        for e in self.edges:
            src, k_src, k_dst = self.ops[e.src], group[e.src], group[e.dst]
            if not e.data or e.src == e.dst:
                continue
            if k_src != k_dst:
                if e.src not in sent:
                    sent.add(e.src)
                    out[k_src] += src.send_cost
                key = (src.channel_key, k_dst)
                if key not in received:
                    received.add(key)
                    out[k_dst] += self.channel_receive_cost(src.channel_key)
            elif e.blocking and (e.src, k_dst) not in waited:
                waited.add((e.src, k_dst))
                out[k_dst] += src.wait_cost
        return out

    def sends(self, name: str, group: dict[str, int]) -> bool:
        """Whether op ``name``'s result leaves its group under the assignment ``group``."""
        return any(e.data and e.dst != name and group[e.dst] != group[name] for e in self.out_edges(name))

    def stream_window(self, name: str, group: dict[str, int]) -> int:
        """Cycles op ``name`` holds its group's stream from its start: issue, then any send."""
        op = self.ops[name]
        return op.issue + (op.send_cost if op.send_cost and self.sends(name, group) else 0)

    def channel_receive_cost(self, channel: str) -> int:
        """What a group pays to receive ``channel`` (the largest receive cost of its ops)."""
        return max(op.receive_cost for op in self.ops.values() if op.channel_key == channel)

    def cycle_costs(self) -> list[int]:
        """Every cycle count in the graph (usages, edge delays, transfer and occupancy costs)."""
        costs = [c for op in self.ops.values() for c in op.usage.values()]
        costs += [c for op in self.ops.values() for c in op.offset.values()]
        costs += [c for op in self.ops.values() for ps in op.segments.values() for p in ps for c in p]
        costs += [abs(e.delay) for e in self.edges]
        costs += [op.transfer_cost for op in self.ops.values()]
        costs += [getattr(op, key) for op in self.ops.values() for key in _OCCUPANCY_CYCLES]
        costs += [e.transfer_cost for e in self.edges if e.transfer_cost]
        return [c for c in costs if c > 0]

    def validate(self) -> None:
        """Check whole-graph consistency; raise :class:`GraphError` naming the problem."""
        if not self.ops:
            raise GraphError("the graph has no ops")
        m = self.machine
        _positive_int(m.max_groups, "machine.max_groups")
        _positive_int(m.reg_granularity, "machine.reg_granularity")
        _positive_int(m.threads_per_group, "machine.threads_per_group")
        _positive_int(m.registers_per_sm, "machine.registers_per_sm")
        _positive_int(m.registers_per_thread, "machine.registers_per_thread")
        _positive_int(m.base_registers, "machine.base_registers", allow_zero=True)
        for memory, cap in m.memory.items():
            if memory == REGISTERS:
                raise GraphError("machine.memory must not declare 'registers' (registers are per group)")
            _positive_int(cap, f"machine.memory[{memory!r}]", allow_zero=True)
        has_vl = any(op.variable_latency for op in self.ops.values())
        has_fixed = any(not op.variable_latency for op in self.ops.values())
        if has_vl and has_fixed and m.max_groups < 2:
            raise GraphError("variable-latency ops need their own warp group, but machine.max_groups "
                             f"is {m.max_groups}")
        for memory, amount in self.reserved_memory().items():
            if amount > m.memory[memory]:
                raise GraphError(f"streaming buffers need {amount} of {memory!r} but the machine has "
                                 f"{m.memory[memory]}")

    # ----------------------------------------------------------------------------- JSON
    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict: ``{"units", "ops", "edges", "machine", "name"}`` (public contract)."""
        return {"name": self.name, "units": dict(self.units),
                "ops": [op.to_json() for op in self.ops.values()],
                "edges": [e.to_json() for e in self.edges], "machine": self.machine.to_json(),
                **({"post_handoffs": [p.to_json() for p in self.post_handoffs]} if self.post_handoffs else {}),
                **({"post_staging": [p.to_json() for p in self.post_staging]} if self.post_staging else {})}

    def dumps(self, **kwargs: Any) -> str:
        return json.dumps(self.to_json(), **kwargs)

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> "Graph":
        """Rebuild a graph from :meth:`to_json` output (a dict or a JSON string)."""
        if isinstance(data, str):
            data = json.loads(data)
        if not isinstance(data, dict) or "ops" not in data or "units" not in data:
            raise GraphError("graph JSON must be an object with 'units' and 'ops' (and 'edges')")
        known_machine = set(Machine.__dataclass_fields__)
        machine_data = data.get("machine", {})
        unknown = set(machine_data) - known_machine
        if unknown:
            raise GraphError(f"unknown machine keys {sorted(unknown)}")
        graph = cls(dict(data["units"]), Machine(**machine_data), name=data.get("name", ""))
        for op in data["ops"]:
            try:
                graph.add_op(op["name"], op.get("usage", {}), footprint=op.get("footprint"),
                             variable_latency=op.get("variable_latency", False),
                             streaming=op.get("streaming", False), depth=op.get("depth", 2),
                             transfer_cost=op.get("transfer_cost", 0), kind=op.get("kind", ""),
                             offset=op.get("offset"), handoff=op.get("handoff"), segments=op.get("segments"),
                             detached=op.get("detached", False),
                             **{key: op[key] for key in OCCUPANCY_FIELDS if key in op})
            except KeyError as exc:
                raise GraphError(f"op entry {op!r} lacks key {exc}") from None
        for e in data.get("edges", []):
            try:
                graph.add_edge(e["src"], e["dst"], e["delay"], e.get("distance", 0),
                               data=e.get("data", True), blocking=e.get("blocking", False),
                               transfer=e.get("transfer"), transfer_cost=e.get("transfer_cost"),
                               memories=e.get("memories"), hold=e.get("hold", 0),
                               operand_registers=e.get("operand_registers", 0))
            except KeyError as exc:
                raise GraphError(f"edge entry {e!r} lacks key {exc}") from None
        for ph in data.get("post_handoffs", []):
            graph.add_post_handoff(ph["src"], ph["dst"], ph.get("footprint", {}))
        for ps in data.get("post_staging", []):
            graph.add_post_staging(ps["dst"], ps.get("footprint", {}), ps.get("hosts", []))
        return graph

    def copy(self) -> "Graph":
        return Graph.from_json(self.to_json())

    def scaled(self, mapping: dict[int, int]) -> "Graph":
        """A copy with every cycle count ``c`` replaced by ``mapping[c]`` (cost normalization)."""
        data = self.to_json()
        for op in data["ops"]:
            op["usage"] = {u: mapping[c] for u, c in op["usage"].items()}
            if op.get("offset"):
                op["offset"] = {u: mapping[c] for u, c in op["offset"].items()}
            if op.get("segments"):
                # mapped pieces keep their order but may now touch or add up differently: merge, re-add
                op["segments"] = {u: reservation.merged([(mapping.get(o, 0), mapping[c]) for o, c in ps])
                                  for u, ps in op["segments"].items()}
                op["usage"].update({u: sum(c for _, c in ps) for u, ps in op["segments"].items()})
            for key in ("transfer_cost", *_OCCUPANCY_CYCLES):
                if op.get(key):
                    op[key] = mapping[op[key]]
        for e in data["edges"]:
            if e["delay"]:
                e["delay"] = int(math.copysign(mapping[abs(e["delay"])], e["delay"]))
            if e.get("transfer_cost"):
                e["transfer_cost"] = mapping[e["transfer_cost"]]
        return Graph.from_json(data)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.ops)} ops, {len(self.edges)} edges, units={self.units})"


def round_up_to_quantum(g: Graph, q: int) -> None:
    """Every cycle count of the graph rounded up to a multiple of `q` (never shortened: a schedule of the
    rounded graph is valid for the exact one; a unit's pieces grow outwards, to whole quanta from the node's
    start, and join where they then touch)."""
    if q <= 1:
        return

    def up(x: int) -> int:
        return -(-x // q) * q if x > 0 else x

    for op in g.ops.values():
        for u, pieces in op.segments.items():
            grown = [(o // q * q, up(o + c) - o // q * q) for o, c in pieces]
            op.segments[u] = [tuple(p) for p in reservation.merged(grown)]
            op.usage[u] = sum(c for _, c in op.segments[u])
        op.usage = {u: c if u in op.segments else up(c) for u, c in op.usage.items()}
        op.transfer_cost = up(op.transfer_cost)
        op.issue, op.send_cost, op.receive_cost, op.wait_cost, op.stream = (
            up(op.issue), up(op.send_cost), up(op.receive_cost), up(op.wait_cost), up(op.stream))
        op.offset = {u: up(c) for u, c in op.offset.items()}
    for e in g.edges:
        e.delay = up(e.delay)
        if getattr(e, "transfer_cost", None):
            e.transfer_cost = up(e.transfer_cost)
