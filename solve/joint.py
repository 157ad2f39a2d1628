"""Joint software pipelining + warp specialization as one CP-SAT interval model, on exact cycles.

Per op: start ``s`` of iteration 0 with ``s = stage * II + r`` and ``0 <= r < II``, and a warp group.
Every per-cycle resource (unit occupancy, live registers of a group, live SM memory, ops in flight
in a group) is a modulo reservation: an occupancy ``[r, r + len)`` folded modulo II.  We fold by
laying interval copies ``k * II`` apart on a timeline and bounding the whole timeline: in the window
where every copy of every item overlaps, the count is the modulo count, elsewhere it is a part of
it, so the cumulative constraint is exactly the modulo constraint.

All constraints compare differences of start times with sums of cycle counts and of II, never
strictly.  Hence (a) when II and every cycle count are multiples of ``q``, rounding a schedule's
starts down to multiples of ``q`` keeps it valid, and the model is solved in units of ``q``; (b) with
non-negative delays, stretching a schedule by ``II'/II`` and rounding keeps it valid, so
feasibility is monotone in II (search.py relies on both).

Constraint families can be guarded by literals (``guarded=True``) for infeasibility explanations.
"""

from __future__ import annotations

import math
from typing import Any

from ortools.sat.python import cp_model

from .bounds import exclusive_delay
from .graph import REGISTERS, Graph

# Family ids (machine-readable); explain.py turns them into sentences.
STAGES = "stages"
GROUPS = "groups"
VARIABLE_LATENCY = "variable-latency"
TRANSFER_COST = "transfer-cost"
NO_TRANSFER = "no-transfer"
SM_REGISTERS = "registers:sm"
GROUP_OCCUPANCY = "occupancy"


def unit_family(unit: str) -> str:
    return f"unit:{unit}"


def memory_family(memory: str) -> str:
    return f"memory:{memory}"


def group_registers_family(group: int) -> str:
    return f"registers:g{group}"


def blocking_family(op: str) -> str:
    return f"blocking:{op}"


def time_quantum(graph: Graph, ii: int) -> int:
    """Largest q dividing II and every cycle count of the graph (the exact time unit)."""
    return math.gcd(ii, *graph.cycle_costs())


class JointModel:
    """The model at one II; read solutions with :meth:`extract`.

    ``warp=False`` gives the plain modulo-scheduling model (dependences and units only), used for
    the shortest single-group schedule of Algorithm 1's first phase.  ``stages`` bounds the length
    ``L <= stages * II``.
    """

    def __init__(self, graph: Graph, ii: int, stages: int, *, warp: bool = True,
                 groups: int | None = None, guarded: bool = False, symmetry: bool = True,
                 min_length: int = 0, mma_units: tuple[str, ...] = ("tc",)):
        if ii < 1:
            raise ValueError(f"II must be positive, got {ii}")
        self.source = graph
        self.quantum = q = time_quantum(graph, ii)
        if q > 1:
            graph = graph.scaled({c: c // q for c in graph.cycle_costs()})
        self.graph = graph
        self.II = ii // q
        self.model = cp_model.CpModel()
        self.guarded = guarded
        self.guards: dict[str, Any] = {}
        self.stages = stages
        # With the stage bound guarded, the model itself must allow longer schedules.
        self.horizon_stages = stages + (2 if guarded else 0)
        self.ops = list(graph.ops)
        self._build_times(-(-min_length // q))
        self._build_units()
        self.groups = 0
        if warp:
            self.groups = groups if groups is not None else graph.machine.max_groups
            self._build_groups(symmetry)
            self._build_transfers()
            self._build_lifetimes()
            self._build_registers()
            self._build_memories()
            self._build_blocking()
            self._build_occupancy()
            self._build_objectives(mma_units)

    def guard(self, family: str) -> list:
        """Enforcement literals of ``family`` (empty when the model is not guarded)."""
        if not self.guarded:
            return []
        if family not in self.guards:
            self.guards[family] = self.model.new_bool_var(f"guard[{family}]")
        return [self.guards[family]]

    # ------------------------------------------------------------------------------ times
    def _build_times(self, min_length: int) -> None:
        m, g, II = self.model, self.graph, self.II
        top = self.horizon_stages * II
        self.start, self.res, self.stage = {}, {}, {}
        for name in self.ops:
            s = m.new_int_var(0, max(0, top - g.ops[name].duration), f"s[{name}]")
            r = m.new_int_var(0, II - 1, f"r[{name}]")
            k = m.new_int_var(0, self.horizon_stages - 1, f"stage[{name}]")
            m.add(s == k * II + r)
            self.start[name], self.res[name], self.stage[name] = s, r, k
        # Shifting a schedule left keeps it valid and shortens it: some op starts at cycle 0.
        m.add_min_equality(m.new_constant(0), list(self.start.values()))
        self.length = m.new_int_var(max(1, min_length), top, "L")
        for name in self.ops:
            m.add(self.length >= self.start[name] + g.ops[name].duration)
        m.add(self.length <= self.stages * II).only_enforce_if(self.guard(STAGES))
        for e in g.edges:
            # Unit exclusivity tightens the delay; the unit constraint implies it, but stated
            # linearly it propagates long before the no-overlap reasoning does.
            delay = exclusive_delay(g, e.src, e.dst, e.delay)
            m.add(self.start[e.dst] + e.distance * II >= self.start[e.src] + delay)

    def _fold(self, items: list[tuple]) -> tuple[list, list]:
        """Interval copies for a modulo resource; items are (start, size, size_hi, presence, demand, name).

        ``start`` lies in ``[0, II)`` (plus at most ``size_hi - size`` for a start offset by that much).

        Copies sit ``k * II`` apart and every item's last copy has the same index ``K - 1``, so the
        window ``[(K-1) II, K II)`` sees every wrap of every item: there the count is the modulo
        count, everywhere else it is a part of it.  So bounding the whole timeline is exact.
        """
        m, II = self.model, self.II
        counts = [max(1, -(-size_hi // II) + 1) for _, _, size_hi, _, _, _ in items]
        top = max(counts, default=0)
        intervals, demands = [], []
        for (start, size, size_hi, presence, demand, name), count in zip(items, counts):
            for k in range(top - count, top):
                s = start + k * II
                if isinstance(size, int):
                    end = s + size
                else:
                    end = m.new_int_var(0, (top + 1) * II + size_hi, f"{name}#{k}.end")
                    m.add(end == s + size)
                if presence is None:
                    intervals.append(m.new_interval_var(s, size, end, f"{name}#{k}"))
                else:
                    intervals.append(m.new_optional_interval_var(s, size, end, presence, f"{name}#{k}"))
                demands.append(demand)
        return intervals, demands

    def _build_units(self) -> None:
        m, g = self.model, self.graph
        for unit, cap in g.units.items():
            users = [(n, o, c) for n in self.ops for o, c in g.ops[n].spans(unit)]
            if not users:
                continue
            lit = self.guard(unit_family(unit))
            presence = lit[0] if lit else None
            # an offset start res + o lies in [o, o + II): o more cycles of wrap to fold
            intervals, demands = self._fold([(self.res[n] + o, c, c + o, presence, 1, f"{unit}[{n}]")
                                             for n, o, c in users])
            if cap == 1:
                m.add_no_overlap(intervals)
            else:
                m.add_cumulative(intervals, demands, cap)

    # ------------------------------------------------------------------------------ groups
    def _build_groups(self, symmetry: bool) -> None:
        m, g, G = self.model, self.graph, self.groups
        self.x = {n: [m.new_bool_var(f"x[{n},{k}]") for k in range(G)] for n in self.ops}
        for n in self.ops:
            m.add_exactly_one(self.x[n])
        self.used = [m.new_bool_var(f"used[{k}]") for k in range(G)]
        for n in self.ops:
            for k in range(G):
                m.add_implication(self.x[n][k], self.used[k])
        limit = g.machine.max_groups
        if G > limit:
            for n in self.ops:
                for k in range(limit, G):
                    m.add(self.x[n][k] == 0).only_enforce_if(self.guard(GROUPS))
        vl = [n for n in self.ops if g.ops[n].variable_latency]
        fixed = [n for n in self.ops if not g.ops[n].variable_latency]
        self.vl_group = 0 if vl and fixed else None
        if self.vl_group is not None:
            lit = self.guard(VARIABLE_LATENCY)
            for n in vl:
                m.add(self.x[n][0] == 1).only_enforce_if(lit)
            for n in fixed:
                m.add(self.x[n][0] == 0).only_enforce_if(lit)
        if symmetry:
            self._break_group_symmetry(1 if self.vl_group is not None else 0)

    def _break_group_symmetry(self, first: int) -> None:
        """Interchangeable groups ``first..G-1`` open in order of the ops that first use them."""
        m, G = self.model, self.groups
        swappable = list(range(first, G))
        if len(swappable) < 2:
            return
        seen_prev: list = []
        for i, n in enumerate(self.ops):
            if i == 0:
                for k in swappable[1:]:
                    m.add(self.x[n][k] == 0)
            else:
                for j, k in enumerate(swappable[1:], start=1):
                    m.add_implication(self.x[n][k], seen_prev[j - 1])
            seen = []
            for j, k in enumerate(swappable):
                s = m.new_bool_var(f"seen[{i},{k}]")
                m.add_max_equality(s, [self.x[n][k]] + ([seen_prev[j]] if seen_prev else []))
                seen.append(s)
            seen_prev = seen

    def _build_transfers(self) -> None:
        m, g = self.model, self.graph
        self.cross: dict[int, Any] = {}
        for idx, e in enumerate(g.edges):
            if not e.transfer or e.src == e.dst:
                continue
            c = m.new_bool_var(f"cross[{idx}]")
            for k in range(self.groups):
                m.add_bool_or([self.x[e.src][k].Not(), self.x[e.dst][k], c])
            self.cross[idx] = c
            cost = g.transfer_cost(e)
            if cost:
                m.add(self.start[e.dst] + e.distance * self.II >= self.start[e.src] + e.delay + cost
                      ).only_enforce_if([c, *self.guard(TRANSFER_COST)])
            if not g.machine.allow_transfers:
                m.add(c == 0).only_enforce_if(self.guard(NO_TRANSFER))

    # ------------------------------------------------------------------------------ liveness
    def _build_lifetimes(self) -> None:
        """Lifetime ``[s, max start of a consumer reading it)`` of each (op, memory) result."""
        m, g = self.model, self.graph
        top = self.horizon_stages * self.II
        self.life: dict[tuple[str, str], tuple[Any, int]] = {}
        for n, memory in g.lifetimes():
            outs = g.readers(n, memory)
            longest = max(0, max(top - g.ops[e.dst].duration + e.distance * self.II for e in outs))
            life = m.new_int_var(0, longest, f"life[{n},{memory}]")
            for e in outs:
                m.add(self.start[n] + life >= self.start[e.dst] + e.distance * self.II)
            self.life[n, memory] = (life, longest)

    def _value_item(self, n: str, memory: str, presence, tag: str) -> tuple:
        life, longest = self.life[n, memory]
        return (self.res[n], life, longest, presence, self.graph.ops[n].footprint[memory], f"{tag}[{n}]")

    def _build_registers(self) -> None:
        m, mach = self.model, self.graph.machine
        G = self.groups
        cap = mach.group_register_cap
        top = cap if not self.guarded else 4 * max(cap, mach.registers_per_thread)
        self.register_top = top
        self.peak = [m.new_int_var(0, top, f"peak[{k}]") for k in range(G)]
        self.alloc = [m.new_int_var(0, top // mach.reg_granularity, f"alloc8[{k}]") for k in range(G)]
        values = [n for n, memory in self.life if memory == REGISTERS]
        operands = self.graph.operand_registers()
        for k in range(G):
            # a consumer's group holds the operands it reads into registers while it runs
            held = [(self.res[dst], self.graph.ops[dst].duration, self.graph.ops[dst].duration, self.x[dst][k],
                     amount, f"opnd{k}[{src}>{dst}]") for (src, dst), amount in operands.items()]
            intervals, demands = self._fold([self._value_item(n, REGISTERS, self.x[n][k], f"reg{k}")
                                             for n in values] + held)
            if intervals:
                m.add_cumulative(intervals, demands, self.peak[k])
            alloc = self.alloc[k] * mach.reg_granularity
            m.add(alloc >= self.peak[k] + mach.base_registers * self.used[k])
            m.add(alloc <= cap).only_enforce_if(self.guard(group_registers_family(k)))
        m.add(sum(self.alloc) * mach.reg_granularity * mach.threads_per_group <= mach.registers_per_sm
              ).only_enforce_if(self.guard(SM_REGISTERS))

    def _build_handoffs(self) -> dict[str, Any]:
        """SM memory of the channels handing values between groups (graph.py): per memory, a linear
        expression of the slot counts (stage span of a crossing consumer) and of the post-loop hand-offs."""
        m, g = self.model, self.graph
        top = self.horizon_stages + max([0] + [e.distance + e.hold for e in g.edges]) + 1
        total: dict[str, Any] = {memory: 0 for memory in g.machine.memory}
        for n, op in g.ops.items():
            if not op.handoff:
                continue
            slots = m.new_int_var(0, top, f"slots[{n}]")
            for idx, e in enumerate(g.edges):
                if idx in self.cross and e.src == n and e.transfer and e.dst != n:
                    m.add(slots >= self.stage[e.dst] + e.distance + e.hold - self.stage[n] + 1
                          ).only_enforce_if(self.cross[idx])
                    m.add(slots >= 1).only_enforce_if(self.cross[idx])
            for memory, amount in op.handoff.items():
                total[memory] += amount * slots
        for i, ph in enumerate(g.post_handoffs):
            apart = m.new_bool_var(f"post_apart[{i}]")
            for k in range(self.groups):
                m.add_bool_or([self.x[ph.src][k].Not(), self.x[ph.dst][k], apart])
            for memory, amount in ph.footprint.items():
                total[memory] += amount * apart
        for i, ps in enumerate(g.post_staging):
            # taken unless a host runs wholly with dst (graph.PostStaging)
            taken = m.new_bool_var(f"staging[{i}]")
            gone = []
            for j, host in enumerate(ps.hosts):
                lit = m.new_bool_var(f"staging_host[{i},{j}]")
                for n in host:
                    for k in range(self.groups):
                        m.add_bool_or([self.x[n][k].Not(), self.x[ps.dst][k], lit])
                gone.append(lit)
            m.add_bool_or([taken] + [lit.Not() for lit in gone])
            for memory, amount in ps.footprint.items():
                total[memory] += amount * taken
        return total

    def _build_memories(self) -> None:
        m, g = self.model, self.graph
        reserved = g.reserved_memory()
        handoff = self._build_handoffs()
        for memory, cap in g.machine.memory.items():
            values = [n for n, mem in self.life if mem == memory]
            room = cap - reserved[memory]  # >= 0: Graph.validate checks the streaming buffers
            lit = self.guard(memory_family(memory))
            if not values:
                if not isinstance(handoff[memory], int):
                    m.add(handoff[memory] <= room).only_enforce_if(lit)
                continue
            intervals, demands = self._fold([self._value_item(n, memory, None, memory) for n in values])
            if not isinstance(handoff[memory], int):
                # what the lifetimes may take: the room the hand-off channels leave
                left = m.new_int_var(0, max(room, sum(demands)), f"room[{memory}]")
                m.add(left <= room - handoff[memory]).only_enforce_if(lit)
                if lit:
                    m.add(left == sum(demands)).only_enforce_if(lit[0].Not())
                m.add_cumulative(intervals, demands, left)
            elif lit:  # switched off, the capacity exceeds any possible demand
                m.add_cumulative(intervals, demands, room + sum(demands) * (1 - lit[0]))
            else:
                m.add_cumulative(intervals, demands, room)

    # ------------------------------------------------------------------------------ blocking
    def _build_blocking(self) -> None:
        """A blocking consumer does not start strictly inside another same-group op's flight
        (``Op.flight``: a detached op's is its issue only).

        Starting in the same cycle as another op is allowed: this keeps every constraint
        non-strict, which the exactness of scaling needs.  For each blocking op and group, one
        cumulative holds the other ops' windows without their first cycle (demand 1) and the
        blocking op's start cycle (demand D, capacity D): the start may coincide with no window.
        """
        m, g = self.model, self.graph
        self.blk = self._blocking_literals()
        for v, blk in self.blk.items():
            others = [o for o in self.ops if o != v and g.ops[o].flight > 1]
            if self.vl_group is not None and not self.guarded:  # never share a group
                others = [o for o in others if g.ops[o].variable_latency == g.ops[v].variable_latency]
            if not others:
                continue
            big = sum(-(-g.ops[o].flight // self.II) + 1 for o in others)
            for k in range(self.groups):
                conds = [self.x[v][k], *self.guard(blocking_family(v))] + ([blk] if blk is not None else [])
                present = conds[0]
                if len(conds) > 1:
                    present = m.new_bool_var(f"blocks{k}[{v}]")
                    m.add_bool_or([c.Not() for c in conds] + [present])
                items = [(self.res[o] + 1, g.ops[o].flight - 1, g.ops[o].flight, self.x[o][k], 1,
                          f"flight{k}[{v},{o}]") for o in others]
                items.append((self.res[v], 1, 1, present, big, f"point{k}[{v}]"))
                intervals, demands = self._fold(items)
                m.add_cumulative(intervals, demands, big)
        self._build_runs_apart_from_flights()

    def _blocking_literals(self) -> dict[str, Any]:
        """{op that may block: None where it always does, else the literal of its blocking (a transfer input
        crosses groups)}."""
        m, g = self.model, self.graph
        blk: dict[str, Any] = {}
        for v in self.ops:
            if not g.may_block(v):
                continue
            if g.always_blocks(v):
                blk[v] = None  # blocks whatever the assignment
            else:
                lit = m.new_bool_var(f"blk[{v}]")
                for idx, e in enumerate(g.edges):
                    if e.dst == v and idx in self.cross:
                        m.add_implication(self.cross[idx], lit)
                blk[v] = lit
        return blk

    def _build_runs_apart_from_flights(self) -> None:
        """Implied (redundant) constraint: in a group whose ops hold one instruction stream in order, a blocking
        op's issue window and another op's flight do not overlap modulo II. The blocking op does not start
        inside the flight, and the other op does not start inside the blocking op's window (their windows
        on the stream are apart), so the two are apart. Stated as one no-overlap per flight, with every
        blocking op's window, it lets CP-SAT's disjunctive reasoning see a softmax group's run and its MMAs'
        flights take the II together (attention_fwd on Hopper, one cycle below its optimal II: a proof in
        ~1 s instead of ~6 s)."""
        m, g = self.model, self.graph
        if not g.occupies() or not g.machine.stream_order:
            return
        for k in range(self.groups):
            runs = {}
            for v, blk in self.blk.items():
                if not g.ops[v].issue:
                    continue
                conds = [self.x[v][k], *self.guard(blocking_family(v)), *self.guard(GROUP_OCCUPANCY)]
                conds += [blk] if blk is not None else []
                present = m.new_bool_var(f"run{k}[{v}]")
                m.add_bool_or([c.Not() for c in conds] + [present])
                runs[v] = (self.res[v], g.ops[v].issue, g.ops[v].issue, present, 1, f"run{k}[{v}]")
            for o in self.ops:
                op = g.ops[o]
                if not op.issue or op.flight <= op.issue:
                    continue
                others = [item for v, item in runs.items() if v != o]
                if others:
                    # modulo II a flight longer than the II takes every residue, as one of II cycles does; its
                    # full length would lay copies over one another, which the no-overlap refuses outright
                    size = min(op.flight, self.II)
                    flight = (self.res[o], size, size, self.x[o][k], 1, f"flight{k}[{o}]")
                    m.add_no_overlap(self._fold([flight] + others)[0])

    # ------------------------------------------------------------------------------ occupancy
    def _build_occupancy(self) -> None:
        """Each group is one instruction stream: its ops' windows (issue, then the send of a result
        that leaves the group) do not overlap modulo II (where the machine states `stream_order`),
        and their issue cycles plus the hand-offs the assignment implies (graph.py) fit in II."""
        m, g, G = self.model, self.graph, self.groups
        if not g.occupies():
            return
        lit = self.guard(GROUP_OCCUPANCY)
        sends = self._charge_streams(lit)
        for k in range(G):
            if not g.machine.stream_order:
                continue
            items = []
            for n in self.ops:
                # the op's window on the stream: its issue, then the send when its result leaves
                op, send = g.ops[n], sends.get((n, k))
                size = op.issue if send is None else op.issue + op.send_cost * send
                size_hi = op.issue + (op.send_cost if send is not None else 0)
                if not size_hi:
                    continue
                present = [self.x[n][k], *lit]
                if not op.issue:  # a send alone: absent when there is none (no-overlap rejects empty
                    present.append(send)  # intervals strictly inside others)
                    size = op.send_cost
                if len(present) > 1:
                    both = m.new_bool_var(f"streams{k}[{n}]")
                    m.add_bool_or([p.Not() for p in present] + [both])
                    for p in present:
                        m.add_implication(both, p)
                    present = [both]
                items.append((self.res[n], size, size_hi, present[0], 1, f"stream{k}[{n}]"))
            if len(items) > 1:
                m.add_no_overlap(self._fold(items)[0])

    def _charge_streams(self, lit: list) -> dict:
        """Per group, its ops' issue cycles plus the hand-offs the assignment implies fit in II (enforced by
        ``lit``). Returns the send literals {(op, group): var}: the op's result leaves that group."""
        m, g, G = self.model, self.graph, self.groups
        load: list[list] = [[] for _ in range(G)]

        def charged(name: str, cost: int, k: int):
            var = m.new_bool_var(name)
            load[k].append(cost * var)
            return var

        sends, receives, waits = {}, {}, {}
        for e in g.edges:
            if not e.data or e.src == e.dst:
                continue
            src = g.ops[e.src]
            channel = src.channel_key
            recv = g.channel_receive_cost(channel)
            for k in range(G):
                xs, xd = self.x[e.src][k], self.x[e.dst][k]
                if src.send_cost:  # the result leaves group k
                    if (e.src, k) not in sends:
                        sends[e.src, k] = charged(f"send[{e.src},{k}]", src.send_cost, k)
                    m.add_bool_or([xs.Not(), xd, sends[e.src, k]])
                if recv:  # group k receives it from another group
                    if (channel, k) not in receives:
                        receives[channel, k] = charged(f"recv[{channel},{k}]", recv, k)
                    m.add_bool_or([xd.Not(), xs, receives[channel, k]])
                if e.blocking and src.wait_cost:  # group k waits for its own result
                    if (e.src, k) not in waits:
                        waits[e.src, k] = charged(f"wait[{e.src},{k}]", src.wait_cost, k)
                    m.add_bool_or([xs.Not(), xd.Not(), waits[e.src, k]])
        for k in range(G):
            total = (sum((g.ops[n].issue + g.ops[n].stream) * self.x[n][k] for n in self.ops
                         if g.ops[n].issue or g.ops[n].stream) + sum(load[k]))
            m.add(total <= self.II).only_enforce_if(lit)
        return sends

    # ------------------------------------------------------------------------------ objectives
    def _build_objectives(self, mma_units: tuple[str, ...]) -> None:
        m, g = self.model, self.graph
        G = self.groups
        chans = {}
        for e in g.edges:
            if e.src == e.dst:
                continue
            for k in range(G):
                key = (e.src, k)
                if key not in chans:
                    chans[key] = m.new_bool_var(f"chan[{e.src},{k}]")
                m.add_bool_or([self.x[e.dst][k].Not(), self.x[e.src][k], chans[key]])
        self.channels = sum(chans.values()) if chans else 0
        self.n_channels = len(chans)
        # A blocking wait stalls every critical unit its group feeds: count (wait, unit) pairs.
        waits = []
        for unit in mma_units:
            users = [n for n in self.ops if unit in g.ops[n].usage]
            if not users:
                continue
            issues = []
            for k in range(G):
                lit = m.new_bool_var(f"issues[{unit},{k}]")
                for n in users:
                    m.add_implication(self.x[n][k], lit)
                issues.append(lit)
            for v, blk in self.blk.items():
                w = m.new_bool_var(f"wait[{v},{unit}]")
                for k in range(G):
                    lits = [self.x[v][k].Not(), issues[k].Not(), w]
                    if blk is not None:
                        lits.append(blk.Not())
                    m.add_bool_or(lits)
                waits.append(w)
        self.mma_waits = sum(waits) if waits else 0
        self.n_waits = len(waits)
        self.groups_used = sum(self.used)
        self.peak_registers = m.new_int_var(0, self.register_top, "peak_registers")
        for k in range(G):
            m.add(self.peak_registers >= self.peak[k])

    def objective(self, name: str):
        """Expression of a named objective: length (in quanta), channels, mma_waits, groups, registers."""
        return {"length": self.length, "channels": self.channels, "mma_waits": self.mma_waits,
                "groups": self.groups_used, "registers": self.peak_registers}[name]

    def lexicographic(self, order: tuple[str, ...]):
        """One expression whose minimum is the lexicographic minimum of the named objectives.

        Each objective is bounded, so weighting it by the product of the later objectives' ranges
        orders them strictly; one solve is much cheaper than one per objective.
        """
        ranges = {"length": self.horizon_stages * self.II + 1, "mma_waits": self.n_waits + 1,
                  "channels": self.n_channels + 1, "groups": self.groups + 1,
                  "registers": self.register_top + 1}
        expr = 0
        for name in order:
            expr = expr * ranges[name] + self.objective(name)
        return expr

    # ------------------------------------------------------------------------------ reading
    def extract(self, run) -> dict[str, Any]:
        """II, length, start/stage/group per op from a solved run (in cycles)."""
        q = self.quantum
        ii = q * self.II
        start = {n: q * run.value(self.start[n]) for n in self.ops}
        group = {}
        if self.groups:
            for n in self.ops:
                group[n] = next(k for k in range(self.groups) if run.value(self.x[n][k]))
        length = max(start[n] + self.source.ops[n].duration for n in self.ops)
        return {"ii": ii, "length": length, "start": start, "group": group,
                "stage": {n: start[n] // ii for n in self.ops}}

    def hint(self, sol: dict[str, Any]) -> None:
        """Use a schedule (in cycles, e.g. from a neighbouring II) as the solver's starting point."""
        self.model.clear_hints()
        for n in self.ops:
            self.model.add_hint(self.start[n], sol["start"][n] // self.quantum)
            if self.groups and sol.get("group"):
                for k in range(self.groups):
                    self.model.add_hint(self.x[n][k], int(sol["group"][n] == k))
