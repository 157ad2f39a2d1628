"""One rule for every entry point: a mistake of the user's is an `ArefError` at the user's line; anything
else that escapes aref is reported as a compiler bug naming the pass — never a bare traceback.

Entry points (the kernel's call and `specialize`, the interpreter, the simulator, compile, launch, every CLI
command) wrap their work with `guarded(...)` or convert a caught exception with `as_aref_error(...)`. The
traceback decides who is at fault: the innermost frame that belongs either to aref (its packages) or to the
user (any other file that is not Python's or a library's) is the one that raised. A user frame means the
user's own Python raised (a division by a zero tile size, a `KeyError` in `example_inputs`): the error names
that line. An aref frame means aref failed: a `CompilerBugError` names the pass (from the module that raised)
and, as context, the innermost user line on the stack.
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import sysconfig
import traceback

from aref.errors import ArefError, CompilerBugError, SrcInfo, UserCodeError, VerifyError
from aref.examples import is_example_file

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT_DIRS = tuple(os.path.join(_ROOT, p) + os.sep for p in ("aref", "partition", "pipeline", "solve")) + (
    os.path.join(os.path.expanduser("~"), ".cache", "aref") + os.sep,)   # generated CuTe DSL modules
_LIB_DIRS = tuple({os.path.abspath(p) + os.sep for p in (
    sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("purelib"),
    sysconfig.get_paths().get("platlib"), sys.prefix, sys.base_prefix) if p})

# module prefix -> the compiler step it implements (first match wins; the most specific first)
PASSES = (
    ("aref.lang.frontend", "the frontend (tracing)"), ("aref.lang", "the frontend (tracing)"),
    ("aref.lang.trace", "the frontend (tracing)"), ("aref.ir.typing_rules", "the frontend (type rules)"),
    ("aref.runtime.kernel", "the kernel call"), ("aref.runtime.harness", "the example harness"),
    ("aref.runtime", "the kernel call"), ("aref.nn", "aref.nn"), ("aref.verify.ws", "the warp-specialized IR verifier"),
    ("aref.verify", "the Tile IR verifier"), ("partition.optimal", "the optimal partitioner"),
    ("partition.distribute", "loop distribution"), ("partition", "the heuristic partitioner"),
    ("pipeline", "pipelining"), ("aref.lower", "aref lowering"), ("aref.interp.tile", "the interpreter"),
    ("aref.interp.channels", "the channel-level executor"), ("aref.sim.timing", "the timing model"),
    ("aref.sim", "the simulator"), ("aref.backend.cute.launch", "the launch"),
    ("aref.backend.cute", "the CuTe DSL backend"), ("solve", "the solver"), ("aref.runtime.harness", "the example harness"),
    ("aref.outputs", "the example harness"),
    ("aref.viz", "the pictures"), ("aref.cli", "the command line"), ("aref.compiler", "the compiler driver"),
    ("aref.search", "the compile search"),
)
ROW_SPLIT = "the cooperative row split"     # a rewrite inside the heuristic partitioner, named on its own
# helpers every pass uses: a failure there is charged to the pass that called them (whole module names)
_HELPERS = frozenset({"aref.ir", "aref.errors", "aref.guard", "aref.target.machine", "aref.target.targets",
                      "aref.ir.printer", "aref.ir.dtypes", "aref.ir.ws", "aref.verify.ws"})


def _kind(filename: str) -> str:
    """'aref', 'user' or 'lib' for a frame's file."""
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    if is_example_file(path):
        return "user"                    # the built-in examples ship inside the package but are user programs
    if path.startswith(PROJECT_DIRS):
        return "aref"
    if path.startswith("<") or path.startswith(_LIB_DIRS):
        return "lib"
    return "user"


def _pass_of(module: str) -> str | None:
    for prefix, name in PASSES:
        if module == prefix or module.startswith(prefix + "."):
            return name
    return None


def _hint_for(exc: BaseException) -> str:
    if isinstance(exc, ZeroDivisionError):
        return "a divisor is zero: check the compile-time constants and sizes it is computed from"
    if isinstance(exc, RecursionError):
        return "the code calls itself without end: a kernel cannot call itself or another kernel"
    if isinstance(exc, (KeyError, IndexError)):
        return "a key or index that does not exist: check the values passed in (e.g. --set NAME=VALUE)"
    if isinstance(exc, (TypeError, ValueError)):
        return "check the types and values of the arguments passed in"
    return "fix the code at this line"


def as_aref_error(exc: BaseException, stage: str | None = None, context: SrcInfo | None = None,
                  hint: str | None = None) -> ArefError:
    """`exc` as an ArefError: itself if it is one, else a `UserCodeError` at the user's line that raised it,
    or a `CompilerBugError` in `stage` (default: the pass of the aref module that raised)."""
    if isinstance(exc, ArefError):
        return exc
    frames = [(f, line) for f, line in traceback.walk_tb(exc.__traceback__)]
    mine = [(f, line, _kind(f.f_code.co_filename)) for f, line in frames]
    owned = [m for m in mine if m[2] != "lib"]
    users = [m for m in owned if m[2] == "user"]
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if owned and owned[-1][2] == "user":
        f, line, _ = owned[-1]
        err = UserCodeError(f"your code raised {text}", SrcInfo(f.f_code.co_filename, line),
                            hint=hint or _hint_for(exc))
    else:
        where, name = None, stage
        for f, line, _ in reversed(owned):
            module = f.f_globals.get("__name__", "")
            if where is None:
                where = f"{os.path.relpath(f.f_code.co_filename, _ROOT)}:{line} in {f.f_code.co_name}"
            if name is None and module not in _HELPERS:
                name = _pass_of(module)
            if name is not None:
                break
        if where is None and frames:
            f, line = frames[-1]
            where = f"{f.f_code.co_filename}:{line} in {f.f_code.co_name}"
        ctx = SrcInfo(users[-1][0].f_code.co_filename, users[-1][1]) if users else context
        err = CompilerBugError(text, ctx, pass_name=name, where=where)
    err.original = exc
    return err


@contextlib.contextmanager
def guarded(stage: str | None = None, context: SrcInfo | None = None, hint: str | None = None):
    """Convert any exception escaping the block into an ArefError (see `as_aref_error`), without the
    compiler's frames (the message names the user's line). KeyboardInterrupt and SystemExit pass."""
    try:
        yield
    except ArefError as err:
        raise err.with_traceback(None) from None
    except Exception as exc:  # noqa: BLE001 - the point of an entry point's guard
        raise as_aref_error(exc, stage, context, hint).with_traceback(None) from None


def user_facing(method):
    """Decorate a public entry point: like `guarded()`, and the raised error's traceback starts here."""
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except ArefError as err:
            raise err.with_traceback(None) from None
        except Exception as exc:  # noqa: BLE001 - the point of an entry point's guard
            raise as_aref_error(exc).with_traceback(None) from None
    return wrapper


@contextlib.contextmanager
def compiler_pass(name: str, context: SrcInfo | None = None, verifying: bool = False):
    """Run one compiler pass — or, with `verifying`, the verifier on a pass's output — so that a failure that
    is not a refusal of the user's program is a `CompilerBugError` of pass `name`, the user's line `context`
    (or the one the verifier points at) shown only as context. Verifying, every `ArefError` is the pass's
    bug (the user's program passed the same verifier before the pass); running the pass, a `VerifyError`
    and any non-aref exception are, while other `ArefError`s (a channel too shallow for the schedule, a
    consumer mode that does not apply) are refusals the user can act on and pass through."""
    try:
        yield
    except CompilerBugError:
        raise
    except ArefError as err:
        if not (verifying or isinstance(err, VerifyError)):
            raise
        raise CompilerBugError(f"produced IR that the verifier rejects: {err.message}", err.loc,
                               pass_name=name) from err
    except Exception as exc:  # noqa: BLE001 - any crash inside a pass is the compiler's
        raise as_aref_error(exc, name, context) from exc
