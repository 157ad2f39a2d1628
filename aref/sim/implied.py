"""Waits a kernel could do without: the happens-before order of its synchronization, from executions.

An `mbarrier_wait` is *implied* when, every time its group reaches it, the phase it waits for has completed
as far as the group can know by the group's next op that uses the channel (its slots, barriers, or tensor
memory): the phase's arrivals (arrives, TMA copies landing, tcgen05.commits) happen-before that op through
the group's other waits. Deleting an implied wait changes nothing the group does with the channel: by then
the phase it skipped has completed in every schedule. An `mma_wait` is *idle* when, every time, the MMAs it
would retire are retired already (`retired ≥ issued − pending`): deleting it, or raising its `pending`,
changes nothing either.

Happens-before is computed with vector clocks (one entry per group) over control-state executions: each
phase completion carries the join of its arrivals' clocks (a TMA copy's and an MMA commit's are their
issuer's at issue), a wait joins the completion it observes, a named-barrier generation joins its
participants. In a kernel whose every wait observes the same phase in every schedule (a correct kernel: no
parity aliasing), these clocks are the same in every schedule; `implied_ops` still runs several schedules
and calls a wait implied only if it is in every one.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from aref.ir import OpKind
from aref.sim.engine import COMMIT, GROUP, TMA, Engine
from aref.sim.launch import Launch
from aref.sim.program import LaunchError, Prog
from aref.sim.schedules import persistent_sizes, protocol_sizes
from aref.sim.values import SimViolation


# A clock: (per-group counters, asynchronous completions known). A TMA copy landing and an MMA completing are
# events of their own, after their issue: knowing the issuer's clock at issue does not tell that they happened.
def _join(a, b):
    return tuple(x if x >= y else y for x, y in zip(a[0], b[0])), a[1] | b[1]


def _le(a, b) -> bool:
    return a[1] <= b[1] and all(x <= y for x, y in zip(a[0], b[0]))


def _tick(c, g: int):
    return c[0][:g] + (c[0][g] + 1,) + c[0][g + 1:], c[1]


def _with(c, events):
    return c[0], c[1] | frozenset(events)


@dataclass
class Implied:
    """Per op (by id): whether every execution found it implied (waits) or idle (mma_waits)."""

    waits: dict = field(default_factory=dict)        # id(op) -> bool
    mma_waits: dict = field(default_factory=dict)    # id(op) -> bool
    covered: dict = field(default_factory=dict)      # id(mma_wait op) -> bool (`analyse`'s `drop`)
    runs: int = 0

    def implied(self, op) -> bool:
        return self.waits.get(id(op), False)

    def idle(self, op) -> bool:
        return self.mma_waits.get(id(op), False)

    def _record(self, table: dict, op, ok: bool) -> None:
        table[id(op)] = table.get(id(op), True) and ok


def analyse(eng: Engine, rng: random.Random, out: Implied, drop=None) -> bool:
    """One random control-state execution of `eng`'s CTA with vector clocks, recorded into `out`. False if
    the execution hit a violation (the kernel is not correct: nothing is implied).

    `drop` = (mma_wait op, raised): the knowledge that op gives its group — which MMAs completed — is left
    out (all of it, or, `raised`, that of one more MMA), and `out.covered[id(op)]` records whether every
    MMA completion the contract needs known still is: by the group that frees tensor memory, by each reader
    of a tensor-memory tile an MMA of another group wrote, and (the group's own) by its mma_commits at its
    end."""
    p = eng.prog
    n = p.ngroups
    zero = ((0,) * n, frozenset())
    vc = [zero] * n
    ntma = ncommit = 0
    acc = {}                   # barrier index -> join of this phase's arrivals so far
    done = {}                  # barrier index -> [clock of completion k]
    tma_vc = {}                # id(tma record) -> issuer's clock
    commit_vc = {}             # id(pending commit) -> (issuer's clock, MMAs it waits for)
    nb_acc, nb_done = {}, {}
    # per group, the waits whose need is not settled yet: [op, channels, completion seen, clock without it]
    pending = [[] for _ in range(n)]

    def learn(x, clock):
        vc[x] = _join(vc[x], clock)
        for ob in pending[x]:
            ob[3] = _join(ob[3], clock)

    def touch(x, chans):
        for ob in [ob for ob in pending[x] if ob[1] & chans]:
            out._record(out.waits, ob[0], _le(ob[2], ob[3]))
            pending[x].remove(ob)

    eng.trace = []
    try:
        st = eng.initial()
        while True:
            steps, asyncs = eng.actions(st)
            if not steps and not asyncs:
                break
            acts = steps + asyncs
            act = acts[rng.randrange(len(acts))]
            bars_before = list(st.bars)
            tmas_before = {id(t) for t in st.tmas}
            nb_before = dict(st.nbars)
            src = zero
            kind, x = act
            if kind == GROUP:
                g = st.groups[x]
                ins = p.programs[x][g.pc]
                touch(x, _touches(p, ins))
                if ins.kind is OpKind.MBAR_WAIT:
                    i = g.rest[1]
                    k = st.bars[i][3]
                    seen = done.get(i, [])[k - 1] if k else zero
                    # a slot's release by tcgen05.commit takes effect at the commit (its reading MMAs then
                    # complete, and those completions are known): its arrival adds nothing a writer needs
                    need = seen if ins.bar[1] == "full" else \
                        (seen[0], frozenset(e for e in seen[1] if e[0] != "commit"))
                    ob = [ins.op, _touches(p, ins), need, vc[x]]
                    learn(x, seen)
                    pending[x].append(ob)
                elif ins.kind is OpKind.MMA_WAIT:
                    out._record(out.mma_waits, ins.op, g.retired >= g.issued - ins.op.attrs.pending)
                    # the group knows its MMAs up to issued - pending completed
                    known = g.issued - ins.op.attrs.pending
                    if drop is not None and ins.op is drop[0]:
                        known = known - 1 if drop[1] else 0
                    learn(x, (zero[0], frozenset(("mma", x, q) for q in range(known))))
                elif drop is not None and ins.kind is OpKind.TMEM_DEALLOC:
                    need = {("mma", h, q) for h, o in enumerate(st.groups) for q in range(o.issued)}
                    out._record(out.covered, drop[0], need <= vc[x][1])
                elif ins.kind is OpKind.NAMED_BAR_SYNC and g.nb is not None:
                    learn(x, nb_done[p.nb_key(x, ins.op.attrs.id)][g.nb])
                vc[x] = _tick(vc[x], x)
                commits_before = len(g.commits)
                src = vc[x]
            elif kind == TMA:
                src = tma_vc.get(id(st.tmas[x]), zero)
            elif kind == COMMIT:
                clock, target = commit_vc.pop(id(st.groups[x[0]].commits[x[1]]))
                # a tcgen05.commit arrives once the MMAs before it completed: those completions are known; the
                # arrival itself is an event of its own (two commits' arrivals are not ordered)
                ncommit += 1
                src = _with(clock, [("commit", ncommit)] + [("mma", x[0], q) for q in range(target)])
            eng.trace = []
            eng.apply(st, act)
            if kind == GROUP:
                # the ops the step ran after its visible one (slot reads, commits, the next tile's start)
                touch(x, set().union(*[_touches(p, i) for _, i in eng.trace[1:] if i.op is not None]))
                if drop is not None:
                    _tmem_reads(eng, st, x, vc[x], drop[0], out)
            if kind == GROUP:
                g = st.groups[x]
                for c in g.commits[commits_before:]:
                    commit_vc[id(c)] = (vc[x], c[0])
                for t in st.tmas:
                    if id(t) not in tmas_before:
                        ntma += 1
                        tma_vc[id(t)] = _with(vc[x], (("tma", ntma),))
            for i, (before, after) in enumerate(zip(bars_before, st.bars)):
                if before == after:
                    continue
                acc[i] = _join(acc.get(i, zero), src)
                if after[3] > before[3]:
                    done.setdefault(i, []).append(acc[i])
                    acc[i] = zero
            if kind == GROUP and st.nbars != nb_before:
                for bid, (count, gen) in st.nbars.items():
                    if (count, gen) == nb_before.get(bid, (0, 0)):
                        continue
                    nb_acc[bid] = _join(nb_acc.get(bid, zero), vc[x])
                    if gen > nb_before.get(bid, (0, 0))[1]:
                        nb_done.setdefault(bid, {})[gen - 1] = nb_acc[bid]
                        nb_acc[bid] = zero
                        if ins.kind is OpKind.NAMED_BAR_SYNC:      # this group completed it: it goes on
                            learn(x, nb_done[bid][gen - 1])
        for x in range(n):             # a wait no later op of its group depended on
            for ob in pending[x]:
                out._record(out.waits, ob[0], True)
        if drop is not None:
            owner = next(gi for gi, code in enumerate(p.programs) if any(i.op is drop[0] for i in code))
            g = st.groups[owner]
            out._record(out.covered, drop[0], g.committed >= g.issued)
        out.runs += 1
        return True
    except SimViolation:
        return False


def _touches(prog, ins) -> set:
    """Channels whose slots, barriers or tensor memory `ins` uses: a deleted wait matters first at such an op
    of its group (all tensor-memory channels for an access of tensor-memory data: their columns may alias)."""
    c = ins.bar[0] if ins.bar is not None else ins.ring[0] if ins.ring is not None else None
    tm = prog.tmem.of_chan
    if ins.kind is OpKind.MMA_ASYNC and tm:
        return set(tm)
    if c is None:
        return set()
    if ins.kind in (OpKind.MBAR_WAIT, OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX, OpKind.MMA_COMMIT):
        return {c}                     # a barrier op: its own channel's barriers and slot (not their columns)
    return set(tm) | {c} if c in tm else {c}


def _tmem_reads(eng, st, x, clock, op, out) -> None:
    """The step group x just took read tensor-memory tiles: each one an MMA of another group wrote must be
    known complete (`analyse`'s `drop`)."""
    tm = eng.prog.tmem
    env = st.groups[x].env
    for gi, ins in eng.trace:
        if ins.kind is not OpKind.SLOT_READ or ins.ring is None or ins.ring[0] not in tm.of_chan:
            continue
        item = env.get(ins.args[2])           # the item read (the tiles of other items are not its business)
        for owner in st.tmem:
            if owner is not None and isinstance(owner[0], int) and len(owner) > 2 and owner[2] is not None \
                    and owner[2][0] != x and owner[:2] == (ins.ring[0], item):
                out._record(out.covered, op, ("mma", *owner[2]) in clock[1])


def covered_without(kernel, op, raised: bool, tensors: dict | None = None, *, seeds: int = 3) -> bool:
    """Whether the mma_wait `op` of `kernel` can go (or keep one more MMA in flight, `raised`) without the
    contract missing what it tells: no op after it in its group uses an MMA result or issues an MMA, its
    group's mma_commits cover every MMA it issued, and every MMA completion the contract needs known is
    known without it (`analyse`'s `drop`) — over the launches and sizes of `implied_ops`."""
    gp = next(g for g in kernel.groups if any(o is op for o in g.all_ops()))
    ops = list(gp.all_ops())
    later = ops[next(i for i, o in enumerate(ops) if o is op) + 1:]
    mma_values = {id(o.result) for o in ops if o.kind is OpKind.MMA_ASYNC}
    if gp.loop is not None:
        mma_values |= {id(r) for r, y in zip(gp.loop.results, gp.loop.yields) if id(y) in mma_values}
    if any(o.kind is OpKind.MMA_ASYNC or any(id(v) in mma_values for v in o.operands) for o in later):
        return False
    out = Implied()
    for pr, cta, trips in _configs(kernel):
        for seed in range(seeds):
            eng = Engine(pr, tensors or {}, cta, compute_values=False)
            try:
                eng.set_trips(value=trips)
            except ValueError:
                break
            if not analyse(eng, random.Random(seed), out, drop=(op, raised)):
                return False
    return out.covered.get(id(op), True)


def _configs(kernel) -> list:
    configs = []
    prog = Prog(kernel)
    ctas = Launch().ctas_of(kernel.grid)
    configs += [(prog, cta, None) for cta in ctas] + [(prog, ctas[0], t) for t in protocol_sizes(prog)]
    try:
        for trip, tiles in persistent_sizes(prog):
            configs.append((Prog(kernel, Launch(persistent=True, min_tiles=tiles)), (0,), trip))
    except LaunchError:
        pass
    return configs


def implied_ops(kernel, tensors: dict | None = None, *, seeds: int = 3) -> Implied | None:
    """Implied waits and idle mma_waits of `kernel` over the launches and sizes `aref.sim.check` simulates by
    default: one tile per CTA on every CTA at the inputs' trip count and on the first at its protocol sizes,
    and the persistent CTAs of `schedules.persistent_sizes`; `seeds` random
    schedules each. None if some execution violates the contract (nothing is implied then)."""
    tensors = tensors or {}
    out = Implied()
    for i, (pr, cta, trips) in enumerate(_configs(kernel)):
        for seed in range(seeds):
            eng = Engine(pr, tensors, cta, compute_values=False)
            try:
                eng.set_trips(value=trips)
            except ValueError:
                break
            if not analyse(eng, random.Random(1000 * i + seed), out):
                return None
    return out
