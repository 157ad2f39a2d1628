"""Small building blocks for writing generated Python: an indented line buffer and unique identifiers."""
from __future__ import annotations

import contextlib
import keyword
import re

from aref.backend.cute.analysis import ident


class Lines:
    """Indented source lines."""

    def __init__(self, indent: int = 0):
        self.lines: list[str] = []
        self.depth = indent

    def __call__(self, text: str = "") -> None:
        self.lines.append(("    " * self.depth + text) if text else "")

    @contextlib.contextmanager
    def block(self, header: str):
        self(header)
        self.depth += 1
        mark = len(self.lines)
        yield
        if all(not line.strip() or line.strip().startswith("#") for line in self.lines[mark:]):
            self("pass")                # a Python block of comments alone needs a statement
        self.depth -= 1

    def extend(self, other: "Lines") -> None:
        self.lines += ["    " * self.depth + line if line else "" for line in other.lines]

    def text(self) -> str:
        return "\n".join(self.lines)


_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*) = ")


def prune_unused(setup: list[str], rest: list[str]) -> list[str]:
    """The setup lines without assignments `name = ...` that nothing else reads (the generic thread and
    fragment setup of a role emits a few that a given kernel does not need), removed until none is left."""
    setup = list(setup)
    while True:
        for i, line in enumerate(setup):
            m = _ASSIGN.match(line)
            if not m:
                continue
            word = re.compile(rf"\b{re.escape(m.group(1))}\b")
            if not any(word.search(x) for j, x in enumerate(setup) if j != i) and \
                    not any(word.search(x) for x in rest):
                del setup[i]
                break
        else:
            return setup


class Names:
    """Unique Python identifiers within one generated function."""

    def __init__(self, reserved=()):
        self.used = set(reserved) | set(keyword.kwlist) | {"cute", "cutlass", "aref", "warpgroup", "cpasync"}

    def __call__(self, hint: str) -> str:
        base = ident(hint.split("^")[0])
        base = re.sub(r"(_\d+)+$", "", base) or base
        name, i = base, 1
        while name in self.used:
            name = f"{base}_{i}"
            i += 1
        self.used.add(name)
        return name

    def reserve(self, name: str) -> str:
        self.used.add(name)
        return name
