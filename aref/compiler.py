"""The compiler driver: the ordered list of passes from Tile IR down, steered by `CompileOptions`.

    tile ──fp8 promotion──▶ promoted ──partition + loop distribution──▶ partitioned ──pipeline──▶ pipelined ──aref lowering──▶ barrier

Each step is a pure function of the previous stage's IR (DESIGN.md's one-directional data flow); with
`verify_each_stage` the matching verifier runs after every step. The CLI lists `STAGES` from here.
`run_passes` runs the list; which program to keep — the retries where the resource model refuses one, the
timing guard of the optimal partitioner — is `aref.search`'s policy, which the command line, the tuner and
the launch call (`aref.search.lower_to`).

A pass that crashes, or whose output the verifier rejects, raises `CompilerBugError` naming the pass (the
compiler's bug, with the user's line only as context); a pass may still refuse a program with an
`ArefError` that says what the user can change.
"""
from __future__ import annotations

from dataclasses import dataclass

from aref.errors import ArefError
from aref.guard import compiler_pass
from aref.ir import Kernel
from aref.ir.printer import print_kernel
from aref.target import DEFAULT_ARCH, Target, target_of
from aref.verify import verify
from aref.ir.ws import print_ws


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

    arch: str = DEFAULT_ARCH          # a name of `aref.target.ARCHS`; `target` is its record
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
                                      # runs (on by `aref.search` after a register refusal: solving with it can
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
        target_of(self.arch)          # an unknown arch is refused here, naming the known ones
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

    @property
    def target(self) -> Target:
        """The record of `arch`: its limits and features."""
        return target_of(self.arch)


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
    if options.target.has_tensor_memory:   # its accumulators start from zeros: β·C is added after the loop
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


def run_passes(kernel: Kernel, stage: str, options: CompileOptions | None = None):
    """Run the passes of `STEPS` up to and including `stage`; return that stage's IR. No retry and no choice:
    `aref.search.lower_to` runs this under the policy that picks which program to keep."""
    options = options or CompileOptions()
    if stage not in STAGES:
        raise ArefError(f"unknown stage {stage!r}", hint=f"stages: {', '.join(STAGES)}")
    ir = kernel
    for name, step, _ in STEPS:
        ir = step(ir, options)
        if name == stage:
            return ir
    raise AssertionError("unreachable")


def print_stage(ir, stage: str) -> str:
    return {n: p for n, _, p in STEPS}[stage](ir)
