"""The builder state used while a kernel function runs on proxies, and user-source locations.

Tracing is one half of the frontend (see `aref.lang.frontend`): the AST transform makes loop-carried variables and
the loop's region explicit, and running the transformed function on proxies records every op here, each with
the exact line and columns of the user's call (from the frame's bytecode position).
"""
from __future__ import annotations

import os
import sys
import threading

from aref.errors import ArefError, ArefSyntaxError, SrcInfo, UNKNOWN_LOC
from aref.ir import Block, Op, OpKind, Value

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))      # the aref package
_TOOLING = (os.path.join(_PKG_DIR, "cli") + os.sep, os.path.join(_PKG_DIR, "runtime", "harness.py"))
_state = threading.local()


def _is_tooling(fname: str) -> bool:
    """aref's command line and example harness call kernels on the user's behalf: no user line beyond them."""
    path = os.path.abspath(fname)
    return path.startswith(_TOOLING[0]) or path == _TOOLING[1]


def user_loc(skip_pkg: str = _PKG_DIR) -> SrcInfo:
    """The innermost frame outside the aref package: the user's line, with columns of the call (unknown when
    the call came from aref's command line or harness rather than from user code)."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = frame.f_code.co_filename
        if _is_tooling(fname):
            return UNKNOWN_LOC
        if not os.path.abspath(fname).startswith(skip_pkg + os.sep) and not fname.startswith("<frozen"):
            line, col, col_end = frame.f_lineno, 0, 0
            positions = getattr(frame.f_code, "co_positions", None)
            if positions is not None and frame.f_lasti >= 0:
                try:
                    pos = list(positions())[frame.f_lasti // 2]
                    if pos[0] is not None and pos[0] == line:
                        col = pos[2] or 0
                        col_end = pos[3] if pos[1] == line and pos[3] is not None else 0
                except IndexError:
                    pass
            return SrcInfo(fname, line or 0, col, col_end)
        frame = frame.f_back
    return UNKNOWN_LOC


UNDEF = object()           # a loop variable with no value before the loop


class Poison:
    """Stands for a variable assigned inside the loop and read after it (undefined for zero trips)."""

    def __init__(self, name: str, loop_loc: SrcInfo):
        self._name = name
        self._loop_loc = loop_loc

    def fail(self, *_, **__):
        raise ArefSyntaxError(
            f"'{self._name}' is assigned inside the loop (line {self._loop_loc.line}) and used after it, "
            f"where it has no value when the loop runs zero times", user_loc(),
            hint=f"give '{self._name}' a value before the loop; it is then carried across iterations")

    def __getattr__(self, item):
        if item.startswith("_"):
            raise AttributeError(item)
        self.fail()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = fail
    __getitem__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __iter__ = __index__ = fail


class LoopState:
    """What the tracer knows about the loop while its body is being traced."""

    def __init__(self, loc: SrcInfo):
        self.loc = loc
        self.body = Block()


class Tracer:
    """Collects ops into the current block (pre-loop, loop body or post-loop)."""

    def __init__(self, kernel_name: str):
        self.kernel_name = kernel_name
        self.pre = Block()
        self.post = Block()
        self.block = self.pre
        self.loop_state: LoopState | None = None
        self.loop_done = False
        self.loop = None            # the finished ir.Loop
        self.channels = []           # lang.Channel objects, in creation order
        self.program_ids: dict[int, Value] = {}
        self.stores: list[tuple[Op, tuple]] = []  # store ops with their coordinate proxies (grid inference)
        self.consts: dict[tuple, Value] = {}       # per-block constants and scalar index math, shared

    @property
    def region(self) -> str:
        if self.block is self.pre:
            return "pre"
        return "post" if self.block is self.post else "loop"

    def emit(self, kind: OpKind, operands, result_types, attrs, loc: SrcInfo | None = None,
             names=None) -> Op:
        loc = loc or user_loc()
        results = tuple(Value(t, n) for t, n in zip(result_types, names or [None] * len(result_types)))
        op = Op(kind, tuple(operands), results, attrs, loc)
        self.block.ops.append(op)
        return op


def current(what: str = "this function") -> Tracer:
    tracer = getattr(_state, "tracer", None)
    if tracer is None:
        raise ArefSyntaxError(f"{what} can only be called while an @aref_kernel function is being compiled",
                              user_loc(), hint="call it inside a function decorated with @aref_kernel")
    return tracer


def active() -> Tracer | None:
    return getattr(_state, "tracer", None)


class tracing:
    """Context manager that installs a Tracer for the duration of one kernel trace."""

    def __init__(self, tracer: Tracer):
        self.tracer = tracer

    def __enter__(self) -> Tracer:
        if getattr(_state, "tracer", None) is not None:
            raise ArefError("nested kernel tracing: an @aref_kernel function cannot call another one",
                            user_loc())
        _state.tracer = self.tracer
        return self.tracer

    def __exit__(self, *exc) -> None:
        _state.tracer = None
