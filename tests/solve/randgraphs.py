"""Small random graphs (with every constraint family in play) for cross-checking encodings."""

from __future__ import annotations

import random

from solve import Graph, Machine


def random_graph(seed: int, n_ops: int | None = None, occupancy: bool = False, handoff: bool = False,
                 operands: bool = False, segments: bool = False, detached: bool = False) -> Graph:
    """A loop body of 2-5 ops with small cycle counts, recurrences, blocking and register limits.

    With ``occupancy``, the same graph also gets group-occupancy costs (issue cycles, hand-off
    costs, shared channels), drawn from a second generator so the rest of the graph is unchanged; with
    ``handoff``, shared-memory slots of its hand-off channels (a third generator); with ``operands``,
    registers its consumers hold while they run (a fourth); with ``segments``, ops that take a unit in two
    pieces with a gap (a fifth); with ``detached``, fire-and-forget ops (a sixth).
    """
    rng = random.Random(seed)
    n = n_ops or rng.randint(2, 5)
    machine = Machine(max_groups=rng.randint(1, 3), registers_per_thread=rng.choice([8, 12, 16, 255]),
                      registers_per_sm=rng.choice([24, 32, 64, 10_000]), threads_per_group=1,
                      reg_granularity=rng.choice([1, 4]), base_registers=rng.choice([0, 0, 2]),
                      memory={"smem": rng.choice([4, 6, 100])},
                      allow_transfers=rng.random() < 0.8)
    units = {"tc": 1, "mufu": rng.randint(1, 2), "fma": 1}
    g = Graph(units, machine, name=f"random-{seed}")
    names = [f"o{i}" for i in range(n)]
    for i, name in enumerate(names):
        usage = {u: rng.randint(1, 3) for u in rng.sample(sorted(units), rng.randint(1, 2))}
        footprint = {}
        if rng.random() < 0.6:
            footprint["registers"] = rng.randint(1, 6)
        if rng.random() < 0.3:
            footprint["smem"] = rng.randint(1, 3)
        vl = i == 0 and machine.max_groups > 1 and rng.random() < 0.3
        g.add_op(name, usage, footprint={} if vl else footprint, variable_latency=vl,
                 streaming=vl and rng.random() < 0.5, depth=1,
                 transfer_cost=rng.choice([0, 0, 1, 2]))
    for j in range(1, n):
        for i in rng.sample(range(j), rng.randint(1, min(2, j))):
            if g.ops[names[j]].streaming:
                continue
            src = g.ops[names[i]]
            memories = None
            if len(src.footprint) > 1 and rng.random() < 0.5:
                memories = [rng.choice(sorted(src.footprint))]
            g.add_edge(names[i], names[j], rng.randint(0, 3), 0, blocking=rng.random() < 0.3,
                       memories=memories)
    for _ in range(rng.randint(0, 2)):
        i, j = rng.randint(0, n - 1), rng.randint(0, n - 1)
        if g.ops[names[j]].streaming:
            continue
        g.add_edge(names[i], names[j], rng.randint(0, 4), rng.randint(1, 2), blocking=rng.random() < 0.3)
    if occupancy:
        add_occupancy(g, random.Random(seed * 7919 + 1))
    if handoff:
        add_handoffs(g, random.Random(seed * 104729 + 3))
    if operands:
        add_operand_registers(g, random.Random(seed * 15485863 + 5))
    if segments:
        add_segments(g, random.Random(seed * 32452843 + 7))
    if detached:
        rng6 = random.Random(seed * 49979687 + 11)
        for op in g.ops.values():      # in flight for the blocking rule only while they issue
            op.detached = rng6.random() < 0.5
    return g


def add_operand_registers(g: Graph, rng: random.Random) -> None:
    """Registers a consumer holds while it runs, on data edges out of ops with register results, at random."""
    for e in g.edges:
        if e.data and g.ops[e.src].registers and rng.random() < 0.6:
            e.operand_registers = rng.randint(1, g.ops[e.src].registers)


def add_handoffs(g: Graph, rng: random.Random) -> None:
    """Shared memory per slot for the hand-offs of ops with register results, consumers that hold a slot a
    step longer, and a post-loop hand-off, at random; the shared-memory capacity tightened so they bind."""
    for op in g.ops.values():
        if op.registers and rng.random() < 0.7:
            op.handoff = {"smem": rng.randint(1, 2)}
    for e in g.edges:
        if e.transfer and rng.random() < 0.3:
            e.hold = 1
    names = sorted(g.ops)
    if len(names) > 1 and rng.random() < 0.4:
        a, b = rng.sample(names, 2)
        g.add_post_handoff(a, b, {"smem": rng.randint(1, 2)})
    g.machine.memory["smem"] = rng.choice([2, 3, 4, 6])
    if any(amount > g.machine.memory["smem"] for amount in g.reserved_memory().values()):
        g.machine.memory["smem"] = max(g.reserved_memory().values())
    if len(names) > 1 and rng.random() < 0.4:
        # a post-loop staging buffer, taken unless one of its hosts runs wholly in its group
        hosts = [rng.sample(names, rng.randint(1, 2)) for _ in range(rng.randint(0, 2))]
        g.add_post_staging(rng.choice(names), {"smem": rng.randint(1, 2)}, hosts)


def add_occupancy(g: Graph, rng: random.Random) -> None:
    """Issue cycles (up to the op's duration), hand-off costs, a shared channel and offsets into units, at
    random."""
    for op in g.ops.values():
        if rng.random() < 0.3:
            op.offset = {rng.choice(sorted(op.usage)): rng.randint(1, 2)}
        if rng.random() < 0.8:
            op.issue = rng.randint(1, op.duration + 1)
        op.send_cost = rng.choice([0, 0, 1])
        op.receive_cost = rng.choice([0, 1, 1, 2])
        op.wait_cost = rng.choice([0, 1])
    vl = [n for n, op in g.ops.items() if op.variable_latency]
    if len(vl) > 1 or (len(g.ops) > 2 and rng.random() < 0.3):
        for n in (vl or rng.sample(sorted(g.ops), 2)):
            g.ops[n].channel = "shared"


def add_segments(g: Graph, rng: random.Random) -> None:
    """Reservation tables: some ops take a unit in two pieces with a gap (its usage grows by the second
    piece), the others keep one piece from their start or offset."""
    for op in g.ops.values():
        if rng.random() < 0.6:
            unit = rng.choice(sorted(op.usage))
            first, gap, second = op.usage[unit], rng.randint(1, 3), rng.randint(1, 2)
            start = op.offset.pop(unit, 0)
            op.segments = {unit: [(start, first), (start + first + gap, second)]}
            op.usage[unit] = first + second
