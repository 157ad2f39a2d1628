"""The optimal partitioner's solve: which graphs of a kernel's loop it solves, and which answer it lowers.

`solve_partition` solves the kernel's graph with its hand-off channels' shared memory (`solve_loop`); where no
partition of it is found — a proof that none fits the SM, or none within the time limit — the row-split
tile's (`_row_split_fallback`, `partition.rowsplit`), else the graph without that memory. Every CP-SAT call
of the step is in the answer's profile (`solve.SolveCall`, labelled with the graph it solved: "unsplit",
"row split", "no hand-off memory"), which `aref solve --json` reports as `solve_profile`. `optimal_partition`
maps the answer to the partition the compiler lowers (here, above `partition.optimal`'s extraction and
mapping, so that neither module imports the other).
"""
from __future__ import annotations

import time

import solve as S
from solve.memo import solve_once
from solve.search import explain_budget
from aref.errors import SolverError
from aref.ir import Kernel
from partition import optimal, streams
from partition.model import Partition

UNSPLIT, ROW_SPLIT, NO_HANDOFF_MEMORY = "unsplit", "row split", "no hand-off memory"


def solve_loop(kernel: Kernel, arch: str, *, time_limit: float, encoding: str = "interval",
               register_cap: int | None = None, allow_transfers: bool = True, progress=None,
               explain_found: bool = True, operands: bool = False, channel_memory: bool = True,
               reservations: bool | None = None, detached_stores: bool | None = None, group_order: bool = False,
               explain: bool = True, label: str = ""):
    """Extract `kernel`'s loop graph and solve it: (extraction, result, proof). `proof` says why no partition
    of the graph with its hand-off channels' shared memory was found: the solver's proof that none fits the
    SM, or its time-out without one (`solve_partition` then solves the row split, or the graph without that
    memory, `channel_memory=False`, whose partition the lowering's resource model refuses by that rule,
    recorded on its Barrier IR, which the simulator still runs). `reservations`: `extract_graph`'s (False on
    Blackwell: the occupancy-free graph), as `detached_stores`. `explain=False` leaves the proofs unexplained
    (`solve.explain_infeasible` explains them where needed); `label` names the graph in the result's profile."""
    ex = optimal.extract_graph(kernel, arch, register_cap=register_cap, allow_transfers=allow_transfers,
                               channel_memory=channel_memory, operands=operands, detached_stores=detached_stores,
                               group_order=group_order,
                               **({} if reservations is None else {"reservations": reservations}))
    result = solve_once(ex.graph, S.SolveOptions(encoding=encoding, time_limit=time_limit, progress=progress,
                                                 explain_found=explain_found, explain=explain))
    for call in result.profile:
        call.label = label
    return ex, result, _proof(ex, result, channel_memory, time_limit)


def _proof(ex, result, channel_memory: bool, time_limit: float) -> str:
    """Why no partition of the graph with its hand-off channels' shared memory was found ('' where one was,
    or where the proof names no SM resource)."""
    g = ex.graph
    metered = g.post_handoffs or g.post_staging or any(o.handoff for o in g.ops.values())
    if channel_memory and metered and (_hardware_limits(result) or result.status == S.TIMEOUT):
        proof = "; ".join(r for inf in result.infeasible for r in inf.reasons)
        if result.status == S.TIMEOUT:
            proof = (f"none found in {time_limit:g} s" + (f": {proof}" if proof else ""))
        return proof
    return ""


def solve_partition(kernel: Kernel, options, *, encoding: str = "interval", progress=None,
                    explain_found: bool = False):
    """The solve the optimal partitioner lowers (`options`: its `CompileOptions`): the kernel's graph with its
    hand-off channels' memory; where no partition of it is found, the row split's (`_row_split_fallback`),
    else the graph without that memory. Returns (kernel, extraction, result, proof, why the rows split); the
    result's profile lists the CP-SAT calls of every graph solved on the way.

    The unsplit graph's proofs are explained after its solve, only where their reasons are read: with
    `explain_found`, where its answer stands; else where it has no schedule (the row split's note, the
    fallback without hand-off memory, a refusal)."""
    calls: list = []
    limit = options.solver_time_limit
    start = time.perf_counter()

    def solve(k: Kernel, label: str, explain: bool = True, **how):
        out = solve_loop(k, options.arch, time_limit=limit, encoding=encoding,
                         progress=progress, register_cap=options.solver_register_cap,
                         allow_transfers=options.solver_transfers, explain_found=explain_found,
                         operands=options.solver_operands,
                         reservations=False if options.solver_occupancy_free else None,
                         detached_stores=options.solver_detached_stores,
                         group_order=options.solver_group_order, explain=explain, label=label, **how)
        calls.extend(out[1].profile)
        return out

    # the unsplit graph's proofs are explained once it is known whether its answer stands: where the rows
    # split, only the note of why reads them (a short budget), and `aref solve`'s explanation of a proof that
    # no II at all has a schedule was 15 s of the 34 s it took on causal attention's large tile, for reasons
    # it never printed
    ex, result, proof = solve(kernel, UNSPLIT, explain=False)
    unexplained = explain_found or result.status in (S.INFEASIBLE, S.TIMEOUT)

    def explained(budget: float):
        """The unsplit graph's answer with its proofs explained (`budget` seconds each), and its proof."""
        nonlocal unexplained
        if unexplained:
            before = len(result.profile)
            S.explain_infeasible(ex.graph, result, budget)
            for call in result.profile[before:]:
                call.label = UNSPLIT
            calls.extend(result.profile[before:])
            unexplained = False
        return result, _proof(ex, result, True, limit)

    split = _row_split_fallback(kernel, result, proof, options, lambda k: solve(k, ROW_SPLIT),
                                lambda: explained(min(2.0, limit / 4)))
    why = ""
    if split is not None:
        kernel, (ex, result, proof), why = split
    else:
        result, proof = explained(explain_budget(limit))
        if proof:
            ex, result, _ = solve(kernel, NO_HANDOFF_MEMORY, channel_memory=False)
    result.profile = calls
    result.solve_seconds = time.perf_counter() - start      # the whole step: every graph solved on the way
    return kernel, ex, result, proof, why


def _row_split_fallback(kernel: Kernel, result, proof: str, options, solve, explained=None):
    """Where the kernel's own graph has no partition — a proof that none fits the SM (naming shared memory or
    registers: e.g. two 128-row fp32 accumulators, too many registers for one group and, in two, a 64 KB
    hand-off after the loop beside the ring; or no schedule within the stage bound at any II) or none found
    in the time limit (causal attention's 128-row tile) — the solver's space grows by the cooperative
    consumers' rewrite: the tile rows split over `num_consumers` replicas (`partition.rowsplit`), whose nodes
    the solver places and schedules like any other. Returns (split kernel, its solve, why), or None when the
    kernel's own answer stands, the rows do not split, or the split kernel fits no better. `explained()`
    gives the kernel's own answer with its proofs explained, and its proof (for the note of why)."""
    found = result.status in (S.OPTIMAL, S.FEASIBLE_TIMEOUT)
    # an answer above its units' bound (hand-offs between groups, a group's stream) may lose to the split
    # tile's, which keeps each replica's rows in one group: causal attention's large tile fits unsplit once
    # its post-loop hand-off reuses a released slot, at II 2976 against the split's 2048
    above_bound = found and result.ii is not None and result.lower_bound is not None and \
        result.ii > result.lower_bound
    if (found and not above_bound) or options.target.mma != "wgmma" or options.num_consumers < 2:
        return None
    from partition.rowsplit import can_row_split, row_split
    if can_row_split(kernel, options.num_consumers) is not None:
        return None
    split, _ = row_split(kernel, options.num_consumers)
    ex, res, why_not = solve(split)
    if why_not or res.status not in (S.OPTIMAL, S.FEASIBLE_TIMEOUT):
        return None
    if found:
        if res.ii >= result.ii:
            return None
        return split, (ex, res, why_not), (f"the row split's II {res.ii} beats the unsplit tile's {result.ii} "
                                           f"(above its bound {result.lower_bound})")
    if explained is not None:
        result, proof = explained()
    limits = proof or _hardware_limits(result)
    if result.status == S.TIMEOUT:
        why = f"no partition of the unsplit tile found ({limits})"
    elif limits:
        why = f"no partition of the unsplit tile fits the SM ({limits})"
    else:
        why = f"no partition of the unsplit tile exists ({result.message})"
    return split, (ex, res, why_not), why


def _hardware_limits(result) -> str:
    """The SM resources ("shared memory", "registers") a proven infeasibility names, as words ('' if none)."""
    if result.status != S.INFEASIBLE:
        return ""
    families = {f for inf in result.infeasible for f in inf.families}
    words = (["shared memory"] if any(f.startswith("memory:") for f in families) else []) + \
        (["registers"] if any(f.startswith("registers:") for f in families) else [])
    return " and ".join(words)


def optimal_partition(kernel: Kernel, options) -> tuple[Kernel, Partition, dict[int, tuple[int, int]]]:
    """Solve, then place every Tile IR op in its node's group. Returns the kernel, the partition and the
    anchors {index of the op in kernel.all_ops(): (stage, residue)} for the pipeline."""
    kernel, ex, result, proof, why = solve_partition(kernel, options)
    if result.status not in (S.OPTIMAL, S.FEASIBLE_TIMEOUT):
        why = "; ".join(r for inf in result.infeasible for r in inf.reasons) or result.message
        hint = ("raise solver_time_limit (aref solve --time-limit S)" if result.status == S.TIMEOUT
                else "use the heuristic partition, or give the loop more resources")
        raise SolverError(f"no warp-specialized schedule for @{kernel.name}: {result.status}"
                          + (f" ({why})" if why else ""), kernel.loc, hint=hint)
    part = optimal.partition_from_schedule(kernel, ex, result, options.arch)
    index = {op: i for i, op in enumerate(kernel.all_ops())}
    anchors = {}
    for n, ops in ex.members.items():
        if ex.kind[n] == "tma":
            continue                           # the producer runs ahead by its ring depth, unstaged
        cyc = result.schedule[n]
        for o in ops:
            anchors[index[o]] = (cyc // result.ii, cyc % result.ii)
    if ex.occupancy:     # where the graph states the streams, the solver knows when each slot is freed
        anchors.update(streams.release_anchors(kernel, ex, result, index))
        anchors.update(streams.tensor_core_order(ex, result, index))
    # the lowering may rely on the nodes' stated streams (a tensor-memory tile released after its load)
    part.streams = ex.occupancy or ex.own_streams
    part.group_overlap = ex.own_streams and not options.solver_group_order and streams.group_overlap(ex, result)
    part.notes.append(f"II={result.ii} (lower bound {result.lower_bound}, "
                      f"{'proven optimal' if result.proven_optimal else 'not proven'})")
    if proof:
        part.notes.append(f"no schedule fits the SM with its hand-off channels' shared memory ({proof})")
    if why:
        part.notes.append(f"rows split over {options.num_consumers} replicas: {why}")
    return kernel, part, anchors
