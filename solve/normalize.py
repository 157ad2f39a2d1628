"""Cost normalization (Twill section 5.2): shrink cycle counts while keeping their ratios.

Given distinct costs ``C``, find integers ``C'`` minimizing ``F`` subject to
``-F <= C[i] * C'[j] - C[j] * C'[i] <= F`` for all pairs and ``1 <= sum(C') <= U``.
Only the time-indexed encoding needs it: the interval model works on exact cycles.
Deviation from the paper: every positive cost keeps at least one unit (``C'[i] >= 1``), so an op
never becomes free; ties on ``F`` are broken towards the smallest ``sum(C')``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ortools.sat.python import cp_model

from .graph import Graph


@dataclass
class Normalization:
    """Mapping from original to normalized costs and how faithful it is."""

    mapping: dict[int, int]
    error: int  # the optimal F
    budget: int  # U

    @property
    def exact(self) -> bool:
        return self.error == 0

    @property
    def scale(self) -> Fraction:
        """Original cycles per normalized unit (exact when ``error == 0``)."""
        if not self.mapping:
            return Fraction(1)
        return Fraction(sum(self.mapping), sum(self.mapping.values()))

    def to_json(self) -> dict:
        return {"mapping": {str(k): v for k, v in sorted(self.mapping.items())}, "error": self.error,
                "budget": self.budget, "scale": str(self.scale)}


def normalize_costs(costs: list[int], budget: int = 300, time_limit: float = 10.0) -> Normalization:
    """Solve the normalization program for the distinct positive values of ``costs``."""
    values = sorted({c for c in costs if c > 0})
    if not values:
        return Normalization({}, 0, budget)
    if len(values) > budget:
        raise ValueError(f"{len(values)} distinct costs cannot fit a normalization budget U={budget}")
    if sum(values) <= budget:
        return Normalization({c: c for c in values}, 0, budget)  # identity is optimal (F = 0)
    model = cp_model.CpModel()
    top = max(values)
    new = [model.new_int_var(1, budget, f"c{c}") for c in values]
    f_var = model.new_int_var(0, top * budget, "F")
    for i, ci in enumerate(values):
        for j in range(i + 1, len(values)):
            cj = values[j]
            diff = ci * new[j] - cj * new[i]
            model.add(diff <= f_var)
            model.add(diff >= -f_var)
    model.add(sum(new) <= budget)
    # Ratios are preserved when larger costs stay larger; this prunes symmetric search.
    for a, b in zip(new, new[1:]):
        model.add(a <= b)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    model.minimize(f_var)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"cost normalization failed: {solver.status_name(status)}")
    best_f = int(solver.value(f_var))
    model.add(f_var <= best_f)
    model.minimize(sum(new))
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"cost normalization failed: {solver.status_name(status)}")
    return Normalization({c: int(solver.value(v)) for c, v in zip(values, new)}, best_f, budget)


def normalize_graph(graph: Graph, budget: int = 300) -> tuple[Graph, Normalization]:
    """A copy of ``graph`` with normalized cycle counts, and the normalization used."""
    norm = normalize_costs(graph.cycle_costs(), budget)
    return graph.scaled(norm.mapping), norm
