"""Paper-literal time-indexed encoding (Twill Figs. 4-6) and its search, on normalized costs.

Booleans ``op[v,i,t]`` (op ``v`` of copy ``i`` issues at cycle ``t`` of the straight-line program of
overlapped copies), ``live[v,i,t]`` and ``opw[v,w]``; constraints: uniqueness, consistency,
completion, dependence, capacity, liveness propagation (init / live / dead), memory capacity, warp
uniqueness, variable latency, register limit, cross-warp spills and concurrency.  Implications that
quantify over a range of cycles are written with prefix booleans ``pre[v,i,t] = OR op[v,i,<=t]``
(same constraint, linear size).

Deviations from the paper, each needed for the answer to be exact and to match the interval model:
* the program has ``ceil(L/II) + D`` copies, ``D`` the largest distance of a value edge, and memory
  and register limits are checked on cycles ``< copies * II``: that window sees every live value of
  the steady state, and a value whose consumer copy lies past the program stays live to the end
  (the paper's Init rule, generalized from the last copy to every copy);
* a consumer issuing in the same cycle as its producer (zero delay) is allowed by DeadProp-1;
* Concurrency forbids a blocking op to start while another op of its group runs *strictly* past
  its own start; starting in the same cycle is allowed.  This keeps the problem invariant under
  scaling all cycle counts, the premise of cost normalization (the interval model does the same);
* dependences whose distance reaches past the program are stated on copy 0, shifted by II;
* machine-wide limits shared with the interval model (per-SM registers, setmaxnreg granularity,
  streaming buffers, forbidden transfers, the SM memory of hand-off channels) are included; with
  hand-off channels, whose slots count pipeline steps from the earliest start, some op starts at
  cycle 0 (as in the interval model; shifting a schedule left keeps it valid otherwise).
Like the paper it returns the first feasible point, with no secondary objectives and no symmetry
breaking.
"""

from __future__ import annotations

import math
import time

from ortools.sat.python import cp_model

from .bounds import RecurrenceError, compute_bounds
from .check import check
from .cpsat import run
from .explain import explain
from .graph import REGISTERS, Graph
from .normalize import normalize_graph
from .result import (INFEASIBLE, OPTIMAL, TIME_INDEXED, TIMEOUT, Infeasibility, Progress, Schedule,
                     SolveOptions)
from .search import critical_units, default_max_ii


class TimeIndexedModel:
    """The joint time-indexed model for one (II, L)."""

    def __init__(self, graph: Graph, ii: int, length: int):
        self.graph, self.ii, self.L = graph, ii, length
        g, m = graph, cp_model.CpModel()
        self.model = m
        reach = max([0] + [e.distance for e in g.edges if e.data])
        self.N = math.ceil(length / ii) + reach
        self.T = (self.N - 1) * ii + length
        self.window = min(self.T, self.N * ii)
        names = self.names = list(g.ops)
        N, T = self.N, self.T
        self.op = {v: [[m.new_bool_var(f"op[{v},{i},{t}]") for t in range(T)] for i in range(N)] for v in names}
        self.pre = {v: [[m.new_bool_var(f"pre[{v},{i},{t}]") for t in range(T)] for i in range(N)] for v in names}
        for v in names:
            dur = g.ops[v].duration
            for i in range(N):
                op, pre = self.op[v][i], self.pre[v][i]
                m.add_exactly_one(op)  # Uniqueness
                m.add(pre[0] == op[0])
                for t in range(1, T):
                    m.add(pre[t] == pre[t - 1] + op[t])
                for t in range(T):
                    if t + dur > T:  # Completion
                        m.add(op[t] == 0)
                    if i:  # Consistency
                        if t + i * ii < T:
                            m.add_implication(self.op[v][0][t], op[t + i * ii])
                        else:
                            m.add(self.op[v][0][t] == 0)
        self._dependences()
        self._capacity()
        self._warps()
        self._liveness()
        self._memory()
        self._registers()
        self._spills_and_concurrency()
        self._occupancy()

    # ------------------------------------------------------------------------------ helpers
    def started_before(self, v: str, i: int, t: int):
        """``pre[v,i,t-1]`` as a literal or constant (``t`` may be out of range)."""
        if t <= 0:
            return 0
        return self.pre[v][i][min(t, self.T) - 1]

    def running(self, v: str, i: int, t: int, span: int):
        """1 when copy ``i`` of ``v`` started in ``(t - span, t]`` (a 0/1 linear expression)."""
        expr = self.pre[v][i][t]
        if t - span >= 0:
            expr = expr - self.pre[v][i][t - span]
        return expr

    def _forbid_before(self, cause: list, v: str, i: int, t: int) -> None:
        """``AND cause => not pre[v,i,t-1]`` (v may not start before ``t``)."""
        b = self.started_before(v, i, t)
        if isinstance(b, int):
            if b:
                self.model.add_bool_or([c.Not() for c in cause])
            return
        self.model.add_bool_or([*(c.Not() for c in cause), b.Not()])

    def _dependences(self) -> None:
        g, N, T = self.graph, self.N, self.T
        for e in g.edges:
            for t in range(T):
                if e.distance < N:
                    for i in range(N - e.distance):  # Dependence
                        self._forbid_before([self.op[e.src][i][t]], e.dst, i + e.distance, t + e.delay)
                else:
                    self._forbid_before([self.op[e.src][0][t]], e.dst, 0, t + e.delay - e.distance * self.ii)

    def _capacity(self) -> None:
        g, m = self.graph, self.model
        for unit, cap in g.units.items():
            users = [(v, o, c) for v, op in g.ops.items() for o, c in op.spans(unit)]
            if not users:
                continue
            for t in range(self.T):
                terms = []
                for v, offset, cycles in users:
                    if t - offset < 0:
                        continue
                    for i in range(self.N):  # copy i holds the unit when it started in (t-o-c, t-o]
                        terms.append(self.pre[v][i][t - offset])
                        if t - offset - cycles >= 0:
                            terms.append(-self.pre[v][i][t - offset - cycles])
                m.add(sum(terms) <= cap)  # Capacity

    def _warps(self) -> None:
        g, m = self.graph, self.model
        G = self.G = g.machine.max_groups
        self.opw = {v: [m.new_bool_var(f"opw[{v},{w}]") for w in range(G)] for v in self.names}
        for v in self.names:
            m.add_exactly_one(self.opw[v])  # Warp uniqueness
        vl = [v for v in self.names if g.ops[v].variable_latency]
        if vl and len(vl) < len(self.names):
            for v in self.names:  # Variable latency: designated group 0
                m.add(self.opw[v][0] == int(g.ops[v].variable_latency))
        self.used = [m.new_bool_var(f"used[{w}]") for w in range(G)]
        for v in self.names:
            for w in range(G):
                m.add_implication(self.opw[v][w], self.used[w])

    def _liveness(self) -> None:
        g, m, N, T = self.graph, self.model, self.N, self.T
        self.live: dict[tuple[str, str], list[list]] = {}
        by_readers: dict[tuple, list[list]] = {}
        for v, memory in g.lifetimes():
            outs = g.readers(v, memory)
            key = (v, tuple(id(e) for e in outs))
            if key in by_readers:  # same consumers, same lifetime
                self.live[v, memory] = by_readers[key]
                continue
            rows = []
            for i in range(N):
                live = [m.new_bool_var(f"live[{v},{i},{t}]") for t in range(T + 1)]
                users = [(e.dst, i + e.distance) for e in outs if i + e.distance < N]
                past_end = any(i + e.distance >= N for e in outs)
                m.add(live[T] == int(past_end))  # Init
                mine = self.op[v][i]
                for t in range(T, -1, -1):
                    issued = mine[t] if t < T else None
                    here = [self.op[u][j][t] for u, j in users] if t < T else []
                    prev = live[t - 1] if t > 0 else None
                    # LiveProp-1 / LiveProp-2
                    if issued is not None and prev is not None:
                        m.add_bool_or([live[t].Not(), issued.Not(), prev.Not()])
                    if prev is not None:
                        m.add_bool_or([live[t].Not(), prev] + ([issued] if issued is not None else []))
                    else:
                        m.add_bool_or([live[t].Not()] + ([issued] if issued is not None else []))
                    # DeadProp-1 (a consumer in the producer's own cycle needs nothing earlier)
                    for use in here:
                        m.add_bool_or([live[t], use.Not()] + ([prev] if prev is not None else [])
                                      + ([issued] if issued is not None else []))
                    # DeadProp-2
                    if prev is not None:
                        m.add_bool_or([live[t], prev.Not(), *here])
                rows.append(live)
            self.live[v, memory] = by_readers[key] = rows

    def _handoffs(self) -> dict:
        """Per SM memory, what the hand-off channels take (graph.py): slots span the pipeline steps
        (``t // II`` of copy 0's start) from a value's producer to its crossing consumers' release."""
        g, m = self.graph, self.model
        total = {memory: 0 for memory in g.machine.memory}
        if not (any(op.handoff for op in g.ops.values()) or g.post_handoffs or g.post_staging):
            return total
        m.add_bool_or([self.op[v][0][0] for v in self.names])
        step = {v: sum((t // self.ii) * self.op[v][0][t] for t in range(self.T)) for v in self.names}

        def apart(a: str, b: str, tag: str):
            lit = m.new_bool_var(f"apart[{tag}]")
            for w in range(self.G):
                m.add_bool_or([self.opw[a][w].Not(), self.opw[b][w], lit])
            return lit

        top = self.N + max([0] + [e.distance + e.hold for e in g.edges]) + 1
        for v, op in g.ops.items():
            if not op.handoff:
                continue
            slots = m.new_int_var(0, top, f"slots[{v}]")
            for j, e in enumerate(g.handoff_edges(v)):
                lit = apart(v, e.dst, f"{v},{j}")
                m.add(slots >= step[e.dst] + e.distance + e.hold - step[v] + 1).only_enforce_if(lit)
                m.add(slots >= 1).only_enforce_if(lit)
            for memory, amount in op.handoff.items():
                total[memory] += amount * slots
        for i, ph in enumerate(g.post_handoffs):
            lit = apart(ph.src, ph.dst, f"post{i}")
            for memory, amount in ph.footprint.items():
                total[memory] += amount * lit
        for i, ps in enumerate(g.post_staging):
            # taken unless a host runs wholly with dst: each host not wholly there forces its literal, and
            # all of them together force the buffer's
            taken = m.new_bool_var(f"staging[{i}]")
            gone = []
            for j, host in enumerate(ps.hosts):
                lit = m.new_bool_var(f"staging[{i},{j}]")
                for n in host:
                    for w in range(self.G):
                        m.add_bool_or([self.opw[n][w].Not(), self.opw[ps.dst][w], lit])
                gone.append(lit)
            m.add_bool_or([taken] + [lit.Not() for lit in gone])
            for memory, amount in ps.footprint.items():
                total[memory] += amount * taken
        return total

    def _memory(self) -> None:
        g, m = self.graph, self.model
        reserved = g.reserved_memory()
        handoff = self._handoffs()
        for memory, cap in g.machine.memory.items():
            values = [v for v, mem in self.live if mem == memory]
            if not values:
                if not isinstance(handoff[memory], int):
                    m.add(handoff[memory] <= cap - reserved[memory])
                continue
            for t in range(self.window):  # Memory capacity
                m.add(sum(self.live[v, memory][i][t] * g.ops[v].footprint[memory]
                          for v in values for i in range(self.N)) + handoff[memory] <= cap - reserved[memory])

    def _registers(self) -> None:
        g, m, mach = self.graph, self.model, self.graph.machine
        values = [v for v, mem in self.live if mem == REGISTERS]
        cap = mach.group_register_cap
        self.alloc = [m.new_int_var(0, cap // mach.reg_granularity, f"alloc8[{w}]") for w in range(self.G)]
        for w in range(self.G):
            peak = m.new_int_var(0, cap, f"peak[{w}]")
            for t in range(self.window):  # Register limit
                terms = []
                for v in values:
                    for i in range(self.N):
                        both = m.new_bool_var(f"lw[{v},{i},{t},{w}]")
                        m.add_bool_or([self.live[v, REGISTERS][i][t].Not(), self.opw[v][w].Not(), both])
                        terms.append(both * g.ops[v].registers)
                for (_, dst), amount in g.operand_registers().items():    # operands held while dst runs
                    dur = g.ops[dst].duration
                    for i in range(self.N):
                        both = m.new_bool_var(f"lo[{dst},{i},{t},{w}]")
                        m.add(both >= self.running(dst, i, t, dur) + self.opw[dst][w] - 1)
                        terms.append(both * amount)
                if terms:
                    m.add(sum(terms) <= peak)
            m.add(self.alloc[w] * mach.reg_granularity >= peak + mach.base_registers * self.used[w])
        m.add(sum(self.alloc) * mach.reg_granularity * mach.threads_per_group <= mach.registers_per_sm)

    def _spills_and_concurrency(self) -> None:
        g, m, N, T, G = self.graph, self.model, self.N, self.T, self.G
        cross_into: dict[str, list] = {v: [] for v in self.names}
        for e in g.edges:
            if not e.transfer or e.src == e.dst:
                continue
            cross = m.new_bool_var(f"cross[{e.src},{e.dst}]")
            for w in range(G):
                m.add_bool_or([self.opw[e.src][w].Not(), self.opw[e.dst][w], cross])
            if not g.machine.allow_transfers:
                m.add(cross == 0)
            cross_into[e.dst].append(cross)
            cost = g.transfer_cost(e)
            if cost:  # Cross-warp spills
                for t in range(T):
                    if e.distance < N:
                        for i in range(N - e.distance):
                            self._forbid_before([self.op[e.src][i][t], cross], e.dst, i + e.distance,
                                                t + e.delay + cost)
                    else:
                        self._forbid_before([self.op[e.src][0][t], cross], e.dst, 0,
                                            t + e.delay + cost - e.distance * self.ii)
        for v in self.names:
            if not g.may_block(v):
                continue
            enforce_blk = []
            if not g.always_blocks(v):
                blk = m.new_bool_var(f"blk[{v}]")
                for c in cross_into[v]:
                    m.add_implication(c, blk)
                enforce_blk = [blk]
            for o in self.names:
                if o == v:
                    continue
                same = m.new_bool_var(f"same[{v},{o}]")
                for w in range(G):
                    m.add_bool_or([self.opw[v][w].Not(), self.opw[o][w].Not(), same])
                for i in range(N):
                    for t in range(1, T):  # Concurrency (o started strictly before t, still running)
                        busy = sum(self.running(o, j, t - 1, g.ops[o].flight - 1) for j in range(N))
                        m.add(busy == 0).only_enforce_if([self.op[v][i][t], same, *enforce_blk])

    def _occupancy(self) -> None:
        """Group occupancy (graph.py): per group, at most one op holds the stream at each cycle (its
        issue, then its send when the result leaves; where the machine states `stream_order`), and
        issue cycles plus the hand-offs the assignment implies fit in II."""
        g, m, N, T, G = self.graph, self.model, self.N, self.T, self.G
        if not g.occupies():
            return
        load: list[list] = [[] for _ in range(G)]
        charged: dict[tuple, object] = {}

        def charge(key: tuple, cost: int, w: int, clause: list) -> None:
            if key not in charged:
                charged[key] = m.new_bool_var(f"{key}")
                load[w].append(cost * charged[key])
            m.add_bool_or(clause + [charged[key]])

        for e in g.edges:
            if not e.data or e.src == e.dst:
                continue
            src = g.ops[e.src]
            recv = g.channel_receive_cost(src.channel_key)
            for w in range(G):
                xs, xd = self.opw[e.src][w], self.opw[e.dst][w]
                if src.send_cost:
                    charge(("send", e.src, w), src.send_cost, w, [xs.Not(), xd])
                if recv:
                    charge(("recv", src.channel_key, w), recv, w, [xd.Not(), xs])
                if e.blocking and src.wait_cost:
                    charge(("wait", e.src, w), src.wait_cost, w, [xs.Not(), xd.Not()])
        for w in range(G):  # Group occupancy
            m.add(sum((op.issue + op.stream) * self.opw[v][w] for v, op in g.ops.items() if op.issue or op.stream)
                  + sum(load[w]) <= self.ii)
            # the op's window on the stream: issue, then the send when its result leaves the group
            if not g.machine.stream_order:
                continue
            windows = [(v, g.ops[v].issue, charged.get(("send", v, w))) for v in self.names]
            windows = [(v, short, send) for v, short, send in windows if short or send is not None]
            if len(windows) < 2:
                continue
            for t in range(T):  # One instruction stream
                holds = []
                for v, short, send in windows:
                    h = m.new_bool_var(f"holds[{v},{w},{t}]")
                    if short:
                        run = sum(self.running(v, i, t, short) for i in range(N))
                        m.add(run <= h + N * (1 - self.opw[v][w]))
                    if send is not None:
                        run = sum(self.running(v, i, t, short + g.ops[v].send_cost) for i in range(N))
                        m.add(run <= h + N * (2 - self.opw[v][w] - send))
                    holds.append(h)
                m.add(sum(holds) <= 1)

    def extract(self, res) -> tuple[dict[str, int], dict[str, int]]:
        start = {v: next(t for t in range(self.T) if res.value(self.op[v][0][t])) for v in self.names}
        group = {v: next(w for w in range(self.G) if res.value(self.opw[v][w])) for v in self.names}
        return start, group


def plain_min_length(graph: Graph, ii: int, horizon: int, time_limit: float):
    """Time-indexed ZLP of plain modulo scheduling at ``ii``: shortest length, or None / 'unknown'."""
    m = cp_model.CpModel()
    a = {v: [m.new_bool_var(f"a[{v},{t}]") for t in range(horizon - op.duration + 1)]
         for v, op in graph.ops.items()}
    start = {}
    for v, row in a.items():
        m.add_exactly_one(row)
        start[v] = sum(t * x for t, x in enumerate(row))
    for e in graph.edges:
        m.add(start[e.dst] + e.distance * ii >= start[e.src] + e.delay)
    for unit, cap in graph.units.items():
        rows = [[] for _ in range(ii)]
        for v, op in graph.ops.items():
            for c in (c for offset, cycles in op.spans(unit) for c in range(offset, offset + cycles)):
                for t, x in enumerate(a[v]):
                    rows[(t + c) % ii].append(x)
        for row in rows:
            if row:
                m.add(sum(row) <= cap)
    length = m.new_int_var(0, horizon, "L")
    for v, op in graph.ops.items():
        m.add(length >= start[v] + op.duration)
    m.minimize(length)
    res = run(m, time_limit)
    if res.status == "infeasible":
        return None
    if res.status != "optimal":
        return "unknown"
    return res.value(length)


def search_time_indexed(graph: Graph, options: SolveOptions) -> Schedule:
    """Algorithm 1 with the time-indexed model: II and L step by one normalized unit."""
    t0 = time.perf_counter()
    deadline = t0 + options.time_limit
    graph.validate()
    norm_graph, norm = normalize_graph(graph, options.normalize_budget)
    scale = norm.scale
    infeasible: list[Infeasibility] = []

    def result(status: str, **kw) -> Schedule:
        bounds_kw = dict(lower_bound=lb_orig, res_mii=b.res_mii, rec_mii=b.rec_mii) if b else \
            dict(lower_bound=0, res_mii=0, rec_mii=0)
        return Schedule(status=status, solve_seconds=time.perf_counter() - t0, encoding=TIME_INDEXED,
                        infeasible=infeasible, normalization={**norm.to_json(), "exact": norm.exact},
                        bound_reasons=b.reasons(norm_graph) if b else [], **bounds_kw, **kw)

    b = None
    lb_orig = 0
    try:
        b = compute_bounds(norm_graph)
    except RecurrenceError as err:
        infeasible.append(Infeasibility(0, 0, [str(err)], ["recurrence"], True))
        return result(INFEASIBLE, ii=None, proven_optimal=False, message=str(err))
    lb = b.lower_bound
    lb_orig = int(lb * scale)
    hi = default_max_ii(norm_graph, lb)
    if options.max_ii:
        hi = max(lb, int(options.max_ii / scale))

    def emit(kind: str, ii, detail: str = "") -> None:
        if options.progress is not None:
            options.progress(Progress(kind, ii, lb, time.perf_counter() - t0, detail))

    def left() -> float:
        return deadline - time.perf_counter()

    emit("bounds", lb)
    stages = None
    for ii in range(lb, hi + 1):
        horizon = (math.ceil(default_max_ii(norm_graph, 1) / ii) + 2) * ii
        emit("try", ii)
        min_len = plain_min_length(norm_graph, ii, horizon, left())
        if min_len == "unknown":
            return result(TIMEOUT, ii=None, proven_optimal=False, message="time limit hit")
        if min_len is None:
            infeasible.append(Infeasibility(ii, ii, ["no modulo schedule even on one warp group"], [], True))
            continue
        if stages is None:
            stages = math.ceil(min_len / ii) + options.extra_stages
        for length in range(min_len, stages * ii + 1):
            tm = TimeIndexedModel(norm_graph, ii, length)
            res = run(tm.model, left(), options.workers, options.deterministic)
            if res.has_solution:
                return _found(result, tm, res, graph, norm_graph, scale, norm.exact, options, infeasible,
                              stages)
            if res.status != "infeasible":
                return result(TIMEOUT, ii=None, proven_optimal=False, stage_bound=stages,
                              message=f"time limit hit at II {ii}, L {length} (normalized units)")
        why = explain(norm_graph, ii, stages, time_limit=max(0.1, min(left(), 10.0))) \
            if options.explain and left() > 0 else None
        infeasible.append(Infeasibility(int(ii * scale), int(ii * scale),
                                        why.reasons if why else ["infeasible"],
                                        why.families if why else [], True))
        emit("infeasible", ii)
    return result(INFEASIBLE, ii=None, proven_optimal=False, stage_bound=stages,
                  message=f"no schedule for II up to {hi} (normalized units)")


def _found(result, tm: TimeIndexedModel, res, graph: Graph, norm_graph: Graph, scale, exact: bool,
           options: SolveOptions, infeasible, stages) -> Schedule:
    start_n, group = tm.extract(res)
    start = {v: int(s * scale) for v, s in start_n.items()}
    ii = int(tm.ii * scale) if exact else round(tm.ii * scale)
    report = check(norm_graph, tm.ii, start_n, group, critical_units(graph, options))
    if not report.ok:
        raise AssertionError(f"internal error: time-indexed schedule fails the checker: {report.violations}")
    length = max(start[v] + op.duration for v, op in graph.ops.items())
    return result(OPTIMAL, ii=ii, proven_optimal=True, length=length, stages=math.ceil(length / ii),
                  stage_bound=stages, assignment=group, schedule=start,
                  stage={v: s // ii for v, s in start.items()},
                  registers={k: v for k, v in report.register_alloc.items()},
                  objectives={"length": length, "channels": report.channels,
                              "mma_waits": report.mma_waits, "groups": len(set(group.values())),
                              "registers": max(report.register_peak.values(), default=0)},
                  message=f"II {ii} ({'exact' if exact else 'approximate'} normalization)")
