"""User-facing errors that point at the user's source line.

Every error the compiler raises about a user's program is an `ArefError` carrying a `SrcInfo`. Its message
renders the source excerpt with a caret (as rustc and Triton do), so a user never has to read compiler frames.
"""
from __future__ import annotations

import linecache
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class SrcInfo:
    """Where an op came from in the user's code (1-based line, 0-based columns; col_end exclusive)."""

    file: str
    line: int
    col: int = 0
    col_end: int = 0

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
    where_note = ""        # what the source line is to this error (InternalError: context only)

    def __init__(self, message: str, loc: SrcInfo | None = None, hint: str | None = None):
        self.message = message
        self.loc = loc or UNKNOWN_LOC
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        parts = [f"{self.kind}: {self.message}"]
        if self.loc is not UNKNOWN_LOC and self.loc.line > 0:
            parts.append(f"  --> {self.loc}{self.where_note}")
            excerpt = render_excerpt(self.loc)
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


REPORT_HINT = ("this is a bug in aref, not in your program: please report it with the kernel source and the "
               "command that failed (`aref ir FILE --stage tile` shows the Tile IR the compiler started from)")


class InternalError(ArefError):
    """A compiler pass broke an IR invariant or failed unexpectedly: aref's bug, never the user's.

    It names the pass; `loc` is the user's line the pass was working on, shown as context only."""

    kind = "internal compiler error"
    where_note = " (the line being compiled, for context: it is not known to be wrong)"

    def __init__(self, pass_name: str, detail: str, loc: SrcInfo | None = None):
        self.pass_name = pass_name
        super().__init__(f"the {pass_name} pass {detail}", loc, hint=REPORT_HINT)



@contextmanager
def compiler_pass(name: str, loc: SrcInfo | None = None, verifying: bool = False):
    """Run a compiler pass (or the verifier after one): a failure that is not a refusal of the user's program
    becomes an `InternalError` naming the pass. With `verifying`, every `ArefError` is one (the verifier
    rejecting a pass's output is the pass's bug); otherwise `VerifyError`s and non-aref exceptions are, and
    other `ArefError`s (a channel too shallow for the schedule, a partition mode that does not apply) pass
    through as the user's to act on."""
    try:
        yield
    except InternalError:
        raise
    except ArefError as err:
        if not (verifying or isinstance(err, VerifyError)):
            raise
        raise InternalError(name, f"produced IR that the verifier rejects: {err.message}", err.loc) from err
    except Exception as err:  # noqa: BLE001 - any crash inside a pass is the compiler's
        raise InternalError(name, f"failed unexpectedly ({type(err).__name__}: {err})", loc) from err
