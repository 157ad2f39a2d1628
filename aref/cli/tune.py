"""`aref tune` (rank a kernel's configurations, cache the winner) and `aref bench` (time it against torch).

Both register themselves in `aref.cli.common.COMMANDS`; torch, the tuner and the backend are imported inside the
commands, so `aref --help` stays fast.
"""
from __future__ import annotations

import json

from aref.cli.common import add_target, command, example_and_inputs
from aref.target import ARCHS, DEFAULT_ARCH


def _tune_args(p):
    add_target(p, with_arch=False)
    p.add_argument("--arch", default=None, choices=ARCHS,
                   help=f"target (default: the GPU's, else {DEFAULT_ARCH})")
    p.add_argument("--top-k", type=int, default=8, help="GPU: how many of the model's best to time")
    p.add_argument("--model-only", action="store_true", help="rank by the timing model even with a GPU")
    p.add_argument("--cache-dir", default=None, help="winner cache (default: ~/.cache/aref/tune)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the winner cache")
    p.add_argument("--show", type=int, default=30, help="table rows to show (pruned candidates follow)")
    p.set_defaults(size="large")


def _tune_options(args, use_gpu):
    from aref.tune import TuneOptions
    from aref.tune.cache import DEFAULT_TUNE_CACHE
    return TuneOptions(arch=args.arch, use_gpu=use_gpu, top_k=args.top_k, use_cache=not args.no_cache,
                       cache_dir=args.cache_dir or DEFAULT_TUNE_CACHE)


def inputs_on_device(args, use_gpu: bool):
    """(example, inputs) with the tensors on the GPU when it is used, else on torch's meta device (shapes and
    dtypes only: large problems cost no memory or time to make)."""
    import torch
    if not use_gpu:
        with torch.device("meta"):
            return example_and_inputs(args, for_arch=False)     # the candidates choose the constants
    example, inputs = example_and_inputs(args, for_arch=False)
    return example, {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _uses_gpu(args) -> bool:
    from aref.tune.gpu import gpu_arch
    present = gpu_arch()
    return present is not None and not getattr(args, "model_only", False) and args.arch in (None, present)


@command("tune", "autotune a kernel: rank its configurations (timing model, GPU when present), cache the winner",
         _tune_args)
def cmd_tune(args, console) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from aref.tune.bench import split_inputs
    use_gpu = _uses_gpu(args)
    example, inputs = inputs_on_device(args, use_gpu)
    tensors, fixed = split_inputs(example, inputs)
    err = Console(stderr=True)
    progress = Progress(TextColumn("[bold]tuning[/bold] {task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, transient=True, disable=args.json or not err.is_terminal)
    with progress:
        task = progress.add_task(example.name, total=None)

        def tick(done, total, label):
            progress.update(task, completed=done, total=total, description=label[:50])

        reference = (lambda t: example.reference_fn(**{**inputs, **t})) if use_gpu else None
        result = example.kernel.tune(**tensors, **fixed, options=_tune_options(args, use_gpu), reference=reference,
                                     tolerance=example.tolerance(inputs) if use_gpu else None, progress=tick)
    data = result.to_json()
    if args.json:
        print(json.dumps(data))
        return 0 if result.best is not None else 1
    from aref.cli.tables import tune_table
    console.print(tune_table(result, args.show))
    if result.best is None:
        console.print("[red]every candidate was pruned[/red]")
        return 1
    how = "measured on " + result.device if result.method == "gpu" else f"ranked by the timing model ({result.device})"
    console.print(f"winner: [bold]{result.best.label()}[/bold] ({how}; "
                  f"{'from the cache' if result.cached else 'cached'} as {result.key})")
    return 0


# ------------------------------------------------------------------------------------------------ bench
def _bench_args(p):
    add_target(p, with_arch=False)
    p.add_argument("--dry-run", action="store_true", help="print what would run, even with a GPU")
    p.set_defaults(size="large")


@command("bench", "time a kernel (autotuned) against its torch baseline on the GPU; without one, say what would run",
         _bench_args)
def cmd_bench(args, console) -> int:
    from aref.tune.bench import bench_example, example_baseline, plan_example
    from aref.tune.gpu import gpu_arch
    arch = gpu_arch()
    example, inputs = inputs_on_device(args, arch is not None and not args.dry_run)
    base = example_baseline(example)
    baselines = {"torch": base} if base is not None else {"reference()": lambda i: (lambda: example.reference_fn(**i))}
    if arch is None or args.dry_run:
        plan = plan_example(example, inputs, baselines, arch or DEFAULT_ARCH)
        plan["gpu"] = arch is not None
        if args.json:
            print(json.dumps({"dry_run": True, **plan}))
        else:
            pick = (f"{plan['config']} predicted {plan['predicted_ms']:.4f} ms" if plan["config"] else
                    "none: every candidate is pruned (aref tune lists why)")
            console.print(("No CUDA GPU: " if arch is None else "Dry run: ") + f"would benchmark {plan['name']} on "
                          f"{plan['problem']}\n  configuration (timing model): {pick}; {plan['candidates']} "
                          f"candidates, {plan['pruned']} pruned\n  against: {', '.join(plan['baselines'])} (each "
                          f"output checked against reference())", highlight=False)
        return 0
    row = bench_example(example, inputs, baselines)
    data = row.to_json()
    if args.json:
        print(json.dumps(data))
    else:
        from rich.table import Table
        table = Table(title=f"{row.name}: {row.problem}  [{row.config}]")
        for col in ("kernel", "ms", "ratio (baseline / aref)", "check"):
            table.add_column(col)
        chk = data["checks"]
        table.add_row("aref", f"{row.aref_ms:.4f}" if row.aref_ms else "-", "1.00", _check(chk.get("aref")))
        for n, ms in row.baselines.items():
            ratio = row.ratios.get(n)
            table.add_row(n, f"{ms:.4f}" if ms else "-", f"{ratio:.3f}" if ratio else "-", _check(chk.get(n)))
        console.print(table)
        for note in row.notes:
            console.print(f"note: {note}", highlight=False)
    return 0 if data["checks"].get("aref", {}).get("ok") else 1


def _check(c) -> str:
    return "-" if not c else (f"ok ({c['max_abs_err']:.2g})" if c["ok"] else f"FAILED ({c['max_abs_err']:.2g})")
