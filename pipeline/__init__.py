"""Software pipelining of partitioned IR.

`pipeline_kernel` gives every warp group a schedule (Tawa's T/C/U coarse stages and MMA issue depth, or a
solver's modulo schedule), sizes every channel from it, and expands each group's loop into prologue /
steady state / epilogue (`pipeline.expand`).
"""
from __future__ import annotations

import copy
from dataclasses import replace

from aref.errors import ArefError
from aref.ws import WSKernel
from pipeline.expand import expand
from pipeline import sm100
from pipeline.schedule import (GroupSchedule, PipelineOptions, anchored_schedule, choose_depths,
                               global_conflict, heuristic_schedule, required_depths)

__all__ = ["pipeline_kernel", "PipelineOptions", "GroupSchedule"]


def pipeline_kernel(kernel: WSKernel, options: PipelineOptions | None = None) -> WSKernel:
    """The pipelined level: a new kernel (the input is left as it was). A kernel carrying a solver's
    `anchors` follows that schedule; otherwise each group gets the heuristic one."""
    options = options or PipelineOptions()
    out = copy.deepcopy(kernel)
    anchored = out.anchors is not None
    scheds = _schedules(out, options)
    problem = global_conflict(out, scheds)
    if problem is not None and sm100.deepen_tmem_rings(out, required_depths(out, scheds)):
        problem = global_conflict(out, scheds)
    # Groups that feed each other within an iteration can wait on each other in a cycle when one of them
    # reorders its channel ops or runs ahead a stage: retreat to program order, then to the MMA issue depth
    # alone, until the schedules fit together.
    for fallback in (replace(options, tensor_core_first=False), replace(options, tensor_core_first=False,
                                                                        coarse=False)):
        if problem is None or anchored:
            break
        scheds = _schedules(out, fallback)
        problem = global_conflict(out, scheds)
        if problem is not None and sm100.deepen_tmem_rings(out, required_depths(out, scheds)):
            problem = global_conflict(out, scheds)
    if problem is not None:
        raise ArefError(f"the warp groups' schedules do not fit together: {problem}", kernel.loc,
                        hint="this is a deadlock the pipeline would have; change the partition or the schedule")
    for gp in out.groups:
        if gp.group.id in scheds:
            expand(gp, scheds[gp.group.id])
    out.level = "pipelined"
    return out


def _schedules(out: WSKernel, options: PipelineOptions) -> dict[int, GroupSchedule]:
    scheds: dict[int, GroupSchedule] = {}
    for gp in out.groups:
        if gp.loop is None:
            continue
        if out.anchors is not None:
            scheds[gp.group.id] = anchored_schedule(gp, out, out.anchors, options)
        else:
            scheds[gp.group.id] = heuristic_schedule(gp, out, options)
    choose_depths(out, scheds)
    return scheds
