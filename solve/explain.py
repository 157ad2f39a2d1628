"""Why an II (or a range of IIs) has no schedule: a small set of constraint families.

Every family of the joint model is guarded by an assumption literal.  CP-SAT names a sufficient
subset of assumptions when the model is infeasible; we then drop families (in halving chunks, then
one at a time) while the rest stays infeasible, which leaves an irreducible set: no family can be
removed.  Dependences are never guarded: they are the program itself.  The model used here allows
two more warp groups than the machine, so that "number of warp groups" can show up as a reason.
"""

from __future__ import annotations

from dataclasses import dataclass
import time

from . import joint
from .cpsat import run
from .graph import Graph


@dataclass
class Explanation:
    """Irreducible infeasible set of families (ids and sentences); ``complete`` if not cut short."""

    families: list[str]
    reasons: list[str]
    complete: bool


def describe(family: str, graph: Graph, stages: int) -> str:
    """One sentence for a family id."""
    mach = graph.machine
    kind, _, arg = family.partition(":")
    if kind == "unit":
        users = [n for n, op in graph.ops.items() if arg in op.usage]
        return (f"capacity of unit {arg!r} ({graph.units[arg]} instance(s)) shared by "
                f"{', '.join(users)}")
    if kind == "memory":
        reserved = graph.reserved_memory()[arg]
        held = f", {reserved} held by streaming buffers" if reserved else ""
        return f"{arg} capacity ({mach.memory[arg]}{held})"
    if family == joint.SM_REGISTERS:
        return (f"register file per SM ({mach.registers_per_sm} registers, "
                f"{mach.threads_per_group} threads per group)")
    if kind == "registers":
        return (f"registers of warp group {arg[1:]} (at most {mach.group_register_cap} per thread, "
                f"{mach.base_registers} reserved)")
    if family == joint.GROUPS:
        return f"number of warp groups (at most {mach.max_groups})"
    if kind == "blocking":
        return f"blocking sync on op {arg}: it cannot start while another op of its group is in flight"
    if family == joint.TRANSFER_COST:
        costs = {n: op.transfer_cost for n, op in graph.ops.items() if op.transfer_cost}
        return f"cross-group transfer cost (through shared memory: {costs})"
    if family == joint.NO_TRANSFER:
        return "cross-group transfers are forbidden (register values cannot change warp group)"
    if family == joint.GROUP_OCCUPANCY:
        busy = {n: op.issue + op.stream for n, op in graph.ops.items() if op.issue or op.stream}
        return (f"group occupancy: a warp group is one instruction stream, so its ops (issue cycles "
                f"{busy}) and the hand-offs between groups it does must fit in II")
    if family == joint.VARIABLE_LATENCY:
        return "variable-latency ops need a warp group of their own"
    if family == joint.STAGES:
        return f"schedule length of at most {stages} stage(s) (Algorithm 1's stage bound)"
    return family


def explain(graph: Graph, ii: int, stages: int, *, warp: bool = True, time_limit: float = 10.0,
            symmetry: bool = True, record: list | None = None) -> Explanation:
    """Explain why ``graph`` has no schedule at ``ii`` within ``stages`` stages.

    Raises ``ValueError`` when a schedule does exist.  ``record``: a list the CP-SAT calls are appended to
    (:class:`SolveCall`, step ``"explain"``).
    """
    from .result import SolveCall

    def solved(model, limit, **kw):
        outcome = run(model, limit, strong=False, **kw)
        if record is not None:
            record.append(SolveCall("explain", ii, outcome.status, outcome.seconds))
        return outcome

    deadline = time.perf_counter() + time_limit
    groups = min(len(graph.ops), graph.machine.max_groups + 2)
    jm = joint.JointModel(graph, ii, stages, warp=warp, groups=groups, guarded=True, symmetry=symmetry)
    by_index = {lit.index: fam for fam, lit in jm.guards.items()}

    def left() -> float:
        return deadline - time.perf_counter()

    def core_of(families: list[str]) -> tuple[bool | None, list[str]]:
        """Solve with every family on as assumptions; CP-SAT names a sufficient subset."""
        jm.model.clear_assumptions()
        jm.model.add_assumptions([jm.guards[f] for f in families])
        outcome = solved(jm.model, left(), core=True)
        jm.model.clear_assumptions()
        if outcome.status == "infeasible":
            core = {by_index[i] for i in outcome.solver.sufficient_assumptions_for_infeasibility()
                    if i in by_index}
            return True, [f for f in families if f in core] or families
        return (False if outcome.has_solution else None), families

    def infeasible_with(families: list[str]) -> bool | None:
        """Whether the model with exactly ``families`` switched on is infeasible (None: unknown).

        Fixing the guards (rather than assuming them) lets presolve drop whole families.
        """
        if left() <= 0:
            return None
        trial = jm.model.clone()
        for fam, lit in jm.guards.items():
            trial.add(lit == int(fam in families))
        # the last schedule found with fewer families on is where the next search starts: dropping families
        # one chunk at a time, most trials have a schedule close to it
        for var, value in hint.items():
            trial.add_hint(var, value)
        outcome = solved(trial, left())
        if outcome.status == "infeasible":
            return True
        if outcome.has_solution:
            hint.clear()
            hint.update({v: outcome.value(v) for v in decisions})
            return False
        return None

    decisions = list(jm.start.values()) + [x for row in getattr(jm, "x", {}).values() for x in row]
    hint: dict = {}

    every = sorted(jm.guards)
    verdict, core = core_of(every)
    if verdict is False:
        raise ValueError(f"II {ii} admits a schedule within {stages} stage(s): nothing to explain")
    if verdict is None:
        return Explanation([], ["no explanation within the time limit"], False)
    # Drop chunks of families while the rest stays infeasible, halving the chunk size down to one
    # family: few solves when most families are irrelevant, and irreducible at the end.
    complete = True
    size = max(1, len(core) // 2)
    while True:
        i = 0
        while i < len(core):
            trial = core[:i] + core[i + size:]
            verdict = infeasible_with(trial)
            if verdict:
                core = trial
            else:
                complete = complete and verdict is not None
                i += size
        if size == 1:
            break
        size = max(1, size // 2)
    if not core:
        return Explanation([], ["the dependences alone admit no schedule in this horizon"], complete)
    return Explanation(core, [describe(f, graph, stages) for f in core], complete)
