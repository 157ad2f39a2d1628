"""The Blackwell (sm_100a) templates of the CuTe DSL backend: tcgen05 MMAs into tensor memory.

`generate_source_sm100(ws)` is `aref.backend.cute.generate_source` for sm_100a Barrier IR: `plan` checks and
lays out the kernel, `role` emits each warp group's role function (its register math placed in tcgen05's row
layout by `rows`), `module` assembles the module, and
`support` holds the device helpers the generated code calls (tensor-memory loads and stores in tcgen05's
row layout, MMA issue, commits).
"""
from __future__ import annotations

from aref.backend.cute.sm100.module import emit_module_sm100
from aref.backend.cute.sm100.plan import Sm100Plan, plan_kernel_sm100


def generate_source_sm100(ws, persistent: bool = False, ctas: int = 148, exp2_fma: float = 0.0,
                          raster: int = 0, epilogue_overlap: bool = False) -> str:
    """The CuTe DSL module of an sm_100a Barrier IR kernel (a `BackendError` for what it cannot express);
    `exp2_fma`: the share of exp2 computed on the FMA units (see `aref.backend.cute.generate_source`).
    `epilogue_overlap`: a persistent kernel's doubled tensor-memory accumulator already overlaps one tile's
    epilogue with the next tile's MMAs; the option refuses a kernel where it could not be doubled."""
    plan = plan_kernel_sm100(ws, persistent, ctas, raster)
    if epilogue_overlap:
        from aref.backend.cute.overlap import check_sm100
        check_sm100(plan)
    plan.exp2_fma = exp2_fma
    return emit_module_sm100(plan)


# the entry points `aref.target.SM_100A` names this module for (the same as `aref.backend.cute.hopper`'s)
def generate_source(ws, persistent: bool = False, ctas: int = 148, exp2_fma: float = 0.0, raster: int = 0,
                    epilogue_overlap: bool = False, cluster=(1, 1)) -> str:
    """`generate_source_sm100` (these templates launch no clusters: `aref.backend.cute.generate_source`
    refuses one before it gets here)."""
    return generate_source_sm100(ws, persistent, ctas, exp2_fma, raster, epilogue_overlap)


def plan(ws, persistent: bool = False, ctas: int = 148, raster: int = 0, epilogue_overlap: bool = False,
         cluster=(1, 1)) -> Sm100Plan:
    """`plan_kernel_sm100` (the launch follows its tensors' mode order)."""
    return plan_kernel_sm100(ws, persistent, ctas, raster)


def register_budgets(ws, persistent: bool = False, ctas: int = 148, raster: int = 0,
                     epilogue_overlap: bool = False) -> dict[str, int]:
    """Warp group name -> setmaxnreg budget: the lowering's (an epilogue overlap doubles the tensor-memory
    accumulator, not a group)."""
    return {g.group.name: g.group.regs for g in ws.groups}


__all__ = ["generate_source_sm100", "plan_kernel_sm100", "Sm100Plan", "generate_source", "plan", "register_budgets"]
