"""Options, progress events and the result type of :func:`solve.solve`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

OPTIMAL = "optimal"
FEASIBLE_TIMEOUT = "feasible-timeout"
INFEASIBLE = "infeasible"
TIMEOUT = "timeout"

INTERVAL = "interval"
TIME_INDEXED = "time-indexed"


@dataclass
class Progress:
    """One step of the search, for progress displays.

    ``kind`` is one of ``"bounds"``, ``"try"`` (an II or II range is being solved), ``"infeasible"``,
    ``"feasible"``, ``"refine"`` (secondary objective at the optimal II), ``"timeout"``, ``"done"``.
    """

    kind: str
    ii: int | None
    lower_bound: int
    elapsed: float
    detail: str = ""
    ii_max: int | None = None


@dataclass
class SolveOptions:
    """Knobs of the search.

    ``objectives`` are minimized lexicographically, in the given order, at the optimal II (drop a
    name to switch it off): ``length`` (Algorithm 1 returns the shortest schedule), ``mma_waits``
    (blocking waits in warp groups that issue ops on ``mma_units``: such a wait stalls the unit the
    loop is bound by), ``channels`` (cross-group channels, one per value and consuming group),
    ``groups`` (warp groups used), ``registers`` (peak live registers per thread of any group).
    ``mma_units=None`` means the ``"tc"`` unit plus every unit as busy as the ResMII-binding one.

    ``extra_stages`` widens Algorithm 1's stage bound ``L <= stages * II``, where stages is
    ``ceil(L_min / II)`` of the shortest plain modulo schedule at the first II that has one, plus
    ``extra_stages``.  Zero is the paper's search; the default 1 leaves room for the extra
    prologue stage that warp specialization often needs (FA3 hoists a GEMM), which the shortest
    plain schedule need not have.

    ``time_limit`` bounds the whole search (seconds).  CP-SAT runs ``workers`` threads; one is
    deterministic and, on small models, as fast as a portfolio.  With more, ``deterministic``
    interleaves them reproducibly (slower).  ``explain`` adds the reasons of infeasible IIs (with ``explain_found``
    False only where no schedule is found: the IIs below a schedule are then proven, not explained);
    ``normalize_budget`` is the paper's U for the time-indexed encoding; ``max_ii`` caps the search.
    """

    encoding: str = INTERVAL
    time_limit: float = 60.0
    workers: int = 1
    deterministic: bool = True
    extra_stages: int = 1
    max_ii: int | None = None
    objectives: tuple[str, ...] = ("length", "mma_waits", "channels", "groups", "registers")
    mma_units: tuple[str, ...] | None = None
    symmetry_breaking: bool = True
    explain: bool = True
    explain_found: bool = True
    normalize_budget: int = 300
    progress: Callable[[Progress], None] | None = None


@dataclass
class SolveCall:
    """One CP-SAT call of a search, for profiles: ``step`` is ``"plain"`` (the modulo schedule without warp
    groups), ``"joint"`` (a schedule at ``ii``, first found), ``"objectives"`` (the secondary objectives
    minimized at ``ii``), ``"explain"`` (why ``ii`` fails) or ``"remembered"`` (no call: the answer of an earlier
    solve of the same question, `solve.memo`); ``status`` is CP-SAT's (optimal / feasible / infeasible /
    unknown)."""

    step: str
    ii: int
    status: str
    seconds: float
    encoding: str = INTERVAL
    label: str = ""         # the caller's name for the graph solved (e.g. which of a compiler's candidates)

    def to_json(self) -> dict[str, Any]:
        out = {"step": self.step, "encoding": self.encoding, "ii": self.ii, "status": self.status,
               "seconds": round(self.seconds, 4)}
        if self.label:
            out["label"] = self.label
        return out


@dataclass
class Infeasibility:
    """Why the IIs ``ii..ii_max`` admit no schedule.  ``families`` are machine-readable ids."""

    ii: int
    ii_max: int
    reasons: list[str]
    families: list[str]
    proven: bool = True
    stages: int | None = None      # the stage bound the proof holds within (to explain it later)
    warp: bool = True              # False: proven for the plain modulo schedule (no warp groups)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Schedule:
    """The answer of the II search.

    ``schedule[op]`` is the start cycle of the op in iteration 0 (``stage * ii + residue``),
    ``assignment[op]`` its warp group.  ``proven_optimal`` holds only when every smaller II (down to
    ``lower_bound``) was proven infeasible within the stage bound; otherwise ``gap`` says how many
    IIs below ``ii`` remain unproven.
    """

    status: str
    ii: int | None
    lower_bound: int
    res_mii: int
    rec_mii: int
    proven_optimal: bool
    solve_seconds: float
    encoding: str
    length: int | None = None
    stages: int | None = None
    stage_bound: int | None = None
    assignment: dict[str, int] = field(default_factory=dict)
    schedule: dict[str, int] = field(default_factory=dict)
    stage: dict[str, int] = field(default_factory=dict)
    registers: dict[int, int] = field(default_factory=dict)
    infeasible: list[Infeasibility] = field(default_factory=list)
    bound_reasons: list[str] = field(default_factory=list)
    objectives: dict[str, int] = field(default_factory=dict)
    objectives_proven: bool = False
    gap: int | None = None
    message: str = ""
    normalization: dict[str, Any] | None = None
    profile: list[SolveCall] = field(default_factory=list)

    @property
    def proven_bound(self) -> int:
        """A lower bound no schedule of the model beats: the smallest II at or above ``lower_bound`` not
        proven infeasible (the II itself where it is proven optimal)."""
        bound = self.lower_bound
        for inf in sorted(self.infeasible, key=lambda i: i.ii):
            if inf.proven and inf.ii <= bound <= inf.ii_max:
                bound = inf.ii_max + 1
        return bound

    @property
    def groups(self) -> dict[int, list[str]]:
        """Ops of each warp group, groups in index order."""
        out: dict[int, list[str]] = {}
        for op, g in sorted(self.assignment.items(), key=lambda kv: (kv[1], self.schedule.get(kv[0], 0))):
            out.setdefault(g, []).append(op)
        return out

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["infeasible"] = [i.to_json() for i in self.infeasible]
        data["profile"] = [c.to_json() for c in self.profile]
        data["registers"] = {str(k): v for k, v in self.registers.items()}
        return data
