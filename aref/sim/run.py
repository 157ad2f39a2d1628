"""Schedulers over the engine: seeded random interleavings (`simulate`), exhaustive search (`explore`) and
the comparison against a reference (`check`)."""
from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass, field

import torch

from aref.outputs import compare
from aref.sim.checks import _violation, check_finished, diagnose_stuck
from aref.sim.engine import COMMIT, GROUP, MMA, TMA, Engine
from aref.sim.launch import Launch
from aref.sim.program import LaunchError, Prog
from aref.sim.reduction import Footprints, persistent_set
from aref.sim.resources import check_resources
from aref.sim.schedules import persistent_sizes, protocol_runs, protocol_sizes
from aref.sim.schedules import run_random as _run_random
from aref.sim.values import SimViolation

DEADLOCK_KINDS = ("deadlock", "wait-never-completes", "register-budget")


@dataclass
class SimResult:
    """Outcome of one `simulate` call (every CTA under one seeded interleaving)."""

    ok: bool
    violations: list = field(default_factory=list)
    steps: int = 0
    ctas: int = 0
    deadlocked: bool = False
    seconds: float = 0.0


@dataclass
class ExploreResult:
    """Outcome of `explore`: distinct control states visited, whether the search covered every reachable
    state (`completed`) or stopped at `max_states`, and the number of complete schedules the visited state
    graph contains (`interleavings`; a lower bound when not completed)."""

    completed: bool
    states: int
    interleavings: int
    violations: list = field(default_factory=list)
    ctas: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations


def _ctas(kernel, cta=None, launch: Launch | None = None) -> list[tuple]:
    if cta is not None:
        return [tuple(cta)]
    return (launch or Launch()).ctas_of(kernel.grid)


def _check_tensors(kernel, tensors, need_all: bool) -> None:
    for p in kernel.params:
        t = tensors.get(p.name)
        if t is None:
            if need_all:
                raise ValueError(f"no tensor for parameter {p.name}")
            continue
        if tuple(t.shape) != p.value.type.shape or t.device.type != "cpu":
            raise ValueError(f"argument {p.name} does not match the specialization {p.value.type} on the CPU")


def _terminal(eng: Engine, st) -> SimViolation | None:
    return check_finished(eng, st) if eng.finished(st) else diagnose_stuck(eng, st)


@contextlib.contextmanager
def _one_torch_thread():
    """Tiles are small: torch's intra-op threads cost ~10x more than they save (and fight over the cores
    with other processes), so simulation runs single-threaded and restores the setting afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def simulate(kernel, tensors: dict, *, seed: int = 0, compute_values: bool = True,
             launch: Launch | None = None) -> SimResult:
    """Run a barrier-level `WSKernel` on every CTA of its grid under a seeded random interleaving.

    `tensors` maps parameter names to CPU torch tensors; stores write into them in place. Each CTA gets its
    own generator derived from `seed`. The run stops at its first violation. `launch` (`aref.sim.Launch`):
    persistent CTAs walking several tiles with rings continuing, epilogue overlap's consumer copies.
    """
    t0 = time.perf_counter()
    _check_tensors(kernel, tensors, need_all=compute_values)
    if compute_values and launch is not None and launch.min_tiles:
        raise ValueError("Launch.min_tiles repeats tiles: simulate it with compute_values=False")
    prog = Prog(kernel, launch)
    res = SimResult(ok=True)
    for ci, cta in enumerate(_ctas(kernel, launch=launch)):
        eng = Engine(prog, tensors, cta, compute_values)
        eng.copy_on_write = False              # one run: no earlier state is kept
        with _one_torch_thread():
            exc, steps = _run_random(eng, random.Random(seed * 1_000_003 + ci))
        res.steps += steps
        res.ctas += 1
        if exc is not None:
            res.ok = False
            res.violations.append(_violation(prog, exc, cta))
            res.deadlocked = exc.kind in DEADLOCK_KINDS
            break
    res.seconds = time.perf_counter() - t0
    return res


def _describe(eng: Engine, st, act) -> str:
    kind, x = act
    if kind == GROUP:
        g = st.groups[x]
        return f"{eng.prog.groups[x].name}: {eng.prog.op_text(eng.prog.programs[x][g.pc].op)}"
    if kind == TMA:
        c, r, slot, item = st.tmas[x][:4]
        return f"TMA lands: payload {r} of item {item} in slot {slot} of channel {eng.prog.chans[c].name}"
    if kind == MMA:
        return f"MMA #{st.groups[x].completed} of {eng.prog.groups[x].name} completes"
    gi, k = x
    ins = st.groups[gi].commits[k][3]
    return f"mma_commit of {eng.prog.groups[gi].name} arrives: {eng.prog.op_text(ins.op)}"


def _explore_cta(eng: Engine, max_states: int, footprints=None):
    """Depth-first search over every enabled action of every state — or, with `footprints`, over a persistent
    set of them (`aref.sim.reduction`) — merging states with equal `key()`.
    Returns (violation or None, trace, states, schedules, completed)."""
    try:
        root = eng.initial()
    except SimViolation as exc:
        return exc, [], 1, 0, True
    seen: dict = {}

    def actions(st):
        steps, asyncs = eng.actions(st)
        if footprints is not None and len(steps) + len(asyncs) > 1:
            return persistent_set(footprints, eng, st, steps, asyncs)
        return steps + asyncs

    acts = actions(root)
    if not acts:
        exc = _terminal(eng, root)
        return exc, [], 1, 0 if exc else 1, True
    stack = [[root, acts, 0, 0, root.key(), None]]   # state, actions, next action, schedules, key, action in
    while stack:
        frame = stack[-1]
        st, acts, i = frame[0], frame[1], frame[2]
        if i == len(acts):
            stack.pop()
            seen[frame[4]] = frame[3]
            if stack:
                stack[-1][3] += frame[3]
            continue
        frame[2] += 1
        act = acts[i]
        child = st.copy()
        try:
            _apply_batched(eng, child, act)
            key = child.key()
            if key in seen:
                frame[3] += seen[key]
                continue
            if len(seen) + len(stack) >= max_states:
                return None, [], len(seen) + len(stack), sum(f[3] for f in stack), False
            cacts = actions(child)
            if not cacts:
                exc = _terminal(eng, child)
                if exc is not None:
                    raise exc
                seen[key] = 1
                frame[3] += 1
                continue
        except SimViolation as exc:
            trace = [_describe(eng, f[0], g[5]) for f, g in zip(stack, stack[1:])] + [_describe(eng, st, act)]
            return exc, trace, len(seen) + len(stack), sum(f[3] for f in stack), False
        stack.append([child, cacts, 0, 0, key, act])
    return None, [], len(seen), seen[root.key()], True


def _apply_batched(eng: Engine, st, act) -> None:
    """Apply `act`; an MMA completion goes on completing the group's MMAs (in issue order) until one makes an
    mma_commit due, enables an mma_wait or none is left. Nothing observes the completions in between — a slot
    an MMA reads is released only by a commit or after a wait — so the merged states hide no schedule; they
    only keep the explorer from enumerating every moment between two observable completions.
    Then every due mma_commit arrives, in issue order: the exploration does not delay one commit's arrival
    behind another's (the random and adversarial schedules of `simulate` and `check` do), which keeps the
    attention kernels' state spaces within reach."""
    eng.apply(st, act)
    if act[0] == MMA:
        g = st.groups[act[1]]
        while g.completed < g.issued and not _observed(eng, st, act[1]):
            eng.apply(st, act)
            g = st.groups[act[1]]
    for gi, g in enumerate(st.groups):
        while g.commits and g.commits[0][0] <= g.completed:
            eng.apply(st, (COMMIT, (gi, 0)))
            g = st.groups[gi]


def _observed(eng: Engine, st, gi: int) -> bool:
    g = st.groups[gi]
    if any(c[0] == g.completed + 1 for c in g.commits):
        return True
    rest = g.rest
    return rest is not None and rest[0] == "mma" and g.issued - (g.completed + 1) <= rest[1]


def explore(kernel, tensors: dict | None = None, *, cta=None, max_states: int = 200_000,
            compute_values: bool = False, launch: Launch | None = None, reduce: bool = True,
            trips: int | None = None) -> ExploreResult:
    """Exhaustively explore the interleavings of one CTA (`cta`) or of every CTA of the grid (`cta=None`).

    States are hashed on their control state (`CTAState.key`), so interleavings that reach the same state
    are explored once. Tile values are not computed unless `compute_values` (and even then they are not
    part of the state: each state keeps the values of the first schedule that reached it); scalars always
    are. Stops at the first violation (with the schedule that reaches it in `Violation.trace`) or after
    `max_states` states per CTA. With `reduce` (the default) each state's successors are those of a
    persistent set of its actions (`aref.sim.reduction`: partial-order reduction over independent groups,
    copies and MMAs), which reaches every violation and terminal state the full search does; `interleavings`
    then counts the schedules of the reduced graph. `launch`: persistent CTAs, epilogue overlap
    (`aref.sim.Launch`); `trips`: run the loop that many times instead (control state only).
    """
    t0 = time.perf_counter()
    tensors = tensors or {}
    _check_tensors(kernel, tensors, need_all=compute_values)
    prog = Prog(kernel, launch)
    res = ExploreResult(completed=True, states=0, interleavings=0)
    footprints = Footprints(prog) if reduce else None
    for c in _ctas(kernel, cta, launch):
        eng = Engine(prog, tensors, c, compute_values)
        eng.set_trips(value=trips)
        exc, trace, states, schedules, completed = _explore_cta(eng, max_states, footprints)
        res.states += states
        res.interleavings += schedules
        res.ctas += 1
        res.completed = res.completed and completed
        if exc is not None:
            res.violations.append(_violation(prog, exc, c, trace))
            break
    res.seconds = time.perf_counter() - t0
    return res


@dataclass
class SimReport:
    """`check`'s verdict: outputs vs reference over many interleavings, plus any violations."""

    ok: bool
    max_abs_err: float
    deadlocks: int
    interleavings: int
    runs: int
    mismatches: int = 0
    violations: list = field(default_factory=list)
    explored: ExploreResult | None = None
    warnings: list = field(default_factory=list)   # static resource problems (`check_resources`)
    seconds: float = 0.0
    protocol_runs: int = 0     # control-state runs under adversarial schedules and at protocol sizes

    def to_json(self) -> dict:
        out = {"ok": self.ok, "max_abs_err": self.max_abs_err, "deadlocks": self.deadlocks,
               "interleavings": self.interleavings, "runs": self.runs, "mismatches": self.mismatches,
               "protocol_runs": self.protocol_runs}
        if self.explored is not None:
            out["exhaustive"] = {"completed": self.explored.completed, "states": self.explored.states,
                                 "interleavings": self.explored.interleavings}
        if self.warnings:
            out["warnings"] = list(self.warnings)
        if not self.ok:
            out["violations"] = [{k: v.to_json()[k] for k in ("kind", "op", "line", "group", "message", "schedule")
                                  if k in v.to_json()} for v in self.violations]
        return out


def _clone(inputs: dict) -> dict:
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def check(kernel, example_inputs: dict, reference_fn, *, seeds: int = 50, exhaustive: bool = False,
          max_states: int = 200_000, tolerance: dict | None = None, protocol: bool = True,
          launch: Launch | None = None) -> SimReport:
    """Run `kernel` under `seeds` random interleavings, each on fresh copies of `example_inputs`, and compare
    every run's outputs with `reference_fn(**inputs)` via `aref.outputs.compare` (`tolerance` as there).

    With `protocol` (the default), also run the control state where the protocol is exercised, whatever the
    inputs' size (`SimReport.protocol_runs`), on the grid's first CTA: under adversarial schedules
    (`aref.sim.schedules`: each async source completing as late as it can, each group as early and as late
    as it can) and random ones at trip counts 0, 1, those below the pipeline's stages and 2·D + 1 (every ring
    wraps twice: `schedules.protocol_sizes`); and under the adversarial ones on a persistent launch
    (`aref.sim.Launch`), a CTA walking three tiles with every ring continuing across them, at trip count 1,
    where a ring's first use within a tile waits for the previous tile's items.
    `launch`: the launch the random interleavings (and the protocol runs) simulate (default: one tile per
    CTA). With `exhaustive`, also explore every interleaving of every CTA's control state (`explore`).
    Violations are deduplicated by (kind, op, line, group). Static resource problems (shared memory,
    threads, registers: `aref.sim.resources.check_resources`) are reported as `warnings`."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 0 or (seeds == 0 and not exhaustive):
        from aref.errors import ArefError
        raise ArefError(f"seeds must be an integer ≥ 1 (or ≥ 0 with exhaustive=True), got {seeds!r}: the check "
                        f"must run at least one interleaving", hint="pass seeds=50, or exhaustive=True")
    with _one_torch_thread():
        return _check(kernel, example_inputs, reference_fn, seeds, exhaustive, max_states, tolerance, protocol,
                      launch)


def _check(kernel, example_inputs, reference_fn, seeds, exhaustive, max_states, tolerance, protocol,
           launch) -> SimReport:
    t0 = time.perf_counter()
    expected = reference_fn(**_clone(example_inputs))
    report = SimReport(ok=True, max_abs_err=0.0, deadlocks=0, interleavings=0, runs=0,
                       warnings=check_resources(kernel))
    seen = set()

    def add(v):
        key = (v.kind, v.op, v.line, v.group)
        if key not in seen:
            seen.add(key)
            report.violations.append(v)

    for seed in range(seeds):
        args = _clone(example_inputs)
        res = simulate(kernel, args, seed=seed, launch=launch)
        report.runs += 1
        report.interleavings += 1
        if not res.ok:
            report.ok = False
            report.deadlocks += res.deadlocked
            for v in res.violations:
                add(v)
            continue
        cmp = compare(args, expected, tolerance)
        report.max_abs_err = max(report.max_abs_err, cmp.max_abs_err)
        if not cmp.ok:
            report.ok = False
            report.mismatches += 1
    if protocol:
        for prog, cta0, trips in _protocol_launches(kernel, launch, report):
            for exc, cta, label in protocol_runs(prog, example_inputs, cta0, trips):
                report.protocol_runs += 1
                if exc is not None:          # (`deadlocks` counts the random interleavings only)
                    report.ok = False
                    v = _violation(prog, exc, cta)
                    v.schedule = label
                    add(v)
    if exhaustive:
        ex = explore(kernel, _clone(example_inputs), max_states=max_states, launch=launch)
        report.explored = ex
        report.interleavings += ex.interleavings
        for v in ex.violations:
            report.ok = False
            report.deadlocks += v.kind in DEADLOCK_KINDS
            add(v)
    report.seconds = time.perf_counter() - t0
    return report


def _protocol_launches(kernel, launch: Launch | None, report: SimReport):
    """(program, CTA, trip counts) of the check's protocol runs: the given launch's first CTA at
    `schedules.protocol_sizes`; unless that launch is persistent, the first CTA of persistent launches at
    `schedules.persistent_sizes` (round the grid again where it has fewer tiles; a warning where the kernel
    cannot be launched persistent)."""
    prog = Prog(kernel, launch)
    yield prog, _ctas(kernel, launch=launch)[0], protocol_sizes(prog)
    if launch is None or not launch.persistent:
        for trip, tiles in persistent_sizes(prog):
            try:
                persistent = Prog(kernel, Launch(persistent=True, min_tiles=tiles))
            except LaunchError as exc:
                report.warnings.append(f"persistent launch not simulated: {exc}")
                return
            yield persistent, _ctas(kernel, launch=persistent.launch)[0], [trip]


@dataclass
class Equivalence:
    """`equivalent`'s verdict: `proved` when every schedule of every CTA was explored without a violation."""

    proved: bool
    reason: str
    states: int = 0


def equivalent(kernel, tensors: dict | None = None, *, max_states: int = 200_000) -> Equivalence:
    """Whether `kernel` (typically a planted mutant that `check` passed) is free of violations under every
    schedule of the launches `check` simulates: the exhaustive exploration (with partial-order reduction)
    of every CTA's control state completes without one, for one tile per CTA and for the persistent CTAs of
    `schedules.persistent_sizes`, whose rings continue across their tiles."""
    states = 0
    runs = [("", dict())]
    try:
        for trip, tiles in persistent_sizes(Prog(kernel)):
            launch = Launch(persistent=True, min_tiles=tiles)
            Prog(kernel, launch)
            runs.append((f" (persistent, {tiles} tiles of trip count {trip})",
                         dict(launch=launch, cta=(0,), trips=trip)))
    except LaunchError:
        pass
    for what, kw in runs:
        ex = explore(kernel, tensors, max_states=max_states, **kw)
        states += ex.states
        if ex.violations:
            v = ex.violations[0]
            return Equivalence(False, f"exploration{what} finds {v.kind}: {v.message}", states)
        if not ex.completed:
            return Equivalence(False, f"exploration{what} stopped at {max_states} states per CTA", states)
    return Equivalence(True, f"every schedule explored ({states} states)", states)
