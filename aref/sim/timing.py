"""Discrete-event timing of one CTA of a barrier-level kernel on a machine model (`aref.target.machine`).

The functional engine decides what may happen (the same mbarrier, slot and MMA semantics as `simulate`);
this module decides when. Each warp group issues its ops in order; an op occupies its functional unit
("tc", "tma", "mufu", "fma", "smem", Blackwell's "tmem_ld" / "tmem_st": one each per SM, first come first
served) for `op_cost` cycles, and
the group waits for it, except for the asynchronous ones: an `mma_async` costs the group its issue cycles
(`aref.target.machine.mma_issue_cycles`: on Blackwell one warp issues a tcgen05.mma per K atom) and completes when
the tensor core finishes it (so does an arrive, whose effect a waiter pays for when it wakes; on Blackwell
an `mma_commit` arrives then); a `tma_load` costs the group `async_issue_cycles`
and lands after a latency drawn from the machine's distribution plus its transfer time (the copy engine is
busy only for the transfer, and it serves outstanding copies work-conserving: a copy fills the engine's idle
cycles wherever they are, between copies booked before it); a tile `store` costs the group the staging of
the tile into shared memory and the issue of the TMA store, which then runs on the copy engine (fire and
forget). On Blackwell a group's CUDA-core work on its own MMA's result first loads it from tensor memory
(tcgen05.ld), and writes an accumulator of its own next MMA back (tcgen05.st), on the "tmem_ld" / "tmem_st"
paths (`aref.sim.program`).
A blocked op (mbarrier wait, mma_wait, named barrier, setmaxnreg.inc) resumes at the event that enables it.
No tile values are computed.

The report: total cycles, steady-state cycles per loop iteration (from the middle half of the iterations),
utilization per unit, and a per-group timeline of (group, op, unit, start, end, line) entries, including
"wait" entries for the time a group spent blocked — the data a Gantt chart needs.
"""
from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass, field

from aref.ir import OpKind
from aref.ops.memory import tma_bytes
from aref.target.machine import ISSUE, SHARED_UNITS, Machine, mma_issue_cycles, op_cost, unit_busy
from aref.sim.checks import _violation, check_finished, diagnose_stuck
from aref.sim.engine import COMMIT, GROUP, MMA, TMA, Engine
from aref.sim.program import LOOP_END, LOOP_ENTER, Prog
from aref.sim.resources import check_resources
from aref.sim.values import SimViolation


@dataclass
class TimelineEntry:
    group: str
    op: str
    unit: str          # a shared unit, "issue" (the group's own instruction stream) or "wait" (blocked)
    start: int
    end: int
    line: int
    busy: int = 0      # cycles the unit is occupied from `start` (0: all of start..end; a TMA copy: its transfer,
    #                    which may interleave with other copies' on the engine)
    issued: int = -1   # an asynchronous op (MMA, TMA copy): when its group issued it; else -1
    file: str = ""     # the source file of `line` (pictures label an MMA by its source)

    def to_json(self) -> dict:
        return dict(vars(self))


@dataclass
class TimingReport:
    """Cycles of one CTA. `cycles_per_iter` is the steady-state period (the slowest group's); `utilization`
    is busy cycles / total cycles per shared unit."""

    machine: str
    total_cycles: int
    cycles_per_iter: float
    iterations: int
    utilization: dict
    group_cycles_per_iter: dict
    timeline: list = field(default_factory=list)
    violations: list = field(default_factory=list)
    warnings: list = field(default_factory=list)      # static resource problems (`check_resources`)
    iteration_starts: dict = field(default_factory=dict)   # group -> cycle each loop iteration began

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict:
        return {"machine": self.machine, "total_cycles": self.total_cycles, "cycles_per_iter": self.cycles_per_iter,
                "iterations": self.iterations, "utilization": self.utilization,
                "group_cycles_per_iter": self.group_cycles_per_iter,
                "timeline": [e.to_json() for e in self.timeline],
                "violations": [v.to_json() for v in self.violations], "warnings": list(self.warnings)}


# Ops that only signal (an arrive on an mbarrier or a named barrier): like an asynchronous copy they cost the
# signalling warp group only their issue; the `sync_cycles` it takes their effect to reach a waiter are charged
# to the waiter when its wait completes.
SIGNALS = frozenset({OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX, OpKind.NAMED_BAR_ARRIVE})


def _steady(starts: list[int]) -> float | None:
    """Cycles per iteration from iteration start times (plus the loop's end): the middle half's average,
    so pipeline fill and drain do not count."""
    n = len(starts) - 1
    if n < 1:
        return None
    lo, hi = (n // 4, n - n // 4) if n >= 4 else (0, n)
    return (starts[hi] - starts[lo]) / (hi - lo)


class _Clock:
    def __init__(self, eng: Engine, machine: Machine, rng: random.Random | None):
        self.eng, self.m, self.rng = eng, machine, rng
        self.prog = eng.prog
        n = len(self.prog.groups)
        self.ready = [0] * n                 # when each group can issue its next op
        self.free = dict.fromkeys(SHARED_UNITS, 0)         # when each unit's last booking ends
        self.booked = {u: [] for u in SHARED_UNITS}          # (begin, end) per unit, in time order
        self.busy = dict.fromkeys(SHARED_UNITS, 0)
        self.tma_done: dict[int, int] = {}   # id(tma entry) -> landing time
        self.mma_done = [[] for _ in range(n)]
        self.iters = [[] for _ in range(n)]
        self.timeline: list[TimelineEntry] = []

    def entry(self, gi, op, unit, start, end, busy=0, issued=-1):
        if end > start:
            self.timeline.append(TimelineEntry(self.prog.groups[gi].name, self.prog.op_text(op), unit, start, end,
                                               op.loc.line, busy, issued, op.loc.file))

    def occupy(self, unit, start, cycles) -> int:
        """Book `unit` for `cycles` at the earliest free time from `start`. A group runs ahead until it
        blocks, so bookings do not arrive in time order: one at an earlier time takes a gap that another
        group's later bookings left (first come first served in time, not in the order groups are run)."""
        slots = self.booked[unit]
        begin = start
        i = bisect.bisect_right(slots, begin, key=lambda s: s[1])      # ends are in order too
        while i < len(slots) and slots[i][0] < begin + cycles:
            begin = max(begin, slots[i][1])
            i += 1
        if cycles > 0:
            slots.insert(i, (begin, begin + cycles))
        self.free[unit] = max(self.free[unit], begin + cycles)
        self.busy[unit] += cycles
        return begin

    def copy(self, start, cycles) -> tuple[int, int]:
        """Book the copy engine for a copy of `cycles` transfer cycles issued at `start`: (first cycle, last
        cycle + 1). The engine serves every outstanding copy, so a copy takes the idle cycles from `start` on
        wherever they are, before and between copies booked already, rather than waiting for one gap that
        holds it whole (work-conserving: the engine is never idle while a copy is outstanding). A group runs
        ahead in simulation order, so a load booked after another group's later store may still be the
        earlier copy: it uses the engine's cycles before that store and finishes after it."""
        slots = self.booked["tma"]
        i = bisect.bisect_right(slots, start, key=lambda s: s[1])
        cur, left, first, pieces = start, cycles, None, []
        while left > 0:
            gap_end = slots[i][0] if i < len(slots) else cur + left
            if gap_end > cur:
                take = min(left, gap_end - cur)
                pieces.append((cur, cur + take))
                first = cur if first is None else first
                cur, left = cur + take, left - take
            if left > 0:
                cur = max(cur, slots[i][1])
                i += 1
        if not pieces:
            return start, start
        merged = []
        for a, b in sorted(slots + pieces):          # touching bookings as one: the list stays short
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        self.booked["tma"] = merged
        self.free["tma"] = max(self.free["tma"], cur)
        self.busy["tma"] += cycles
        return first, cur

    def forget(self, now: int) -> None:
        """Drop bookings that end by `now`: no group asks for a unit before the current event."""
        for slots in self.booked.values():
            k = bisect.bisect_right(slots, now, key=lambda s: s[1])
            if k:
                del slots[:k]

    def run_ops(self, st, gi, items) -> None:
        """Account the ops group gi just executed (in order), starting at its ready time."""
        cur = self.ready[gi]
        for ins in items:
            if ins.kind == LOOP_ENTER or ins.kind == LOOP_END:
                self.iters[gi].append(cur)
                continue
            op = ins.op
            k = op.kind
            if k is OpKind.MMA_ASYNC:
                _, cycles = op_cost(op, self.m)
                issue = mma_issue_cycles(op, self.m)
                begin = self.occupy("tc", cur + issue, cycles)
                self.mma_done[gi].append(begin + cycles)
                self.entry(gi, op, "tc", begin, begin + cycles, issued=cur)
                cur += issue
            elif k is OpKind.STORE:
                # fire and forget: the group stages the tile into shared memory (registers → smem at the
                # port's rate), issues the TMA store and goes on; the copy engine then moves the bytes
                staged = self.occupy("smem", cur, max(1, -(-tma_bytes(op) // self.m.smem_bytes_per_clk)))
                cur = staged + max(1, -(-tma_bytes(op) // self.m.smem_bytes_per_clk))
                _, cycles = op_cost(op, self.m)
                begin, end = self.copy(cur + self.m.async_issue_cycles, cycles)
                self.entry(gi, op, "tma", begin, end, busy=cycles, issued=cur)
                cur += self.m.async_issue_cycles
            elif k is OpKind.TMA_LOAD:
                _, cycles = op_cost(op, self.m, self.rng)
                transfer = unit_busy(op, self.m)
                begin, end = self.copy(cur + self.m.async_issue_cycles, transfer)
                # the copy's bytes arrive after its latency (and after the cycles other copies took from its
                # transfer); the engine appended it last to the in-flight list
                landed = end - transfer + cycles
                self.tma_done[id(st.tmas[-1])] = landed
                self.entry(gi, op, "tma", begin, landed, busy=transfer, issued=cur)
                cur += self.m.async_issue_cycles
            else:
                if ins.tmem_ld_bytes:           # the group's own MMA result: tcgen05.ld into registers first
                    cur = self.tmem_move(gi, op, "tmem_ld", cur, ins.tmem_ld_bytes)
                unit, cycles = op_cost(op, self.m, self.rng)
                if k is OpKind.SLOT_READ and ins.tensor_pipe:
                    unit, cycles = ISSUE, 0     # an MMA's operand in tensor memory: no tcgen05.ld
                if k in SIGNALS:
                    cycles = min(cycles, self.m.async_issue_cycles)
                if unit == ISSUE:
                    self.entry(gi, op, ISSUE, cur, cur + cycles)
                    cur += cycles
                else:
                    busy = unit_busy(op, self.m)
                    begin = self.occupy(unit, cur, busy)
                    self.entry(gi, op, unit, begin, begin + cycles, busy=busy)
                    cur = begin + cycles
                if ins.tmem_st_bytes:           # the accumulator of its own next MMA: tcgen05.st back
                    cur = self.tmem_move(gi, op, "tmem_st", cur, ins.tmem_st_bytes)
        self.ready[gi] = cur

    def tmem_move(self, gi, op, unit, cur, nbytes) -> int:
        """A group's synchronous tcgen05.ld / tcgen05.st of `nbytes` (the tensor memory path's rate)."""
        cycles = max(1, -(-nbytes // self.m.tmem_bytes_per_clk))
        begin = self.occupy(unit, cur, cycles)
        self.entry(gi, op, unit, begin, begin + cycles)
        return begin + cycles


def extend_loop(eng: Engine, extra: int) -> None:
    """Run the loop `extra` iterations beyond its trip count (`Engine.set_trips`)."""
    eng.set_trips(extra)


def simulate_timing(kernel, tensors: dict | None, machine: Machine, *, seed: int | None = 0, cta=None,
                    extra_trips: int = 0) -> TimingReport:
    """Time one CTA (`cta`, default the first) of a barrier-level kernel on `machine`; `seed` drives the TMA
    latency draws (None: every copy takes the distribution's mean, so a steady state is periodic). Tile values
    are not computed, so `tensors` may be None (it is only checked for shapes).
    `extra_trips` runs the loop that many iterations beyond its trip count (the same program over a longer
    loop, as with a larger input along it: a steady state where the inputs give only a few iterations).
    A schedule bug stops the run; the report then carries the violation."""
    prog = Prog(kernel)
    cta = tuple(cta) if cta is not None else tuple(0 for _ in kernel.grid)
    eng = Engine(prog, tensors or {}, cta, compute_values=False, machine=machine)
    extend_loop(eng, extra_trips)
    clock = _Clock(eng, machine, random.Random(seed) if seed is not None else None)
    eng.trace = []
    violations = []
    now = 0
    st = None
    try:
        st = eng.initial()
        for gi, items in itertools.groupby(eng.trace, key=lambda t: t[0]):
            clock.run_ops(st, gi, [ins for _, ins in items])
        while True:
            steps, asyncs = eng.actions(st)
            if not steps and not asyncs:
                break
            best = None
            for act in asyncs:
                if act[0] == COMMIT:
                    t = now                    # a tcgen05.commit arrives as its MMAs complete
                else:
                    t = clock.tma_done[id(st.tmas[act[1]])] if act[0] == TMA else clock.mma_done[act[1]][0]
                if best is None or t < best[0]:
                    best = (t, act)
            for act in steps:
                t = max(clock.ready[act[1]], now)
                if best is None or t < best[0]:
                    best = (t, act)
            now, act = best
            clock.forget(now)
            if act[0] == TMA:
                del clock.tma_done[id(st.tmas[act[1]])]
            elif act[0] == MMA:
                clock.mma_done[act[1]].pop(0)
            elif act[0] == GROUP:
                gi = act[1]
                waited_since = clock.ready[gi]
                if now > waited_since:
                    ins = prog.programs[gi][st.groups[gi].pc]
                    clock.entry(gi, ins.op, "wait", waited_since, now)
                clock.ready[gi] = now
                eng.trace = []
            eng.apply(st, act)
            if act[0] == GROUP:
                clock.run_ops(st, act[1], [ins for _, ins in eng.trace])
        exc = check_finished(eng, st) if eng.finished(st) else diagnose_stuck(eng, st)
        if exc is not None:
            raise exc
    except SimViolation as exc:
        violations.append(_violation(prog, exc, cta))
    total = max([now, *clock.ready, *clock.free.values()])
    per_group = {}
    for gi, starts in enumerate(clock.iters):
        period = _steady(starts)
        if period is not None:
            per_group[prog.groups[gi].name] = period
    iterations = max((len(s) - 1 for s in clock.iters), default=0)
    return TimingReport(machine.name, total, max(per_group.values(), default=0.0), iterations,
                        {u: (clock.busy[u] / total if total else 0.0) for u in SHARED_UNITS}, per_group,
                        sorted(clock.timeline, key=lambda e: (e.start, e.group)), violations,
                        check_resources(kernel, machine),
                        {prog.groups[gi].name: list(starts) for gi, starts in enumerate(clock.iters)})
