"""Partial-order reduction for the exhaustive exploration: at each state, explore a *persistent set* of the
enabled actions instead of all of them.

Two actions are independent when they touch no common object, or only read it: then they commute, neither
enables nor disables the other, and neither changes whether the other violates the contract. The objects
(`Footprints`): the mbarriers of one channel's `full` or `empty` array, the slots of one channel, tensor memory,
one group's MMA queue (issued, completed, retired; its pending commits), one named barrier, the register pool,
the set of slots written by slot_store and not yet fenced.

The actors of a CTA are its groups' instruction streams, each group's MMA completions, each TMA copy in
flight and each due tcgen05.commit arrival. A set C of actors is closed when, for every actor in C, the next action it can take conflicts with
nothing an actor outside C could ever do (its *future*: every instruction it may still execute, and the
copies and MMA completions those spawn). The enabled actions of a closed C form a persistent set: along any
schedule of actors outside C, every action is independent of them, and no actor in C is enabled or disabled
by it. Exploring only persistent sets reaches every terminal state — every deadlock, every finished CTA —
and every violation (an action that violates the contract does so in every state that schedule-independent
actions lead to), so a complete reduced exploration without a violation proves the same of the full one.
The state graph is acyclic (every action advances a group, lands a copy or completes an MMA), so no cycle
proviso is needed.

Footprints over-approximate: a channel is one object whatever its slot, an op with tile operands of a slot
may read any slot its group reads, tensor memory is one object.
"""
from __future__ import annotations

from aref.ir import OpKind
from aref.sim.engine import GROUP, MMA, TMA
from aref.sim.program import LOOP_END, LOOP_ENTER, Prog

_EMPTY = (frozenset(), frozenset())


class Footprints:
    """Static footprints of a program: per group and pc, its next step's and its future's (reads, writes)."""

    def __init__(self, prog: Prog):
        self.prog = prog
        self.ids: dict = {}
        self.landing: dict = {}
        n = prog.ngroups
        self.mma_groups = [g for g in range(n) if any(i.kind is OpKind.MMA_ASYNC for i in prog.programs[g])]
        self.read_chans = [{i.ring[0] for i in prog.programs[g] if i.kind is OpKind.SLOT_READ} for g in range(n)]
        self.tmem_chans = set(prog.tmem.of_chan)
        # MMA completions of group g: its queue, its commits' barriers (and slots released), slots its MMAs read
        self.mma_fp = []
        for g in range(n):
            w = {self._id(("q", g))}
            for ins in prog.programs[g]:
                if ins.kind is OpKind.MMA_COMMIT:
                    w |= self._arrive_objs(ins.bar)
            for c in self.read_chans[g]:
                w |= self._slots(c)
            self.mma_fp.append((frozenset(), frozenset(w)))
        self.instr_fp = [[self._instr(g, ins) for ins in prog.programs[g]] for g in range(n)]
        self.step = [[self._union(g, pc, stop_at_visible=True) for pc in range(len(prog.programs[g]))]
                     for g in range(n)]
        self.future = [[self._union(g, pc, stop_at_visible=False) for pc in range(len(prog.programs[g]))]
                       for g in range(n)]

    def _id(self, obj) -> int:
        return self.ids.setdefault(obj, len(self.ids))

    def _bars(self, c: int, which: str) -> set:
        """Every mbarrier of channel c's `which` array (a static op may use any slot's)."""
        base = self.prog.bar_base[c][0 if which == "full" else 1]
        return {self._id(("b", base + s)) for s in range(self.prog.chans[c].depth)}

    def _slots(self, c: int) -> set:
        base = self.prog.slot_base[c]
        return {self._id(("s", base + s)) for s in range(self.prog.chans[c].depth)}

    def _arrive_objs(self, bar) -> set:
        c, which = bar
        out = self._bars(c, which)
        if which == "empty":
            out |= self._slots(c)
        return out

    def landing_fp(self, tma):
        """A TMA copy in flight writes its slot and completes bytes on its full barrier (both known)."""
        c, _, slot, _, bi = tma[:5]
        key = (c, slot, bi)
        if key not in self.landing:
            self.landing[key] = (frozenset(), frozenset({self._id(("s", self.prog.slot_base[c] + slot)),
                                                         self._id(("b", bi))}))
        return self.landing[key]

    def blocking(self, g, gi: int) -> frozenset:
        """The object whose state a blocked group waits on (what can enable it writes it)."""
        r = g.rest
        if r is None:
            return frozenset()
        tag = r[0]
        if tag == "bar":
            return frozenset({self._id(("b", r[1]))})
        if tag == "mma":
            return frozenset({self._id(("q", gi))})
        if tag == "nb":
            return frozenset({self._id(("n", r[1]))})
        return frozenset({self._id(("r",))})

    def _tmem(self) -> set:
        out = {self._id(("t",))} | {self._id(("q", g)) for g in self.mma_groups}
        for c in self.tmem_chans:
            out |= self._slots(c)
        return out

    def _instr(self, g: int, ins):
        """(reads, writes, spawned (reads, writes)) of one instruction of group g."""
        k = ins.kind
        r, w, spawn_r, spawn_w = set(), set(), set(), set()
        if k is OpKind.MBAR_WAIT:
            r |= self._bars(*ins.bar)
        elif k in (OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX):
            w |= self._arrive_objs(ins.bar)
            if ins.bar[0] in self.tmem_chans:
                r |= self._tmem()
        elif k is OpKind.MMA_COMMIT:
            w |= self._arrive_objs(ins.bar) | {self._id(("q", g))}
        elif k is OpKind.TMA_LOAD:
            c = ins.ring[0]
            w |= self._slots(c)
            spawn_w |= self._slots(c) | self._bars(c, "full")
        elif k is OpKind.SLOT_STORE:
            c = ins.ring[0]
            w |= self._slots(c) | {self._id(("u",))}
            r |= {self._id(("q", g))}
            if c in self.tmem_chans:
                w |= self._tmem()
        elif k is OpKind.SLOT_READ:
            c = ins.ring[0]
            r |= self._slots(c)
            if c in self.tmem_chans:
                r |= self._tmem()
        elif k is OpKind.MMA_ASYNC:
            w.add(self._id(("q", g)))
            for c in self.read_chans[g]:
                w |= self._slots(c)
            r.add(self._id(("u",)))
            if self.tmem_chans:
                w |= self._tmem()
            spawn_r, spawn_w = set(self.mma_fp[g][0]), set(self.mma_fp[g][1])
        elif k is OpKind.MMA_WAIT:
            r.add(self._id(("q", g)))
        elif k in (OpKind.FENCE_PROXY_ASYNC, OpKind.TMEM_STORE_FENCE):
            w.add(self._id(("u",)))
        elif k is OpKind.TMEM_DEALLOC:
            w |= self._tmem() | {self._id(("q", x)) for x in range(self.prog.ngroups)}
        elif k in (OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE):
            w.add(self._id(("n", ins.op.attrs.id)))
        elif k is OpKind.SETMAXNREG:
            w.add(self._id(("r",)))
        elif ins.op is not None and any(a is not None for a in ins.args):
            # a use of a slot view checks the slot still holds the item (`Engine._check_view`)
            for c in self.read_chans[g]:
                r |= self._slots(c)
        return frozenset(r), frozenset(w), frozenset(spawn_r), frozenset(spawn_w)

    def _successors(self, g: int, pc: int) -> list:
        code = self.prog.programs[g]
        ins = code[pc]
        if ins.kind == LOOP_ENTER:
            nxt = [pc + 1, ins.target]
        elif ins.kind == LOOP_END:
            nxt = [ins.target, pc + 1]
        else:
            nxt = [pc + 1]
        out = []
        for n in nxt:
            if n >= len(code):
                if self.prog.launch.persistent:
                    out.append(0)           # the next tile
                continue
            out.append(n)
        return out

    def _union(self, g: int, pc: int, stop_at_visible: bool):
        """Reads and writes of what group g does from pc: its next step (up to the next visible op), or its
        whole future, with the copies and MMA completions it spawns."""
        code = self.prog.programs[g]
        r, w = set(), set()
        seen = {pc}
        todo = [pc]
        first = True
        while todo:
            p = todo.pop()
            ins = code[p]
            if stop_at_visible and not first and ins.visible:
                first = False
                continue
            fr, fw, sr, sw = self.instr_fp[g][p]
            r |= fr | sr
            w |= fw | sw
            if first:
                first = False
            for n in self._successors(g, p):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return frozenset(r), frozenset(w)


def _conflict(a, b) -> bool:
    return bool(a[1] & (b[0] | b[1]) or b[1] & a[0])


def persistent_set(fp: Footprints, eng, st, steps: list, asyncs: list) -> list:
    """A persistent set of the enabled actions of state `st`: the enabled actions of a closed set of actors
    (the smallest found by trying each enabled actor as a seed). Closing a set: an enabled actor's next
    action brings in every actor whose future conflicts with it; a blocked group brings in every actor whose
    future writes what it waits on (only those can enable it, so it does not move before they do)."""
    actors = []          # (enabled action or None, next footprint, future footprint, blocking objects)
    enabled_steps = {a[1] for a in steps}
    for gi, g in enumerate(st.groups):
        if g.done:
            continue
        en = (GROUP, gi) if gi in enabled_steps else None
        actors.append((en, fp.step[gi][g.pc], fp.future[gi][g.pc],
                       None if en is not None else fp.blocking(g, gi)))
    for act in asyncs:
        if act[0] == TMA:
            f = fp.landing_fp(st.tmas[act[1]])
        elif act[0] == MMA:
            f = fp.mma_fp[act[1]]
        else:                                   # a due tcgen05.commit arrives on its barrier
            gi, k = act[1]
            f = (frozenset(), frozenset({fp._id(("b", st.groups[gi].commits[k][1]))}))
        actors.append((act, f, f, None))
    enabled = [i for i, a in enumerate(actors) if a[0] is not None]
    if len(enabled) <= 1:
        return [actors[i][0] for i in enabled]
    best, best_size = None, len(enabled)
    n = len(actors)
    for seed in enabled:
        closed = {seed}
        work = [seed]
        size = 1
        while work and size < best_size:
            c = work.pop()
            _, nxt, _, blocked = actors[c]
            for d in range(n):
                if d in closed:
                    continue
                fut = actors[d][2]
                if (blocked & fut[1]) if blocked is not None else _conflict(nxt, fut):
                    closed.add(d)
                    work.append(d)
                    size += actors[d][0] is not None
        if size < best_size:           # closed (the loop ran out of work) and smaller than any before
            best, best_size = closed, size
            if size == 1:
                break
    if best is None:
        return [actors[i][0] for i in enabled]
    return [actors[i][0] for i in sorted(best) if actors[i][0] is not None]
