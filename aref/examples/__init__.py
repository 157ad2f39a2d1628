"""The built-in examples: kernels with their inputs, torch references and tolerances (the example
convention, docs/language.md). They ship inside the package, so `aref demo` and `aref run gemm` work from an
installed wheel; in a clone, the top-level `examples` is a link to this folder and `examples/gemm.py` names the
same file.

The example files are user programs, not compiler code: errors in them are the user's (`aref.trace.user_loc`
and `aref.guard` treat this folder as user code), and they import nothing from each other.
"""
from __future__ import annotations

import os

DIR = os.path.dirname(os.path.abspath(__file__))


def names() -> list[str]:
    """The built-in examples by name (`gemm`, `attention_fwd`, ...), sorted."""
    return sorted(f[:-3] for f in os.listdir(DIR) if f.endswith(".py") and not f.startswith("_"))


def path(name: str) -> str | None:
    """The file of built-in example `name` (with or without `.py`), or None if there is none."""
    base = name[:-3] if name.endswith(".py") else name
    if os.sep in base or "/" in base or base not in names():
        return None
    return os.path.join(DIR, base + ".py")


def is_example_file(filename: str) -> bool:
    """Whether `filename` is one of the built-in example files (user code that ships with aref; the link
    `examples/` of a clone lies outside the package and is user code anyway)."""
    return not filename.startswith("<") and os.path.abspath(filename).startswith(DIR + os.sep)
