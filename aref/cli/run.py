"""`aref run`: run a kernel on its example inputs (reference interpreter or simulator) and compare with
the example's reference."""
from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from aref.cli.common import add_target, command, example_and_inputs, int_at_least, options_of, progress, results_table
from aref.search import lower_to
from aref.errors import UsageError


def _run_args(p):
    add_target(p)
    p.add_argument("--backend", default="interpret", choices=("interpret", "sim"),
                   help="interpret: the sequential reference interpreter; sim: the warp-specialized program "
                        "(Barrier IR) in the simulator, over many interleavings")
    p.add_argument("--seeds", type=int_at_least(1), default=None,
                   help="sim: random interleavings to run (≥ 1, default 50)")
    p.add_argument("--exhaustive", action="store_true",
                   help="sim: also explore every interleaving of each CTA's synchronization (small sizes)")


@command("run", "run a kernel on its example inputs and compare with reference()", _run_args)
def cmd_run(args, console: Console) -> int:
    if args.backend != "sim" and (args.seeds is not None or args.exhaustive):
        raise UsageError(f"{'--seeds' if args.seeds is not None else '--exhaustive'} applies to the simulator; "
                         f"the interpreter runs the program once, in order", hint="add --backend sim")
    args.seeds = 50 if args.seeds is None else args.seeds
    example, inputs = example_and_inputs(args)
    if args.backend == "sim":
        return _run_sim(args, console, example, inputs)
    from aref.runtime.harness import run_interpreter
    report = run_interpreter(example, inputs)
    if args.json:
        print(json.dumps({"kernel": example.name, "backend": args.backend, **report.to_json()}))
    else:
        console.print(results_table(example.name, args.backend, report))
    return 0 if report.ok else 1


def _run_sim(args, console: Console, example, inputs) -> int:
    from aref import sim
    kernel = example.kernel.specialize(**inputs)
    with progress(args, f"lowering {example.name} for {args.arch}…"):
        ws = lower_to(kernel, "barrier", options_of(args))
    with progress(args, f"simulating {args.seeds} interleavings…"):
        report = sim.check(ws, inputs, example.reference, seeds=args.seeds, exhaustive=args.exhaustive,
                           tolerance=example.tolerance(inputs))
    out = report.to_json()
    if args.json:
        print(json.dumps({"kernel": example.name, "backend": "sim", "arch": args.arch,
                          "partition": args.partition, **out}))
        return 0 if report.ok else 1
    title = (f"{example.name} on the simulator ({args.arch}, {args.partition}): "
             + ("[green]ok" if report.ok else "[red]FAILED"))
    table = Table(title=title)
    for col in ("interleavings", "deadlocks", "max |err|", "groups"):
        table.add_column(col)
    table.add_row(str(out["interleavings"]), str(out["deadlocks"]), f"{out['max_abs_err']:.3g}",
                  ", ".join(f"{g.group.name} ({g.group.warps} warps, {g.group.regs} regs)" for g in ws.groups))
    console.print(table)
    for v in out.get("violations", []):
        console.print(f"[red]{v['kind']}[/red] in {v['group']} at line {v['line']}: {v['message']}\n"
                      f"    {v['op']}", highlight=False)
    return 0 if report.ok else 1
