"""`aref solve` (the optimal schedule of a kernel's loop) and `aref compare` (heuristic vs optimal)."""
from __future__ import annotations

import json
import time

from rich.console import Console
from rich.table import Table

from aref.cli import add_target, command, example_and_inputs, options_of
from aref.compiler import CompileOptions, lower_to
from aref.errors import ArefError

UNIT_GLYPH = {"tc": "T", "mufu": "M", "fma": "F", "tma": "D", "smem": "S", "issue": "i", "wait": "."}


def _solve_args(p):
    add_target(p)
    p.add_argument("--encoding", default="interval", choices=("interval", "time-indexed"),
                   help="interval: the joint CP-SAT model at exact cycles; time-indexed: Twill's boolean model")
    p.add_argument("--time-limit", type=float, default=60.0, help="solver time limit in seconds")


def solve_kernel(kernel, arch: str, encoding: str, time_limit: float, progress=None):
    """Extract the dependence graph of `kernel`'s loop and solve it; returns (extraction, schedule)."""
    import solve as S
    from partition.optimal import extract_graph
    ex = extract_graph(kernel, arch)
    result = S.solve(ex.graph, S.SolveOptions(encoding=encoding, time_limit=time_limit, progress=progress))
    return ex, result


def solve_json(ex, result) -> dict:
    """The `aref solve --json` document (DESIGN.md's keys)."""
    out = {k: getattr(result, k) for k in ("status", "ii", "lower_bound", "res_mii", "rec_mii", "proven_optimal",
                                            "solve_seconds", "length", "encoding")}
    out["assignment"] = dict(result.assignment)
    out["schedule"] = dict(result.schedule)
    ops = []
    for name, node in ex.graph.ops.items():
        first = ex.members[name][0]
        unit = max(node.usage, key=node.usage.get) if node.usage else "issue"
        cycle = result.schedule.get(name)
        ops.append({"name": name, "kind": ex.kind[name], "line": first.loc.line, "unit": unit,
                    "group": result.assignment.get(name), "cycle": cycle,
                    "stage": None if cycle is None or not result.ii else cycle // result.ii})
    out["ops"] = ops
    out["infeasible"] = [{"ii": i.ii, "ii_max": i.ii_max, "reasons": i.reasons, "families": i.families}
                         for i in result.infeasible]
    out["graph"] = ex.graph.to_json()
    return out


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
    return 0 if result.ii is not None else 1


# ----------------------------------------------------------------------------------------- compare
def _compare_args(p):
    add_target(p)
    p.add_argument("--time-limit", type=float, default=60.0, help="solver time limit in seconds")
    p.add_argument("--gantt", action="store_true", help="draw each partition's steady state as a text Gantt chart")
    p.set_defaults(size="large")


def measure(kernel, inputs, options: CompileOptions) -> tuple[dict, object, object]:
    """Lower with `options` and run the timing model: the compare entry of one partition."""
    from aref.machine import machine_for
    from aref.sim.timing import simulate_timing
    ws = lower_to(kernel, "barrier", options)
    tensors = {p.name: inputs[p.name] for p in ws.params}
    report = simulate_timing(ws, tensors, machine_for(options.arch))
    entry = {"cycles_per_iter": report.cycles_per_iter, "tc_utilization": report.utilization.get("tc", 0.0),
             "warp_groups": len(ws.groups), "groups": [g.group.name for g in ws.groups],
             "total_cycles": report.total_cycles}
    return entry, ws, report


@command("compare", "compare the heuristic and the optimal partition (II, simulated cycles, utilization)",
         _compare_args)
def cmd_compare(args, console: Console) -> int:
    example, inputs = example_and_inputs(args)
    kernel = example.kernel.specialize(**inputs)
    base = options_of(args)
    out: dict = {"kernel": example.name, "arch": args.arch}
    reports = {}
    t0 = time.perf_counter()
    for mode in ("heuristic", "optimal"):
        opts = CompileOptions(arch=base.arch, partition=mode, consumers=base.consumers, mma_depth=base.mma_depth,
                              solver_time_limit=args.time_limit)
        try:
            entry, ws, report = measure(kernel, inputs, opts)
        except ArefError as err:
            out[mode] = {"error": err.message}
            continue
        reports[mode] = (ws, report)
        out[mode] = entry
    ex, result = solve_kernel(kernel, args.arch, "interval", args.time_limit)
    out["lower_bound"] = result.lower_bound
    if "optimal" in reports:
        out["optimal"]["ii"] = result.ii
        out["optimal"]["proven_optimal"] = result.proven_optimal
    if "heuristic" in reports:
        # the heuristic has no modulo schedule of its own: its II is what it sustains in the timing model
        out["heuristic"]["ii"] = round(out["heuristic"]["cycles_per_iter"])
    out["seconds"] = round(time.perf_counter() - t0, 2)
    if args.json:
        print(json.dumps(out))
        return 0
    table = Table(title=f"{example.name} on {args.arch}: heuristic vs optimal (lower bound {result.lower_bound})")
    for col in ("partition", "II", "cycles/iter", "tensor-core util.", "warp groups"):
        table.add_column(col)
    for mode in ("heuristic", "optimal"):
        e = out[mode]
        if "error" in e:
            table.add_row(mode, "-", "-", "-", e["error"])
            continue
        table.add_row(mode, str(e.get("ii")), f"{e['cycles_per_iter']:.0f}", f"{e['tc_utilization']:.0%}",
                      f"{e['warp_groups']}: " + ", ".join(e["groups"]))
    console.print(table)
    if args.gantt:
        names = max((len(g.group.name) for ws, _ in reports.values() for g in ws.groups), default=8)
        width = max(40, min(120, console.width - names - 4))
        for mode, (ws, report) in reports.items():
            console.print(f"[bold]{mode}[/bold]")
            console.print(gantt(report, width=width), highlight=False, markup=False, soft_wrap=True)
    return 0


def gantt(report, width: int = 100) -> str:
    """Two steady-state iterations per warp group as text: T tensor core, M MUFU, F FMA, D TMA, S shared
    memory, i issue, . waiting, space idle."""
    if not report.timeline:
        return "(no timeline)"
    cpi = max(1.0, report.cycles_per_iter or 1.0)
    mid = report.total_cycles / 2
    start, end = mid - cpi, mid + cpi
    scale = (end - start) / width
    rows = {}
    for e in report.timeline:
        if e.end <= start or e.start >= end:
            continue
        row = rows.setdefault(e.group, [" "] * width)
        a = max(0, int((e.start - start) / scale))
        b = min(width, max(a + 1, int((e.end - start) / scale)))
        glyph = UNIT_GLYPH.get(e.unit, "?")
        for i in range(a, b):
            if row[i] in (" ", ".", "i"):
                row[i] = glyph
    name_w = max(len(g) for g in rows) if rows else 0
    lines = [f"{g.ljust(name_w)} |{''.join(r)}|" for g, r in rows.items()]
    lines.append(f"{''.ljust(name_w)}  cycles {start:.0f} .. {end:.0f} (two iterations at {cpi:.0f} cycles each)")
    return "\n".join(lines)
