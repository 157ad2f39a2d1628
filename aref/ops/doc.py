"""The op table of the documentation, generated from the registry: `python -m aref.ops.doc > docs/ops.md`.

`table()` is one Markdown row per registered entry (what `python -m aref.ops` prints); `page()` wraps it in the
text of `docs/ops.md`. tests/test_docs.py checks that the checked-in page equals `page()`, so a new or changed
entry shows up in the documentation as soon as it is registered.
"""
from __future__ import annotations

from aref import ops

HEADER = """# The op table

Every op of the tile language is one entry of the op registry (`aref/ops/`), keyed by its op kind and function.
This page is generated from the registry (`python -m aref.ops.doc > docs/ops.md`; `tests/test_docs.py` checks
that it is up to date). Columns:

* **op**: the entry's name (op kind, and function where a kind has several);
* **spelling**: how a kernel writes it;
* **traits**: what the compiler derives from the entry (elementwise, reduction, view, MUFU, ...);
* **unit**: the functional unit its cost is charged to in the machine model;
* **CuTe**: the forms of its CuTe DSL emission, with the register layouts an emission is specialized for;
* **test cases**: the cases `tests/test_ops_registry.py` runs through the interpreter, the simulator and the
  backend (or the op that carries it into a test).
"""


def _cell(text: str) -> str:
    """`text` as one Markdown table cell (a `|` inside it, as in |x|, would end the cell)."""
    return text.replace("|", "\\|")


def table() -> str:
    """Entry, spelling, traits, cost unit, CuTe layouts and test cases of every registered op."""
    rows = ["| op | spelling | what | traits | unit | CuTe | test cases |", "|---|---|---|---|---|---|---|"]
    for d in ops.entries():
        unit = d.cost.declared_unit
        forms = sorted({e.form + (f" ({', '.join(sorted(e.layouts))})" if e.layouts else "") for e in d.cute})
        cases = ", ".join(c.label for c in d.hints.cases) or (f"in {d.hints.carrier}" if d.hints.carrier else "")
        rows.append(f"| `{d.name}` | {_cell(d.surface or '')} | {_cell(d.doc)} | {', '.join(sorted(d.traits))} | "
                    f"{unit} | {_cell('; '.join(forms))} | {_cell(cases)} |")
    return "\n".join(rows)


def page() -> str:
    """The whole text of docs/ops.md."""
    return f"{HEADER}\n{table()}\n"


if __name__ == "__main__":
    print(page(), end="")
