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
from pipeline.schedule import (GroupSchedule, PipelineOptions, choose_depths, global_conflict,
                               heuristic_schedule)

__all__ = ["pipeline_kernel", "PipelineOptions", "GroupSchedule"]


def pipeline_kernel(kernel: WSKernel, options: PipelineOptions | None = None,
                    schedules: dict[int, GroupSchedule] | None = None) -> WSKernel:
    """The pipelined level: a new kernel (the input is left as it was)."""
    options = options or PipelineOptions()
    out = copy.deepcopy(kernel)
    given = schedules or {}
    scheds = _schedules(kernel, out, given, options)
    problem = global_conflict(out, scheds)
    if problem is not None and options.coarse and not given:
        # groups feed each other within an iteration: staging one of them would make them wait on each
        # other in a cycle, so pipeline only the MMA issue depth
        scheds = _schedules(kernel, out, given, replace(options, coarse=False))
        problem = global_conflict(out, scheds)
    if problem is not None:
        raise ArefError(f"the warp groups' schedules do not fit together: {problem}", kernel.loc,
                        hint="this is a deadlock the pipeline would have; change the partition or the schedule")
    for gp in out.groups:
        if gp.group.id in scheds:
            expand(gp, scheds[gp.group.id])
    out.level = "pipelined"
    return out


def _schedules(kernel, out, given, options) -> dict[int, GroupSchedule]:
    scheds: dict[int, GroupSchedule] = {}
    for gp in out.groups:
        if gp.loop is None:
            continue
        if gp.group.id in given:
            scheds[gp.group.id] = _translate(kernel, out, gp, given[gp.group.id])
        else:
            scheds[gp.group.id] = heuristic_schedule(gp, out, options)
    choose_depths(out, scheds)
    return scheds


def _translate(src: WSKernel, dst: WSKernel, gp, sched: GroupSchedule) -> GroupSchedule:
    """A schedule written against `src`'s ops, re-keyed to the deep-copied program's ops."""
    old = next(g for g in src.groups if g.group.id == gp.group.id).loop.body.ops
    mapping = dict(zip(old, gp.loop.body.ops))
    return GroupSchedule({mapping[o]: s for o, s in sched.stage.items()}, [mapping[o] for o in sched.order],
                         sched.mma_depth)
