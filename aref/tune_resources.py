"""Whether a lowered tuning candidate fits the machine: the tuner's one call into the resource model.

Today three checks decide it: the static limits of `aref.sim.resources.check_resources` (shared memory of the
rings, threads, register budgets, named barriers) and, for the arch the CuTe DSL backend generates, the
backend's own plan and register checks (store staging, per-group register pressure), reached by generating
the kernel's source without compiling it. When the resource model becomes one function shared by the solver,
the partitioners and the backend, this module is the single place to call it instead.
"""
from __future__ import annotations

from aref.errors import ArefError
from aref.machine import Machine


def candidate_problems(ws, machine: Machine, persistent: bool = False, ctas: int | None = None) -> list[str]:
    """Why Barrier IR `ws` cannot run on `machine` as launched (empty: it fits)."""
    from aref.sim.resources import check_resources
    problems = list(check_resources(ws, machine))
    if problems or ws.arch != "sm_90a":
        return problems
    from aref.backend.cute import generate_source
    try:
        generate_source(ws, persistent, ctas or machine.sms)
    except ArefError as err:
        problems.append(f"{err.kind}: {err.message}")
    return problems
