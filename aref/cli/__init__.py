"""The `aref` command: `demo`, `ir`, `run`, `compile` (more subcommands register themselves in `COMMANDS`).

Every subcommand takes `FILE[:KERNEL]`, `--size small|large` and `--set NAME=VALUE` (overrides passed to the example's `example_inputs`), plus `--json` for machine-readable output. A user error (in the kernel, the
example file or the flags) prints the error with its source excerpt on stderr and, with `--json`, the error
object `{"ok": false, "error", "kind", "file", "line", "hint"}` on stdout; the exit status is 1. An unexpected
exception inside aref is reported the same way as a compiler bug naming the pass (`aref --traceback ...` adds Python's traceback for a bug report).

`aref --help` answers at once: this module and the command modules import only the light parts of aref at
import time; torch, the CuTe DSL and OR-tools are imported inside the commands that need them.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

from rich.console import Console

from aref.cli.common import COMMANDS, ArgumentParser
from aref.errors import ArefError, error_json

# modules whose import registers their commands, in the order `aref --help` lists them (each must stay light # to import: see the docstring)
COMMAND_MODULES = ["aref.cli.ir", "aref.cli.run", "aref.cli.compile", "aref.cli.demo", "aref.cli.solve",
                   "aref.cli.compare", "aref.cli.tune"]


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
