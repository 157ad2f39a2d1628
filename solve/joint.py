"""Joint software pipelining + warp specialization as one CP-SAT interval model, on exact cycles.

Per op: start ``s`` of iteration 0 with ``s = stage * II + r`` and ``0 <= r < II``; a warp group.
Every per-cycle resource (unit occupancy, live registers of a group, live SM memory) is a modulo
reservation: an occupancy ``[r, r + len)`` folded modulo II.  We fold by laying interval copies at
``r + k * II`` on a timeline and constraining the whole timeline: in the window where every copy
overlaps the count is exact, elsewhere it is a subset, so the cumulative constraint is exactly the
modulo constraint.  Lifetimes may exceed II; they are split into ``q`` full turns (a constant
demand) and a remainder ``rho < II`` that needs only two copies.

``II`` is either fixed or a variable in a range (to prove a whole range of IIs infeasible at once).
Constraint families can be guarded by literals (``guarded=True``) for infeasibility explanations.
"""

from __future__ import annotations

import math
from typing import Any

from ortools.sat.python import cp_model

from .bounds import exclusive_delay
from .graph import Graph

# Family ids (machine-readable); explain.py turns them into sentences.
STAGES = "stages"
GROUPS = "groups"
VARIABLE_LATENCY = "variable-latency"
TRANSFER_COST = "transfer-cost"
NO_TRANSFER = "no-transfer"
SM_REGISTERS = "registers:sm"


def unit_family(unit: str) -> str:
    return f"unit:{unit}"


def memory_family(memory: str) -> str:
    return f"memory:{memory}"


def group_registers_family(group: int) -> str:
    return f"registers:g{group}"


def blocking_family(op: str) -> str:
    return f"blocking:{op}"


class JointModel:
    """Build the model; read solutions with :meth:`extract`.

    ``warp=False`` gives the plain modulo-scheduling model (dependences and units only), used for
    the shortest single-group schedule of Algorithm 1's first phase.
    """

    def __init__(self, graph: Graph, ii: int | tuple[int, int], stages: int, *, warp: bool = True,
                 groups: int | None = None, guarded: bool = False, symmetry: bool = True,
                 min_length: int = 0, mma_units: tuple[str, ...] = ("tc",)):
        self.source = graph
        self.quantum = 1
        if isinstance(ii, int):
            # With II and every cycle count multiples of q, rounding any schedule's start times
            # down to multiples of q keeps it valid (all constraints compare differences against
            # multiples of q), so solving in units of q is exact and shrinks every domain.
            self.quantum = math.gcd(ii, *graph.cycle_costs())
            if self.quantum > 1:
                q = self.quantum
                graph = graph.scaled({c: c // q for c in graph.cycle_costs()})
                ii //= q
                min_length = -(-min_length // q)
        self.graph = graph
        self.model = cp_model.CpModel()
        self.guarded = guarded
        self.guards: dict[str, Any] = {}
        self.stages = stages
        m = self.model
        if isinstance(ii, int):
            self.ii_lo = self.ii_hi = ii
            self.II: Any = ii
        else:
            self.ii_lo, self.ii_hi = ii
            self.II = m.new_int_var(self.ii_lo, self.ii_hi, "II")
        if self.ii_lo < 1:
            raise ValueError(f"II must be positive, got range starting at {self.ii_lo}")
        self.fixed_ii = isinstance(self.II, int)
        # With the stage bound guarded, the model itself must allow longer schedules.
        self.horizon_stages = stages + (2 if guarded else 0)
        self.ops = list(graph.ops)
        self._build_times(min_length)
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
            self._build_objectives(mma_units)

    # ------------------------------------------------------------------------------ helpers
    def guard(self, family: str) -> list:
        """Enforcement literals of ``family`` (empty when the model is not guarded)."""
        if not self.guarded:
            return []
        if family not in self.guards:
            self.guards[family] = self.model.new_bool_var(f"guard[{family}]")
        return [self.guards[family]]

    def _mul_ii(self, factor_var, hi_factor: int, name: str):
        """``factor_var * II`` as an expression (a product variable when II varies)."""
        if self.fixed_ii:
            return factor_var * self.II
        prod = self.model.new_int_var(0, hi_factor * self.ii_hi, name)
        self.model.add_multiplication_equality(prod, [factor_var, self.II])
        return prod

    # ------------------------------------------------------------------------------ times
    def _build_times(self, min_length: int) -> None:
        m, g = self.model, self.graph
        top = self.horizon_stages * self.ii_hi
        self.start, self.res, self.stg = {}, {}, {}
        for name in self.ops:
            op = g.ops[name]
            s = m.new_int_var(0, max(0, top - op.duration), f"s[{name}]")
            r = m.new_int_var(0, self.ii_hi - 1, f"r[{name}]")
            k = m.new_int_var(0, self.horizon_stages - 1, f"stage[{name}]")
            if not self.fixed_ii:
                m.add(r <= self.II - 1)
            m.add(s == self._mul_ii(k, self.horizon_stages, f"kII[{name}]") + r)
            self.start[name], self.res[name], self.stg[name] = s, r, k
        self.length = m.new_int_var(max(1, min_length), top, "L")
        for name in self.ops:
            m.add(self.length >= self.start[name] + g.ops[name].duration)
        m.add(self.length <= self.stages * self.II).only_enforce_if(self.guard(STAGES))
        for e in g.edges:
            # Unit exclusivity tightens the delay; the unit constraint implies it, but stated
            # linearly it propagates long before the no-overlap reasoning does.
            delay = exclusive_delay(g, e.src, e.dst, e.delay)
            m.add(self.start[e.dst] + e.distance * self.II >= self.start[e.src] + delay)

    def _shifted(self, var, k: int, size_hi: int, name: str):
        """``var + k * II`` as something CP-SAT accepts as an interval start (one variable)."""
        if self.fixed_ii or k == 0:
            return var + k * self.II
        aux = self.model.new_int_var(0, (k + 1) * self.ii_hi + size_hi, name)
        self.model.add(aux == var + k * self.II)
        return aux

    def _interval(self, start, size, name: str, presence=None, size_hi: int = 0):
        """Interval ``[start, start + size)``; ``size`` may be a variable (then ``size_hi`` bounds it)."""
        m = self.model
        if isinstance(size, int):
            end = start + size
        else:
            end = m.new_int_var(0, 4 * self.horizon_stages * self.ii_hi + size_hi, f"{name}.end")
            m.add(end == start + size)
        if presence is None:
            return m.new_interval_var(start, size, end, name)
        return m.new_optional_interval_var(start, size, end, presence, name)

    def _fold(self, items: list[tuple]) -> tuple[list, list]:
        """Interval copies for a modulo resource; items are (start, size, size_hi, presence, demand, name).

        Copies sit ``k * II`` apart and every item's last copy has the same index ``K - 1``, so the
        window ``[(K-1) II, K II)`` sees every wrap of every item: there the count is the modulo
        count, everywhere else it is a part of it.  So bounding the whole timeline is exact.
        """
        counts = [max(1, -(-size_hi // self.ii_lo) + 1) for _, _, size_hi, _, _, _ in items]
        top = max(counts, default=0)
        intervals, demands = [], []
        for (start, size, size_hi, presence, demand, name), count in zip(items, counts):
            for k in range(top - count, top):
                s = self._shifted(start, k, size_hi, f"{name}@{k}")
                intervals.append(self._interval(s, size, f"{name}#{k}", presence, size_hi))
                demands.append(demand)
        return intervals, demands

    def _build_units(self) -> None:
        m, g = self.model, self.graph
        for unit, cap in g.units.items():
            users = [(n, g.ops[n].usage[unit]) for n in self.ops if unit in g.ops[n].usage]
            if not users:
                continue
            lit = self.guard(unit_family(unit))
            presence = lit[0] if lit else None
            intervals, demands = self._fold([(self.res[n], c, c, presence, 1, f"{unit}[{n}]")
                                             for n, c in users])
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
                parts = [self.x[n][k]] + ([seen_prev[j]] if seen_prev else [])
                m.add_max_equality(s, parts)
                seen.append(s)
            seen_prev = seen

    def same_group(self, a: str, b: str):
        """A literal forced true when ops ``a`` and ``b`` share a warp group."""
        key = (a, b) if a < b else (b, a)
        if key not in self._same:
            lit = self.model.new_bool_var(f"same[{key[0]},{key[1]}]")
            for k in range(self.groups):
                self.model.add_bool_or([self.x[a][k].Not(), self.x[b][k].Not(), lit])
            self._same[key] = lit
        return self._same[key]

    def _build_transfers(self) -> None:
        m, g = self.model, self.graph
        self._same: dict[tuple[str, str], Any] = {}
        self.cross: dict[int, Any] = {}
        for idx, e in enumerate(g.edges):
            if not e.transfer or e.src == e.dst:
                continue
            c = m.new_bool_var(f"cross[{idx}]")
            for k in range(self.groups):
                m.add_bool_or([self.x[e.src][k].Not(), self.x[e.dst][k], c])
            self.cross[idx] = c
            cost = g.ops[e.src].transfer_cost
            if cost:
                m.add(self.start[e.dst] + e.distance * self.II >= self.start[e.src] + e.delay + cost
                      ).only_enforce_if([c, *self.guard(TRANSFER_COST)])
            if not g.machine.allow_transfers:
                m.add(c == 0).only_enforce_if(self.guard(NO_TRANSFER))

    # ------------------------------------------------------------------------------ liveness
    def _build_lifetimes(self) -> None:
        """Lifetime ``[s, max consumer start)`` of each value with a footprint."""
        m, g = self.model, self.graph
        top = self.horizon_stages * self.ii_hi
        self.life: dict[str, tuple[Any, int]] = {}
        for n in self.ops:
            op = g.ops[n]
            outs = g.data_out_edges(n)
            if op.streaming or not outs or not any(op.footprint.values()):
                continue
            longest = max(top - g.ops[e.dst].duration + e.distance * self.ii_hi for e in outs)
            life = m.new_int_var(0, max(0, longest), f"life[{n}]")
            for e in outs:
                m.add(self.start[n] + life >= self.start[e.dst] + e.distance * self.II)
            self.life[n] = (life, max(0, longest))

    def _value_item(self, n: str, presence, demand: int, tag: str) -> tuple:
        life, longest = self.life[n]
        return (self.res[n], life, longest, presence, demand, f"{tag}[{n}]")

    def _build_registers(self) -> None:
        m, g, mach = self.model, self.graph, self.graph.machine
        G = self.groups
        cap = mach.group_register_cap
        loose = not self.guarded
        top = cap if loose else 4 * max(cap, mach.registers_per_thread)
        self.register_top = top
        self.peak = [m.new_int_var(0, top, f"peak[{k}]") for k in range(G)]
        self.alloc = [m.new_int_var(0, top // mach.reg_granularity, f"alloc8[{k}]") for k in range(G)]
        values = [n for n in self.life if g.ops[n].registers > 0]
        for k in range(G):
            intervals, demands = self._fold([self._value_item(n, self.x[n][k], g.ops[n].registers, f"reg{k}")
                                             for n in values])
            if intervals:
                m.add_cumulative(intervals, demands, self.peak[k])
            alloc = self.alloc[k] * mach.reg_granularity
            m.add(alloc >= self.peak[k] + mach.base_registers * self.used[k])
            m.add(alloc <= cap).only_enforce_if(self.guard(group_registers_family(k)))
        m.add(sum(self.alloc) * mach.reg_granularity * mach.threads_per_group <= mach.registers_per_sm
              ).only_enforce_if(self.guard(SM_REGISTERS))

    def _build_memories(self) -> None:
        m, g = self.model, self.graph
        reserved = g.reserved_memory()
        for memory, cap in g.machine.memory.items():
            values = [n for n in self.life if g.ops[n].footprint.get(memory, 0) > 0]
            if not values:
                continue
            intervals, demands = self._fold([self._value_item(n, None, g.ops[n].footprint[memory], memory)
                                             for n in values])
            room = cap - reserved[memory]  # >= 0: Graph.validate checks the streaming buffers
            lit = self.guard(memory_family(memory))
            if lit:
                # Switched off, the capacity exceeds any possible demand.
                relax = sum(demands)
                m.add_cumulative(intervals, demands, room + relax * (1 - lit[0]))
            else:
                m.add_cumulative(intervals, demands, room)

    # ------------------------------------------------------------------------------ blocking
    def _build_blocking(self) -> None:
        """A blocking consumer cannot start while another op of its group is in flight.

        Per group, one cumulative holds every op's in-flight window (demand 1) and a one-cycle
        "start point" of every blocking op (demand D = number of windows) under capacity D + 1:
        a point can only coexist with its own window.  A blocking op that outlasts II overlaps its
        own next iteration, which the rule ignores, so those use pairwise disjunctions instead.
        """
        m, g = self.model, self.graph
        self.blk: dict[str, Any] = {}
        for v in self.ops:
            if not g.may_block(v):
                continue
            if g.always_blocks(v):
                self.blk[v] = None  # blocks whatever the assignment
            else:
                lit = m.new_bool_var(f"blk[{v}]")
                for idx, e in enumerate(g.edges):
                    if e.dst == v and idx in self.cross:
                        m.add_implication(self.cross[idx], lit)
                self.blk[v] = lit
        if not self.blk:
            return
        long_ops = [v for v in self.blk if g.ops[v].duration >= self.ii_lo]
        for v in long_ops:
            self._pairwise_blocking(v)
        points_of = [v for v in self.blk if v not in long_ops]
        if not points_of:
            return
        for k in range(self.groups):
            windows = [(self.res[o], g.ops[o].duration, g.ops[o].duration, self.x[o][k], 1, f"flight{k}[{o}]")
                       for o in self.ops]
            big = sum(-(-g.ops[o].duration // self.ii_lo) + 1 for o in self.ops)
            points = []
            for v in points_of:
                conds = [self.x[v][k], *self.guard(blocking_family(v))]
                if self.blk[v] is not None:
                    conds.append(self.blk[v])
                if len(conds) == 1:
                    present = conds[0]
                else:
                    present = m.new_bool_var(f"blocks{k}[{v}]")
                    m.add_bool_or([c.Not() for c in conds] + [present])
                points.append((self.res[v], 1, 1, present, big, f"point{k}[{v}]"))
            intervals, demands = self._fold(windows + points)
            m.add_cumulative(intervals, demands, big + 1)

    def _pairwise_blocking(self, v: str) -> None:
        m, g = self.model, self.graph
        for o in self.ops:
            if o == v:
                continue
            enforce = [self.same_group(v, o), *self.guard(blocking_family(v))]
            if self.blk[v] is not None:
                enforce.append(self.blk[v])
            dur = g.ops[o].duration
            after = m.new_bool_var(f"after[{v},{o}]")
            rv, ro = self.res[v], self.res[o]
            m.add(rv >= ro + dur).only_enforce_if([*enforce, after])
            m.add(rv <= ro - 1).only_enforce_if([*enforce, after.Not()])
            m.add(rv + self.II >= ro + dur).only_enforce_if([*enforce, after.Not()])

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
        ranges = {"length": self.horizon_stages * (self.ii_hi if self.fixed_ii else 1) + 1,
                  "mma_waits": self.n_waits + 1, "channels": self.n_channels + 1,
                  "groups": self.groups + 1, "registers": self.register_top + 1}
        expr = 0
        for name in order:
            expr = expr * ranges[name] + self.objective(name)
        return expr

    # ------------------------------------------------------------------------------ reading
    def decision_vars(self) -> list:
        """Variables whose values pin a solution (used for hints between solves)."""
        out = [self.start[n] for n in self.ops]
        if self.groups:
            out += [lit for n in self.ops for lit in self.x[n]]
        if not self.fixed_ii:
            out.append(self.II)
        return out

    def extract(self, run) -> dict[str, Any]:
        """II, length, start/stage/group per op from a solved run (in cycles)."""
        q = self.quantum
        ii = q * (self.II if self.fixed_ii else run.value(self.II))
        start = {n: q * run.value(self.start[n]) for n in self.ops}
        group = {}
        if self.groups:
            for n in self.ops:
                group[n] = next(k for k in range(self.groups) if run.value(self.x[n][k]))
        length = max(start[n] + self.source.ops[n].duration for n in self.ops)
        return {"ii": ii, "length": length, "start": start, "group": group,
                "stage": {n: start[n] // ii for n in self.ops}}
