"""The compile search: the pass list of `aref.compiler` run under the policy that picks the program to keep.

`lower_to(kernel, stage, options)` is how the command line, the tuner, the launch and the example harness
compile. It runs `aref.compiler.run_passes` and, where the resource model refuses the result, tries the
alternatives below in order (`_fitting`); with `options.timing_guard` (the command line turns it on) the
optimal partitioner's Barrier IR is timed against the heuristic's and against the other schedules of the
solver's graphs in the simulator's timing model (`_never_slower`), and the faster program that fits is kept.
The passes themselves never retry: each is one pure function of the previous stage's IR.
"""
from __future__ import annotations

from dataclasses import replace

from aref.compiler import STAGES, CompileOptions, run_passes
from aref.errors import ArefError, SolverError
from aref.ir import Kernel, OpKind
from aref.resources import ResourceError


def lower_to(kernel: Kernel, stage: str, options: CompileOptions | None = None):
    """Run the passes up to and including `stage`; return that stage's IR.

    With the heuristic partitioner's `consumers="auto"`, a partition whose register budgets the resource model
    refuses (at the lowering, where budgets follow liveness) is retried with cooperative consumers (which split
    the accumulators over two groups), then without the coarse T/C/U overlap (which keeps the next iteration's
    tiles live), then both: "auto" picks the first organisation that fits. The optimal partitioner solves
    again counting the register tiles each node reads in its group (`solver_operands`), then under a tighter
    register cap. When nothing fits, the first Barrier IR is returned carrying the
    refusal (`WSKernel.resource_error`): the simulator runs it, the backend raises the refusal. An optimal
    partition whose shared memory does not fit (the solver budgets its hand-offs' slots but not the store
    staging and operand scratch the lowering adds) is solved again without hand-offs between groups, then also
    without the coarse overlap.

    The optimal partition at the barrier level passes the timing guard (`timing_guard`, `_never_slower`)."""
    options = options or CompileOptions()
    if stage not in STAGES:
        raise ArefError(f"unknown stage {stage!r}", hint=f"stages: {', '.join(STAGES)}")
    if options.partition == "optimal" and kernel.loop is None and STAGES.index(stage) >= STAGES.index("partitioned"):
        # nothing to pipeline: the solver schedules a loop, and the heuristic's partition of straight-line code
        # (a split-KV combine, a row-wise epilogue) is the program; the API and the command line alike
        ws = _fitting(kernel, stage, replace(options, partition="heuristic"))
        ws.fallback = NO_LOOP_FALLBACK
        return ws
    try:
        ws = _fitting(kernel, stage, options)
    except SolverError as refusal:
        if not (stage == "barrier" and options.partition == "optimal" and options.timing_guard):
            raise
        # the guard never hands on a refusal where the heuristic's program fits (attention_causal at head
        # dim 256 on sm_90a: the solver proves that no partition of its space fits the registers)
        other = _alternative(kernel, replace(options, partition="heuristic"))
        if other is None:
            raise
        other.fallback = (f"the solver found no schedule ({_brief(_first_sentence(refusal.message))}): the "
                          f"optimal partitioner keeps the heuristic's program")
        return other
    if stage == "barrier" and options.partition == "optimal" and options.timing_guard:
        return _never_slower(kernel, ws, options)
    return ws


NO_LOOP_FALLBACK = ("the optimal partitioner schedules the kernel's loop and this kernel has none: it is compiled "
                    "with the heuristic's partition")


# the timing guard times whole loops: kernels with longer ones keep the solver's program untimed
GUARD_MAX_TRIPS = 1024


def _never_slower(kernel: Kernel, ws, options: CompileOptions):
    """The optimal partition's Barrier IR, or the heuristic's where the timing model (`aref.sim.timing`, the
    busiest CTA, the same figures `aref compare` reports) runs that one in fewer cycles per iteration. The
    solver's model is coarser than the timing model (no per-group occupancy of the instruction stream), so
    its proven-optimal II can lower to a slower program than the heuristic's; the guard makes "optimal"
    never the slower of the two. Likewise a program that fits the resource model beats one that does not: when
    no partition of the solver's space fits (it gives each MMA node a group; rows split only on sm_90a and
    only where the tile's rows split), the heuristic's program is kept rather than a refusal. The
    kept program says why in `WSKernel.fallback`."""
    from aref.interp.tile import longest_cta, trip_counts
    from aref.target.machine import machine_for
    from aref.sim.timing import simulate_timing

    def heuristic():
        try:
            return _fitting(kernel, "barrier", replace(options, partition="heuristic"))
        except ArefError:
            return None

    tmem = options.target.has_tensor_memory
    if ws.resource_error is not None and tmem and not options.solver_occupancy_free:
        ws = _free_graph_program(kernel, options) or ws
    if ws.resource_error is not None:
        other = heuristic()
        if other is None or other.resource_error is not None:
            return ws
        other.fallback = (f"no partition of the solver's space fits, the optimal partitioner keeps the "
                          f"heuristic's program; its own was refused for {ws.resource_error.kind}: "
                          f"{_first_sentence(ws.resource_error.message)}")
        return other
    cta = longest_cta(kernel)
    if kernel.loop is None or trip_counts(kernel).get(cta, 0) > GUARD_MAX_TRIPS:
        return ws
    machine = machine_for(options.arch)
    own = simulate_timing(ws, None, machine, cta=cta)
    if tmem and not options.solver_occupancy_free:
        # Blackwell: the schedule of the occupancy-free graph too (`partition.optimal.extract_graph`'s
        # `reservations`), where it lowers to a faster program than the stream graph's or where that one
        # does not run in the timing model
        if ws.streams:
            # the same schedule with each tensor-memory slot held until its last reader (where the early
            # release lets the MMA warp run ahead into a slower order: attention_fwd, 1681 against 1606)
            ws, own = _keep_faster(_alternative(kernel, replace(options, early_tmem_release=False)), ws, own,
                                   machine, cta)
        if ws.group_overlap:
            # the schedule of the graph whose groups run their nodes one at a time, where the solver's ran two
            # of one group at once (linear_attention: the state's cast and q·S's rescale, 1626 against 1242)
            ws, own = _keep_faster(_alternative(kernel, replace(options, solver_group_order=True)), ws, own,
                                   machine, cta)
        ws, own = _keep_faster(_free_graph_program(kernel, options), ws, own, machine, cta,
                               "the schedule of the solver's stream graph ran {own} cycles/iteration in the timing "
                               "model, the occupancy-free graph's {new}: the optimal partitioner keeps the latter")
    if not tmem and options.solver_detached_stores is None and _stores_in_loop(kernel):
        # Hopper: the schedule of the graph whose TMA stores hold their group until the copy ends, where it
        # lowers to a faster program (the tensor core serves MMAs as they come, not at the schedule's
        # cycles: linear_attention's detached schedule lowers to 4046 cycles per iteration, this one 2243)
        ws, own = _keep_faster(_alternative(kernel, replace(options, solver_detached_stores=False)), ws, own,
                               machine, cta, "the schedule with fire-and-forget stores ran {own} cycles/iteration "
                                             "in the timing model, the one with waited stores {new}: the optimal "
                                             "partitioner keeps the latter")
    if own.violations:
        return ws
    other = heuristic()
    if other is None or other.resource_error is not None:
        return ws                            # never trade a program that fits for one that does not
    report = simulate_timing(other, None, machine, cta=cta)
    if report.violations or report.cycles_per_iter >= own.cycles_per_iter:
        return ws
    other.fallback = (f"the solver's schedule ran {own.cycles_per_iter:.0f} cycles/iteration in the timing model, "
                      f"the heuristic's {report.cycles_per_iter:.0f}: the optimal partitioner keeps the "
                      f"heuristic's program")
    return other


def _stores_in_loop(kernel: Kernel) -> bool:
    """Does `kernel`'s loop store tiles (where `extract_graph`'s `detached_stores` changes the graph)?"""
    return kernel.loop is not None and any(op.kind is OpKind.STORE for op in kernel.loop.body.ops)


def _keep_faster(candidate, ws, own, machine, cta, why: str = ""):
    """(`candidate`, its report) where it runs faster than `ws` timed in `own` (`_faster`), its `fallback` set
    from `why` (formatted with both figures); else (`ws`, `own`)."""
    report = _faster(candidate, own, machine, cta)
    if report is None:
        return ws, own
    if why:
        candidate.fallback = why.format(own=f"{own.cycles_per_iter:.0f}", new=f"{report.cycles_per_iter:.0f}")
    return candidate, report


def _faster(candidate, own, machine, cta):
    """The timing report of `candidate` (a Barrier IR or None) where it runs without a violation and in fewer
    cycles per iteration than the program timed in `own` (or `own` had a violation); else None."""
    from aref.sim.timing import simulate_timing
    if candidate is None:
        return None
    report = simulate_timing(candidate, None, machine, cta=cta)
    if report.violations or not (own.violations or report.cycles_per_iter < own.cycles_per_iter):
        return None
    return report


def _free_graph_program(kernel: Kernel, options: CompileOptions):
    """The Barrier IR of the occupancy-free graph's schedule (Blackwell), or None where it does not fit."""
    return _alternative(kernel, replace(options, solver_occupancy_free=True))


def _alternative(kernel: Kernel, options: CompileOptions):
    """The Barrier IR the optimal partitioner makes with `options`, or None where it fails or does not fit."""
    try:
        ws = _fitting(kernel, "barrier", options)
    except ArefError:
        return None
    return ws if ws.resource_error is None else None


def _first_sentence(text: str) -> str:
    return text.split(". ")[0].rstrip(".")


def _brief(text: str, limit: int = 240) -> str:
    """`text` cut after `limit` characters at a clause boundary (a solver's reasons repeat per II tried)."""
    if len(text) <= limit:
        return text
    cut = text.rfind(";", 0, limit)
    return text[:cut if cut > 0 else limit].rstrip() + " …"


def _fitting(kernel: Kernel, stage: str, options: CompileOptions):
    """`stage`'s IR, retried with the alternatives of `lower_to` when the resource model refuses it."""
    ws = run_passes(kernel, stage, options)
    first = getattr(ws, "resource_error", None)
    if first is None:
        return ws
    if options.partition == "optimal" and getattr(first, "smem_excess", 0) and options.solver_transfers:
        # the solver budgets its hand-offs' slots, not the store staging and operand scratch the lowering adds
        # beside them: without hand-offs, then also without the coarse overlap's extra live tiles
        alternatives = iter((replace(options, solver_transfers=False),
                             replace(options, solver_transfers=False, coarse=False)))
    elif options.partition == "optimal":
        if getattr(first, "excess", 0) and not options.solver_operands:
            # the solver's registers without the operands its nodes hold: count them (attention_causal's
            # softmax group held the received S beside P and O: 368 registers)
            try:
                other = run_passes(kernel, stage, replace(options, solver_operands=True))
                if getattr(other, "resource_error", None) is None:
                    return other
            except ArefError:
                pass
        alternatives = _tighter_caps(options, first)
    elif options.target.mma == "tcgen05" and options.compute_groups is None \
            and getattr(first, "register_file", False):
        # Blackwell: one group per chain of register math can need more registers than the SM's file; fewer
        # groups, each running several chains one after another, need fewer
        wide = sum(gp.group.warps == 4 and gp.group.role in ("compute", "softmax") for gp in ws.groups)
        alternatives = iter([replace(options, compute_groups=k) for k in range(wide - 1, 0, -1)])
    elif options.consumers == "auto":
        # cooperative groups split the accumulators; without the coarse T/C/U overlap fewer tiles are live
        alternatives = iter((replace(options, consumers="cooperative"), replace(options, coarse=False),
                             replace(options, consumers="cooperative", coarse=False)))
    else:
        alternatives = iter(())
    cooperative_failed = None            # why the cooperative consumers tried below did not fit either
    for alt in alternatives:
        try:
            other = run_passes(kernel, stage, alt)
        except ArefError as exc:
            if isinstance(alternatives, _tighter_caps):
                break                        # no schedule under the tighter cap: the first refusal stands
            if alt.consumers == "cooperative" and options.consumers != "cooperative":
                cooperative_failed = cooperative_failed or exc.message
            continue
        error = getattr(other, "resource_error", None)
        if error is None:
            return other
        if alt.consumers == "cooperative" and options.consumers != "cooperative":
            cooperative_failed = cooperative_failed or error.message
        if isinstance(alternatives, _tighter_caps):
            alternatives.send_error(error)
    if options.partition == "optimal" and options.solver_detached_stores is None \
            and not options.target.has_tensor_memory:
        # Hopper's graph lets a TMA store run on while its group goes on; where the partition that admits does
        # not fit, the graph whose stores hold their group (random program seed 67: II 976 refused for
        # registers, 1248 fits) is the next schedule
        try:
            other = _fitting(kernel, stage, replace(options, solver_detached_stores=False))
            if getattr(other, "resource_error", None) is None:
                return other
        except ArefError:
            pass
    if cooperative_failed is not None:
        _cooperative_tried(first, cooperative_failed)
    return ws


def _cooperative_tried(error, why: str) -> None:
    """The register refusal's hint without the advice to split the rows over cooperative consumer groups, which
    was tried and failed too (linear attention's D×D state at D = 128 is carried whole by every consumer): it says
    why instead."""
    hint = error.hint or ""
    if "cooperative" not in hint and "more consumer groups" not in hint:
        return
    hint = hint.replace(", or split the rows over cooperative consumer groups", "").replace(
        "split the work over more consumer groups or use smaller tiles", "use smaller tiles")
    error.noting(hint=f"{hint} (cooperative consumer groups were tried and do not fit either: {_brief(why, 160)})")


class _tighter_caps:
    """The solver schedules the loop with its own view of live registers; when the lowered kernel needs more
    than a group can be given (the resource model's liveness), solve again with the groups' cap lowered by
    the excess — up to three times — so the schedule the optimal partitioner hands on is one that fits."""

    def __init__(self, options: CompileOptions, first: ResourceError):
        from aref.resources import BUDGET_CAP
        self.options, self.error, self.tries = options, first, 0
        self.cap = options.solver_register_cap or BUDGET_CAP

    def __iter__(self):
        return self

    def __next__(self) -> CompileOptions:
        from aref.resources import REG_STEP
        excess = getattr(self.error, "excess", None)
        if self.tries == 3 or not excess:
            raise StopIteration
        self.tries += 1
        self.cap -= -(-excess // REG_STEP) * REG_STEP
        if self.cap < 64:
            raise StopIteration
        return replace(self.options, solver_register_cap=self.cap)

    def send_error(self, error: ResourceError) -> None:
        self.error = error
