"""The builder state used while a kernel function runs on proxies, and user-source locations.

Tracing is one half of the frontend (see `aref.lang.frontend`): the AST transform makes loop-carried variables and
the loop's region explicit, and running the transformed function on proxies records every op here, each with
the exact line and columns of the user's call (from the frame's bytecode position).
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, replace

from aref.errors import ArefError, ArefSyntaxError, SrcInfo, UNKNOWN_LOC
from aref.examples import is_example_file
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
        if (not os.path.abspath(fname).startswith(skip_pkg + os.sep) or is_example_file(fname)) \
                and not fname.startswith("<frozen"):
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


@dataclass(eq=False)
class UnrolledLoop:
    """A Python `for` loop of the kernel (not `aref.range`) while it runs during tracing: Python executes it,
    so the kernel gets one copy of its body per trip. `shape_dependent`: its trip count is computed from a
    tensor's shape (the frontend's reading of the source); `suggestion`: the `aref.range` header to write
    instead; `kernel_loop`: the line of the kernel's aref.range loop, if it has one."""

    loc: SrcInfo
    shape_dependent: bool
    suggestion: str
    kernel_loop: int | None
    trips: int | None = None

    def error(self, what: str) -> ArefSyntaxError:
        """The refusal of this loop doing the pipelined loop's work: it `what` (loads per trip, uses a
        channel ...). Named at the loop's header."""
        trips = f" ({self.trips} trips here)" if self.trips is not None else ""
        grows = " and its trip count comes from tensor shapes" if self.shape_dependent else ""
        message = (f"this Python `for` loop {what}{grows}: Python runs it while the kernel is traced, so the kernel "
                   f"holds one copy of its body per trip{trips}, not a pipelined loop")
        if self.kernel_loop is not None:
            hint = (f"a kernel has one pipelined loop, the aref.range loop on line {self.kernel_loop}: fold this "
                    f"work into it, or loop here over a compile-time constant")
        else:
            hint = (f"use aref.range(...) for the pipelined loop: `{self.suggestion}`, with the tiles it loads put "
                    f"into an aref channel (see the README's gemm)")
        return ArefSyntaxError(message, self.loc, hint=hint)


UNDEF = object()           # a loop variable with no value before the loop


class Poison:
    """Stands for a variable assigned inside the loop and read after it (undefined for zero trips)."""

    def __init__(self, name: str, loop_loc: SrcInfo, index: bool = False, bound: str = "n"):
        self._name = name
        self._loop_loc = loop_loc
        self._index = index           # the loop's own index variable
        self._bound = bound           # the source text of the loop's trip count (`aref.range(<bound>)`)

    def fail(self, *_, **__):
        n = self._name
        if self._index:
            # the loop rebinds its index, so a value given before the loop is not carried: the trip count is
            # what remains known after it
            raise ArefSyntaxError(
                f"'{n}' is the index of the aref.range loop (line {self._loop_loc.line}); it has no value after "
                f"the loop, which may run zero times", user_loc(),
                hint=f"after the loop, use the trip count: the last index is `{self._bound} - 1` (n - 1 for "
                     f"aref.range(n)); a value given to '{n}' before the loop does not help: the loop replaces it")
        raise ArefSyntaxError(
            f"'{n}' is assigned inside the loop (line {self._loop_loc.line}) and used after it, "
            f"where it has no value when the loop runs zero times", user_loc(),
            hint=f"give '{n}' a value before the loop; it is then carried across iterations")

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
        self.producer: dict[int, Op] = {}          # id(value) -> the op that made it (for errors: where a
        #                                            tile's shape was set)
        self.first_put: dict[int, Op] = {}         # id(channel value) -> its first put (a get's tiles' origin)
        self.unrolled: list = []                   # Python `for` loops being traced (innermost last)

    @property
    def region(self) -> str:
        if self.block is self.pre:
            return "pre"
        return "post" if self.block is self.post else "loop"

    def emit(self, kind: OpKind, operands, result_types, attrs, loc: SrcInfo | None = None,
             names=None) -> Op:
        loc = loc or user_loc()
        if self.unrolled and loc.python_loop is None:
            loc = replace(loc, python_loop=self.unrolled[-1].loc)
        results = tuple(Value(t, n) for t, n in zip(result_types, names or [None] * len(result_types)))
        op = Op(kind, tuple(operands), results, attrs, loc)
        self.block.ops.append(op)
        for r in results:
            self.producer[id(r)] = op
        if kind is OpKind.PUT:
            self.first_put.setdefault(id(op.operands[0]), op)
        return op

    def unrolled_outside_loop(self) -> UnrolledLoop | None:
        """The innermost Python `for` loop being traced outside the kernel's aref.range loop, or None (inside
        the pipelined loop, a Python loop is a legitimate static unroll: `for i in range(SUBTILE)`)."""
        if self.region == "loop" or not self.unrolled:
            return None
        return self.unrolled[-1]

    def shape_note(self, name: str, v: Value):
        """(what, where) of the op that set tile `v`'s shape, for an error's notes (None if it is unknown)."""
        op = self.origin(v)
        if op is None or op.loc.line <= 0:
            return None
        shape = "x".join(map(str, v.type.shape))
        made = self.producer.get(id(v))
        view = " (its transposed view)" if made is not op and made.kind is OpKind.TRANSPOSE else ""
        if op.kind is OpKind.LOAD:
            tile = "x".join(map(str, op.attrs.tile_shape))
            return f"{name} is {shape}{view}: its tile is loaded here with tile shape {tile}", op.loc
        return f"{name} is {shape}{view}: its shape is set here", op.loc

    def origin(self, v: Value) -> Op | None:
        """The op that set the shape of tile `v`: through views, casts and channels (a get's tile is the
        tile its channel's put carried) to the load, constant tile or computation that made it."""
        for _ in range(16):
            op = self.producer.get(id(v))
            if op is None:
                return None
            if op.kind in (OpKind.TRANSPOSE, OpKind.CAST):
                v = op.operands[0]
            elif op.kind is OpKind.GET and id(op.operands[0]) in self.first_put:
                v = self.first_put[id(op.operands[0])].operands[1 + next(i for i, r in enumerate(op.results) if r is v)]
            else:
                return op
        return None


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
