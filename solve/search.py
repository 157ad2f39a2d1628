"""The II search (Twill's Algorithm 1) over the exact-cycle interval model.

1. II starts at the lower bound (ResMII, RecMII, and RecMII with unit exclusivity).
2. Plain modulo scheduling (no warp groups) gives the first II with any modulo schedule and its
   shortest length ``L_min``; the stage bound is ``ceil(L_min / II) + extra_stages`` (Algorithm 1
   keeps ``ceil(L / II)`` fixed while it grows ``L``).
3. The joint model is solved at that II with the objectives (``length`` first: Algorithm 1's first
   feasible ``L``) minimized lexicographically inside the stage bound.  When an II is infeasible,
   one model with II as a variable proves the following IIs infeasible at once and lands on the
   next feasible one, so a register-bound loop does not need one solve per cycle.
"""

from __future__ import annotations

import math
import time
from typing import Any

from . import explain as explain_mod
from .bounds import Bounds, RecurrenceError, compute_bounds
from .check import check
from .cpsat import run, set_hint
from .graph import Graph
from .joint import JointModel
from .result import (FEASIBLE_TIMEOUT, INFEASIBLE, INTERVAL, OPTIMAL, TIMEOUT, Infeasibility,
                     Progress, Schedule, SolveOptions)

OBJECTIVES = ("length", "mma_waits", "channels", "groups", "registers")


def default_max_ii(graph: Graph, lower_bound: int) -> int:
    """An II at which iterations need not overlap: one iteration's sequential length."""
    seq = sum(op.duration for op in graph.ops.values())
    seq += sum(max(0, e.delay) for e in graph.edges)
    seq += sum(op.transfer_cost for op in graph.ops.values())
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

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def emit(self, kind: str, ii: int | None, detail: str = "", ii_max: int | None = None) -> None:
        if self.opt.progress is not None:
            self.opt.progress(Progress(kind, ii, self.lower_bound, time.perf_counter() - self.t0,
                                       detail, ii_max))

    def solve(self, jm: JointModel, objective):
        jm.model.minimize(objective)
        return run(jm.model, self.left(), self.opt.workers, self.opt.deterministic)

    def record(self, lo: int, hi: int, stages: int, warp: bool) -> None:
        """Store why IIs ``lo..hi`` (proven infeasible) fail, explained when asked for."""
        reasons, families = ["infeasible (not explained)"], []
        if self.opt.explain and self.left() > 0:
            ii: Any = lo if lo == hi else (lo, hi)
            why = explain_mod.explain(self.graph, ii, stages, warp=warp,
                                      time_limit=min(self.left(), max(1.0, self.opt.time_limit / 4)),
                                      symmetry=self.opt.symmetry_breaking)
            reasons, families = why.reasons, why.families
            if not warp:
                reasons = ["no modulo schedule even on one warp group: " + r for r in reasons]
        self.infeasible.append(Infeasibility(lo, hi, reasons, families, True))
        self.emit("infeasible", lo, "; ".join(reasons), hi)

    def first_ii(self, lo: int, hi: int, build, objective) -> tuple[str, int | None, Any]:
        """Smallest feasible II in ``lo..hi``: a fixed-II solve at ``lo``, then one ranged solve.

        Returns ``(status, ii, (model, run))``; status is ``"optimal"`` (the II is the smallest),
        ``"feasible"`` (a schedule, minimality not proven in time), ``"infeasible"`` (none in the
        range) or ``"unknown"`` (time-out before any answer).
        """
        self.emit("try", lo)
        jm = build(lo)
        first = self.solve(jm, objective(jm))
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
        status = "optimal" if ranged.status == "optimal" else "feasible"
        return status, ranged.value(jr.II), (jr, ranged)

    def result(self, status: str, **kw) -> Schedule:
        b = self.bounds
        return Schedule(status=status, lower_bound=self.lower_bound, res_mii=b.res_mii if b else 0,
                        rec_mii=b.rec_mii if b else 0, solve_seconds=time.perf_counter() - self.t0,
                        encoding=INTERVAL, infeasible=self.infeasible,
                        bound_reasons=b.reasons(self.graph) if b else [], **kw)

    def timeout(self, message: str, stages: int | None = None) -> Schedule:
        self.emit("timeout", None, message)
        return self.result(TIMEOUT, ii=None, proven_optimal=False, stage_bound=stages, message=message)


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
    def plain(ii):
        return JointModel(graph, ii, plain_horizon(graph, ii if isinstance(ii, int) else ii[0]), warp=False)

    status, ii_plain, found = s.first_ii(lb, hi, plain, lambda jm: jm.length)
    if status == "unknown":
        return s.timeout("time limit hit while looking for a plain modulo schedule")
    if status == "infeasible":
        s.record(lb, hi, plain_horizon(graph, lb), warp=False)
        return s.result(INFEASIBLE, ii=None, proven_optimal=False,
                        message=f"no modulo schedule for II in {lb}..{hi}")
    if ii_plain > lb:
        if status == "optimal":
            s.record(lb, ii_plain - 1, plain_horizon(graph, lb), warp=False)
        else:
            s.proven = False
    jm, res = found
    if not jm.fixed_ii:  # the ranged model found the II; get the shortest length at that II
        jm = plain(ii_plain)
        res = s.solve(jm, jm.length)
        if not res.has_solution:
            return s.timeout("time limit hit while computing the plain schedule length")
    min_len = res.value(jm.length) * jm.quantum
    stages = math.ceil(min_len / ii_plain) + options.extra_stages

    # Phase 2: the joint model from the first plain-feasible II upward.
    units = critical_units(graph, options)

    def joint(ii):
        return JointModel(graph, ii, stages, symmetry=options.symmetry_breaking,
                          min_length=min_len if ii == ii_plain else 0, mma_units=units)

    order = tuple(options.objectives)
    status, ii, found = s.first_ii(ii_plain, hi, joint, lambda jm: jm.lexicographic(order))
    if status == "unknown":
        return s.timeout("time limit hit before any schedule was found", stages)
    if status == "infeasible":
        s.record(ii_plain, hi, stages, warp=True)
        return s.result(INFEASIBLE, ii=None, proven_optimal=False, stage_bound=stages,
                        message=f"no schedule with at most {stages} stages for II in {lb}..{hi}")
    if ii > ii_plain:
        s.record(ii_plain, ii_plain, stages, warp=True)
        if ii > ii_plain + 1:
            if status == "optimal":
                s.record(ii_plain + 1, ii - 1, stages, warp=True)
            else:
                s.proven = False
                s.infeasible.append(Infeasibility(ii_plain + 1, ii - 1, ["solver time-out: not proven"],
                                                  [], False))
    s.emit("feasible", ii, f"stage bound {stages}")
    return _finish(s, ii, stages, found, joint, order, units)


def _finish(s: _Search, ii: int, stages: int, found, joint, order, units) -> Schedule:
    """Optimize the objectives at the chosen II (if the ranged model found it) and package it."""
    jm, res = found
    if not jm.fixed_ii:
        hint = jm.extract(res)
        jm = joint(ii)
        _hint(jm, hint)
        s.emit("refine", ii, "objectives")
        res = s.solve(jm, jm.lexicographic(order))
        if not res.has_solution:
            return s.timeout(f"time limit hit at II {ii}", stages)
    best = jm.extract(res)
    report = check(s.graph, ii, best["start"], best["group"], units)
    if not report.ok:
        raise AssertionError(f"internal error: solver schedule fails the checker: {report.violations}")
    mapping = _group_map(best["group"], s.graph)
    groups = {n: mapping[g] for n, g in best["group"].items()}
    objectives = {"length": best["length"], "mma_waits": report.mma_waits, "channels": report.channels,
                  "groups": len(mapping), "registers": max(report.register_peak.values(), default=0)}
    status = OPTIMAL if s.proven else FEASIBLE_TIMEOUT
    s.emit("done", ii, status)
    return s.result(status, ii=ii, proven_optimal=s.proven, length=best["length"],
                    stages=math.ceil(best["length"] / ii), stage_bound=stages, assignment=groups,
                    schedule=best["start"], stage=best["stage"],
                    registers={mapping[g]: a for g, a in report.register_alloc.items()},
                    objectives=objectives, objectives_proven=res.status == "optimal",
                    message=f"II {ii} ({'proven optimal' if s.proven else 'not proven optimal'})")


def _group_map(group: dict[str, int], graph: Graph) -> dict[int, int]:
    """Solver group index -> reported index (variable-latency group first, then by first op)."""
    order: list[int] = []
    names = sorted(graph.ops, key=lambda n: (not graph.ops[n].variable_latency, list(graph.ops).index(n)))
    for n in names:
        if group[n] not in order:
            order.append(group[n])
    return {g: i for i, g in enumerate(order)}


def _hint(jm: JointModel, sol: dict[str, Any]) -> None:
    variables, values = [], []
    for n in jm.ops:
        variables.append(jm.start[n])
        values.append(sol["start"][n] // jm.quantum)
        if jm.groups and sol["group"]:
            for k in range(jm.groups):
                variables.append(jm.x[n][k])
                values.append(int(sol["group"][n] == k))
    set_hint(jm.model, variables, values)
