"""The loop's dependence graph (the one the solver schedules) coloured by warp group, as in the Twill
paper's figure of the FA3 / FA4 partitions: one panel per partition (the heuristic's, when it places the same
ops, beside the solver's), nodes labelled with their unit and cycles, loop-carried edges dashed. The same
graph is written as Graphviz DOT text beside the picture.
"""
from __future__ import annotations

import os

PALETTE = ("#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5", "#d9d9d9")


def layers(graph) -> dict[str, int]:
    """Longest-path layer of every op over the iteration-local (distance 0) data edges."""
    layer = dict.fromkeys(graph.ops, 0)
    edges = [e for e in graph.edges if e.distance == 0 and e.data]
    for _ in range(len(graph.ops)):
        changed = False
        for e in edges:
            if layer[e.dst] < layer[e.src] + 1:
                layer[e.dst] = layer[e.src] + 1
                changed = True
        if not changed:
            break
    return layer


def positions(graph) -> dict[str, tuple[float, float]]:
    """Left-to-right layers; within a layer, ops in graph order, centred."""
    layer = layers(graph)
    by_layer: dict[int, list[str]] = {}
    for n in graph.ops:
        by_layer.setdefault(layer[n], []).append(n)
    pos = {}
    for x, names in by_layer.items():
        for i, n in enumerate(names):
            pos[n] = (float(x), (len(names) - 1) / 2 - i)
    return pos


def node_text(graph, name: str, schedule: dict | None = None, lines: dict | None = None) -> str:
    """`name (line N)`, its units and cycles, and its start cycle in the schedule if given."""
    op = graph.ops[name]
    units = "\n".join(f"{u} {c}" for u, c in op.usage.items())
    where = f" (line {lines[name]})" if lines and name in lines else ""
    at = f"\nstarts @{schedule[name]}" if schedule and name in schedule else ""
    return f"{name}{where}\n{units}{at}"


def to_dot(graph, groups: dict[str, str], schedule: dict | None = None, lines: dict | None = None) -> str:
    """Graphviz DOT of `graph`, nodes filled by their group in `groups` (node -> group label)."""
    colour = {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(dict.fromkeys(groups.values()))}
    out = [f'digraph "{graph.name or "loop"}" {{', "  rankdir=LR;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica"];']
    for g, c in colour.items():
        members = [n for n in graph.ops if groups.get(n) == g]
        out.append(f'  subgraph "cluster_{g}" {{ label="{g}"; style=dashed; color="#999999";')
        for n in members:
            label = node_text(graph, n, schedule, lines).replace("\n", "\\n")
            out.append(f'    "{n}" [label="{label}", fillcolor="{c}"];')
        out.append("  }")
    for n in graph.ops:
        if n not in groups:
            out.append(f'  "{n}" [label="{node_text(graph, n, schedule, lines)}"];'.replace("\n", "\\n"))
    for e in graph.edges:
        attrs = [f'label="{e.delay}' + (f", δ={e.distance}" if e.distance else "") + '"']
        if e.distance:
            attrs.append("style=dashed")
        if not e.data:
            attrs.append('style=dotted, color="#888888"')
        out.append(f'  "{e.src}" -> "{e.dst}" [{", ".join(attrs)}];')
    out.append("}")
    return "\n".join(out) + "\n"


def draw(graph, panels: list[tuple[str, dict[str, str], dict | None]], path: str, title: str,
         lines: dict | None = None) -> str:
    """Write the picture of `graph` to `path` with one panel per (title, node -> group label, schedule),
    stacked, and the DOT text of the last panel's colouring to `path` with the suffix `.dot`; returns the DOT
    path. `lines` gives each node's source line for its label."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, Patch

    pos = positions(graph)
    width = max(x for x, _ in pos.values()) + 1
    height = max(abs(y) for _, y in pos.values()) * 2 + 1
    widest = max(len(line) for n in graph.ops for line in node_text(graph, n, {n: 0}, lines).splitlines())
    tallest = max(len(node_text(graph, n, {n: 0}, lines).splitlines()) for n in graph.ops)
    fig, axes = plt.subplots(len(panels), 1, squeeze=False,
                             figsize=(max(8.0, 0.105 * widest * width) + 2.5,
                                      (0.2 * tallest * height + 1.2) * len(panels)))
    for ax, (panel_title, groups, schedule) in zip(axes[:, 0], panels):
        colour = {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(dict.fromkeys(groups.values()))}
        for e in graph.edges:
            (x0, y0), (x1, y1) = pos[e.src], pos[e.dst]
            back = e.distance > 0 or x1 <= x0
            style = "dotted" if not e.data else ("dashed" if e.distance else "solid")
            arrow = FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=12,
                                    connectionstyle=f"arc3,rad={0.35 if back else 0.0}", linestyle=style,
                                    color="#c0392b" if e.distance and e.data else "#555555", lw=1.0,
                                    shrinkA=34, shrinkB=34, zorder=1)
            ax.add_patch(arrow)
        for n, (x, y) in pos.items():
            g = groups.get(n)
            ax.text(x, y, node_text(graph, n, schedule, lines), ha="center", va="center", fontsize=7.5, zorder=2,
                    bbox={"boxstyle": "round,pad=0.45", "facecolor": colour.get(g, "#ffffff"),
                          "edgecolor": "#444444", "linewidth": 0.8})
        ax.set_xlim(-0.7, width - 0.3)
        ax.set_ylim(-height / 2 - 0.2, height / 2 + 0.2)
        ax.axis("off")
        ax.set_title(panel_title, fontsize=11, fontweight="bold")
        handles = [Patch(facecolor=c, edgecolor="#444444", label=g) for g, c in colour.items()]
        handles += [Line2D([], [], color="#c0392b", linestyle="dashed", label="value carried to the next iteration"),
                    Line2D([], [], color="#555555", linestyle="dotted", label="slot reuse (ring depth)")]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False,
                  title="warp groups", title_fontsize=8.5)
    fig.suptitle(title, fontsize=12, fontweight="bold")
    fig.tight_layout()
    from aref.viz import save
    save(fig, path)
    dot_path = os.path.splitext(path)[0] + ".dot"
    with open(dot_path, "w") as f:
        f.write(to_dot(graph, panels[-1][1], panels[-1][2], lines))
    return dot_path
