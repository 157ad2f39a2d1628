"""The `aref` command: `demo`, `ir`, `run`, `compile` (more subcommands register themselves in `COMMANDS`).

Every subcommand takes `FILE[:KERNEL]`, `--size small|large` and `--set NAME=VALUE` (overrides passed to the
example's `example_inputs`), plus `--json` for machine-readable output. A user error (in the kernel, the
example file or the flags) prints the error with its source excerpt on stderr and, with `--json`, the error
object `{"ok": false, "error", "kind", "file", "line", "hint"}` on stdout; the exit status is 1. An unexpected
exception inside aref is reported the same way as a compiler bug naming the pass (`aref --traceback ...`
adds Python's traceback for a bug report).

`aref --help` answers at once: this module and the command modules import only the light parts of aref at
import time; torch, the CuTe DSL and OR-tools are imported inside the commands that need them.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import math
import os
import sys

from rich.console import Console
from rich.table import Table

from aref.compiler import ARCHS, STAGES, CompileOptions, lower_to, print_stage
from aref.errors import ArefError, UsageError, error_json

COMMANDS: dict[str, tuple] = {}   # name -> (help, add_arguments, handler)
# modules whose import registers more commands (each must stay light to import: see the docstring)
COMMAND_MODULES = ["aref.cli_solve", "aref.cli_compare", "aref.cli_tune"]


def command(name: str, help: str, arguments=lambda parser: None):
    """Register a subcommand: `arguments(parser)` adds its flags, the decorated function runs it."""
    def register(fn):
        COMMANDS[name] = (help, arguments, fn)
        return fn
    return register


# ------------------------------------------------------------------------------- flag validation
def int_at_least(lo: int):
    """argparse type: an integer ≥ `lo` (the message states the accepted range)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer ≥ {lo}, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be an integer ≥ {lo}, got {v}")
        return v
    parse.__name__ = f"integer ≥ {lo}"
    return parse


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return v


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are `UsageError`s, so they are reported like every other error (and as
    the JSON error object under --json)."""

    def error(self, message):
        raise UsageError(message, hint=f"see `{self.prog} --help`")


def add_target(p: argparse.ArgumentParser, with_arch: bool = True) -> None:
    p.add_argument("target", metavar="FILE[:KERNEL]", help="example file, optionally with a kernel name")
    p.add_argument("--size", default="small", choices=("small", "large"), help="example input sizes")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="override an example_inputs argument or a compile-time constant (repeatable), "
                        "e.g. --set K=0")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    if with_arch:
        p.add_argument("--arch", default="sm_90a", choices=ARCHS)
        p.add_argument("--partition", default="heuristic", choices=("heuristic", "optimal"))
        p.add_argument("--consumers", default="auto", choices=("auto", "plain", "cooperative", "pingpong"),
                       help="Hopper consumer warp groups (heuristic partition)")
        p.add_argument("--mma-depth", type=int_at_least(0), default=None,
                       help="MMA groups kept in flight (default 1)")
        p.add_argument("--promote-every", type=int_at_least(0), default=0, metavar="N",
                       help="fp8 GEMMs: add the tensor core's partial sum into the fp32 accumulator every N "
                            "K-steps (sm_90a; 0: never)")


# ------------------------------------------------------------------------------------ --set values
def _annotation_types(param: inspect.Parameter) -> set:
    """The scalar types {int, float, bool, str} a parameter accepts, from its annotation or default."""
    ann = param.annotation
    names = {"int": int, "float": float, "bool": bool, "str": str}
    if isinstance(ann, str):
        return {names[t.strip()] for t in ann.split("|") if t.strip() in names}
    args = getattr(ann, "__args__", None) or ((ann,) if ann is not inspect.Parameter.empty else ())
    found = {a for a in args if a in (int, float, bool, str)}
    if not found and param.default not in (inspect.Parameter.empty, None):
        found = {type(param.default)} & {int, float, bool, str}
    return found


def _convert(name: str, text: str, types: set, declared: str):
    if not types:
        for conv in (int, float):
            try:
                return conv(text)
            except ValueError:
                pass
        return {"true": True, "false": False}.get(text.lower(), text)
    if bool in types and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if int in types:
        try:
            return int(text)
        except ValueError:
            pass
    if float in types:
        try:
            return float(text)
        except ValueError:
            pass
    if str in types:
        return text
    want = " or ".join(sorted({int: "an integer", float: "a number", bool: "true/false"}[t]
                              for t in types if t is not str))
    raise UsageError(f"--set {name}={text}: {name} takes {want} ({declared}), got {text!r}",
                     hint=f"give {name} {want}")


def parse_overrides(items: list[str], example) -> dict:
    """`--set NAME=VALUE` items as keyword arguments of `example_inputs`, each converted to the type its
    parameter (or the kernel's compile-time constant of that name) declares."""
    fn_params = {}
    takes_any = False
    if example.inputs_fn is not None:
        for p in inspect.signature(example.inputs_fn).parameters.values():
            if p.kind is p.VAR_KEYWORD:
                takes_any = True
            elif p.name != "size":
                fn_params[p.name] = p
    kernel_sig = inspect.signature(example.kernel.fn).parameters
    constexprs = {n: p for n, p in kernel_sig.items() if p.kind is p.KEYWORD_ONLY}
    out = {}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name.isidentifier():
            raise UsageError(f"--set expects NAME=VALUE, got {item!r}", hint="e.g. --set K=0 or --set BM=64")
        if name in fn_params:
            param, declared = fn_params[name], f"example_inputs({name})"
        elif name in constexprs and takes_any:
            param, declared = constexprs[name], f"@{example.name}'s compile-time constant {name}"
        else:
            known = list(fn_params) + (list(constexprs) if takes_any else [])
            raise UsageError(f"--set {name}: example_inputs() of {os.path.basename(example.path)} has no "
                             f"argument '{name}'", hint=f"settable: {', '.join(known) or 'nothing'}")
        out[name] = _convert(name, text, _annotation_types(param), declared)
    return out


def example_and_inputs(args, for_arch: bool = True):
    """The example (`FILE[:KERNEL]`) and its inputs at `--size` with the `--set` overrides, for the command's
    `--arch` (an example may choose its constants for the target, `Example.inputs`; `for_arch=False`: the
    example's defaults, where the command chooses the constants itself, as `tune` does)."""
    from aref.harness import load_example
    example = load_example(args.target)
    overrides = parse_overrides(args.overrides, example)
    arch = getattr(args, "arch", None) if for_arch else None
    return example, example.inputs(args.size, arch, **overrides)


def options_of(args) -> CompileOptions:
    return CompileOptions(arch=getattr(args, "arch", "sm_90a"), partition=getattr(args, "partition", "heuristic"),
                          consumers=getattr(args, "consumers", "auto"),
                          mma_depth=getattr(args, "mma_depth", None), timing_guard=True,
                          promote_every=getattr(args, "promote_every", 0))


@contextlib.contextmanager
def progress(args, text: str):
    """A spinner with `text` on stderr while a long step runs (quiet under --json or without a terminal);
    yields a function that updates the text."""
    err = Console(stderr=True)
    if getattr(args, "json", False) or not err.is_terminal:
        yield lambda _text: None
        return
    with err.status(text) as status:
        yield status.update


# ------------------------------------------------------------------------------------------ commands
def _ir_args(p):
    add_target(p)
    p.add_argument("--stage", default="tile", choices=STAGES, help="IR level to print")


@command("ir", "print a kernel's IR at a stage", _ir_args)
def cmd_ir(args, console: Console) -> int:
    example, inputs = example_and_inputs(args)
    kernel = example.kernel.specialize(**inputs)
    ir = lower_to(kernel, args.stage, options_of(args))
    text = print_stage(ir, args.stage)
    if args.json:
        print(json.dumps({"kernel": example.name, "stage": args.stage, "ir": text}))
    else:
        sys.stdout.write(text)
    return 0



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
    from aref.harness import run_interpreter
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



def results_table(name: str, backend: str, report) -> Table:
    table = Table(title=f"{name} on {backend}: {'[green]ok' if report.ok else '[red]MISMATCH'}")
    for col in ("output", "shape", "dtype", "max |err|", "tolerance", "ok"):
        table.add_column(col)
    for o in report.outputs:
        table.add_row(o.name, str(o.shape), o.dtype, f"{o.max_abs_err:.3g}", f"{o.atol:g} + {o.rtol:g}·|ref|",
                      "[green]yes" if o.ok else "[red]no")
    return table


def _compile_args(p):
    add_target(p)
    p.add_argument("--emit", default="ptx", choices=("cute", "ptx", "cubin"),
                   help="what to write: the generated CuTe DSL source, or also its PTX / cubin")
    p.add_argument("--out", default=None, help="output directory (default: ./aref_out/<kernel>)")
    p.add_argument("--persistent", action="store_true",
                   help="one CTA per SM looping over output tiles (static round-robin tile scheduler)")
    p.add_argument("--ctas", type=int_at_least(1), default=None,
                   help="persistent CTAs to launch, ≥ 1 (default: the SMs of an H100, 132, or a B200, 148)")
    p.add_argument("--raster", type=int_at_least(0), default=0,
                   help="walk output tiles in groups of N rows of grid axis 0 (L2-friendly order; 0: none)")
    p.add_argument("--epilogue-overlap", action="store_true",
                   help="with --persistent: overlap one tile's epilogue with the next tile's main loop (sm_90a: "
                        "two consumer copies on alternate tiles; sm_100a: the doubled accumulator)")
    p.add_argument("--cluster", default="1x1", choices=("1x1", "2x1", "1x2"),
                   help="sm_90a: clusters of 2 CTAs along grid axis 0 (2x1) or 1 (1x2) that TMA-multicast the "
                        "tiles both load (1x1: no cluster)")


@command("compile", "generate CuTe DSL code for a kernel and compile it (no GPU needed)", _compile_args)
def cmd_compile(args, console: Console) -> int:
    from aref.backend.cute import compile_barrier
    from aref.machine import machine_for
    example, inputs = example_and_inputs(args)
    kernel = example.kernel.specialize(**inputs)
    with progress(args, f"lowering {example.name} for {args.arch} ({args.partition} partition)…"):
        ws = lower_to(kernel, "barrier", options_of(args))
    out_dir = args.out or os.path.join("aref_out", f"{example.name}.{args.arch}.{args.partition}")
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out_dir}: cannot create the output directory ({exc.strerror})",
                         hint="give a directory that exists or can be created") from None
    with progress(args, f"generating CuTe DSL and compiling for {args.arch} (cute.compile, ptxas)…"):
        result = compile_barrier(ws, out_dir=out_dir, emit=args.emit, persistent=args.persistent,
                                 ctas=args.ctas or machine_for(args.arch).sms, raster=args.raster,
                                 epilogue_overlap=args.epilogue_overlap,
                                 cluster=tuple(int(x) for x in args.cluster.split("x")))
    data = result.to_json()
    if args.json:
        print(json.dumps({"kernel": example.name, "partition": args.partition, "fallback": ws.fallback,
                          "notes": ws.notes, **data}))
        return 0
    for note in ws.notes:
        console.print(f"[dim]partition:[/] {note}")
    if ws.fallback:
        console.print(f"[yellow]note:[/] {ws.fallback}")
    from aref.cli_tables import compile_table
    console.print(compile_table(example.name, args.partition, data))
    return 0


def _demo_args(p):
    p.add_argument("--example", default="gemm", help="example to demonstrate: a built-in example's name or a file")


@command("demo", "run a built-in example end to end on the CPU", _demo_args)
def cmd_demo(args, console: Console) -> int:
    ns = argparse.Namespace(target=args.example, size="small", overrides=[], json=False, arch="sm_90a",
                            partition="heuristic", stage="tile", backend="interpret")
    example, inputs = example_and_inputs(ns)
    console.rule(f"[bold]aref demo: {os.path.basename(example.path)}:{example.name}")
    kernel = example.kernel.specialize(**inputs)
    console.print("[bold]Tile IR[/bold] (aref ir --stage tile)")
    console.print(print_stage(lower_to(kernel, "tile"), "tile"), highlight=False, markup=False, soft_wrap=True)
    from aref.harness import run_interpreter
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
    from aref.cli_compare import measure
    from aref.cli_solve import solve_kernel
    _, result = solve_kernel(kernel, "sm_90a", "interval", 60.0)
    console.print(f"[bold]Optimal schedule[/bold] (aref solve): II = {result.ii} cycles, lower bound "
                  f"{result.lower_bound}, {'proven optimal' if result.proven_optimal else result.status}, "
                  f"{result.solve_seconds:.2f} s")
    large = example.inputs("large")               # a steady state needs many iterations
    big = example.kernel.specialize(**large)
    for mode in ("heuristic", "optimal"):
        entry, _, _ = measure(big, large, CompileOptions(partition=mode, timing_guard=True))
        console.print(f"  {mode} partition in the timing model (size large): {entry['cycles_per_iter']:.0f} "
                      f"cycles/iteration, "
                      f"tensor core {entry['tc_utilization']:.0%} busy, {entry['warp_groups']} warp groups")
    import tempfile
    from aref.backend.cute import compile_barrier
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_90a"))
    with tempfile.TemporaryDirectory() as out:
        res = compile_barrier(ws, out_dir=out).to_json()
    ins = res["instructions"]
    console.print(f"[bold]CuTe DSL kernel[/bold] (aref compile): {res['arch']}, {res['registers']} registers, "
                  f"{res['spill_bytes']} spill bytes, {ins.get('wgmma.mma_async', 0)} wgmma, "
                  f"{ins.get('cp.async.bulk.tensor', 0)} TMA copies, {ins.get('mbarrier.try_wait.parity', 0)} "
                  f"parity waits, compiled in {res['compile_seconds']:.1f} s without a GPU")
    return res["spill_bytes"] == 0



# -------------------------------------------------------------------------------------------- main
def versions() -> dict[str, str]:
    """aref's version and those of the CuTe DSL and torch it runs with (from the installed packages' metadata:
    neither is imported, so `aref --version` answers at once)."""
    from importlib.metadata import PackageNotFoundError, version

    import aref

    def installed(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "not installed"
    return {"aref": aref.__version__, "CuTe DSL (nvidia-cutlass-dsl)": installed("nvidia-cutlass-dsl"),
            "torch": installed("torch")}


class _Version(argparse.Action):
    """`aref --version`: the versions a bug report needs, then exit."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        v = versions()
        print(f"aref {v.pop('aref')}\n" + "".join(f"{name} {ver}\n" for name, ver in v.items()), end="")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    for module in COMMAND_MODULES:
        importlib.import_module(module)      # registers its commands
    parser = ArgumentParser(prog="aref", description="aref: warp-specialized GPU kernels from tile "
                                                     "programs with explicit arefs")
    parser.add_argument("--traceback", action="store_true",
                        help="on an internal error also print Python's traceback (for a bug report)")
    parser.add_argument("--version", action=_Version, help="print the versions of aref, the CuTe DSL and torch")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for name, (help_text, add_args, _) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def report_error(err: ArefError, want_json: bool, traceback: bool = False) -> int:
    """Print `err` (stderr; the JSON error object on stdout with --json); the exit status of a failure."""
    if want_json:
        print(json.dumps(error_json(err)))
    original = getattr(err, "original", None)
    if traceback and original is not None:
        import traceback as tb
        sys.stderr.write("".join(tb.format_exception(type(original), original, original.__traceback__)))
    Console(stderr=True).print(err.render(), style="red", highlight=False, markup=False, soft_wrap=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    want_json = "--json" in argv
    show_tb = bool(argv) and argv[0] == "--traceback"
    try:
        args = build_parser().parse_args(argv)
        console = Console(stderr=False, highlight=False)
        return COMMANDS[args.command][2](args, console)
    except ArefError as err:
        return report_error(err, want_json, show_tb)
    except KeyboardInterrupt:
        Console(stderr=True).print("interrupted", style="red")
        return 130
    except Exception as exc:  # noqa: BLE001 - never a bare traceback: an internal failure is a compiler bug
        from aref.guard import as_aref_error
        return report_error(as_aref_error(exc), want_json, show_tb)


if __name__ == "__main__":
    sys.exit(main())
