"""Software pipelining of partitioned IR.

`pipeline_kernel` gives every warp group a schedule (Tawa's T/C/U coarse stages and MMA issue depth, or a
solver's modulo schedule), sizes every channel from it, and expands each group's loop into prologue /
steady state / epilogue (`pipeline.expand`).
"""
from __future__ import annotations

import copy
from dataclasses import replace

from aref.errors import ArefError, ChannelError
from aref.ir.ws import WSKernel
from pipeline.expand import expand
from pipeline import sm100
from pipeline.order import tensor_core_turns
from pipeline.depths import choose_depths, delay_puts, global_conflict, required_depths
from pipeline.schedule import GroupSchedule, PipelineOptions, anchored_schedule, heuristic_schedule

__all__ = ["pipeline_kernel", "PipelineOptions", "GroupSchedule"]


def pipeline_kernel(kernel: WSKernel, options: PipelineOptions | None = None) -> WSKernel:
    """The pipelined level: a new kernel (the input is left as it was). A kernel carrying a solver's
    `anchors` follows that schedule when the groups' schedules fit together; otherwise each group gets the
    heuristic one."""
    options = options or PipelineOptions()
    out = copy.deepcopy(kernel)
    # Groups that feed each other within an iteration can wait on each other in a cycle when one of them
    # reorders its channel ops or runs ahead a stage (a solver's stages included: its model does not see
    # every channel hand-off): retreat to the heuristic schedule, to program order, then to the MMA issue
    # depth alone, until the schedules fit together.
    plain = replace(options, tensor_core_first=False)
    attempts = [(None, options), (None, plain), (None, replace(plain, coarse=False))]
    if out.anchors is not None:
        attempts.insert(0, (out.anchors, options))
    problem, short, first_error = None, [], None
    for anchors, opts in attempts:
        try:
            scheds, short = _schedules(out, opts, anchors)
        except ChannelError as err:            # a user channel too shallow for this attempt's stages
            first_error = first_error or err
            continue
        problem = global_conflict(out, scheds)
        if problem is not None and sm100.deepen_tmem_rings(out, required_depths(out, scheds)):
            problem = global_conflict(out, scheds)     # Blackwell: deeper tensor-memory rings fit the schedules
        if problem is None:
            break
    else:
        if problem is None and first_error is not None:
            raise first_error
        if short:
            ch, need = max(short, key=lambda x: x[1] - x[0].depth)
            raise ChannelError(f"channel '{ch.name}' (depth {ch.depth}) is too shallow for this schedule: a slot "
                               f"stays busy from its put to its last release across {need - 1} pipeline step(s), "
                               f"and the groups would wait on each other ({problem})", ch.loc,
                               hint=f"use aref.channel(depth={need})")
        raise ArefError(f"the warp groups' schedules do not fit together: {problem}", kernel.loc,
                        hint="this is a deadlock the pipeline would have; change the partition or the schedule")
    out.anchors = anchors
    tensor_core_turns(out, scheds, anchors)
    for gp in out.groups:
        if gp.group.id in scheds:
            expand(gp, scheds[gp.group.id])
    out.level = "pipelined"
    return out


def _schedules(out: WSKernel, options: PipelineOptions, anchors) -> tuple[dict[int, GroupSchedule], list]:
    scheds: dict[int, GroupSchedule] = {}
    for gp in out.groups:
        if gp.loop is None:
            continue
        if anchors is not None:
            scheds[gp.group.id] = anchored_schedule(gp, out, anchors, options)
        else:
            scheds[gp.group.id] = heuristic_schedule(gp, out, options)
    short = delay_puts(out, scheds)
    choose_depths(out, scheds)
    return scheds, short
