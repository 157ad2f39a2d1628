"""Whether a lowered tuning candidate fits the machine: the tuner's one call into the resource model.

Three checks decide it: the resource model's refusal of the register budgets, recorded by the lowering
(`WSKernel.resource_error`, from `aref.resources`), the static limits of `aref.sim.resources.check_resources`
(shared memory, threads, register budgets, named barriers) and, for the arch the CuTe DSL backend generates,
the backend's plan (which lays shared memory out by the same model), reached by generating the kernel's
source without compiling it.
"""
from __future__ import annotations

from aref.errors import ArefError
from aref.target import target_of
from aref.target.machine import Machine


def candidate_problems(ws, machine: Machine, persistent: bool = False, ctas: int | None = None,
                       raster: int = 0, epilogue_overlap: bool = False, cluster=(1, 1)) -> list[str]:
    """Why Barrier IR `ws` cannot run on `machine` as launched (empty: it fits)."""
    from aref.sim.resources import check_resources
    if ws.resource_error is not None:
        return [f"{ws.resource_error.kind}: {ws.resource_error.message}"]
    problems = list(check_resources(ws, machine))
    if problems or target_of(ws.arch).has_tensor_memory and not epilogue_overlap and tuple(cluster) == (1, 1):
        return problems     # (a Blackwell epilogue overlap is checked by its plan: the doubled accumulator)
    from aref.backend.cute import generate_source
    try:
        generate_source(ws, persistent, ctas or machine.sms, raster=raster, epilogue_overlap=epilogue_overlap,
                        cluster=cluster)
    except ArefError as err:
        problems.append(f"{err.kind}: {err.message}")
    return problems
