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
from .cpsat import race, run
from .graph import Graph
from .joint import JointModel
from .plain import PlainModel, height_applies, plain_stage_bound
from .relaxed import RelaxedModel
from .result import (FEASIBLE_TIMEOUT, INFEASIBLE, INTERVAL, OPTIMAL, TIMEOUT, Infeasibility,
                     Progress, Schedule, SolveCall, SolveOptions)

# SolveCall.encoding of the formulation that answered a raced probe (beside the interval model's)
PAIRWISE, RELAXED = "pairwise", "relaxed"
OBJECTIVES = ("length", "mma_waits", "channels", "groups", "registers")
# the share of the time left that the plain schedule's last-quantum probes may take: they only sharpen the
# proof below a plain schedule already found (at one-cycle resolution a small graph's proof can take minutes),
# and the joint model needs the rest to find a schedule at all (the joint model's own last quantum is not
# capped: a schedule is in hand by then)
LAST_QUANTUM_SHARE = 0.5
# the share of the time limit kept for explaining the proofs where they are wanted (`SolveOptions.explain_found`)
EXPLAIN_SHARE = 0.25
# the most one proven range's explanation may take: a twentieth of the time limit, at least 3 s (3 s at the
# default 60). An explanation that needs more rarely finds one (attention backward on Hopper: two calls ran
# into a 15 s budget unexplained, 30 of the 47 s `aref solve` took); the range is then printed as proven, not
# explained, and a larger --time-limit gives the reasons more time
EXPLAIN_RANGE_SHARE, EXPLAIN_RANGE_MIN = 0.05, 3.0


def explain_budget(time_limit: float) -> float:
    """Seconds one proven range's explanation may take under a solve's `time_limit`."""
    return max(EXPLAIN_RANGE_MIN, time_limit * EXPLAIN_RANGE_SHARE)


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
    """Stages allowed to the plain modulo schedule at ``ii`` and above: enough for one iteration run
    sequentially, or the bound a shortest schedule provably fits in (`plain.plain_stage_bound`: attention_bwd's
    Hopper graph, 24 stages instead of 89), whichever is smaller."""
    return min(math.ceil(default_max_ii(graph, 1) / ii) + 2, plain_stage_bound(graph, ii))


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
        # with `explain_found`, the proofs' reasons are part of the answer: a share of the time limit waits
        # for them (the search may not take it; `result` explains the proofs once the answer is settled)
        self.deadline = self.t0 + options.time_limit * (1 - (EXPLAIN_SHARE if options.explain_found and options.explain
                                                                else 0))
        self.infeasible: list[Infeasibility] = []
        self.proven = True
        self.lower_bound = 0
        self.bounds: Bounds | None = None
        self.monotone = all(e.delay >= 0 for e in graph.edges)
        self.quantum = math.gcd(*graph.cycle_costs()) if graph.cycle_costs() else 1
        self.cap_until: float | None = None      # while set, probes stop by then (see LAST_QUANTUM_SHARE)
        self.profile: list[SolveCall] = []       # every CP-SAT call, in order (Schedule.profile)
        self.deferred: list[tuple[int, Callable[[], None]]] = []   # (top II, record a proof): `result`

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def emit(self, kind: str, ii: int | None, detail: str = "", ii_max: int | None = None) -> None:
        if self.opt.progress is not None:
            self.opt.progress(Progress(kind, ii, self.lower_bound, time.perf_counter() - self.t0,
                                       detail, ii_max))

    def limit(self) -> float:
        """Seconds the next probe may take: the time left, or less while a cap holds."""
        return self.left() if self.cap_until is None else min(self.left(), self.cap_until - time.perf_counter())

    def race(self, models: list, step: str) -> tuple:
        """(the model that answered, its run): equivalent models, each minimizing its ``length``, side by side."""
        for jm in models:
            jm.model.minimize(jm.length)
        i, res = race([jm.model for jm in models], self.limit(), self.opt.workers, self.opt.deterministic)
        self.profile.append(SolveCall(step, models[i].II * models[i].quantum, res.status, res.seconds,
                                      encoding=PAIRWISE if isinstance(models[i], PlainModel) else INTERVAL))
        return models[i], res

    def refute(self, jm: JointModel, relaxed: JointModel, step: str = "joint"):
        """A first schedule of ``jm``, raced against a proof that its relaxation ``relaxed`` has none."""
        i, res = race([jm.model, relaxed.model], self.limit(), self.opt.workers, self.opt.deterministic,
                      first_solution=True, relaxations=1)
        self.profile.append(SolveCall(step, jm.II * jm.quantum, res.status, res.seconds,
                                      encoding=RELAXED if i else INTERVAL))
        return res

    def solve(self, jm: JointModel, objective=None, first_solution: bool = False, step: str = "joint"):
        if objective is not None:
            jm.model.minimize(objective)
        res = run(jm.model, self.limit(), self.opt.workers, self.opt.deterministic,
                  first_solution=first_solution)
        self.profile.append(SolveCall(step, jm.II * jm.quantum, res.status, res.seconds))
        return res

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
        # the proofs are explained once the search is over (`result`: the search's time goes to finding the
        # answer and its objectives), the highest range first: its reasons are why the II is not lower. A compiler needs the reasons of a
        # refusal, not why a cheaper II than its schedule's failed (they cost solver time): without
        # `explain_found` they are explained only where nothing was found
        pending: list[tuple[int, int, bool]] = []
        found, bad, complete = self._smallest(lo, hi, probe, lambda a, b, split: pending.append((a, b, split)),
                                              last_share)
        for a, b, split in pending:
            wanted = self.opt.explain_found or found is None
            self.deferred.append((b, lambda a=a, b=b, split=split, wanted=wanted: explain(a, b, split, wanted)))
        return found, bad, complete

    def _smallest(self, lo: int, hi: int, probe: Callable[[int, bool], _Probe],
                  explain: Callable[[int, int, bool], None], last_share: float | None = None):
        first = probe(lo, False)
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
        top_probed = False
        while good is None:  # gallop over multiples of the quantum (small models)
            if not top_probed and ii > 2 * lo and hi > ii:
                # nothing up to twice the bound: the top of the range next, which settles a graph with no
                # schedule at any II in one proof (causal attention's unsplit tile on Hopper: its probes get
                # slower as the II grows, ~40 s to gallop there) and else bounds the bisection
                top_probed, ii = True, hi
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
        if 0 < (good.ii - bad) // q <= 2 and good.ii - 1 > bad:
            # one or two grid IIs between the last failure and the first schedule: the proof one cycle below
            # the schedule first, which covers them too where the schedule's II is the answer (attention_bwd
            # on Hopper: a ~4 s proof at II 1040 skipped, 1055's is needed anyway)
            p = probe(good.ii - 1, False)
            if p.feasible:
                good = p
            elif p.status == "infeasible":
                bad = p.ii
        while True:  # bisect on the quantum grid
            grid = range((bad // q + 1) * q, good.ii, q)
            if not grid:
                break
            p = probe(grid[len(grid) // 2], False)
            if p.status == "unknown":
                explain(lo, bad, True)
                return good, bad, False
            good, bad = (p, bad) if p.feasible else (good, p.ii)
        below = good.ii - 1   # with costs on the quantum grid the answer is usually on it too: one proof
        self.cap_until = None if last_share is None else time.perf_counter() + self.left() * last_share
        try:
            while good.ii - bad > 1:  # the last quantum (and what was passed over), in full probes
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
        explain(lo, bad, True)     # one range: its top's reasons cover it (feasibility is monotone)
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
        # (a range left unexplained because a schedule was found above it keeps no stage bound: nothing asks
        # for its reasons later, `explain_infeasible`)
        inf = Infeasibility(lo, hi, [NOT_EXPLAINED], [], True, stages=stages if explained else None, warp=warp)
        if self.opt.explain and explained and self.left() > 0:
            budget = min(self.left(), explain_budget(self.opt.time_limit))
            explain_range(self.graph, inf, budget, self.opt.symmetry_breaking, self.profile)
        elif lo < hi:
            inf.reasons = [_monotone(hi)] + inf.reasons
        self.infeasible.append(inf)
        self.emit("infeasible", lo, "; ".join(inf.reasons), hi)

    def result(self, status: str, **kw) -> Schedule:
        # the proofs are recorded (and explained, as far as the time limit leaves room) once the answer and
        # its objectives are settled: the reasons never take the time the schedule needs
        self.deadline = self.t0 + self.opt.time_limit
        for _, record in sorted(self.deferred, key=lambda d: -d[0]):      # the highest range first
            record()
        self.deferred = []
        b = self.bounds
        return Schedule(status=status, lower_bound=self.lower_bound, res_mii=b.res_mii if b else 0,
                        rec_mii=b.rec_mii if b else 0, solve_seconds=time.perf_counter() - self.t0,
                        encoding=INTERVAL, infeasible=sorted(self.infeasible, key=lambda i: i.ii),
                        bound_reasons=b.reasons(self.graph) if b else [], profile=self.profile, **kw)

    def timeout(self, message: str, stages: int | None = None) -> Schedule:
        self.emit("timeout", None, message)
        return self.result(TIMEOUT, ii=None, proven_optimal=False, stage_bound=stages, message=message)


NOT_EXPLAINED = "infeasible (proven; not explained)"


def _monotone(hi: int) -> str:
    return f"shown at II {hi}; feasibility is monotone in II, so every smaller II fails too"


def explain_range(graph: Graph, inf: Infeasibility, time_limit: float, symmetry: bool = True,
                  profile: list | None = None) -> None:
    """Fill in why the proven range ``inf`` fails (its reasons and families), explaining its top II within
    ``time_limit`` seconds; its CP-SAT calls go to ``profile``."""
    hi, reasons, families = inf.ii_max, [NOT_EXPLAINED], []
    why = explain_mod.explain(graph, hi, inf.stages, warp=inf.warp, time_limit=time_limit, symmetry=symmetry,
                              record=profile)
    if why.families or why.complete:
        reasons, families = why.reasons, why.families
        if not why.complete:
            reasons = ["(a sufficient set; not reduced further within the time limit)"] + reasons
    if not inf.warp:
        reasons = ["no modulo schedule even on one warp group: " + r for r in reasons]
    if inf.ii < hi:
        reasons = [_monotone(hi)] + reasons
    inf.reasons, inf.families = reasons, families


def explain_infeasible(graph: Graph, result: Schedule, time_limit: float, symmetry: bool = True) -> Schedule:
    """``result`` with the reasons of its proven ranges that the search left unexplained (``SolveOptions``'s
    ``explain`` off), each explained within ``time_limit`` seconds (its CP-SAT calls join the profile): a
    caller that needs the reasons only in some outcomes asks for them then."""
    for inf in result.infeasible:
        if inf.proven and inf.stages is not None and not inf.families and NOT_EXPLAINED in inf.reasons:
            explain_range(graph, inf, time_limit, symmetry, result.profile)
    return result


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

    pairwise = height_applies(graph)

    def plain(ii: int, final: bool) -> _Probe:
        # two formulations of the same model race (`cpsat.race`): the folded intervals prove Blackwell's
        # reservation-table graphs at once where the pairwise heights take seconds, and the heights prove
        # Hopper's ring recurrences at one-cycle resolution where the folded intervals take minutes
        s.emit("try", ii, "plain modulo schedule")
        models = [JointModel(graph, ii, horizon, warp=False)] + ([PlainModel(graph, ii, horizon)] if pairwise else [])
        return _Probe(ii, *s.race(models, step="plain"))

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
            return _Probe(ii, jm, s.solve(jm, jm.lexicographic(order), step="objectives"), optimized=True)
        return _Probe(ii, jm, s.refute(jm, RelaxedModel(graph, ii, stages, symmetry=options.symmetry_breaking)))

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
