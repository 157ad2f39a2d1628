"""What every `aref` subcommand shares: the registry of commands (`command`), the flag types and the
`FILE[:KERNEL] --size --set` arguments, the example and its inputs, the compile options, progress lines and
the results table. Light to import (see `aref.cli`)."""
from __future__ import annotations

import argparse
import contextlib
import inspect
import math
import os

from rich.console import Console
from rich.table import Table

from aref.compiler import CompileOptions
from aref.target import ARCHS, DEFAULT_ARCH
from aref.errors import UsageError


COMMANDS: dict[str, tuple] = {}   # name -> (help, add_arguments, handler)
# modules whose import registers more commands (each must stay light to import: see the docstring)




def command(name: str, help: str, arguments=lambda parser: None):
    """Register a subcommand: `arguments(parser)` adds its flags, the decorated function runs it."""
    def register(fn):
        COMMANDS[name] = (help, arguments, fn)
        return fn
    return register


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
        p.add_argument("--arch", default=DEFAULT_ARCH, choices=ARCHS)
        p.add_argument("--partition", default="heuristic", choices=("heuristic", "optimal"))
        p.add_argument("--consumers", default="auto", choices=("auto", "plain", "cooperative", "pingpong"),
                       help="Hopper consumer warp groups (heuristic partition)")
        p.add_argument("--mma-depth", type=int_at_least(0), default=None,
                       help="MMA groups kept in flight (default 1)")
        p.add_argument("--promote-every", type=int_at_least(0), default=0, metavar="N",
                       help="fp8 GEMMs: add the tensor core's partial sum into the fp32 accumulator every N "
                            "K-steps (sm_90a; 0: never)")


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
    from aref.runtime.harness import load_example
    example = load_example(args.target)
    overrides = parse_overrides(args.overrides, example)
    arch = getattr(args, "arch", None) if for_arch else None
    return example, example.inputs(args.size, arch, **overrides)


def options_of(args) -> CompileOptions:
    return CompileOptions(arch=getattr(args, "arch", DEFAULT_ARCH), partition=getattr(args, "partition", "heuristic"),
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


def results_table(name: str, backend: str, report) -> Table:
    table = Table(title=f"{name} on {backend}: {'[green]ok' if report.ok else '[red]MISMATCH'}")
    for col in ("output", "shape", "dtype", "max |err|", "tolerance", "ok"):
        table.add_column(col)
    for o in report.outputs:
        table.add_row(o.name, str(o.shape), o.dtype, f"{o.max_abs_err:.3g}", f"{o.atol:g} + {o.rtol:g}·|ref|",
                      "[green]yes" if o.ok else "[red]no")
    return table
