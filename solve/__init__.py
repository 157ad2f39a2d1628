"""Optimal joint software pipelining + warp specialization (Twill), standalone.

Owns the dependence-graph type, ResMII/RecMII bounds, cost normalization, the joint CP-SAT model,
the paper-literal time-indexed model, the II search (Algorithm 1) and infeasibility explanations.
Imports nothing else of the project: a graph goes in, a schedule comes out.
"""

from __future__ import annotations

from .bounds import Bounds, RecurrenceError, compute_bounds, rec_mii, res_mii
from .check import Report, check
from .graph import REGISTERS, Edge, Graph, GraphError, Machine, Op, round_up_to_quantum
from .normalize import Normalization, normalize_costs, normalize_graph
from .result import (FEASIBLE_TIMEOUT, INFEASIBLE, INTERVAL, OPTIMAL, TIME_INDEXED, TIMEOUT,
                     Infeasibility, Progress, Schedule, SolveCall, SolveOptions)

__all__ = ["Bounds", "Edge", "Graph", "GraphError", "Infeasibility", "Machine", "Normalization", "Op",
           "Progress", "REGISTERS", "RecurrenceError", "Report", "Schedule", "SolveCall", "SolveOptions", "check",
           "compute_bounds", "explain_infeasible", "normalize_costs", "normalize_graph", "rec_mii", "res_mii",
           "round_up_to_quantum", "solve",
           "OPTIMAL", "FEASIBLE_TIMEOUT", "INFEASIBLE", "TIMEOUT", "INTERVAL", "TIME_INDEXED"]


def explain_infeasible(graph: Graph, result: Schedule, time_limit: float = 10.0, symmetry: bool = True) -> Schedule:
    """``result`` (of ``solve(graph, ...)`` with ``explain=False``) with the reasons of its proven infeasible
    ranges filled in, each explained within ``time_limit`` seconds."""
    from .search import explain_infeasible as explain_ranges
    return explain_ranges(graph, result, time_limit, symmetry)


def solve(graph: Graph, options: SolveOptions | None = None, **overrides) -> Schedule:
    """Find the smallest II with a joint modulo schedule and warp assignment for ``graph``.

    ``options`` (or keyword overrides of its fields) pick the encoding ("interval", exact cycles,
    the default; or "time-indexed", the paper-literal model on normalized costs), the time limit and
    the secondary objectives.  Raises :class:`GraphError` for a malformed graph; an impossible
    schedule or a time-out is reported in the result's ``status``, never by hanging.
    """
    opts = options if options is not None else SolveOptions()
    if overrides:
        from dataclasses import replace
        opts = replace(opts, **overrides)
    if opts.encoding == INTERVAL:
        from .search import search_interval
        return search_interval(graph, opts)
    if opts.encoding == TIME_INDEXED:
        from .literal import search_time_indexed
        return search_time_indexed(graph, opts)
    raise ValueError(f"unknown encoding {opts.encoding!r} (use {INTERVAL!r} or {TIME_INDEXED!r})")
