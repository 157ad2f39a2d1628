"""User-facing errors that point at the user's source line.

Every error the compiler raises about a user's program is an `ArefError` carrying a `SrcInfo`. Its message
renders the source excerpt with a caret (as rustc and Triton do), so a user never has to read compiler frames.
"""
from __future__ import annotations

import linecache
from dataclasses import dataclass


@dataclass(frozen=True)
class SrcInfo:
    """Where an op came from in the user's code (1-based line, 0-based columns; col_end exclusive)."""

    file: str
    line: int
    col: int = 0
    col_end: int = 0
    python_loop: "SrcInfo | None" = None   # the Python `for` loop (unrolled while tracing) the op was traced in

    def short(self) -> str:
        """`file.py:LINE` with the file's base name, as printed in IR dumps."""
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"


UNKNOWN_LOC = SrcInfo("<unknown>", 0)


def render_excerpt(loc: SrcInfo) -> str:
    """The source line of `loc` with a caret underline, or an empty string if the file is unreadable."""
    text = linecache.getline(loc.file, loc.line) if loc.line > 0 else ""
    if not text:
        return ""
    text = text.rstrip("\n").expandtabs(4)
    gutter = str(loc.line)
    pad = " " * len(gutter)
    col = min(loc.col, len(text))
    end = loc.col_end if loc.col_end > loc.col else len(text)
    end = min(max(end, col + 1), len(text)) if text.strip() else col + 1
    caret = " " * col + "^" * max(1, end - col)
    return f"{pad} |\n{gutter} | {text}\n{pad} | {caret}"


class ArefError(Exception):
    """An error in the user's kernel, named at the user's line.

    `message` says what is wrong, `loc` where, and `hint` what to change.
    """

    kind = "error"
    notes: tuple[tuple[str, SrcInfo], ...] = ()    # other lines that explain the error (where a size was set)

    def __init__(self, message: str, loc: SrcInfo | None = None, hint: str | None = None):
        self.message = message
        self.loc = loc or UNKNOWN_LOC
        self.hint = hint
        super().__init__(self.render())

    def noting(self, *notes: tuple[str, SrcInfo], hint: str | None = None) -> "ArefError":
        """This error with `notes` ((what, where) pairs, each rendered with its source excerpt after the
        error's own) and, if given, a new hint; returns the error itself, to raise."""
        self.notes = tuple(self.notes) + tuple(n for n in notes if n is not None)
        if hint is not None:
            self.hint = hint
        self.args = (self.render(),)
        return self

    def render(self) -> str:
        return self._render([f"{self.kind}: {self.message}"], "  --> {loc}")

    def _render(self, head: list[str], where: str) -> str:
        parts = list(head)
        if self.loc is not UNKNOWN_LOC and self.loc.line > 0:
            parts.append(where.format(loc=self.loc))
            excerpt = render_excerpt(self.loc)
            if excerpt:
                parts.append(excerpt)
        for text, loc in self.notes:
            parts.append(f"  = note: {text}")
            if loc is not UNKNOWN_LOC and loc.line > 0:
                parts.append(f"  --> {loc}")
                excerpt = render_excerpt(loc)
                if excerpt:
                    parts.append(excerpt)
        if self.hint:
            parts.append(f"  = help: {self.hint}")
        return "\n".join(parts)


class ArefTypeError(ArefError):
    """Shapes, dtypes or broadcasting that do not fit together."""

    kind = "type error"


class ArefSyntaxError(ArefError):
    """Python that the tile language does not support (a `while`, a second loop, an `if` on a tile...)."""

    kind = "unsupported"


class ChannelError(ArefError):
    """Misuse of an aref channel (get without put, consumed without get, a put into a full channel...)."""

    kind = "aref misuse"


class VerifyError(ArefError):
    """An IR invariant that a compiler pass broke (or that hand-made IR violates)."""

    kind = "verifier"


class UsageError(ArefError):
    """A command-line flag or argument outside its accepted range (the message gives the range)."""

    kind = "usage error"


class SolverError(ArefError):
    """The optimal partitioner found no schedule (or the kernel has nothing it can schedule)."""

    kind = "solver"


class ExampleError(ArefError):
    """An example file that does not follow the example convention (docs/language.md), or whose `example_inputs` /
    `reference` raised: named at the example file's line."""

    kind = "example error"


class UserCodeError(ArefError):
    """A Python exception raised by the user's own code (a kernel body, a grid function, an example file)
    while aref ran it, re-raised at the user's line with what to change."""

    kind = "error"


class CompilerBugError(ArefError):
    """An unexpected exception inside aref: a bug of the compiler, not of the user's program.

    `pass_name` names the compiler step that failed, `where` the aref source line that raised, and `loc`
    the user's line being compiled when it happened (context only: the user's code is not blamed).
    """

    kind = "compiler bug"

    def __init__(self, message: str, loc: SrcInfo | None = None, hint: str | None = None,
                 pass_name: str | None = None, where: str | None = None):
        self.pass_name = pass_name
        self.where = where
        super().__init__(message, loc, hint or "this is a bug in aref, not in your program: please report it "
                                              "with the command line and this message")

    def render(self) -> str:
        head = [f"{self.kind} in {self.pass_name or 'aref'}: {self.message}"]
        if self.where:
            head.append(f"  raised at {self.where}")
        return self._render(head, "  while compiling {loc} (your code, for context)")


def error_json(err: ArefError) -> dict:
    """The `--json` error object of every command: `{"ok": false, "error", "kind", "file", "line", "hint"}`
    (and `"pass"` for a compiler bug)."""
    out = {"ok": False, "error": err.message, "kind": err.kind, "file": err.loc.file if err.loc.line else None,
           "line": err.loc.line or None, "hint": err.hint}
    if isinstance(err, CompilerBugError):
        out["pass"] = err.pass_name
        out["where"] = err.where
    if err.notes:
        out["notes"] = [{"note": text, "file": loc.file if loc.line else None, "line": loc.line or None}
                        for text, loc in err.notes]
    return out
