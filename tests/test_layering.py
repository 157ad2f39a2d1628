"""The package layering (issue 26): no import cycle between the modules of aref/, partition/, pipeline/ and
solve/, and the import-linter contracts of pyproject.toml (the layers from the command line down to the IR,
the solver apart, the partitioner and pipeliner imported only from the compiler driver up) hold.

Function-level (lazy) imports count: grimp records every import statement, wherever it is.
"""
from __future__ import annotations

import os

import grimp
import networkx as nx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("aref", "partition", "pipeline", "solve")


def build_graph():
    return grimp.build_graph(*PACKAGES, include_external_packages=False, cache_dir=None)


def import_cycles(graph) -> list[list[str]]:
    """One cycle (as `a -> b (line) -> ... -> a` steps) per strongly connected set of modules."""
    g = nx.DiGraph()
    for m in graph.modules:
        g.add_node(m)
        g.add_edges_from((m, t) for t in graph.find_modules_directly_imported_by(m))
    cycles = []
    for scc in nx.strongly_connected_components(g):
        if len(scc) < 2:
            continue
        steps = []
        for a, b in nx.find_cycle(g.subgraph(scc)):
            lines = sorted({d["line_number"] for d in graph.get_import_details(importer=a, imported=b)})
            steps.append(f"{a} -> {b} (line {', '.join(map(str, lines))})")
        cycles.append(steps)
    return sorted(cycles)


def test_no_import_cycle():
    cycles = import_cycles(build_graph())
    assert not cycles, "import cycles:\n" + "\n\n".join("\n".join(c) for c in cycles)


def test_a_planted_cycle_is_found():
    """The check above can fail: a lazy import of the surface language from the IR closes a cycle."""
    graph = build_graph()
    graph.add_import(importer="aref.ir", imported="aref.lang.tiles", line_number=1, line_contents="import")
    cycles = import_cycles(graph)
    assert len(cycles) == 1 and any(step.startswith("aref.ir -> aref.lang.tiles") for step in cycles[0])


def test_import_linter_contracts_hold(capsys):
    from importlinter.cli import lint_imports
    code = lint_imports(config_filename=os.path.join(ROOT, "pyproject.toml"), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert code == 0, report
    assert "3 kept, 0 broken" in report
