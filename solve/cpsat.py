"""Thin CP-SAT runner: parameters suited to a small machine, statuses as plain strings."""

from __future__ import annotations

from dataclasses import dataclass
import time

from ortools.sat.python import cp_model

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


def run(model: cp_model.CpModel, time_limit: float, workers: int = 1, deterministic: bool = True,
        core: bool = False, first_solution: bool = False) -> Run:
    """Solve ``model`` within ``time_limit`` seconds.

    One worker is deterministic.  With more, ``deterministic`` interleaves the portfolio workers
    in fixed batches (reproducible but markedly slower); otherwise they race.  ``core`` asks for
    an infeasibility core over the model's assumptions, which needs one worker and no presolve
    (presolve can rename assumption literals).  ``first_solution`` stops at the first schedule.
    """
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
    start = time.perf_counter()
    status = solver.solve(model)
    name = _STATUS.get(status, "unknown")
    if name == "invalid":
        raise RuntimeError(f"CP-SAT rejected the model: {model.validate()}")
    return Run(name, solver, time.perf_counter() - start)
