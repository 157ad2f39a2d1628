"""`python -m aref.ops`: the op table generated from the registry (Markdown), one row per entry."""
from aref import ops


def table() -> str:
    """Entry, spelling, traits, cost unit, CuTe layouts and test cases of every registered op."""
    rows = ["| op | spelling | what | traits | unit | CuTe | test cases |", "|---|---|---|---|---|---|---|"]
    for d in ops.entries():
        unit = d.cost.declared_unit
        forms = sorted({e.form + (f" ({', '.join(sorted(e.layouts))})" if e.layouts else "") for e in d.cute})
        cases = ", ".join(c.label for c in d.hints.cases) or (f"in {d.hints.carrier}" if d.hints.carrier else "")
        rows.append(f"| `{d.name}` | {d.surface or ''} | {d.doc} | {', '.join(sorted(d.traits))} | {unit} | "
                    f"{'; '.join(forms)} | {cases} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
