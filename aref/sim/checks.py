"""Whole-state checks: why a stuck CTA is stuck, and what a finished CTA left unbalanced."""
from __future__ import annotations

from aref.ir import OpKind
from aref.sim.engine import Engine
from aref.sim.program import Prog
from aref.sim.state import CTAState
from aref.sim.values import SimViolation, Violation


def diagnose_stuck(eng: Engine, st: CTAState) -> SimViolation:
    """The violation for a state where no action is enabled but some group has not finished.

    Kind: "register-budget" if a group waits for registers, else "wait-never-completes" if some blocked
    wait's barrier can only be completed by groups that have all finished (or by none), else "deadlock".
    The violation names that op — for a plain deadlock, the first wait on a barrier caught mid-phase (some
    arrivals or transaction bytes of its phase came, others never will: the likeliest place a missing arrive
    or a wrong thread count starves), else the first blocked group's — and lists every blocked group with the op it waits at and the
    state of what it waits for.
    """
    p = eng.prog
    blocked, never, regs, partial = [], None, None, None
    for gi, g in enumerate(st.groups):
        if g.done:
            continue
        ins = p.programs[gi][g.pc]
        tag = g.rest[0] if g.rest else None
        dead = False
        if tag == "bar":
            i, parity = g.rest[1], g.rest[2]
            c, which, slot = p.bar_where[i]
            pending, tx, phase, done = st.bars[i]
            ch = p.chans[c]
            arrivers = p.arrivers.get((c, which), set())
            dead = all(st.groups[a].done for a in arrivers)
            if partial is None and (tx != 0 or pending != p.bar_init[i]):
                partial = gi
            who = ", ".join(p.groups[a].name for a in sorted(arrivers)) or "no group"
            waiting = (f"waits on {which}[{slot}] of channel {ch.name} with parity {parity}: phase bit is "
                       f"{phase} after {done} completed phase(s), {pending} of {p.bar_init[i]} arrivals and "
                       f"{tx} transaction bytes outstanding; arrivals come from {who}"
                       + (" (finished)" if dead and arrivers else ""))
        elif tag == "nb":
            a = ins.op.attrs
            count, gen = st.nbars.get(p.nb_key(gi, a.id), (0, 0))
            others = p.nb_users.get(p.nb_key(gi, a.id), set()) - {gi}
            dead = all(st.groups[o].done for o in others)
            waiting = f"waits at named barrier {a.id}: {count} of {a.threads} threads arrived"
            if partial is None and count:
                partial = gi
        elif tag == "reg":
            held = sum(o.regs * eng.threads[j] for j, o in enumerate(st.groups)
                       if j != gi and p.rank_of[j] == p.rank_of[gi])
            waiting = (f"setmaxnreg.inc {g.rest[1]} needs {g.rest[1] * eng.threads[gi]} registers; other groups "
                       f"hold {held} of {eng.machine.registers}")
            regs = regs or (ins.op, gi, waiting)
        else:
            waiting = f"waits for {g.issued - g.completed} MMAs"
        blocked.append({"group": p.groups[gi].name, "op": p.op_text(ins.op), "line": ins.op.loc.line,
                        "waiting_for": waiting})
        if dead and never is None:
            never = (ins.op, gi, waiting)
    first = partial if partial is not None else next(gi for gi, g in enumerate(st.groups) if not g.done)
    first_info = next(b for b in blocked if b["group"] == p.groups[first].name)
    if regs:
        return SimViolation("register-budget", f"registers never become available: {regs[2]}", regs[0], regs[1],
                            blocked)
    if never:
        return SimViolation("wait-never-completes", f"this wait can never complete: {never[2]}", never[0],
                            never[1], blocked)
    names = ", ".join(b["group"] for b in blocked)
    return SimViolation("deadlock", f"every unfinished group is blocked ({names}); "
                                    f"{p.groups[first].name} {first_info['waiting_for']}",
                        p.programs[first][st.groups[first].pc].op, first, blocked)


def check_finished(eng: Engine, st: CTAState) -> SimViolation | None:
    """At the end of a CTA every mbarrier is back at its initial arrival count with no transaction bytes,
    every MMA was retired, every item written to a slot was released by all its consumers and every
    named-barrier generation completed."""
    p = eng.prog
    for i, (pending, tx, phase, done) in enumerate(st.bars):
        if pending != p.bar_init[i] or tx != 0:
            c, which, slot = p.bar_where[i]
            last = st.bar_last[i] or (None, None)
            return SimViolation(
                "arrive-underflow",
                f"{which}[{slot}] of channel {p.chans[c].name}: phase {done} started but {pending} of "
                f"{p.bar_init[i]} arrivals" + (f" and {tx} transaction bytes" if tx else "") +
                " never came; the op shown arrived last", last[0], last[1])
    for gi, g in enumerate(st.groups):
        if max(g.retired, g.committed) < g.issued:
            last = next(ins.op for ins in reversed(p.programs[gi]) if ins.kind is OpKind.MMA_ASYNC)
            left = g.issued - max(g.retired, g.committed)
            return SimViolation("mma-in-flight-at-exit", f"{left} mma_async of this group were never retired by an "
                                                         f"mma_wait or mma_commit (the op shown is its last "
                                                         f"mma_async)", last, gi)
    for c, ch in enumerate(p.chans):
        for slot in range(ch.depth):
            s, d = st.slots[p.slot_base[c] + slot], st.sdata[p.slot_base[c] + slot]
            if s.item is not None and s.rel_count < ch.empty_count:
                op, gi = d.last_read or d.writer
                return SimViolation(
                    "arrive-underflow",
                    f"item {s.item} in slot {slot} of channel {ch.name} got {s.rel_count} of {ch.empty_count} "
                    f"releases on the empty barrier by the end (a consumed()/arrive on empty is missing); the op "
                    f"shown {'read' if d.last_read else 'wrote'} it last", op, gi)
    for nb, (count, gen) in sorted(st.nbars.items()):
        if count:
            op, gi = st.nb_last[nb]
            return SimViolation("arrive-underflow", f"named barrier {nb % p.NB_RANK}: {count} threads arrived in a "
                                                    f"generation "
                                                    f"that never completed; the op shown arrived last", op, gi)
    return None


def _violation(prog: Prog, exc: SimViolation, cta, trace=()) -> Violation:
    """The report of a violation raised in `cta` (the random runs', the explorer's and the timing model's)."""
    op = exc.op
    loc = op.loc if op is not None else None
    group = prog.groups[exc.group].name if exc.group is not None else ""
    return Violation(exc.kind, exc.message, prog.op_text(op), loc.file if loc else "", loc.line if loc else 0,
                     group, tuple(cta), exc.blocked, list(trace))
