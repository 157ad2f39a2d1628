"""Adversarial schedules: interleavings built to expose a missing wait by construction rather than by luck.

A uniform random scheduler seldom starves one asynchronous completion for long, or lets one warp group run far
ahead of another. The policies here do so on purpose; each is a `Policy` over the engine's enabled actions:

  late S    the completions of asynchronous source S happen only when nothing else can: every TMA copy of
            one channel (`("tma", channel)`), every MMA of one group (`("mma", group)`: wgmma results, and
            the tcgen05.commits that wait for them), every tcgen05.commit arrival on one channel's barriers
            (`("commit", channel)`), or all sources at once. A group that reads a
            slot, a tensor-memory tile or an accumulator without waiting for S reads it before it is there.
  eager G   group G steps whenever it can: a producer that skips a wait for a free slot overwrites one its
            consumers still hold; a consumer that skips a wait races ahead of the data.
  lazy G    group G steps only when nothing else can: the groups that depend on what G publishes or
            releases run as far ahead as their own waits allow.

Among the actions a policy leaves open it picks at random (seeded), as `simulate` does. `policies(prog)`
lists every policy of a kernel: one per asynchronous source, one for all of them, and two per group.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from aref.ir import OpKind
from aref.sim.checks import check_finished, diagnose_stuck
from aref.sim.engine import MMA, TMA, Engine
from aref.sim.program import Prog
from aref.sim.values import SimViolation


@dataclass(frozen=True)
class Policy:
    """One adversarial schedule: `late` async sources, an `eager` and a `lazy` group (indices or None)."""

    name: str
    late: frozenset = frozenset()       # {("tma", channel index) | ("mma", group index)}; "all" sources
    eager: int | None = None
    lazy: int | None = None
    late_all: bool = False


def sources(prog: Prog) -> list[tuple]:
    """The asynchronous sources of a kernel: each channel filled by TMA, each group that issues MMAs, each
    channel whose barriers tcgen05.commits arrive on."""
    out = []
    for c, ch in enumerate(prog.chans):
        if ch.kind == "tma":
            out.append(("tma", c))
    for gi, code in enumerate(prog.programs):
        if any(ins.kind is OpKind.MMA_ASYNC for ins in code):
            out.append(("mma", gi))
    out += list(dict.fromkeys(("commit", ins.bar[0]) for code in prog.programs for ins in code
                              if ins.kind is OpKind.MMA_COMMIT))
    return out


def _name(prog: Prog, s: tuple) -> str:
    if s[0] == "tma":
        return f"late tma {prog.chans[s[1]].name}"
    if s[0] == "mma":
        return f"late mma {prog.groups[s[1]].name}"
    return f"late commit {prog.chans[s[1]].name}"


def policies(prog: Prog, per_source: bool = True) -> list[Policy]:
    """The policies of a kernel (`per_source=False`: only the one that holds back every source at once)."""
    out = []
    for s in (sources(prog) if per_source else []):
        out.append(Policy(_name(prog, s), late=frozenset({s})))
    out.append(Policy("late every async source", late_all=True))
    for gi, g in enumerate(prog.groups):
        out.append(Policy(f"eager {g.name}", eager=gi))
        out.append(Policy(f"lazy {g.name}", lazy=gi))
    return out


def _source(eng, st, act) -> tuple:
    if act[0] == TMA:
        return ("tma", st.tmas[act[1]][0])
    if act[0] == MMA:
        return ("mma", act[1])
    gi, k = act[1]
    return ("commit", st.groups[gi].commits[k][3].bar[0])


def drive(eng: Engine, choose):
    """Run one interleaving to its end: `choose(st, steps, asyncs)` picks each action among those enabled.
    Returns (violation or None, steps)."""
    st = None
    try:
        st = eng.initial()
        while True:
            steps, asyncs = eng.actions(st)
            if not steps and not asyncs:
                break
            eng.apply(st, choose(st, steps, asyncs))
        return (check_finished(eng, st) if eng.finished(st) else diagnose_stuck(eng, st)), st.steps
    except SimViolation as exc:
        return exc, st.steps if st is not None else 0


def run_policy(eng: Engine, policy: Policy, rng: random.Random):
    """One interleaving under `policy`. Returns (violation or None, steps)."""
    p_async = rng.choice((0.2, 0.5, 0.8))

    def choose(st, steps, asyncs):
        if policy.eager is not None:
            act = next((a for a in steps if a[1] == policy.eager), None)
            if act is not None:
                return act
        now_steps = [a for a in steps if a[1] != policy.lazy]
        now_async = [a for a in asyncs if not (policy.late_all or _source(eng, st, a) in policy.late)]
        if not now_steps and not now_async:          # nothing else can run: the held-back ones may
            now_steps = [a for a in steps if a[1] == policy.lazy]
            now_async = [a for a in asyncs if a not in now_async]
        if now_async and (not now_steps or rng.random() < p_async):
            return now_async[rng.randrange(len(now_async))]
        return now_steps[rng.randrange(len(now_steps))]
    return drive(eng, choose)


# random control-state interleavings per protocol size, beside the policies
RANDOM_PER_SIZE = 2


def run_random(eng: Engine, rng: random.Random):
    """One interleaving. Per run, a bias for async completions and per-group weights are drawn, so the seeds
    cover schedules where copies land late or early and where one group runs far ahead of another."""
    p_async = rng.choice((0.1, 0.3, 0.5, 0.7, 0.9))
    weights = [rng.random() + 0.05 for _ in eng.prog.groups]

    def choose(st, steps, asyncs):
        if asyncs and (not steps or rng.random() < p_async):
            return asyncs[rng.randrange(len(asyncs))]
        return rng.choices(steps, [weights[a[1]] for a in steps])[0] if len(steps) > 1 else steps[0]
    return drive(eng, choose)


def protocol_sizes(prog: Prog) -> list[int]:
    """Trip counts the check simulates whatever the inputs' own: 0 and 1 (a loop that never runs, or runs
    once: the pipeline's fill and drain meet), every count below the deepest pipeline's stages (each peels
    the loop differently), and 2·D + 1 for the deepest ring's D, where every ring wraps at least twice (each
    slot is reused after release, parities flip twice)."""
    depth = max((ch.depth for ch in prog.chans), default=1)
    stages = max((gp.stages for gp in prog.kernel.groups), default=0) + 1
    return sorted({0, 1, *range(2, stages + 1), 2 * depth + 1})


def persistent_sizes(prog: Prog) -> list[tuple[int, int]]:
    """(trip count, tiles) of the persistent CTAs the check simulates: tiles of one iteration, and tiles whose
    pipeline reaches its steady loop, enough of them that every ring wraps twice across the CTA's tiles
    (2·D + 1 items of the deepest ring: a ring's first use within a tile waits on an earlier tile's item)."""
    depth = max((ch.depth for ch in prog.chans), default=1)
    steady = max((gp.stages for gp in prog.kernel.groups), default=0) + 1
    return sorted({(t, max(3, -(-(2 * depth + 1) // t) + 1)) for t in (1, steady)})


def protocol_runs(prog: Prog, tensors: dict, cta: tuple, trips: list[int], randoms: int = RANDOM_PER_SIZE):
    """Control-state runs that exercise the protocol, on CTA `cta`: at each trip count of `trips` (the same
    program with another trip count: `Engine.set_trips`), `randoms` random interleavings, and every policy at
    trip count 1 and at the largest. Where a group does not compute the loop's trip count,
    every policy at the inputs' trip count instead. Yields (violation or None, CTA, schedule label)."""
    # across a persistent CTA's tiles it is how far one group runs ahead of another that matters: the late
    # sources of one tile are the plain launch's
    pols = policies(prog, per_source=not prog.launch.persistent)
    try:
        Engine(prog, tensors, cta, compute_values=False).set_trips(value=0)
    except ValueError:
        trips = [None]
    runs = []
    for trip in trips:
        # the policies where the loop runs once and where the rings wrap; random runs at every size
        runs += [(trip, pol) for pol in (pols if trip in (None, 1, max(trips)) else [])]
        runs += [(trip, seed) for seed in range(randoms if trip is not None else 0)]
    for i, (trip, how) in enumerate(runs):
        eng = Engine(prog, tensors, cta, compute_values=False)
        eng.copy_on_write = False
        eng.set_trips(value=trip)
        rng = random.Random(7919 * i + 1)
        if isinstance(how, Policy):
            exc, _ = run_policy(eng, how, rng)
            label = how.name
        else:
            exc, _ = run_random(eng, rng)
            label = f"random #{how}"
        if trip is not None:
            label += f", trip count {trip}"
        if prog.launch.persistent:
            label += f", persistent CTA {cta[0]} of {prog.launch.num_ctas(prog.kernel.grid)}"
        yield exc, cta, label
