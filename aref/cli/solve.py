"""`aref solve` (the optimal schedule of a kernel's loop) and `aref compare` (heuristic vs optimal)."""
from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from aref.cli.common import add_target, command, example_and_inputs, positive_seconds


def _solve_args(p):
    add_target(p)
    p.add_argument("--encoding", default="interval", choices=("interval", "time-indexed"),
                   help="interval: the joint CP-SAT model at exact cycles; time-indexed: Twill's boolean model")
    p.add_argument("--time-limit", type=positive_seconds, default=60.0, help="solver time limit in seconds (> 0)")
    p.add_argument("--profile", action="store_true",
                   help="list the solver's CP-SAT calls (graph, step, II, status, seconds; in --json: solve_profile)")


def solve_kernel(kernel, arch: str, encoding: str, time_limit: float, progress=None, explain_found: bool = True):
    """Extract the dependence graph of `kernel`'s loop and solve it; returns (extraction, schedule).
    `explain_found=False` leaves the IIs below a schedule found unexplained (as the compiler's own solve)."""
    from aref.compiler import CompileOptions
    from partition.solving import solve_partition
    # the compiler's own solve (with its row-split fallback), so the II is that of the partition it lowers
    _, ex, result, _, _ = solve_partition(kernel, CompileOptions(arch=arch, solver_time_limit=time_limit),
                                          encoding=encoding, progress=progress, explain_found=explain_found)
    return ex, result


def solve_json(ex, result) -> dict:
    """The `aref solve --json` document (the keys docs/cli.md lists)."""
    from partition.streams import MMA_WARP
    out = {k: getattr(result, k) for k in ("status", "ii", "lower_bound", "res_mii", "rec_mii", "proven_optimal",
                                            "solve_seconds", "length", "encoding", "proven_bound")}
    out["bound_reasons"] = list(result.bound_reasons)
    out["assignment"] = dict(result.assignment)
    out["schedule"] = dict(result.schedule)
    ops = []
    for name, node in ex.graph.ops.items():
        first = ex.members[name][0]
        # the unit it takes most of (an MMA: the tensor core, not the MMA warp's stream)
        units = [u for u in node.usage if u != MMA_WARP] or list(node.usage)
        unit = max(units, key=node.usage.get) if units else "issue"
        cycle = result.schedule.get(name)
        ops.append({"name": name, "kind": ex.kind[name], "line": first.loc.line, "unit": unit,
                    "group": result.assignment.get(name), "cycle": cycle,
                    "stage": None if cycle is None or not result.ii else cycle // result.ii})
    out["ops"] = ops
    out["infeasible"] = [{"ii": i.ii, "ii_max": i.ii_max, "reasons": i.reasons, "families": i.families}
                         for i in result.infeasible]
    out["graph"] = ex.graph.to_json()
    # every CP-SAT call of the partitioner's solve: which graph (label), step, II, status, seconds
    out["solve_profile"] = [c.to_json() for c in result.profile]
    return out


def above_the_bound(result) -> str:
    """Why the II is above its lower bound (ResMII, RecMII, the groups' streams): the reasons of the proof
    that every II from the bound up to the II fails ('' where the II is the bound, or nothing was proven)."""
    if result.ii is None or result.ii <= result.lower_bound:
        return ""
    top = [inf for inf in result.infeasible if inf.proven and inf.ii_max == result.ii - 1]
    reasons = [r for inf in top for r in inf.reasons if not r.startswith("shown at II")]
    if not reasons:
        return ""
    bound = "; ".join(result.bound_reasons) or f"lower bound {result.lower_bound}"
    return (f"II {result.ii} is above the bound {result.lower_bound} ({bound}): every II from "
            f"{result.lower_bound} to {result.ii - 1} is proven infeasible, the highest by " + "; ".join(reasons))


@command("solve", "find the optimal joint software-pipelining + warp-specialization schedule", _solve_args)
def cmd_solve(args, console: Console) -> int:
    example, inputs = example_and_inputs(args)
    kernel = example.kernel.specialize(**inputs)
    status = None if args.json else Console(stderr=True).status("solving…")

    def progress(ev):
        if status is not None:
            bound = f"{ev.ii}" if ev.ii_max in (None, ev.ii) else f"{ev.ii}..{ev.ii_max}"
            status.update(f"[{ev.elapsed:5.1f}s] {ev.kind} II={bound} (lower bound {ev.lower_bound}) {ev.detail}")

    if status is not None:
        status.start()
    try:
        ex, result = solve_kernel(kernel, args.arch, args.encoding, args.time_limit, progress)
    finally:
        if status is not None:
            status.stop()
    data = solve_json(ex, result)
    if args.json:
        print(json.dumps({"kernel": example.name, "arch": args.arch, **data}))
        return 0 if result.ii is not None else 1
    title = (f"{example.name} on {args.arch}: II = {result.ii} (lower bound {result.lower_bound}, "
             f"{'proven optimal' if result.proven_optimal else result.status}) in {result.solve_seconds:.2f}s")
    table = Table(title=title)
    for col in ("op", "kind", "line", "unit", "group", "cycle", "stage"):
        table.add_column(col)
    for op in sorted(data["ops"], key=lambda o: (o["group"] if o["group"] is not None else -1, o["cycle"] or 0)):
        table.add_row(*(str(op[k]) for k in ("name", "kind", "line", "unit", "group", "cycle", "stage")))
    console.print(table)
    for inf in data["infeasible"]:
        span = inf["ii"] if inf["ii_max"] == inf["ii"] else f"{inf['ii']}..{inf['ii_max']}"
        console.print(f"II {span} infeasible: " + "; ".join(inf["reasons"]), highlight=False)
    why = above_the_bound(result)
    if why:
        console.print(why, highlight=False)
    if args.profile:
        profile = Table(title=f"CP-SAT calls ({len(result.profile)}, "
                              f"{sum(c.seconds for c in result.profile):.2f} s)")
        for col in ("graph", "step", "formulation", "II", "status", "seconds"):
            profile.add_column(col)
        for c in result.profile:
            profile.add_row(c.label, c.step, c.encoding, str(c.ii), c.status, f"{c.seconds:.3f}")
        console.print(profile)
    return 0 if result.ii is not None else 1
