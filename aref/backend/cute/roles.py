"""The role of each warp group of the Barrier IR in the Hopper templates (TMA producer, MMA consumer,
CUDA-core consumer), read from what the group's ops do; the plan (`analysis`) and the overlap check
(`overlap`) both ask it."""
from __future__ import annotations

from aref import ops
from aref.backend.cute.errors import BackendError
from aref.errors import SrcInfo
from aref.ir import OpKind
from aref.ir.ws import GroupProgram


def classify(gp: GroupProgram) -> tuple[str, str]:
    """(role, description) from what the group's Barrier IR does."""
    kinds = {op.kind for op in gp.all_ops()}
    does = []
    if OpKind.TMA_LOAD in kinds:
        does.append("TMA loads")
    if OpKind.MMA_ASYNC in kinds:
        does.append("wgmma")
    traits = set().union(*(ops.entry(op).traits for op in gp.all_ops()))
    if {ops.EXPONENTIAL, ops.RUNNING_MAX} <= traits:
        does.append("softmax")
    elif OpKind.REDUCE in kinds:
        does.append("row reductions")
    if OpKind.SLOT_STORE in kinds:
        does.append("shared-memory hand-off")
    if OpKind.STORE in kinds:
        does.append("TMA-store epilogue")
    compute = kinds & (ops.kinds_with(ops.CUDA_CORE) | {OpKind.MMA_ASYNC, OpKind.STORE, OpKind.SLOT_STORE,
                                                       OpKind.SLOT_READ})
    if OpKind.TMA_LOAD in kinds:
        if compute:
            raise BackendError(f"warp group '{gp.group.name}' both issues TMA loads and computes; the Hopper "
                               f"templates keep the TMA producer a pure data-movement role",
                               _first_loc(gp, OpKind.TMA_LOAD),
                               hint="partition loads into their own warp group")
        return "tma_producer", "TMA producer"
    if OpKind.MMA_ASYNC in kinds:
        return "mma_consumer", "MMA consumer (" + ", ".join(does) + ")"
    return "compute", "CUDA-core consumer (" + (", ".join(does) or "no work") + ")"


def _first_loc(gp: GroupProgram, kind: OpKind) -> SrcInfo:
    return next(op.loc for op in gp.all_ops() if op.kind is kind)
