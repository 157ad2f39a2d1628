"""The II search (Twill's Algorithm 1) over the exact-cycle interval model.

1. II starts at the lower bound (ResMII, RecMII, and RecMII with unit exclusivity).
2. Plain modulo scheduling (no warp groups) gives the first II with any modulo schedule and its
   shortest length ``L_min``; the stage bound is ``ceil(L_min / II) + extra_stages`` (Algorithm 1
   keeps ``ceil(L / II)`` fixed while it grows ``L``).
3. The joint model is solved from there with the objectives (``length`` first: Algorithm 1's first
   feasible ``L``) minimized lexicographically inside the stage bound.

When every delay is non-negative, feasibility is monotone in II (joint.py explains why), so one
infeasibility proof at II covers every smaller II.  The search then probes multiples of the graph's
time quantum ``Q`` (the gcd of its cycle counts, where the model is small) by galloping and
bisection, and finally bisects the last ``Q`` cycles one by one — for the plain schedule with at most half
the time left (``LAST_QUANTUM_SHARE``): those probes only sharpen the proof below a plain schedule already
found, and a time-out there leaves the joint model time to find a schedule (not proven) rather than none.  Without that guarantee (negative
ordering delays) it steps II by one.
"""

from __future__ import annotations

import math
import time
from typing import Callable

from . import explain as explain_mod
from .bounds import Bounds, RecurrenceError, compute_bounds
from .check import check
from .cpsat import run
from .graph import Graph
from .joint import JointModel
from .result import (FEASIBLE_TIMEOUT, INFEASIBLE, INTERVAL, OPTIMAL, TIMEOUT, Infeasibility,
                     Progress, Schedule, SolveOptions)

OBJECTIVES = ("length", "mma_waits", "channels", "groups", "registers")
# the share of the time left that the plain schedule's last-quantum probes may take: they only sharpen the
# proof below a plain schedule already found (at one-cycle resolution a small graph's proof can take minutes),
# and the joint model needs the rest to find a schedule at all (the joint model's own last quantum is not
# capped: a schedule is in hand by then)
LAST_QUANTUM_SHARE = 0.5


def default_max_ii(graph: Graph, lower_bound: int) -> int:
    """An II at which iterations need not overlap: one iteration's sequential length."""
    seq = sum(op.duration for op in graph.ops.values())
    seq += sum(max(0, e.delay) for e in graph.edges)
    seq += sum(graph.transfer_cost(e) for e in graph.edges)
    # every hand-off on one group (a generous upper bound on what one group pays for them)
    seq += sum(op.send_cost + op.wait_cost + op.receive_cost * len(graph.out_edges(op.name))
               for op in graph.ops.values())
    return max(lower_bound, seq)


def critical_units(graph: Graph, options: SolveOptions) -> tuple[str, ...]:
    """Units whose issuing groups should not block: ``options.mma_units`` or the bottleneck."""
    if options.mma_units is not None:
        return tuple(options.mma_units)
    load = {u: sum(op.usage.get(u, 0) for op in graph.ops.values()) / cap for u, cap in graph.units.items()}
    top = max(load.values(), default=0)
    units = {u for u, v in load.items() if top and v == top}
    if "tc" in graph.units:
        units.add("tc")
    return tuple(sorted(units))


def plain_horizon(graph: Graph, ii: int) -> int:
    """Stages allowed to the plain modulo schedule: enough for one iteration run sequentially."""
    return math.ceil(default_max_ii(graph, 1) / ii) + 2


class _Probe:
    """Outcome of solving one II: status optimal / feasible / infeasible / unknown."""

    def __init__(self, ii: int, jm: JointModel, res, optimized: bool = False):
        self.ii, self.jm, self.res, self.optimized = ii, jm, res, optimized

    @property
    def status(self) -> str:
        return self.res.status

    @property
    def feasible(self) -> bool:
        return self.res.has_solution


class _Search:
    """State of one search: clock, progress reporting, proofs collected so far."""

    def __init__(self, graph: Graph, options: SolveOptions):
        unknown = set(options.objectives) - set(OBJECTIVES)
        if unknown:
            raise ValueError(f"unknown objectives {sorted(unknown)}; choose from {OBJECTIVES}")
        self.graph = graph
        self.opt = options
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + options.time_limit
        self.infeasible: list[Infeasibility] = []
        self.proven = True
        self.lower_bound = 0
        self.bounds: Bounds | None = None
        self.monotone = all(e.delay >= 0 for e in graph.edges)
        self.quantum = math.gcd(*graph.cycle_costs()) if graph.cycle_costs() else 1
        self.cap_until: float | None = None      # while set, probes stop by then (see LAST_QUANTUM_SHARE)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def emit(self, kind: str, ii: int | None, detail: str = "", ii_max: int | None = None) -> None:
        if self.opt.progress is not None:
            self.opt.progress(Progress(kind, ii, self.lower_bound, time.perf_counter() - self.t0,
                                       detail, ii_max))

    def solve(self, jm: JointModel, objective=None, first_solution: bool = False):
        if objective is not None:
            jm.model.minimize(objective)
        limit = self.left() if self.cap_until is None else min(self.left(), self.cap_until - time.perf_counter())
        return run(jm.model, limit, self.opt.workers, self.opt.deterministic, first_solution=first_solution)

    # ------------------------------------------------------------------------------ II search
    def smallest(self, lo: int, hi: int, probe: Callable[[int, bool], _Probe],
                 explain: Callable[[int, int, bool], None], last_share: float | None = None):
        """Smallest II in ``lo..hi`` whose probe is feasible, recording the proofs on the way.

        ``probe(ii, final)`` solves one II (``final``: optimize, else stop at a first solution);
        ``explain(first, last, split, explained)`` records that IIs ``first..last`` are proven infeasible
        (with their reasons where ``explained``), once the search is over.
        Returns (feasible probe or None, largest proven-infeasible II or None, complete) where
        ``complete`` says every II below the answer (or all of ``lo..hi``) was proven infeasible.
        ``last_share``: the most of the time left the last quantum's probes may take.
        """
        if self.opt.explain_found:   # explained as they are proven, while the time limit leaves room
            return self._smallest(lo, hi, probe, lambda a, b, split: explain(a, b, split, True), last_share)
        # a compiler needs the reasons of a refusal, not why a cheaper II than its schedule's failed (they
        # cost solver time): the proofs wait for the outcome and are explained only where nothing was found
        pending: list[tuple[int, int, bool]] = []
        found, bad, complete = self._smallest(lo, hi, probe, lambda a, b, split: pending.append((a, b, split)),
                                              last_share)
        for a, b, split in pending:
            explain(a, b, split, found is None)
        return found, bad, complete

    def _smallest(self, lo: int, hi: int, probe: Callable[[int, bool], _Probe],
                  explain: Callable[[int, int, bool], None], last_share: float | None = None):
        first = probe(lo, True)
        if first.feasible:
            return first, None, True
        if first.status != "infeasible":
            return None, None, False
        bad, good = lo, None
        if not self.monotone:  # every II needs its own proof
            explain(lo, lo, False)
            for ii in range(lo + 1, hi + 1):
                p = probe(ii, False)
                if p.status != "infeasible":
                    return (p if p.feasible else None), bad, p.feasible
                explain(ii, ii, False)
                bad = ii
            return None, bad, True
        q = self.quantum
        step, ii = q, (lo // q + 1) * q
        while good is None:  # gallop over multiples of the quantum (small models)
            p = probe(min(ii, hi), False)
            if p.feasible:
                good = p
            elif p.status != "infeasible":
                explain(lo, bad, True)
                return None, bad, False
            elif p.ii == hi:
                explain(lo, hi, True)
                return None, hi, True
            else:
                bad, ii, step = p.ii, ii + step, step * 2
        while True:  # bisect on the quantum grid
            grid = range((bad // q + 1) * q, good.ii, q)
            if not grid:
                break
            p = probe(grid[len(grid) // 2], False)
            if p.status == "unknown":
                explain(lo, bad, True)
                return good, bad, False
            good, bad = (p, bad) if p.feasible else (good, p.ii)
        explain(lo, bad, True)  # coarse proofs first: they are cheap to explain
        coarse = bad
        below = good.ii - 1   # with costs on the quantum grid the answer is usually on it too: one proof
        self.cap_until = None if last_share is None else time.perf_counter() + self.left() * last_share
        try:
            while good.ii - bad > 1:  # the last quantum, one cycle resolution at the end
                p = probe(below if below > bad else _coarsest_between(bad, good.ii, q), False)
                below = 0
                if p.feasible:
                    good = p
                elif p.status == "infeasible":
                    bad = p.ii
                else:
                    break
        finally:
            self.cap_until = None
        if bad > coarse:
            explain(coarse + 1, bad, False)
        return good, bad, good.ii - bad == 1

    def record(self, lo: int, hi: int, stages: int, warp: bool, split: bool = True, explained: bool = True) -> None:
        """Store that IIs ``lo..hi`` are proven infeasible.

        With ``split``, the first II gets its own explanation (why not at the bound?); a range is
        explained at its top, which covers it because feasibility is monotone in II.
        """
        if split and hi > lo:
            self._record(lo, lo, stages, warp, explained)
            lo += 1
        self._record(lo, hi, stages, warp, explained)

    def _record(self, lo: int, hi: int, stages: int, warp: bool, explained: bool) -> None:
        reasons, families = ["infeasible (proven; not explained)"], []
        if self.opt.explain and explained and self.left() > 0:
            budget = min(self.left(), max(2.0, self.opt.time_limit / 4))
            why = explain_mod.explain(self.graph, hi, stages, warp=warp, time_limit=budget,
                                      symmetry=self.opt.symmetry_breaking)
            if why.families or why.complete:
                reasons, families = why.reasons, why.families
                if not why.complete:
                    reasons = ["(a sufficient set; not reduced further within the time limit)"] + reasons
            if not warp:
                reasons = ["no modulo schedule even on one warp group: " + r for r in reasons]
        if lo < hi:
            reasons = [f"shown at II {hi}; feasibility is monotone in II, so every smaller II fails too"] + reasons
        self.infeasible.append(Infeasibility(lo, hi, reasons, families, True))
        self.emit("infeasible", lo, "; ".join(reasons), hi)

    def result(self, status: str, **kw) -> Schedule:
        b = self.bounds
        return Schedule(status=status, lower_bound=self.lower_bound, res_mii=b.res_mii if b else 0,
                        rec_mii=b.rec_mii if b else 0, solve_seconds=time.perf_counter() - self.t0,
                        encoding=INTERVAL, infeasible=self.infeasible,
                        bound_reasons=b.reasons(self.graph) if b else [], **kw)

    def timeout(self, message: str, stages: int | None = None) -> Schedule:
        self.emit("timeout", None, message)
        return self.result(TIMEOUT, ii=None, proven_optimal=False, stage_bound=stages, message=message)


def _coarsest_between(lo: int, hi: int, q: int) -> int:
    """An integer strictly between lo and hi, with the largest gcd with q, nearest the middle."""
    mid = (lo + hi) / 2
    for d in sorted((d for d in range(1, q + 1) if q % d == 0), reverse=True):
        first = (lo // d + 1) * d
        if first < hi:
            options = range(first, hi, d)
            return min(options, key=lambda x: (abs(x - mid), x))
    raise AssertionError("no integer strictly between bounds")


def search_interval(graph: Graph, options: SolveOptions) -> Schedule:
    """Algorithm 1 on the interval model; see the module docstring."""
    graph.validate()
    s = _Search(graph, options)
    try:
        s.bounds = compute_bounds(graph)
    except RecurrenceError as err:
        s.infeasible.append(Infeasibility(0, 0, [str(err)], ["recurrence"], True))
        return s.result(INFEASIBLE, ii=None, proven_optimal=False, message=str(err))
    lb = s.lower_bound = s.bounds.lower_bound
    hi = max(lb, options.max_ii) if options.max_ii else default_max_ii(graph, lb)
    s.emit("bounds", lb, "; ".join(s.bounds.reasons(graph)))

    # Phase 1: the first II with a plain modulo schedule, and its shortest length.
    horizon = plain_horizon(graph, lb)

    def plain(ii: int, final: bool) -> _Probe:
        s.emit("try", ii, "plain modulo schedule")
        jm = JointModel(graph, ii, horizon, warp=False)
        return _Probe(ii, jm, s.solve(jm, jm.length))

    found, bad, complete = s.smallest(lb, hi, plain, lambda a, b, split, e: s.record(a, b, horizon, False, split, e),
                                      LAST_QUANTUM_SHARE)
    if found is None:
        if complete:
            return s.result(INFEASIBLE, ii=None, proven_optimal=False,
                            message=f"no modulo schedule for II in {lb}..{hi}")
        return s.timeout("time limit hit while looking for a plain modulo schedule")
    s.proven = s.proven and complete
    ii_plain = found.ii
    if found.res.status != "optimal":
        return s.timeout("time limit hit while computing the plain schedule length")
    min_len = found.res.value(found.jm.length) * found.jm.quantum
    stages = math.ceil(min_len / ii_plain) + options.extra_stages

    # Phase 2: the joint model from the first plain-feasible II upward.
    units = critical_units(graph, options)
    order = tuple(options.objectives)

    def joint(ii: int, final: bool, hint: dict | None = None) -> _Probe:
        s.emit("try", ii, "joint model")
        jm = JointModel(graph, ii, stages, symmetry=options.symmetry_breaking,
                        min_length=min_len if ii == ii_plain else 0, mma_units=units)
        if hint is not None:
            jm.hint(hint)
        if final:
            return _Probe(ii, jm, s.solve(jm, jm.lexicographic(order)), optimized=True)
        return _Probe(ii, jm, s.solve(jm, first_solution=True))

    found, bad, complete = s.smallest(ii_plain, hi, joint, lambda a, b, split, e: s.record(a, b, stages, True, split, e))
    if found is None:
        if complete:
            return s.result(INFEASIBLE, ii=None, proven_optimal=False, stage_bound=stages,
                            message=f"no schedule with at most {stages} stages for II in {lb}..{hi}")
        return s.timeout("time limit hit before any schedule was found", stages)
    s.proven = s.proven and complete
    if not complete:
        s.infeasible.append(Infeasibility((bad or ii_plain - 1) + 1, found.ii - 1,
                                          ["solver time-out: not proven"], [], False))
    s.emit("feasible", found.ii, f"stage bound {stages}")
    return _finish(s, found, joint, stages, units, order, bad)


def _finish(s: _Search, found: _Probe, joint, stages: int, units, order, bad) -> Schedule:
    """Optimize the objectives at the chosen II (unless done already) and package the answer."""
    res, jm = found.res, found.jm
    best = jm.extract(res)
    if not found.optimized and s.left() > 0:
        s.emit("refine", found.ii, "objectives")
        final = joint(found.ii, True, best)
        if final.feasible:
            res, jm = final.res, final.jm
            best = jm.extract(res)
    ii = found.ii
    report = check(s.graph, ii, best["start"], best["group"], units)
    if not report.ok:
        raise AssertionError(f"internal error: solver schedule fails the checker: {report.violations}")
    mapping = _group_map(best["group"], s.graph)
    objectives = {"length": best["length"], "mma_waits": report.mma_waits, "channels": report.channels,
                  "groups": len(mapping), "registers": max(report.register_peak.values(), default=0)}
    status = OPTIMAL if s.proven else FEASIBLE_TIMEOUT
    s.emit("done", ii, status)
    gap = 0 if s.proven else ii - ((bad + 1) if bad is not None else s.lower_bound)
    return s.result(status, ii=ii, proven_optimal=s.proven, length=best["length"],
                    stages=math.ceil(best["length"] / ii), stage_bound=stages,
                    assignment={n: mapping[g] for n, g in best["group"].items()},
                    schedule=best["start"], stage=best["stage"],
                    registers={mapping[g]: a for g, a in report.register_alloc.items()},
                    objectives=objectives, objectives_proven=res.status == "optimal", gap=gap,
                    message=f"II {ii} ({'proven optimal' if s.proven else f'optimal within {gap} cycles'})")


def _group_map(group: dict[str, int], graph: Graph) -> dict[int, int]:
    """Solver group index -> reported index (variable-latency group first, then by first op)."""
    order: list[int] = []
    names = sorted(graph.ops, key=lambda n: (not graph.ops[n].variable_latency, list(graph.ops).index(n)))
    for n in names:
        if group[n] not in order:
            order.append(group[n])
    return {g: i for i, g in enumerate(order)}
