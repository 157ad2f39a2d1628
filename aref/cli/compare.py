"""`aref compare`: the heuristic and the optimal partition of a kernel side by side, with a verdict.

Both partitions are lowered to Barrier IR and timed on the machine model (`aref.sim.timing`, one SM); the
optimal one's initiation interval and lower bound come from the solver. The table lists, per partition: II,
stages, warp groups (role, warps, registers), channels and depths, shared / tensor memory, simulated cycles
per iteration, steady-state unit utilization, the model's TFLOP/s and the solve time; the verdict names the
cause of the difference (what keeps the slower one's tensor core idle). `--gantt` and `--graph` draw it.
"""
from __future__ import annotations

import json
import os
import time

from rich.console import Console
from rich.table import Table

from aref.cli.common import add_target, command, example_and_inputs, options_of, positive_seconds, progress
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.errors import ArefError, UsageError

MODES = ("heuristic", "optimal")
UNITS = ("tc", "mufu", "fma", "tma", "smem")
UNIT_NAMES = {"tc": "tensor core", "mufu": "MUFU", "fma": "FMA", "tma": "TMA", "smem": "smem port"}
PICTURE_TYPES = (".png", ".svg", ".pdf")
FIDELITY = 0.03          # the simulated optimal program must reach the solver's II within 3%
# The fidelity figure is a steady state: the lowered program timed over a loop of at least this many iterations
# (its middle half measured, so pipeline fill and drain stay out) and averaged over this many seeds of the
# random copy latencies; an example's own loop may be a few iterations per CTA (rowwise: 4, batched_gemm: 16)
STEADY_ITERATIONS = 128
STEADY_SEEDS = 3


def _picture_path(text: str) -> str:
    if os.path.splitext(text)[1].lower() not in PICTURE_TYPES:
        raise UsageError(f"cannot write a picture to {text!r}: the name must end in "
                         f"{', '.join(PICTURE_TYPES)}", hint="e.g. --gantt gantt.png")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write {text!r}: no such directory {folder}", hint="create the directory first")
    return text


def _compare_args(p):
    add_target(p)
    p.add_argument("--time-limit", type=positive_seconds, default=60.0, help="solver time limit in seconds (> 0)")
    p.add_argument("--gantt", metavar="PATH", type=_picture_path, default=None,
                   help="write the steady state of both partitions as a Gantt chart (.png, .svg or .pdf)")
    p.add_argument("--graph", metavar="PATH", type=_picture_path, default=None,
                   help="write the loop's dependence graph coloured by warp group (.png, .svg or .pdf) and "
                        "its DOT text beside it (PATH with .dot)")
    p.add_argument("--text-gantt", action="store_true", help="also print the steady states as text")
    p.set_defaults(size="large")


# ------------------------------------------------------------------------------------- measuring
def measure(kernel, inputs, options: CompileOptions) -> tuple[dict, object, object]:
    """Lower with `options` and run the timing model: the compare entry of one partition."""
    from aref.target.machine import machine_for
    from aref.sim.resources import shared_memory_bytes, tensor_memory_columns
    from aref.interp.tile import longest_cta
    from aref.sim.timing import simulate_timing
    t0 = time.perf_counter()
    ws = lower_to(kernel, "barrier", options)
    seconds = time.perf_counter() - t0
    m = machine_for(options.arch)
    tensors = {p.name: inputs[p.name] for p in ws.params}
    report = simulate_timing(ws, tensors, m, cta=longest_cta(kernel))   # run-time trip counts: the busiest CTA
    if report.violations:
        v = report.violations[0]
        raise ArefError(f"the {options.partition} partition does not run in the timing model: {v.kind} in "
                        f"{v.group} ({v.message})", hint="run `aref run --backend sim` for the details")
    cpi = report.cycles_per_iter
    util = steady_utilization(report)
    prediction = launch_prediction(kernel, ws, m)
    entry = {
        "cycles_per_iter": cpi, "tc_utilization": util["tc"], "warp_groups": len(ws.groups),
        "groups": [{"name": g.group.name, "role": g.group.role, "warps": g.group.warps, "regs": g.group.regs,
                    "stages": g.stages + 1 if g.loop is not None else 0,
                    "cycles_per_iter": report.group_cycles_per_iter.get(g.group.name)} for g in ws.groups],
        "stages": max((g.stages + 1 for g in ws.groups if g.loop is not None), default=0),
        "channels": [{"name": c.name, "depth": c.depth, "kind": c.kind, "user": c.user, "slot_bytes": c.slot_bytes,
                      "producer": ws.groups[c.producer].group.name,
                      "consumers": [ws.groups[i].group.name for i in c.consumers]}
                     for c in ws.channels if c.region == "loop"],
        "smem_bytes": shared_memory_bytes(ws), "tmem_columns": tensor_memory_columns(ws),
        "utilization": util,
        # the whole launch on the whole GPU (waves, per-CTA overhead, fill, drain and epilogue, L2 misses):
        # `aref.tune.perf.predict` on the calibrated machine, what bench/data's measurements are held to
        "tflops": round(prediction.tflops or 0.0, 1),         # 0 for a kernel without tensor-core work
        "predicted_ms": round(prediction.seconds * 1e3, 4),
        "machine": figures_source(m),
        "total_cycles": report.total_cycles, "compile_seconds": round(seconds, 3),
        "fallback": ws.fallback,
        # a program over the SM's registers or shared memory (the resource model's refusal): timed all the same,
        # but the backend will not generate it, so it is no baseline to beat
        "refused": _first_line(ws.resource_error.message) if ws.resource_error is not None else None,
    }
    return entry, ws, report


def launch_prediction(kernel, ws, machine):
    """`aref.tune.perf.predict` of the launch of `ws` (lowered from Tile IR `kernel`, specialized to its
    inputs) on `machine`: a CTA of average trip count stands for every CTA."""
    from aref.tune.perf import predict, typical_cta
    return predict(ws, machine, flops=launch_flops(kernel), cta=typical_cta(kernel))


def figures_source(machine) -> str:
    """What the model's TFLOP/s rest on, in words: a calibration against measured kernels, or the datasheet
    alone (then the figure is an upper bound: nothing measured slows the model's units down)."""
    if machine.calibration:
        return f"calibrated on an {machine.name} ({machine.calibration.split(' (')[0]})"
    return f"{machine.name} datasheet, uncalibrated: an upper bound"


def steady_state(kernel, ws, arch: str) -> dict:
    """The steady-state cycles per iteration of the lowered program `ws` (the busiest CTA): its loop run for at
    least `STEADY_ITERATIONS` iterations (`simulate_timing`'s `extra_trips`: the same program, as with a
    larger input along the loop), the mean over `STEADY_SEEDS` seeds of the copy latencies. What the
    solver's II is compared with: `measure`'s figure at the example's own size includes the fill of a short
    loop."""
    from aref.interp.tile import longest_cta, trip_counts
    from aref.target.machine import machine_for
    from aref.sim.timing import simulate_timing
    cta = longest_cta(kernel)
    trips = trip_counts(kernel).get(cta, 0)
    extra = max(0, STEADY_ITERATIONS - trips) if trips > 0 else 0
    per_seed = []
    for seed in range(STEADY_SEEDS):
        report = simulate_timing(ws, None, machine_for(arch), seed=seed, cta=cta, extra_trips=extra)
        if report.violations:
            v = report.violations[0]
            raise ArefError(f"the lowered program does not run {trips + extra} iterations in the timing model: "
                            f"{v.kind} in {v.group} ({v.message})", hint="run `aref run --backend sim`")
        per_seed.append(report.cycles_per_iter)
    return {"cycles_per_iter": round(sum(per_seed) / len(per_seed), 1), "iterations": trips + extra,
            "seeds": len(per_seed), "per_seed": per_seed}


def _first_line(text: str) -> str:
    """The gist of a refusal: its first line, up to the details in parentheses."""
    return text.split("\n")[0].split(" (")[0]


def steady_utilization(report) -> dict:
    """Busy fraction of each unit over the steady state (the middle half of the slowest group's iterations)."""
    from aref.viz.gantt import steady_window
    n = max(1, report.iterations // 2)
    t0, t1, _ = steady_window(report, n)
    if t1 <= t0:
        return dict.fromkeys(UNITS, 0.0)
    busy = dict.fromkeys(UNITS, 0.0)
    for e in report.timeline:
        if e.unit in busy:
            end = e.start + (e.busy or (e.end - e.start))
            busy[e.unit] += max(0.0, min(end, t1) - max(e.start, t0))
    return {u: round(min(1.0, b / (t1 - t0)), 3) for u, b in busy.items()}


def measure_gpu(kernel, inputs, lowered: dict, arch: str, runs: int = 20) -> dict | None:
    """Measured TFLOP/s of each partition's generated kernel on this machine's GPU, or None without a GPU of
    `arch` (the model's figures stand alone then). A partition the backend cannot generate gets its error."""
    import torch
    if not torch.cuda.is_available():
        return None
    from aref.backend.cute import compile_barrier
    from aref.backend.cute.launch import Launcher, device_arch, plan_of
    tensors = {p.name: inputs[p.name].cuda() for p in kernel.params}
    if device_arch(tensors) != arch:
        return None
    flops = launch_flops(kernel)
    out = {}
    for mode, ws in lowered.items():
        try:
            launcher = Launcher(ws, compile_barrier(ws, emit="cute"), plan_of(ws))
        except ArefError as err:
            out[mode] = {"error": err.message}
            continue
        launcher(tensors)                                   # compile and warm up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(runs):
            launcher(tensors)
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1e3 / runs
        out[mode] = {"seconds": seconds, "tflops": round(flops / seconds / 1e12, 1)}
    return out


def launch_flops(kernel) -> int:
    """Tensor-core FLOP of the whole launch of Tile IR `kernel` (specialized to its inputs): every CTA's MMAs
    before and after the loop, and the loop's times the CTA's trip count (run-time counts differ per CTA)."""
    import math

    from aref.interp.tile import trip_counts
    from aref.ir import OpKind
    from aref.ops.memory import mma_flops
    once = sum(mma_flops(op) for op in kernel.pre.ops + kernel.post.ops if op.kind is OpKind.MMA)
    body = sum(mma_flops(op) for op in kernel.loop.body.ops if op.kind is OpKind.MMA) if kernel.loop else 0
    return once * math.prod(kernel.grid) + body * sum(trip_counts(kernel).values())


def inputs_trip_count(kernel, inputs) -> int:
    """The loop's trip count, summed over the CTAs and divided by their number (run-time counts differ per
    CTA), as the interpreter evaluates the pre-loop index math."""
    from aref.interp.tile import trip_counts
    counts = trip_counts(kernel)
    return round(sum(counts.values()) / len(counts)) if counts else 0


# --------------------------------------------------------------------------------------- verdict
def _activity(e) -> str | None:
    """What a group's timeline entry is doing, in words (None for bookkeeping)."""
    from aref.viz.gantt import op_label
    if e.unit == "mufu":
        return f"{op_label(e.op)} runs on the MUFU"
    if e.unit == "fma":
        return f"{op_label(e.op)} runs on the FMA pipe"
    if e.unit == "smem":
        return "results are copied into shared / tensor memory"
    if e.unit == "wait":
        text = e.op
        for word in text.replace("%", " ").split():
            if word.endswith(".full[") or ".full[" in word:
                return f"it waits for channel {word.split('.full')[0]} to be filled"
            if ".empty[" in word:
                return f"it waits for a free slot of channel {word.split('.empty')[0]}"
        if "mma_wait" in text:
            return "it waits for its MMAs to retire (mma_wait)"
        if "named_barrier" in text:
            return "it waits for its ping-pong turn (named barrier)"
        return "it waits on a barrier"
    return None


def idle_cause(report) -> tuple[float, str]:
    """(fraction of the steady state the tensor core is idle, what the MMA-issuing groups do meanwhile)."""
    from aref.viz.gantt import steady_window
    t0, t1, _ = steady_window(report, max(1, report.iterations // 2))
    busy = sorted((max(e.start, t0), min(e.end, t1)) for e in report.timeline
                  if e.unit == "tc" and e.end > t0 and e.start < t1)
    idle, cur = [], t0
    for a, b in busy:
        if a > cur:
            idle.append((cur, a))
        cur = max(cur, b)
    if cur < t1:
        idle.append((cur, t1))
    total = sum(b - a for a, b in idle)
    issuers = {e.group for e in report.timeline if e.unit == "tc"}
    looping = {g for g, starts in report.iteration_starts.items() if len(starts) > 1}
    score: dict[str, float] = {}
    for e in report.timeline:
        what = _activity(e)
        if what is None or e.end <= t0 or e.start >= t1 or (looping and e.group not in looping):
            continue
        if e.unit == "wait" and e.group not in issuers:
            continue          # a producer waiting for free slots is a symptom of the slow consumer, not a cause
        overlap = sum(max(0, min(b, e.end) - max(a, e.start)) for a, b in idle)
        if overlap:
            key = what.replace("it waits", f"{e.group} waits", 1) if e.unit == "wait" else what
            score[key] = score.get(key, 0.0) + overlap
    cause = max(score, key=score.get) if score else "nothing else runs"
    return (total / (t1 - t0) if t1 > t0 else 0.0), cause


def verdict(out: dict, reports: dict) -> str:
    """One line: which partition is faster, by how much, and the cause (and, where the optimal partitioner's
    timing guard kept the heuristic's program, that it did and why)."""
    line = _verdict(out, reports)
    fallback = out["optimal"].get("fallback") if "error" not in out["optimal"] else None
    line = f"{line} (timing guard: {fallback})" if fallback else line
    refused = [m for m in MODES if out[m].get("refused")]
    if refused:
        line += "; " + " and ".join(f"the {m} program does not fit ({out[m]['refused']})" for m in refused)
    return line


def _verdict(out: dict, reports: dict) -> str:
    if any("error" in out[m] for m in MODES):
        bad = [m for m in MODES if "error" in out[m]]
        if "lower_bound" not in out:
            return f"one partition only: {out['optimal']['error']}"
        return f"only one partition could be measured: the {bad[0]} one failed ({out[bad[0]]['error']})"
    h, o = out["heuristic"]["cycles_per_iter"], out["optimal"]["cycles_per_iter"]
    ratio = h / o if o else 1.0
    if ratio > 1 + FIDELITY:
        idle, cause = idle_cause(reports["heuristic"])
        return (f"optimal is {ratio:.2f}× faster ({h:.0f} → {o:.0f} cycles/iteration): the heuristic leaves "
                f"the tensor core idle {idle:.0%} of the time while {cause}")
    if ratio < 1 - FIDELITY:
        idle, cause = idle_cause(reports["optimal"])
        return (f"the heuristic is {1 / ratio:.2f}× faster ({o:.0f} → {h:.0f} cycles/iteration): the lowered "
                f"optimal schedule misses its II {out['optimal']['ii']}; its tensor core is idle {idle:.0%} of "
                f"the time while {cause}")
    tc = out["optimal"]["utilization"]["tc"]
    ii = out["optimal"].get("ii")
    if tc >= 1 - FIDELITY:
        why = f"the tensor core is the bottleneck ({tc:.0%} busy)"
    else:
        idle, cause = idle_cause(reports["optimal"])
        unit = max(UNITS, key=lambda u: out["optimal"]["utilization"][u])
        why = (f"the {UNIT_NAMES[unit]} is busiest ({out['optimal']['utilization'][unit]:.0%}); the tensor core "
               f"is idle {idle:.0%} of the time while {cause}")
    same = f"both partitions run at {o:.0f} cycles/iteration"
    if ii and o > ii * (1 + FIDELITY):
        same += f" (the solver's II is {ii})"
    return f"{same}: {why}"


# --------------------------------------------------------------------------------------- command
@command("compare", "compare the heuristic and the optimal partition side by side (II, stages, warp groups, "
                    "channels, memory, simulated cycles, utilization, TFLOP/s) with a verdict and pictures",
         _compare_args)
def cmd_compare(args, console: Console) -> int:
    from aref.cli.solve import solve_kernel
    example, inputs = example_and_inputs(args)
    kernel = example.kernel.specialize(**inputs)
    base = options_of(args)
    out: dict = {"kernel": example.name, "arch": args.arch, "size": args.size}
    reports, lowered = {}, {}
    t0 = time.perf_counter()
    ex = result = None
    if kernel.loop is not None:
        with progress(args, f"solving the optimal schedule of {example.name} for {args.arch}…") as update:
            ex, result = solve_kernel(kernel, args.arch, "interval", args.time_limit,
                                      lambda ev: update(f"[{ev.elapsed:5.1f}s] solving: {ev.kind} II={ev.ii} "
                                                        f"(lower bound {ev.lower_bound})"),
                                      explain_found=False)   # the lowering's own solve then answers from memory
        # the bound no schedule of the solver's model beats: every II below it is proven infeasible (the II
        # itself where it is proven optimal); the static one (ResMII, RecMII, the groups' streams) beside it
        out["lower_bound"] = result.proven_bound
        out["static_lower_bound"] = result.lower_bound
        # the solver proves its bound on costs rounded up to whole quanta; the timing model charges exact ones
        from partition.exact_bound import exact_bounds
        try:
            out["exact_bound"] = exact_bounds(kernel, base).to_json()
        except ArefError:
            pass
    for mode in MODES:
        if mode == "optimal" and result is None:     # nothing to software-pipeline: one partition only
            out[mode] = {"error": "no aref.range loop: the solver schedules a kernel's loop, so the heuristic's "
                                  "partition is the only one"}
            continue
        opts = CompileOptions(arch=base.arch, partition=mode, consumers=base.consumers, mma_depth=base.mma_depth,
                              solver_time_limit=args.time_limit, timing_guard=base.timing_guard)
        with progress(args, f"lowering the {mode} partition and timing it on the machine model…"):
            try:
                entry, ws, report = measure(kernel, inputs, opts)
            except ArefError as err:
                out[mode] = {"error": err.message}
                continue
        reports[mode], lowered[mode] = report, ws
        out[mode] = entry
    if "optimal" in reports:
        out["optimal"].update(ii=result.ii, proven_optimal=result.proven_optimal,
                              solve_seconds=round(result.solve_seconds, 3))
    if "heuristic" in reports:
        # the heuristic has no modulo schedule of its own: its II is what it sustains in the timing model
        out["heuristic"].update(ii=round(out["heuristic"]["cycles_per_iter"]), proven_optimal=False,
                                solve_seconds=0.0)
    if "heuristic" in reports and "optimal" in reports:
        out["speedup"] = round(out["heuristic"]["cycles_per_iter"] / out["optimal"]["cycles_per_iter"], 3)
    if "optimal" in reports and result.ii:
        # the solver's II against the steady state of the same lowered program over a long loop (the
        # example's own loop may be mostly pipeline fill); "measures" says what the figure is
        steady = steady_state(kernel, lowered["optimal"], args.arch)
        cpi = steady["cycles_per_iter"]
        out["fidelity"] = {"ii": result.ii, "cycles_per_iter": cpi, "gap": round(cpi / result.ii - 1, 4),
                           "within": abs(cpi / result.ii - 1) <= FIDELITY, "iterations": steady["iterations"],
                           "seeds": steady["seeds"], "per_seed": steady["per_seed"],
                           "example_cycles_per_iter": out["optimal"]["cycles_per_iter"],
                           "measures": f"the optimal partition's lowered program, steady state: the middle half "
                                       f"of {steady['iterations']} loop iterations of the busiest CTA, mean "
                                       f"over copy-latency seeds 0-{steady['seeds'] - 1}"}
    out["verdict"] = verdict(out, reports)
    out["warnings"] = {m: r.warnings for m, r in reports.items() if r.warnings}
    with progress(args, "measuring both kernels on the GPU…"):
        out["measured"] = measure_gpu(kernel, inputs, lowered, args.arch)
    pictures = {}
    if args.gantt and reports:
        with progress(args, f"drawing {args.gantt}…"):
            pictures["gantt"] = draw_gantt(example.name, args.arch, out, reports, lowered, args.gantt)
    if args.graph and result is not None:
        with progress(args, f"drawing {args.graph}…"):
            pictures["graph"], pictures["dot"] = draw_graph(example.name, args.arch, kernel, ex, result,
                                                            base, args.graph)
    out["pictures"] = pictures
    out["seconds"] = round(time.perf_counter() - t0, 2)
    if args.json:
        print(json.dumps(out))
        return 0
    console.print(compare_table(out))
    console.print(f"[bold]verdict:[/bold] {out['verdict']}")
    for mode, problems in out["warnings"].items():
        for p in problems:
            console.print(f"[yellow]warning[/yellow] ({mode} partition would not launch as is): {p}")
    for kind, path in pictures.items():
        console.print(f"wrote {kind}: {path}")
    if args.text_gantt:
        for mode, report in reports.items():
            console.print(f"[bold]{mode}[/bold]")
            console.print(text_gantt(report, width=max(40, min(120, console.width - 16))), highlight=False,
                          markup=False, soft_wrap=True)
    return 0


def compare_table(out: dict) -> Table:
    """The side-by-side table of `out` (the --json document)."""
    bound = f", lower bound {out['lower_bound']} cycles" if "lower_bound" in out else ""
    if "exact_bound" in out:
        bound += (f" on the solver's {out['exact_bound']['quantum']}-cycle grid, {out['exact_bound']['cycles']} "
                  f"at exact costs")
    source = next((out[m]["machine"] for m in MODES if "machine" in out[m]), "")
    table = Table(title=f"{out['kernel']} on {out['arch']} (size {out['size']}): heuristic vs optimal{bound}",
                  caption=(f"busy: the loop's steady state on one SM; TFLOP/s: the whole launch predicted by "
                           f"the machine model, {source}") if source else None)
    table.add_column("", no_wrap=True)
    for mode in MODES:
        table.add_column(mode, overflow="fold")
    h, o = out["heuristic"], out["optimal"]
    if "error" in h or "error" in o:
        table.add_row("error", h.get("error", ""), o.get("error", ""))

    def row(label, fn):
        table.add_row(label, *((fn(out[m]) if "error" not in out[m] else "-") for m in MODES))

    row("II (cycles)", lambda e: "-" if not e["stages"] else f"{e['ii']}" + (
        " (proven optimal)" if e.get("proven_optimal") else " (sustained in the model)" if e is h else ""))
    row("simulated cycles / iteration", lambda e: f"{e['cycles_per_iter']:.0f}" if e["stages"] else
        f"no loop: {e['total_cycles']:.0f} cycles per CTA")
    row("stages", lambda e: str(e["stages"]))
    row("warp groups", lambda e: "\n".join(
        (g["name"] if g["name"].startswith(g["role"]) else f"{g['name']} ({g['role']})")
        + f": {g['warps']} warp{'s' if g['warps'] > 1 else ''}, {g['regs']} regs" for g in e["groups"]))
    row("channels (depth)", lambda e: ", ".join(f"{c['name']} ({c['depth']})" for c in e["channels"]))
    row("shared memory", lambda e: f"{e['smem_bytes'] / 1024:.1f} KiB")
    row("tensor memory", lambda e: f"{e['tmem_columns']} columns")
    for u in ("tc", "mufu", "fma", "tma"):
        row(f"{UNIT_NAMES[u]} busy (one SM)", lambda e, u=u: f"{e['utilization'][u]:.0%}")
    row("TFLOP/s predicted (launch)", lambda e: f"{e['tflops']}")
    if out.get("measured"):
        table.add_row("TFLOP/s measured (GPU)", *(str(out["measured"].get(m, {}).get("tflops",
                                                     out["measured"].get(m, {}).get("error", "-")))
                                                  for m in MODES))
    row("solve / lowering time", lambda e: f"{e['solve_seconds']:.2f} s / {e['compile_seconds']:.2f} s")
    return table


def draw_gantt(name, arch, out, reports, lowered, path) -> str:
    from aref.viz import gantt
    panels = []
    for mode in MODES:
        if mode not in reports:
            continue
        ws = lowered[mode]
        labels = [(g.group.name, f"{g.group.name} ({g.group.warps}w)") for g in ws.groups]
        title = f"{mode} ({len(ws.groups)} warp groups)"
        if ws.fallback:
            title += (", the heuristic's program (timing guard)" if "heuristic's program" in ws.fallback
                      else ", the schedule with waited stores (timing guard)" if "waited stores" in ws.fallback
                      else ", the occupancy-free graph's schedule (timing guard)")
        panels.append(gantt.Panel(title, reports[mode], labels, out[mode].get("ii") if mode == "optimal" else None,
                                  {b.id: b.purpose for b in ws.named_barriers}))
    speed = f"(optimal: {out['speedup']:.2f}× the heuristic's speed)" if "speedup" in out else ""
    gantt.draw(panels, path, f"{name} on {arch}: steady state, two iterations    {speed}")
    return path


def draw_graph(name, arch, kernel, ex, result, base: CompileOptions, path) -> tuple[str, str]:
    """The dependence graph coloured by the heuristic's groups (when it keeps the kernel's ops) and by the
    solver's."""
    from aref.viz import graph as viz_graph
    from partition.heuristic import HeuristicOptions, heuristic_partition
    from partition.optimal import partition_from_schedule
    panels = []
    try:
        hk, hp = heuristic_partition(kernel, arch, HeuristicOptions(base.consumers, base.num_consumers))
    except ArefError:
        hk = None
    if hk is kernel:
        groups = {n: hp.groups[hp.assign[ops[0]]].name for n, ops in ex.members.items() if ops[0] in hp.assign}
        panels.append(("heuristic partition", groups, None))
    if result.ii:
        part = partition_from_schedule(kernel, ex, result, arch)
        names = group_names(part, hp if hk is kernel else None)
        groups = {n: names[part.assign[ops[0]]] for n, ops in ex.members.items()}
        panels.append((f"optimal partition (II {result.ii}, start cycle @)", groups, result.schedule))
    if not panels:
        raise ArefError(f"no partition of {name} to draw", hint="check `aref solve` first")
    lines = {n: ops[0].loc.line for n, ops in ex.members.items()}
    dot = viz_graph.draw(ex.graph, panels, path, f"{name} on {arch}: dependence graph of the loop, coloured "
                                                 f"by warp group", lines)
    return path, dot


def group_names(part, heuristic) -> dict[int, str]:
    """Group index -> name of the solver's partition `part`, in the names the compiled program (and compare's
    table) uses: a group placing exactly the ops of a group of the `heuristic` partition is that group (the
    compiler then realizes the solver's answer with the heuristic's roles: `aref.compiler`), so the graph says
    producer / consumer0 / consumer1 where the table does."""
    def blocks(p) -> dict[int, frozenset]:
        out: dict[int, set] = {}
        for op, g in p.assign.items():
            out.setdefault(g, set()).add(id(op))
        return {g: frozenset(ops) for g, ops in out.items()}
    theirs = {ops: heuristic.groups[g].name for g, ops in blocks(heuristic).items()} if heuristic is not None else {}
    return {g: theirs.get(ops, part.groups[g].name) for g, ops in blocks(part).items()}


UNIT_GLYPH = {"tc": "T", "mufu": "M", "fma": "F", "tma": "D", "smem": "S", "issue": "i", "wait": "."}


def text_gantt(report, width: int = 100) -> str:
    """Two steady-state iterations per warp group as text: T tensor core, M MUFU, F FMA, D TMA, S shared
    memory, i issue, . waiting, space idle."""
    from aref.viz.gantt import steady_window
    if not report.timeline:
        return "(no timeline)"
    start, end, _ = steady_window(report, 2)
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
    lines.append(f"{''.ljust(name_w)}  cycles {start:.0f} .. {end:.0f} (two iterations at "
                 f"{report.cycles_per_iter:.0f} cycles each)")
    return "\n".join(lines)
