"""The tables `aref tune` and `aref compile` print, made to fit an 80-column terminal and to say what a
user needs: for tuning, the ranking with the predicted and measured times and each candidate's status, and
the pruned candidates grouped by their whole reason (wrapped, never cut); for a compile, the per-group
register budgets, whether the result came from the cache, the files, and the PTX instructions that matter on
the target's architecture.
"""
from __future__ import annotations

import os

from rich import box
from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text


def _num(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


# ------------------------------------------------------------------------------------------------ tune
def tune_table(result, show: int = 30) -> Group:
    """The ranking of a `TuneResult`: ranked (and failed) candidates in a table, then the pruned ones grouped
    by reason, each reason in full."""
    rows = [c.to_json() for c in result.candidates]
    ranked = [r for r in rows if r["status"] != "pruned"]
    pruned = [r for r in rows if r["status"] == "pruned"]
    measured = result.method == "gpu" or any(r.get("measured_ms") is not None for r in rows)
    title = (f"{result.kernel} on {result.arch}: {sum(r['rank'] is not None for r in rows)} ranked, "
             f"{len(pruned)} pruned" + (" (from the cache)" if result.cached else ""))
    how = (f"measured on {result.device}" if result.method == "gpu" else
           f"ranked by the timing model ({result.device}; no GPU measurement)")
    table = Table(title=title, caption=how, box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("configuration", overflow="fold", ratio=1, min_width=20)
    table.add_column("pred. ms", justify="right", no_wrap=True)
    table.add_column("TFLOP/s", justify="right", no_wrap=True)
    table.add_column("TC", justify="right", no_wrap=True)
    if measured:
        table.add_column("meas. ms", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for r in ranked[:show]:
        status = "ok" if r["status"] == "ok" else f"[yellow]{r['status']} ({r['stage']})[/yellow]"
        cells = [str(r["rank"] or "-"), r["label"], _num(r.get("predicted_ms"), ".4f"),
                 _num(r.get("predicted_tflops"), ".0f"), _num(r.get("tc_utilization"), ".0%")]
        if measured:
            cells.append(_num(r.get("measured_ms"), ".4f"))
        table.add_row(*cells, status)
    if len(ranked) > show:
        table.add_row("…", f"{len(ranked) - show} more (--show N)", *[""] * (len(table.columns) - 2))
    parts = [table]
    failed = [r for r in ranked if r["status"] != "ok"]
    parts += _reasons("failed", failed) + _reasons("pruned", pruned)
    return Group(*parts)


def _reasons(what: str, rows: list[dict]) -> list:
    """`what` candidates grouped by their stage and reason: the labels, then the whole reason, wrapped."""
    if not rows:
        return []
    groups: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        reason = r["reason"]
        prefix = f"{r['stage']}: "
        groups.setdefault((r["stage"], reason[len(prefix):] if reason.startswith(prefix) else reason),
                          []).append(r["label"])
    out = [Text(f"{what} ({len(rows)}):", style="bold")]
    for (stage, reason), labels in groups.items():
        out.append(Padding(Text(" · ".join(labels), overflow="fold"), (0, 0, 0, 2)))
        out.append(Padding(Text(f"{stage}: {reason}", style="dim", overflow="fold"), (0, 0, 0, 4)))
    return out


# --------------------------------------------------------------------------------------------- compile
def compile_table(name: str, partition: str, data: dict) -> Group:
    """A compile's result (`CompileResult.to_json()`): what was built and from where, the registers each warp
    group is given, and the PTX instructions of the target's architecture that the kernel contains."""
    from aref.backend.cute.toolchain import arch_opcodes
    arch = data["arch"]
    table = Table(title=f"{name} for {arch} ({partition} partition)", box=box.SIMPLE_HEAD, show_header=False,
                  pad_edge=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold", ratio=1)
    seconds = f"{data['compile_seconds']:.1f} s"
    table.add_row("compile", f"cached: built in {seconds} by an earlier run ({data['cache_key']})"
                  if data.get("cached") else f"{seconds} ({data['cache_key']})")
    paths = [data.get(k) for k in ("source_path", "ptx_path", "cubin_path") if data.get(k)]
    if paths:
        folder = os.path.dirname(paths[0])
        table.add_row("files", f"{folder}{os.sep}: " + ", ".join(os.path.basename(p) for p in paths))
    budgets = data.get("register_budgets") or {}
    if budgets:
        table.add_row("registers", " · ".join(f"{g} {r}" for g, r in budgets.items())
                      + " (per-thread budget of each warp group: setmaxnreg)")
    if data.get("registers") is not None:
        spills = data.get("spill_bytes")
        table.add_row("ptxas", f"{data['registers']} registers per thread at launch, "
                      + ("spills unknown" if spills is None else f"{spills} bytes spilled")
                      + f" ({data.get('resource_source', 'none')})")
    counts = data.get("instructions") or {}
    shown = [(op, counts[op]) for op in arch_opcodes(arch) if counts.get(op)]
    if not shown:
        return Group(table)
    ins = Table(title=f"PTX instructions ({arch}, nonzero; --json lists all)", box=box.SIMPLE_HEAD,
                show_header=False, pad_edge=False)
    for _ in range(2):
        ins.add_column(no_wrap=True)
        ins.add_column(justify="right", no_wrap=True)
    half = -(-len(shown) // 2)
    for i in range(half):
        right = shown[half + i] if half + i < len(shown) else ("", "")
        ins.add_row(shown[i][0], str(shown[i][1]), right[0], str(right[1]))
    return Group(table, ins)
