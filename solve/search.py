"""The II search (Twill's Algorithm 1) over the exact-cycle interval model.

1. II starts at ``max(ResMII, RecMII)``.
2. Plain modulo scheduling (no warp groups) gives the first II with any modulo schedule and its
   shortest length ``L_min``; the stage bound is ``ceil(L_min / II) + extra_stages`` (Algorithm 1
   keeps ``ceil(L / II)`` fixed while it grows ``L``).
3. The joint model is solved at that II with ``L`` minimized inside the stage bound: the first
   feasible point is optimal.  When an II is infeasible, one model with II as a variable proves the
   following IIs infeasible at once and lands on the next feasible one, so a register-bound loop does
   not need one solve per cycle.
4. At the optimal II, secondary objectives are optimized lexicographically.
"""

from __future__ import annotations

import math
import time
from typing import Any

from . import explain as explain_mod
from .bounds import RecurrenceError, compute_bounds
from .check import check
from .cpsat import run, set_hint
from .graph import Graph
from .joint import JointModel
from .result import (FEASIBLE_TIMEOUT, INFEASIBLE, INTERVAL, OPTIMAL, TIMEOUT, Infeasibility,
                     Progress, Schedule, SolveOptions)

SECONDARY = [("channels", "fewest_channels"), ("mma_waits", "fewest_mma_waits"),
             ("groups", "fewest_groups"), ("registers", "lowest_registers")]


def default_max_ii(graph: Graph, lower_bound: int) -> int:
    """An II at which iterations need not overlap: one iteration's sequential length."""
    seq = sum(op.duration for op in graph.ops.values())
    seq += sum(max(0, e.delay) for e in graph.edges)
    seq += sum(op.transfer_cost for op in graph.ops.values())
    return max(lower_bound, seq)


class _Search:
    """State of one search: clock, progress reporting, proofs collected so far."""

    def __init__(self, graph: Graph, options: SolveOptions):
        self.graph = graph
        self.opt = options
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + options.time_limit
        self.infeasible: list[Infeasibility] = []
        self.proven = True
        self.lower_bound = 0

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def emit(self, kind: str, ii: int | None, detail: str = "", ii_max: int | None = None) -> None:
        if self.opt.progress is not None:
            self.opt.progress(Progress(kind, ii, self.lower_bound, time.perf_counter() - self.t0,
                                       detail, ii_max))

    def solve(self, jm: JointModel, objective=None):
        if objective is not None:
            jm.model.minimize(objective)
        return run(jm.model, self.left(), self.opt.workers, self.opt.deterministic)

    def record(self, lo: int, hi: int, stages: int, warp: bool, proven: bool = True) -> None:
        """Store why IIs ``lo..hi`` fail, with an explanation when asked for."""
        if not proven:
            self.proven = False
            self.infeasible.append(Infeasibility(lo, hi, ["solver time-out: not proven"], [], False))
            return
        if self.opt.explain and self.left() > 0:
            ii: Any = lo if lo == hi else (lo, hi)
            why = explain_mod.explain(self.graph, ii, stages, warp=warp,
                                      time_limit=min(self.left(), max(1.0, self.opt.time_limit / 4)),
                                      symmetry=self.opt.symmetry_breaking)
            reasons, families = why.reasons, why.families
            if not warp:
                reasons = ["no modulo schedule even on one warp group: " + r for r in reasons]
        else:
            reasons, families = ["infeasible (not explained)"], []
        self.infeasible.append(Infeasibility(lo, hi, reasons, families, True))
        self.emit("infeasible", lo, "; ".join(reasons), hi)

    # ------------------------------------------------------------------------------ phases
    def first_ii(self, lo: int, hi: int, build) -> tuple[str, int | None, Any]:
        """Smallest feasible II in ``lo..hi`` (fixed-II solve at ``lo``, then one ranged solve).

        Returns (status, ii, run) with status in optimal / infeasible / unknown / feasible; the
        infeasible prefix is recorded by the caller.
        """
        self.emit("try", lo)
        jm = build(lo)
        first = self.solve(jm, jm.length)
        if first.has_solution:
            return "optimal", lo, (jm, first)
        if first.status != "infeasible":
            return "unknown", None, None
        if lo == hi:
            return "infeasible", None, None
        self.emit("try", lo + 1, "range", hi)
        jr = build((lo + 1, hi))
        ranged = self.solve(jr, jr.II)
        if ranged.status == "infeasible":
            return "infeasible", None, None
        if not ranged.has_solution:
            return "unknown", None, None
        return ("optimal" if ranged.status == "optimal" else "feasible"), ranged.value(jr.II), (jr, ranged)


def _plain_horizon(graph: Graph, ii: int) -> int:
    return math.ceil(default_max_ii(graph, 1) / ii) + 2


def _result(search: _Search, status: str, bounds, **kw) -> Schedule:
    return Schedule(status=status, lower_bound=search.lower_bound, res_mii=bounds.res_mii if bounds else 0,
                    rec_mii=bounds.rec_mii if bounds else 0, solve_seconds=time.perf_counter() - search.t0,
                    encoding=INTERVAL, infeasible=search.infeasible,
                    bound_reasons=bounds.reasons(search.graph) if bounds else [], **kw)


def search_interval(graph: Graph, options: SolveOptions) -> Schedule:
    """Algorithm 1 on the interval model; see the module docstring."""
    graph.validate()
    s = _Search(graph, options)
    try:
        bounds = compute_bounds(graph)
    except RecurrenceError as err:
        s.infeasible.append(Infeasibility(0, 0, [str(err)], ["recurrence"], True))
        return _result(s, INFEASIBLE, None, ii=None, proven_optimal=False, message=str(err))
    lb = s.lower_bound = bounds.lower_bound
    hi = max(lb, options.max_ii) if options.max_ii else default_max_ii(graph, lb)
    s.emit("bounds", lb, "; ".join(bounds.reasons(graph)))

    # Phase 1: first II with a plain modulo schedule, and its shortest length.
    def plain(ii):
        lo = ii if isinstance(ii, int) else ii[0]
        return JointModel(graph, ii, _plain_horizon(graph, lo), warp=False)

    status, ii_plain, found = s.first_ii(lb, hi, plain)
    if status in ("unknown", "feasible"):
        return _timeout(s, bounds, "time limit hit while looking for a plain modulo schedule")
    if status == "infeasible":
        s.record(lb, hi, _plain_horizon(graph, lb), warp=False)
        return _result(s, INFEASIBLE, bounds, ii=None, proven_optimal=False,
                       message=f"no modulo schedule for II in {lb}..{hi}")
    if ii_plain > lb:
        s.record(lb, ii_plain - 1, _plain_horizon(graph, lb), warp=False)
    jm, res = found
    if not jm.fixed_ii:  # the ranged model proved the II; get the shortest length at that II
        jm = plain(ii_plain)
        res = s.solve(jm, jm.length)
        if not res.has_solution:
            return _timeout(s, bounds, "time limit hit while computing the plain schedule length")
    min_len = res.value(jm.length)
    stages = math.ceil(min_len / ii_plain) + options.extra_stages

    # Phase 2: joint model from the first plain-feasible II upward.
    def joint(ii):
        return JointModel(graph, ii, stages, symmetry=options.symmetry_breaking,
                          min_length=min_len if ii == ii_plain else 0, mma_units=options.mma_units)

    status, ii, found = s.first_ii(ii_plain, hi, joint)
    if status == "unknown":
        return _timeout(s, bounds, "time limit hit before any schedule was found", stages)
    if status == "infeasible":
        s.record(ii_plain, hi, stages, warp=True)
        return _result(s, INFEASIBLE, bounds, ii=None, proven_optimal=False, stage_bound=stages,
                       message=f"no schedule with at most {stages} stages for II in {lb}..{hi}")
    if ii > ii_plain:
        s.record(ii_plain, ii_plain, stages, warp=True)
        if ii > ii_plain + 1:
            s.record(ii_plain + 1, ii - 1, stages, warp=True, proven=(status == "optimal"))
    s.emit("feasible", ii, f"stage bound {stages}")
    return _refine(s, bounds, ii, stages, found, joint)


def _timeout(s: _Search, bounds, message: str, stages: int | None = None) -> Schedule:
    s.emit("timeout", None, message)
    return _result(s, TIMEOUT, bounds, ii=None, proven_optimal=False, stage_bound=stages, message=message)


def _refine(s: _Search, bounds, ii: int, stages: int, found, joint) -> Schedule:
    """Lexicographic secondary objectives at the optimal II, then package the answer."""
    jm, res = found
    if not jm.fixed_ii:  # re-solve the fixed-II model, hinted with the ranged solution
        hint = jm.extract(res)
        jm = joint(ii)
        _hint(jm, hint)
        res = s.solve(jm, jm.length)
        if not res.has_solution:
            return _timeout(s, bounds, f"time limit hit at II {ii}", stages)
    best = jm.extract(res)
    settled = res.status == "optimal"
    objectives = {"length": best["length"]}
    previous = "length"
    for name, flag in SECONDARY:
        if not getattr(s.opt, flag) or s.left() <= 0:
            continue
        value = res.value(jm.objective(previous))
        if previous != "length" or s.opt.minimize_length:
            jm.model.add(jm.objective(previous) <= value)
        _hint(jm, best)
        s.emit("refine", ii, name)
        nxt = s.solve(jm, jm.objective(name))
        if not nxt.has_solution:
            settled = False
            break
        res, best, previous = nxt, jm.extract(nxt), name
        settled = settled and nxt.status == "optimal"
    report = check(s.graph, ii, best["start"], best["group"], s.opt.mma_units)
    if not report.ok:
        raise AssertionError(f"internal error: solver schedule fails the checker: {report.violations}")
    groups = _renumber(best["group"], s.graph)
    objectives.update(channels=report.channels, mma_waits=report.mma_waits,
                      groups=len(set(groups.values())),
                      registers=max(report.register_peak.values(), default=0))
    status = OPTIMAL if s.proven else FEASIBLE_TIMEOUT
    s.emit("done", ii, status)
    return _result(s, status, bounds, ii=ii, proven_optimal=s.proven, length=best["length"],
                   stages=math.ceil(best["length"] / ii), stage_bound=stages, assignment=groups,
                   schedule=best["start"], stage=best["stage"],
                   registers={new: report.register_alloc[old] for old, new in
                              _group_map(best["group"], s.graph).items()},
                   objectives=objectives, objectives_proven=settled,
                   message=f"II {ii} ({'proven optimal' if s.proven else 'not proven optimal'})")


def _group_map(group: dict[str, int], graph: Graph) -> dict[int, int]:
    """Solver group index -> reported index (variable-latency group first, then by first op)."""
    order: list[int] = []
    names = sorted(graph.ops, key=lambda n: (not graph.ops[n].variable_latency, list(graph.ops).index(n)))
    for n in names:
        if group[n] not in order:
            order.append(group[n])
    return {g: i for i, g in enumerate(order)}


def _renumber(group: dict[str, int], graph: Graph) -> dict[str, int]:
    mapping = _group_map(group, graph)
    return {n: mapping[g] for n, g in group.items()}


def _hint(jm: JointModel, sol: dict[str, Any]) -> None:
    variables, values = [], []
    for n in jm.ops:
        variables.append(jm.start[n])
        values.append(sol["start"][n])
        if jm.groups and sol["group"]:
            for k in range(jm.groups):
                variables.append(jm.x[n][k])
                values.append(int(sol["group"][n] == k))
    set_hint(jm.model, variables, values)
