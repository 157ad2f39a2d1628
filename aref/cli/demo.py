"""`aref demo`: a built-in example end to end on the CPU: the interpreter, the simulator, the optimal
partition and a compile of the generated kernel."""
from __future__ import annotations

import argparse
import os

from rich.console import Console

from aref.cli.common import command, example_and_inputs, results_table
from aref.compiler import CompileOptions, print_stage
from aref.search import lower_to
from aref.target import ARCHS, DEFAULT_ARCH


def _demo_args(p):
    p.add_argument("--example", default="gemm", help="example to demonstrate: a built-in example's name or a file")


@command("demo", "run a built-in example end to end on the CPU", _demo_args)
def cmd_demo(args, console: Console) -> int:
    ns = argparse.Namespace(target=args.example, size="small", overrides=[], json=False, arch=DEFAULT_ARCH,
                            partition="heuristic", stage="tile", backend="interpret")
    example, inputs = example_and_inputs(ns)
    console.rule(f"[bold]aref demo: {os.path.basename(example.path)}:{example.name}")
    kernel = example.kernel.specialize(**inputs)
    console.print("[bold]Tile IR[/bold] (aref ir --stage tile)")
    console.print(print_stage(lower_to(kernel, "tile"), "tile"), highlight=False, markup=False, soft_wrap=True)
    from aref.runtime.harness import run_interpreter
    report = run_interpreter(example, inputs)
    console.print(results_table(example.name, "the reference interpreter", report))
    ok = report.ok
    for arch in ARCHS:
        ws = lower_to(kernel, "barrier", CompileOptions(arch=arch))
        console.print(f"[bold]Warp-specialized for {arch}[/bold]: "
                      + ", ".join(f"{g.group.name} ({g.group.warps} warps, {g.group.regs} regs)" for g in ws.groups)
                      + "; arefs: " + ", ".join(f"{c.name} (depth {c.depth}, {c.kind})" for c in ws.channels))
        from aref import sim
        sim_report = sim.check(ws, inputs, example.reference, seeds=20)
        out = sim_report.to_json()
        console.print(f"  simulator: {out['interleavings']} interleavings, {out['deadlocks']} deadlocks, "
                      f"max |err| {out['max_abs_err']:.3g} -> " + ("[green]ok" if sim_report.ok else "[red]FAILED"))
        ok = ok and sim_report.ok
    ok = _demo_solve_compile(console, example, kernel, inputs) and ok
    from aref import examples
    target = (os.path.splitext(os.path.basename(example.path))[0] if examples.is_example_file(example.path)
              else os.path.relpath(example.path))
    console.print("Next: aref ir " + target + " --stage barrier | aref solve … | "
                  "aref compare … --gantt g.png | aref compile … --emit cute")
    return 0 if ok else 1


def _demo_solve_compile(console: Console, example, kernel, inputs) -> bool:
    """The optimal schedule, heuristic vs optimal in the timing model, and the generated kernel compiled."""
    from aref.cli.compare import measure
    from aref.cli.solve import solve_kernel
    from partition.exact_bound import exact_bounds
    large = example.inputs("large")               # a steady state needs many iterations: solved and timed large
    big = example.kernel.specialize(**large)
    _, result = solve_kernel(big, DEFAULT_ARCH, "interval", 60.0)
    exact = exact_bounds(big, CompileOptions(arch=DEFAULT_ARCH))
    console.print(f"[bold]Optimal schedule[/bold] (aref solve): II = {result.ii} cycles, lower bound "
                  f"{result.lower_bound}, {'proven optimal' if result.proven_optimal else result.status} on the "
                  f"solver's grid of {exact.quantum}-cycle costs (each rounded up), {result.solve_seconds:.2f} s; "
                  f"at exact costs no schedule runs below {exact.cycles} cycles"
                  + (f" ({exact.reasons[0]})" if exact.reasons else ""))
    for mode in ("heuristic", "optimal"):
        entry, _, _ = measure(big, large, CompileOptions(partition=mode, timing_guard=True))
        console.print(f"  {mode} partition in the timing model (size large): {entry['cycles_per_iter']:.0f} "
                      f"cycles/iteration, tensor core {entry['tc_utilization']:.0%} busy, {entry['warp_groups']} "
                      f"warp groups; predicted {entry['tflops']} TFLOP/s ({entry['machine']})")
    import tempfile
    from aref.backend.cute import compile_barrier
    ws = lower_to(kernel, "barrier", CompileOptions(arch=DEFAULT_ARCH))
    with tempfile.TemporaryDirectory() as out:
        res = compile_barrier(ws, out_dir=out).to_json()
    ins = res["instructions"]
    console.print(f"[bold]CuTe DSL kernel[/bold] (aref compile): {res['arch']}, {res['registers']} registers, "
                  f"{res['spill_bytes']} spill bytes, {ins.get('wgmma.mma_async', 0)} wgmma, "
                  f"{ins.get('cp.async.bulk.tensor', 0)} TMA copies, {ins.get('mbarrier.try_wait.parity', 0)} "
                  f"parity waits, compiled in {res['compile_seconds']:.1f} s without a GPU")
    return res["spill_bytes"] == 0
