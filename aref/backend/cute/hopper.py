"""The Hopper (sm_90a) templates of the CuTe DSL backend, as `aref.target.SM_90A` names them: wgmma
accumulators in registers, a TMA producer warp group, consumers cooperative or ping-pong, epilogue overlap by
two consumer copies (`overlap`) and TMA-multicast clusters (`cluster`). `analysis` checks and lays out the
kernel, `role` emits each warp group's role function and `module` assembles the module; this module is the
entry the target-independent `aref.backend.cute.generate_source` and the launch call."""
from __future__ import annotations

from aref.backend.cute.analysis import BackendError, plan_kernel
from aref.backend.cute.module import emit_module


def plan(ws, persistent: bool = False, ctas: int = 132, raster: int = 0, epilogue_overlap: bool = False,
         cluster=(1, 1)):
    """The Hopper plan of `ws` with its launch options (see `aref.backend.cute.generate_source`)."""
    from aref.backend.cute import cluster as clusters
    out = plan_kernel(ws, persistent, ctas, raster, epilogue_overlap)
    out.cluster = clusters.plan_cluster(out, cluster, persistent)
    return out


def generate_source(ws, persistent: bool = False, ctas: int = 132, exp2_fma: float = 0.0, raster: int = 0,
                    epilogue_overlap: bool = False, cluster=(1, 1)) -> str:
    """The CuTe DSL module of a Hopper Barrier IR kernel (a `BackendError` for what it cannot express)."""
    if exp2_fma:
        raise BackendError("software exp2 (exp2_fma) is a Blackwell option", ws.loc)
    return emit_module(plan(ws, persistent, ctas, raster, epilogue_overlap, cluster))


def register_budgets(ws, persistent: bool = False, ctas: int = 132, raster: int = 0,
                     epilogue_overlap: bool = False) -> dict[str, int]:
    """Warp group name -> setmaxnreg budget of the generated kernel (with an epilogue overlap, the budgets of
    the producer and the consumer's two copies, the copy named `<consumer>_1`)."""
    budgets = {g.group.name: g.group.regs for g in ws.groups}
    if epilogue_overlap:
        p = plan_kernel(ws, persistent, ctas, raster, epilogue_overlap)
        budgets = {g.group.name: g.group.regs for g in p.ws.groups}
        budgets[p.groups[p.overlap.group].gp.group.name + "_1"] = p.overlap.regs
    return budgets
