"""The steady state of warp-specialized schedules as a picture: one panel per partition, stacked, on one
cycle axis so that a shorter iteration is visibly shorter.

Each panel has one lane per warp group (what its instruction stream does: synchronous work on a unit,
issuing asynchronous MMAs and copies, synchronization, and the time it is blocked) and one lane per
functional unit (when the tensor core, TMA engine, MUFU, FMA pipe and shared-memory port are busy, and for
which op). Ops are coloured by kind; dashed lines mark iteration boundaries of the simulated steady state
and, where the solver gave one, a bracket marks its initiation interval.
"""
from __future__ import annotations

import linecache
import re
from dataclasses import dataclass, field

# kind -> (label, colour); the order is the legend's
KINDS = {
    "tc": ("MMA (tensor core)", "#3b6fb6"),
    "tma": ("TMA copy", "#4daf4a"),
    "mufu": ("exp / log (MUFU)", "#e8772e"),
    "fma": ("elementwise, reductions (FMA)", "#f2c14e"),
    "smem": ("registers → shared / tensor memory", "#9c6ade"),
    "issue": ("synchronization, issue", "#b8b8b8"),
    "wait": ("blocked (waiting)", "#f4f4f4"),
}
UNIT_LANES = (("tc", "tensor core"), ("tma", "TMA engine"), ("mufu", "MUFU"), ("fma", "FMA pipe"),
              ("smem", "smem / tmem port"))


@dataclass
class Panel:
    """One partition's steady state: `title`, its timing report, lane labels per group (in order), the
    solver's initiation interval (None for the heuristic) and what each named barrier is for (id ->
    purpose, `aref.ws.NamedBarrier`: a blocked bar says what it waits on)."""

    title: str
    report: object
    groups: list[tuple[str, str]]      # (group name in the timeline, label)
    ii: float | None = None
    barriers: dict = field(default_factory=dict)


@dataclass
class Bar:
    """One bar of a lane: `lane` (a group's name or `unit:<unit>`), start and width in cycles from the
    window's start, its kind (a `KINDS` key), and its label variants, longest first (the widest that fits is
    drawn)."""

    lane: str
    x: float
    width: float
    kind: str
    labels: tuple[str, ...] = ()


def op_label(text: str) -> str:
    """A short name for a timeline entry's op text: `%s = mma_async ...` -> `mma`, `... unary %x exp2` -> `exp2`."""
    body = text.split(" = ", 1)[-1]
    m = re.match(r"(unary|binary|reduce)\s+(?:%\S+,?\s*)+(\w+)", body)
    if m:
        return m.group(2)
    word = body.split()[0] if body.split() else "?"
    return {"mma_async": "mma", "tma_load": "load", "mbarrier_wait": "wait", "mbarrier_arrive": "arrive",
            "mbarrier_arrive_expect_tx": "expect", "slot_store": "store", "tma_store": "store"}.get(word, word)


def _operand(node) -> str:
    """An MMA operand as written, without casts (`p.to(dtype)` -> `p`) and with `x.T` as `xᵀ`."""
    import ast
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to":
        node = node.func.value
    if isinstance(node, ast.Attribute) and node.attr == "T":
        return _operand(node.value) + "ᵀ"
    text = ast.unparse(node)
    return text if len(text) <= 12 else text[:11] + "…"


def mma_label(file: str, line: int) -> str:
    """What an MMA computes, from its source line: `s = aref.mma(q, k.T)` -> `s=q·kᵀ`; `mma` when the line
    does not say (a statement over several lines, an unreadable file)."""
    import ast
    text = linecache.getline(file, line).split("#", 1)[0].strip() if file and line > 0 else ""
    try:
        stmt = ast.parse(text).body[0] if text else None
    except SyntaxError:
        stmt = None
    call = next((n for n in ast.walk(stmt) if isinstance(n, ast.Call) and (getattr(n.func, "attr", None) == "mma"
                 or getattr(n.func, "id", None) == "mma") and len(n.args) >= 2), None) if stmt is not None else None
    if call is None:
        return "mma"
    product = f"{_operand(call.args[0])}·{_operand(call.args[1])}"
    target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
    name = ast.unparse(target) if target is not None and not isinstance(target, ast.Tuple) else ""
    return f"{name}={product}" if name and len(name) <= 8 else product


def wait_label(op_text: str, barriers: dict | None = None) -> str:
    """What a blocked group waits on, from the wait's op text: a channel's data (`kc`), a free slot of it, its
    MMAs retiring, or a named barrier (its purpose: a tensor-core turn)."""
    m = re.search(r"%([\w.]+?)\.(full|empty)\[", op_text)
    if m:
        return f"waits {m.group(1)}" if m.group(2) == "full" else f"waits free {m.group(1)} slot"
    if "mma_wait" in op_text:
        return "waits its MMAs"
    m = re.search(r"named_barrier_sync id=(\d+)", op_text)
    if m:
        purpose = (barriers or {}).get(int(m.group(1)), "")
        return "waits TC turn" if "turn" in purpose else f"waits barrier {m.group(1)}"
    return "waits"


def steady_window(report, iterations: int = 2) -> tuple[float, float, list[float]]:
    """(start, end, iteration boundaries) of `iterations` steady-state iterations from the middle of the run,
    on the slowest group's loop."""
    cpi = max(1.0, float(report.cycles_per_iter or 1.0))
    starts = []
    for name, per in sorted(report.group_cycles_per_iter.items(), key=lambda kv: -kv[1]):
        starts = report.iteration_starts.get(name) or []
        if len(starts) > iterations + 1:
            break
    if len(starts) > iterations + 1:
        i = max(0, min(len(starts) // 2, len(starts) - 1 - iterations))
        t0 = float(starts[i])
    else:
        t0 = report.total_cycles / 2 - cpi
    return t0, t0 + iterations * cpi, [t0 + k * cpi for k in range(iterations + 1)]


def _clip(a, b, lo, hi):
    return max(a, lo), min(b, hi)


def draw(panels: list[Panel], path: str, title: str, iterations: int = 2) -> None:
    """Write the stacked Gantt chart of `panels` to `path` (PNG or SVG by its extension)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    used = {e.unit for p in panels for e in p.report.timeline}
    units = [(u, label) for u, label in UNIT_LANES if u in used]
    windows = [steady_window(p.report, iterations) for p in panels]
    span = max(w[1] - w[0] for w in windows)
    lanes_per = [len(p.groups) + len(units) for p in panels]
    fig_h = 1.3 + sum(0.34 * n + 0.9 for n in lanes_per)
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, fig_h), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": lanes_per})
    for ax, panel, (t0, t1, bounds) in zip(axes[:, 0], panels, windows):
        _draw_panel(ax, panel, t0, t1, bounds, span, units)
    axes[-1, 0].set_xlabel("cycles from the start of a steady-state iteration (timing model of one SM)")
    handles = [Patch(facecolor=c, edgecolor="#555555", label=lbl, hatch="///" if k == "wait" else None)
               for k, (lbl, c) in KINDS.items()]
    fig.legend(handles=handles, loc="upper center", ncol=4, fontsize=8.5, frameon=False,
               bbox_to_anchor=(0.5, 1.0 - 0.02 * 6 / fig_h))
    fig.suptitle(title, fontsize=12, fontweight="bold", y=1.0 - 0.004 * 6 / fig_h)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.62 / fig_h))
    from aref.viz import save
    save(fig, path)


def panel_bars(panel: Panel, t0: float, t1: float, units) -> list[Bar]:
    """The bars of `panel`'s window [t0, t1): each group's work (an asynchronous op as its issue), blocked
    time labelled with what it waits on, and each unit's busy time; tensor-core bars say which MMA (from its
    source line) and which group issued it."""
    report = panel.report
    groups = {name for name, _ in panel.groups}
    lanes = groups | {f"unit:{u}" for u, _ in units}
    bars: list[Bar] = []
    for e in report.timeline:
        if e.end <= t0 or e.start >= t1:
            continue
        kind = e.unit if e.unit in KINDS else "issue"
        if e.unit == "tc":
            what = mma_label(getattr(e, "file", ""), e.line)
            labels = (f"{what} (l.{e.line}) {e.group}", f"{what} {e.group}", what)
        else:
            labels = (op_label(e.op),)
        if e.unit in ("tc", "tma"):
            # asynchronous: the group only issues it; the unit lane shows the work
            if e.issued >= 0 and t0 <= e.issued < t1 and e.group in groups:
                bars.append(Bar(e.group, e.issued - t0, 16, kind))
            a, b = _clip(e.start, e.start + (e.busy or (e.end - e.start)), t0, t1)
            if b > a and f"unit:{e.unit}" in lanes:
                bars.append(Bar(f"unit:{e.unit}", a - t0, b - a, kind, labels))
            continue
        a, b = _clip(e.start, e.end, t0, t1)
        if e.group in groups:
            if kind == "wait":
                bars.append(Bar(e.group, a - t0, b - a, "wait", (wait_label(e.op, panel.barriers),)))
            else:
                bars.append(Bar(e.group, a - t0, b - a, kind, labels if kind != "issue" else ()))
        if f"unit:{e.unit}" in lanes:
            a, b = _clip(e.start, e.start + (e.busy or (e.end - e.start)), t0, t1)
            if b > a:
                bars.append(Bar(f"unit:{e.unit}", a - t0, b - a, kind, labels))
    return bars


def _draw_panel(ax, panel: Panel, t0: float, t1: float, bounds: list[float], span: float, units) -> None:
    report = panel.report
    lanes = [(name, label) for name, label in panel.groups] + [(f"unit:{u}", lbl) for u, lbl in units]
    row = {name: len(lanes) - 1 - i for i, (name, _) in enumerate(lanes)}
    cycles_per_char = span / 210                    # the axes hold about 210 characters of 7-point text
    for bar in panel_bars(panel, t0, t1, units):
        label = next((t for t in bar.labels if (len(t) + 2) * cycles_per_char <= bar.width), "")
        if bar.kind == "wait":
            ax.broken_barh([(bar.x, bar.width)], (row[bar.lane] - 0.38, 0.76), facecolors=KINDS["wait"][1],
                           edgecolors="#9a9a9a", hatch="///", linewidth=0.3)
            if label:
                ax.text(bar.x + bar.width / 2, row[bar.lane], label, ha="center", va="center", fontsize=6.5,
                        color="#333333", clip_on=True,
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"})
        else:
            _bar(ax, row[bar.lane], bar.x, bar.width, KINDS[bar.kind][1], label)
    for k, x in enumerate(bounds):
        ax.axvline(x - t0, color="#444444", linestyle="--", linewidth=0.9)
        if k < len(bounds) - 1:
            ax.text(x - t0 + 6, len(lanes) - 0.35, f"iteration {k + 1}", fontsize=7.5, color="#444444",
                    va="bottom")
    cpi = report.cycles_per_iter
    if panel.ii:
        y = len(lanes) - 0.05
        ax.annotate("", xy=(panel.ii, y + 0.45), xytext=(0, y + 0.45),
                    arrowprops={"arrowstyle": "<->", "color": "#c0392b", "lw": 1.4})
        ax.text(panel.ii / 2, y + 0.6, f"solver II = {panel.ii:.0f}", color="#c0392b", fontsize=8.5,
                ha="center", va="bottom", fontweight="bold")
    ax.set_yticks([row[name] for name, _ in lanes])
    ax.set_yticklabels([label for _, label in lanes], fontsize=8.5)
    for tick, (name, _) in zip(ax.get_yticklabels(), lanes):
        tick.set_fontweight("normal" if name.startswith("unit:") else "bold")
    ax.axhline(len(units) - 0.5, color="#888888", linewidth=0.8)
    ax.set_ylim(-0.6, len(lanes) + (1.1 if panel.ii else 0.5))
    ax.set_xlim(0, span * 1.01)
    ax.set_title(f"{panel.title}: {cpi:.0f} cycles per iteration", loc="left", fontsize=10.5,
                 fontweight="bold")
    ax.grid(axis="x", color="#e6e6e6", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _bar(ax, y, x, w, colour, label):
    ax.broken_barh([(x, w)], (y - 0.38, 0.76), facecolors=colour, edgecolors="white", linewidth=0.4)
    if label:
        ax.text(x + w / 2, y, label, ha="center", va="center", fontsize=7,
                color="white" if colour in ("#3b6fb6", "#4daf4a", "#9c6ade") else "#222222", clip_on=True)
