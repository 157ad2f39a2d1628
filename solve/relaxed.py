"""A relaxation of the joint model that proves an II infeasible fast: pairwise heights, no registers or memory.

`joint.JointModel` states every modulo resource with folded interval copies over the residues. This model
states the ones that are disjunctive — one-instance units, a group's instruction stream, a blocking op
against the flights of its group — pairwise, with an integer "height" per pair (`plain.PlainModel` explains
the form), and leaves out what has no pairwise form: registers, SM memory, units with several instances, one
op's own pieces. Every joint schedule is a schedule of this model, so "infeasible here" proves the II
infeasible for the joint model; a schedule found here proves nothing (it may not fit the registers).

Neither model proves every II fastest: on attention_bwd's Hopper graph the relaxation refutes the IIs below
the answer in 0.2-0.5 s where the joint model takes 0.8-1.6 s, and one cycle below the answer the joint model
is the faster (1 s against 5 s). The search runs both side by side (`cpsat.race`) for each probe below an
answer.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from .bounds import exclusive_delay
from .graph import Graph
from .joint import JointModel, time_quantum


class RelaxedModel(JointModel):
    """The relaxation at one II within ``stages`` stages (warp groups as the joint model's, unguarded)."""

    def __init__(self, graph: Graph, ii: int, stages: int, *, symmetry: bool = True):
        if ii < 1:
            raise ValueError(f"II must be positive, got {ii}")
        self.source = graph
        self.quantum = q = time_quantum(graph, ii)
        if q > 1:
            graph = graph.scaled({c: c // q for c in graph.cycle_costs()})
        self.graph, self.II = graph, ii // q
        self.model = cp_model.CpModel()
        self.guarded, self.guards = False, {}
        self.stages = self.horizon_stages = stages
        self.ops = list(graph.ops)
        self._same_group: dict[tuple[str, str], object] = {}
        self._times()
        self._units()
        self.groups = graph.machine.max_groups
        self._build_groups(symmetry)
        self._build_transfers()
        self._blocking()
        self._streams()

    def _apart(self, xa, a, xb, b, enforce=()) -> None:
        """[xa, xa + a) and [xb, xb + b) are apart modulo II: b's copy K IIs on starts after a ends and ends
        before a's next copy starts (which also says a + b <= II)."""
        m, top = self.model, self.horizon_stages
        k = m.new_int_var(-top - 2, top + 2, "height")
        first = m.add(xb - xa + k * self.II >= a)
        second = m.add(xa - xb - k * self.II >= b - self.II)
        if enforce:
            first.only_enforce_if(list(enforce))
            second.only_enforce_if(list(enforce))

    def _same(self, a: str, b: str):
        """A literal that holds exactly when ``a`` and ``b`` run in the same group."""
        key = (a, b) if a < b else (b, a)
        if key not in self._same_group:
            m, lit = self.model, self.model.new_bool_var(f"same[{a},{b}]")
            for k in range(self.groups):
                m.add_bool_or([self.x[a][k].Not(), self.x[b][k].Not(), lit])
                m.add_bool_or([lit.Not(), self.x[a][k].Not(), self.x[b][k]])
            self._same_group[key] = lit
        return self._same_group[key]

    def _times(self) -> None:
        m, g, II = self.model, self.graph, self.II
        top = self.stages * II
        self.start = {n: m.new_int_var(0, max(0, top - g.ops[n].duration), f"s[{n}]") for n in self.ops}
        m.add_min_equality(m.new_constant(0), list(self.start.values()))
        self.length = m.new_int_var(1, top, "L")
        for n in self.ops:
            m.add(self.length >= self.start[n] + g.ops[n].duration)
        for e in g.edges:
            m.add(self.start[e.dst] + e.distance * II >= self.start[e.src] + exclusive_delay(g, e.src, e.dst, e.delay))

    def _units(self) -> None:
        g, s = self.graph, self.start
        for unit, cap in g.units.items():
            if cap != 1:
                continue
            pieces = [(n, o, c) for n in self.ops for o, c in g.ops[n].spans(unit)]
            for i, (a, oa, ca) in enumerate(pieces):
                for b, ob, cb in pieces[i + 1:]:
                    if a != b:
                        self._apart(s[a] + oa, ca, s[b] + ob, cb)

    def _blocking(self) -> None:
        """A blocking op does not start strictly inside a same-group op's flight; with the groups' stream
        order, its window is apart from that flight (`JointModel._build_runs_apart_from_flights`)."""
        m, g, s, II, top = self.model, self.graph, self.start, self.II, self.horizon_stages
        self.blk = self._blocking_literals()
        order = g.occupies() and g.machine.stream_order
        for v, blk in self.blk.items():
            for o in self.ops:
                if o == v or g.ops[o].flight <= 1:
                    continue
                if self.vl_group is not None and g.ops[o].variable_latency != g.ops[v].variable_latency:
                    continue                               # never in one group
                enforce = [self._same(v, o)] + ([blk] if blk is not None else [])
                k = m.new_int_var(-top - 2, top + 2, "height")
                m.add(s[v] - s[o] + k * II >= g.ops[o].flight).only_enforce_if(enforce)
                m.add(s[v] - s[o] + k * II <= II).only_enforce_if(enforce)
                if order and g.ops[v].issue and g.ops[o].issue and g.ops[o].flight > g.ops[o].issue:
                    self._apart(s[v], g.ops[v].issue, s[o], g.ops[o].flight, enforce)

    def _streams(self) -> None:
        """The groups' issue and hand-off cycles fit in II; with stream order, two ops of a group hold the
        stream apart (each its issue, then its send where its result leaves the group)."""
        g, m = self.graph, self.model
        if not g.occupies():
            return
        sends = self._charge_streams([])
        if not g.machine.stream_order:
            return
        size = {}
        for n in self.ops:
            op = g.ops[n]
            if not op.issue:
                continue             # (a send alone is absent where there is none: no pairwise form)
            leaves = [(sends[n, k], self.x[n][k]) for k in range(self.groups) if (n, k) in sends]
            if not leaves or not op.send_cost:
                size[n] = op.issue
                continue
            leave = m.new_bool_var(f"leaves[{n}]")
            for send, here in leaves:
                m.add_bool_or([send.Not(), here.Not(), leave])
            size[n] = op.issue + op.send_cost * leave
        names = list(size)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                self._apart(self.start[a], size[a], self.start[b], size[b], [self._same(a, b)])
