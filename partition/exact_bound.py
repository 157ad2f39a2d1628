"""The solver's lower bound on the initiation interval in the timing model's cycles.

The solver works on a graph whose cycle costs are rounded up to whole quanta (`partition.optimal.CYCLE_QUANTUM`,
16 cycles): its II and the lower bound it proves are exact on that grid, and a schedule of the rounded graph is
valid for the exact one — but the grid's bound is not a bound on the exact costs. A copy engine busy 443 cycles
per copy (16 KiB at the calibrated 37 B/clk) counts 448 on the grid, so gemm's II is proven optimal at 896 while
its program runs at ~886 cycles per iteration in the timing model (`aref.sim.timing`), which charges each op its
exact cost. `exact_bounds` states the same graph at a quantum of one cycle and computes its bounds (ResMII, RecMII
and the warp groups' instruction streams, `solve.compute_bounds`): the smallest II any schedule of the exact costs
can have. `units` is its unit-throughput part alone (ResMII: each unit's work per iteration), which no program
doing the loop's work beats whatever its latencies; the rest rests on the graph's latencies, which on Blackwell
plan a ring's copies at a late quantile (`Machine.ring_latency`) and its commits and hand-offs at ASSUMPTION
figures, where the timing model draws each copy's latency — there a program may run below the recurrence part.
`tests/test_model_figures.py` holds the timing model's programs to these bounds.
"""
from __future__ import annotations

from dataclasses import dataclass

import solve as S
from partition.optimal import CYCLE_QUANTUM, extract_graph


@dataclass(frozen=True)
class ExactBound:
    """The lower bound of a kernel's loop in exact cycles (`cycles`), the solver's grid (`quantum`), and
    the reasons that bind it (`reasons`: ResMII's unit, RecMII's recurrence, the groups' streams)."""

    cycles: int
    units: int
    quantum: int
    reasons: tuple[str, ...]

    def to_json(self) -> dict:
        return {"cycles": self.cycles, "units": self.units, "quantum": self.quantum, "reasons": list(self.reasons)}


def exact_bounds(kernel, options) -> ExactBound:
    """The lower bound of `kernel`'s loop (the kernel the solver scheduled: `solve_partition`'s) on
    `options.arch`, from the graph the solver solves with `options` (its `CompileOptions`) at a one-cycle
    quantum. Raises `aref.errors.SolverError` as `extract_graph` does (no loop, nothing to schedule)."""
    ex = extract_graph(kernel, options.arch, quantum=1, register_cap=options.solver_register_cap,
                       allow_transfers=options.solver_transfers, operands=options.solver_operands,
                       detached_stores=options.solver_detached_stores, group_order=options.solver_group_order,
                       **({"reservations": False} if options.solver_occupancy_free else {}))
    bounds = S.compute_bounds(ex.graph)
    return ExactBound(bounds.lower_bound, bounds.res_mii, CYCLE_QUANTUM, tuple(bounds.reasons(ex.graph)))
