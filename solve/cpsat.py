"""Thin CP-SAT runner: parameters suited to a small machine, statuses as plain strings."""

from __future__ import annotations

from dataclasses import dataclass
import threading
import time

from ortools.sat.python import cp_model

RELAXATION_LIMIT = 2.0      # seconds a relaxation races an exact model (`race`)
_STATUS = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible",
           cp_model.INFEASIBLE: "infeasible", cp_model.UNKNOWN: "unknown",
           cp_model.MODEL_INVALID: "invalid"}


@dataclass
class Run:
    """Outcome of one solve: ``status`` in optimal / feasible / infeasible / unknown."""

    status: str
    solver: cp_model.CpSolver
    seconds: float

    @property
    def has_solution(self) -> bool:
        return self.status in ("optimal", "feasible")

    def value(self, expr) -> int:
        return int(self.solver.value(expr))


def _solver(time_limit: float, workers: int = 1, deterministic: bool = True, core: bool = False,
            first_solution: bool = False, strong: bool = True) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = max(0.01, time_limit)
    if core:
        params.num_workers = 1
        params.cp_model_presolve = False
    else:
        params.num_workers = max(1, workers)
        if deterministic and workers > 1:
            params.interleave_search = True
    if first_solution:
        params.stop_after_first_solution = True
    # the disjunctive propagator's stronger (quadratic) reasoning: on these small models it settles the unit
    # and stream orders long before the search would (attention_fwd's Hopper graph, one cycle below its
    # optimal II: 0.9 s instead of 17 s or more); not for explanations, whose many small solves it slows
    # (Blackwell attention forward without transfers: 10.8 s against 7.7 s)
    params.use_strong_propagation_in_disjunctive = strong
    return solver


def _solve(solver: cp_model.CpSolver, model: cp_model.CpModel) -> Run:
    start = time.perf_counter()
    status = solver.solve(model)
    name = _STATUS.get(status, "unknown")
    if name == "invalid":
        raise RuntimeError(f"CP-SAT rejected the model: {model.validate()}")
    return Run(name, solver, time.perf_counter() - start)


def run(model: cp_model.CpModel, time_limit: float, workers: int = 1, deterministic: bool = True,
        core: bool = False, first_solution: bool = False, strong: bool = True) -> Run:
    """Solve ``model`` within ``time_limit`` seconds.

    One worker is deterministic.  With more, ``deterministic`` interleaves the portfolio workers
    in fixed batches (reproducible but markedly slower); otherwise they race.  ``core`` asks for
    an infeasibility core over the model's assumptions, which needs one worker and no presolve
    (presolve can rename assumption literals).  ``first_solution`` stops at the first schedule.
    ``strong``: the disjunctive propagator's strong reasoning (see `_solver`).
    """
    return _solve(_solver(time_limit, workers, deterministic, core, first_solution, strong), model)


def race(models: list[cp_model.CpModel], time_limit: float, workers: int = 1, deterministic: bool = True,
         first_solution: bool = False, relaxations: int = 0) -> tuple[int, Run]:
    """Solve models that state the same question (equivalent formulations) side by side, one thread each,
    and stop the others as soon as one answers (optimal, infeasible, or with ``first_solution`` any
    schedule): (index of the model that answered, its run). Neither formulation of a question is the fastest
    on every graph, and CP-SAT runs outside Python's lock, so the race costs a second core, not time. The
    answer is the question's whichever model gives it; where none does, the first model's run (unknown).
    The last ``relaxations`` models are relaxations of the first: they answer only by proving infeasibility
    (a schedule of a relaxation answers nothing, and its thread just ends)."""
    exact = len(models) - relaxations
    # a relaxation that proves anything does so fast (0.05-0.5 s on the attention graphs); one that has not
    # by RELAXATION_LIMIT stops, leaving its core to the exact model
    solvers = [_solver(time_limit if i < exact else min(time_limit, RELAXATION_LIMIT), workers, deterministic,
                       False, first_solution) for i in range(len(models))]
    runs: list[Run | None] = [None] * len(models)
    done = threading.Event()

    def answered(i: int, r: Run) -> bool:
        if i >= exact:
            return r.status == "infeasible"
        return r.status in ("optimal", "infeasible") or (first_solution and r.has_solution)

    def one(i: int) -> None:
        runs[i] = _solve(solvers[i], models[i])
        if answered(i, runs[i]) and not done.is_set():
            done.set()
            for j, other in enumerate(solvers):
                if j != i:
                    other.stop_search()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(1, len(models))]
    for t in threads:
        t.start()
    one(0)
    for t in threads:
        t.join()
    for i, r in enumerate(runs):
        if r is not None and answered(i, r):
            return i, r
    return 0, runs[0]
