"""The compiler driver: the ordered list of passes from Tile IR down, steered by `CompileOptions`.

    tile ──fp8 promotion──▶ promoted ──partition + loop distribution──▶ partitioned ──pipeline──▶ pipelined ──aref lowering──▶ barrier

Each step is a pure function of the previous stage's IR (docs/architecture.md: data flows one way); with
`verify_each_stage` the matching verifier runs after every step. The CLI lists `STAGES` from here.

A pass that crashes, or whose output the verifier rejects, raises `CompilerBugError` naming the pass (the
compiler's bug, with the user's line only as context); a pass may still refuse a program with an
`ArefError` that says what the user can change.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from aref.errors import ArefError
from aref.guard import compiler_pass
from aref.ir import Kernel, OpKind
from aref.ir.printer import print_kernel
from aref.resources import ResourceError
from aref.verify import verify
from aref.ir.ws import print_ws

ARCHS = ("sm_90a", "sm_100a")


@dataclass(frozen=True)
class CompileOptions:
    """Everything that steers compilation; no environment variable or global state does.

    consumers:      Hopper consumer organisation: "auto", "plain", "cooperative" or "pingpong"
    num_consumers:  consumer warp groups for cooperative / ping-pong
    compute_groups: Blackwell heuristic: at most this many four-warp CUDA-core groups (None: one per independent
                    chain of register math; where their registers do not fit the SM, fewer are tried)
    mma_depth:      MMA groups kept in flight (None: 1, limited by user channel depths)
    coarse:         T/C/U pipelining of groups whose MMAs feed CUDA-core work
    promote_every:  fp8 MMA accumulators promoted to fp32 every N K-steps on sm_90a (`aref.passes.promote`); 0: never
    """

    arch: str = "sm_90a"
    partition: str = "heuristic"      # "heuristic" (Tawa) or "optimal" (Twill solver)
    consumers: str = "auto"
    num_consumers: int = 2
    compute_groups: int | None = None
    mma_depth: int | None = None
    coarse: bool = True
    solver_time_limit: float = 60.0
    solver_register_cap: int | None = None   # per-group registers the solver may use (None: the model's cap)
    solver_transfers: bool = True     # may the solver hand register tiles between groups (through shared memory)
    solver_operands: bool = False     # the solver counts the register tiles a node reads in its group while it
                                      # runs (on by `lower_to` after a register refusal: solving with it can
                                      # take longer, e.g. attention_causal at head dim 128)
    solver_occupancy_free: bool = False   # Blackwell: solve the occupancy-free graph (each node costs its busiest
                                      # unit) instead of the nodes' instruction streams (`extract_graph`'s
                                      # `reservations`); the timing guard lowers both
    solver_detached_stores: bool | None = None   # the solver's TMA stores are fire and forget (`extract_graph`'s
                                      # `detached_stores`; None: on Hopper); the timing guard lowers both
    solver_group_order: bool = False  # Blackwell: a group's nodes hold its stream one at a time in the solver's
                                      # graph (`extract_graph`'s `group_order`); the timing guard lowers both
                                      # where the schedule without it overlaps them
    early_tmem_release: bool = True   # Blackwell, where the solver's graph stated the streams: a tensor-memory
                                      # tile CUDA cores load whole is released after its load
                                      # (`aref.lower.sm100`); the timing guard lowers both
    timing_guard: bool = False        # optimal: keep the heuristic's program where the timing model finds it
                                      # faster or where no solver partition fits (the command line turns it
                                      # on; off: the solver's own program, or its refusal)
    verify_each_stage: bool = True    # run the verifier between passes (tests keep it on)
    promote_every: int = 0            # fp8: the tensor core's partial sum is added into the fp32 accumulator
                                      # every N K-steps (wgmma keeps ~14 bits for fp8); 0: never

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ArefError(f"unsupported arch {self.arch!r}", hint=f"choose one of {', '.join(ARCHS)}")
        if self.partition not in ("heuristic", "optimal"):
            raise ArefError(f"unknown partition mode {self.partition!r}", hint="use 'heuristic' or 'optimal'")
        if self.mma_depth is not None and (not isinstance(self.mma_depth, int) or self.mma_depth < 0):
            raise ArefError(f"mma_depth must be an integer ≥ 0, got {self.mma_depth!r}",
                            hint="None keeps the default of one MMA group in flight")
        if isinstance(self.promote_every, bool) or not isinstance(self.promote_every, int) \
                or self.promote_every < 0:
            raise ArefError(f"promote_every must be an integer ≥ 0 (K-steps between fp8 promotions), got "
                            f"{self.promote_every!r}", hint="e.g. promote_every=4; 0 turns promotion off")
        if not self.solver_time_limit > 0:
            raise ArefError(f"solver_time_limit must be > 0 seconds, got {self.solver_time_limit!r}",
                            hint="e.g. solver_time_limit=60.0")


def _tile(kernel: Kernel, options: CompileOptions) -> Kernel:
    if options.verify_each_stage:
        with compiler_pass("the frontend (tracing)", kernel.loc, verifying=True):
            verify(kernel)
    return kernel


def _promote(kernel: Kernel, options: CompileOptions) -> Kernel:
    from aref.passes.promote import promote_fp8
    with compiler_pass("fp8 promotion", kernel.loc):
        out = promote_fp8(kernel, options.promote_every, options.arch)
    if options.verify_each_stage and out is not kernel:
        with compiler_pass("fp8 promotion", kernel.loc, verifying=True):
            verify(out)
    return out


def _partition(kernel: Kernel, options: CompileOptions):
    from aref.passes.cse import cse, drop_dead
    from aref.passes.squeeze import squeeze
    from partition.distribute import distribute
    # (1, R, C) tiles are (R, C) tiles; a cast or view written twice is one tile; what nothing reads, none
    kernel = drop_dead(cse(squeeze(kernel)))
    if options.arch == "sm_100a":   # tensor-memory accumulators start from zeros: β·C is added after the loop
        from aref.passes.acc_init import hoist_accumulator_init
        kernel = hoist_accumulator_init(kernel)
    anchors = None
    if options.partition == "optimal":
        from partition.optimal import optimal_partition
        with compiler_pass("the optimal partitioner", kernel.loc):
            own, (kernel, part, anchors) = kernel, optimal_partition(kernel, options)
            # the expert templates are the heuristic's answers for the user's program: a kernel the solver
            # rewrote (its rows split over replicas) is realized op by op from its schedule
            expert = _matching_heuristic(kernel, part, options) if kernel is own else None
        if expert is not None:
            # the solver proved this assignment optimal and it is one the expert templates know (e.g. FA3
            # ping-pong): realize it with the expert structure rather than op by op from the modulo schedule
            kernel, part, anchors = expert[0], expert[1], None
        name = "the optimal partitioner"
    else:
        from partition.heuristic import HeuristicOptions, heuristic_partition
        with compiler_pass("the heuristic partitioner", kernel.loc):
            kernel, part = heuristic_partition(kernel, options.arch,
                                               HeuristicOptions(options.consumers, options.num_consumers,
                                                                options.compute_groups))
        name = "the heuristic partitioner"
    if options.verify_each_stage:
        with compiler_pass(name, kernel.loc, verifying=True):
            verify(kernel)
    with compiler_pass("loop distribution", kernel.loc):
        ws = distribute(kernel, part, options.arch)
    ws.anchors = anchors
    ws.streams = anchors is not None and part.streams and options.early_tmem_release
    ws.group_overlap = anchors is not None and part.group_overlap
    from aref.passes.promote import promote_note
    ws.notes = list(part.notes) + promote_note(options.arch, options.promote_every)
    return _checked(ws, options, "loop distribution")


def _matching_heuristic(kernel: Kernel, part, options: CompileOptions):
    """The heuristic partition (kernel, partition) if it places the ops in the same groups as `part`, up to
    the groups' numbering; else None."""
    from partition.heuristic import HeuristicOptions, heuristic_partition
    try:
        hk, hp = heuristic_partition(kernel, options.arch, HeuristicOptions(options.consumers,
                                                                           options.num_consumers,
                                                                           options.compute_groups))
    except ArefError:
        return None
    if hk is not kernel:
        return None                       # the heuristic rewrote the kernel (cooperative rows): not the same

    def blocks(p):
        groups: dict[int, set] = {}
        for op, g in p.assign.items():
            groups.setdefault(g, set()).add(id(op))
        return sorted((frozenset(s) for s in groups.values()), key=lambda s: sorted(s))

    if blocks(hp) != blocks(part):
        return None
    hp.notes += part.notes + ["realized with the heuristic's role structure"]
    return hk, hp


def _pipeline(ws, options: CompileOptions):
    from pipeline import PipelineOptions, pipeline_kernel
    with compiler_pass("pipelining", ws.loc):
        out = pipeline_kernel(ws, PipelineOptions(options.mma_depth, options.coarse))
    return _checked(out, options, "pipelining")


def _lower(ws, options: CompileOptions):
    from aref.lower import lower
    with compiler_pass("aref lowering", ws.loc):
        out = lower(ws)
    return _checked(out, options, "aref lowering")


def _checked(ws, options: CompileOptions, pass_name: str):
    """`ws` after the verifier of its level: a rejection is the bug of the pass that produced it."""
    if options.verify_each_stage:
        from aref.verify.ws import verify_ws
        with compiler_pass(pass_name, ws.loc, verifying=True):
            verify_ws(ws)
    return ws


# (stage name, pass producing it from the previous stage's IR, printer of that stage)
STEPS = [
    ("tile", _tile, print_kernel),
    ("promoted", _promote, print_kernel),
    ("partitioned", _partition, print_ws),
    ("pipelined", _pipeline, print_ws),
    ("barrier", _lower, print_ws),
]
STAGES = tuple(name for name, _, _ in STEPS)


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
    ws = _fitting(kernel, stage, options)
    if stage == "barrier" and options.partition == "optimal" and options.timing_guard:
        return _never_slower(kernel, ws, options)
    return ws


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

    if ws.resource_error is not None and machine_for(options.arch).tmem_columns and not options.solver_occupancy_free:
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
    if machine.tmem_columns and not options.solver_occupancy_free:
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
    if not machine.tmem_columns and options.solver_detached_stores is None and _stores_in_loop(kernel):
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


def _fitting(kernel: Kernel, stage: str, options: CompileOptions):
    """`stage`'s IR, retried with the alternatives of `lower_to` when the resource model refuses it."""
    ws = _run(kernel, stage, options)
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
                other = _run(kernel, stage, replace(options, solver_operands=True))
                if getattr(other, "resource_error", None) is None:
                    return other
            except ArefError:
                pass
        alternatives = _tighter_caps(options, first)
    elif options.arch == "sm_100a" and options.compute_groups is None and getattr(first, "register_file", False):
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
    for alt in alternatives:
        try:
            other = _run(kernel, stage, alt)
        except ArefError:
            if isinstance(alternatives, _tighter_caps):
                break                        # no schedule under the tighter cap: the first refusal stands
            continue
        error = getattr(other, "resource_error", None)
        if error is None:
            return other
        if isinstance(alternatives, _tighter_caps):
            alternatives.send_error(error)
    if options.partition == "optimal" and options.solver_detached_stores is None and options.arch == "sm_90a":
        # Hopper's graph lets a TMA store run on while its group goes on; where the partition that admits does
        # not fit, the graph whose stores hold their group (random program seed 67: II 976 refused for
        # registers, 1248 fits) is the next schedule
        try:
            other = _fitting(kernel, stage, replace(options, solver_detached_stores=False))
            if getattr(other, "resource_error", None) is None:
                return other
        except ArefError:
            pass
    return ws


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


def _run(kernel: Kernel, stage: str, options: CompileOptions):
    ir = kernel
    for name, step, _ in STEPS:
        ir = step(ir, options)
        if name == stage:
            return ir
    raise AssertionError("unreachable")


def print_stage(ir, stage: str) -> str:
    return {n: p for n, _, p in STEPS}[stage](ir)
