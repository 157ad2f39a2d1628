"""The state of one CTA under simulation: groups as explicit state machines, mbarriers, slots, async units.

Everything the explorer must copy is either an immutable value (tuples, frozensets, tensors that are never
mutated in place) or one of the small mutable records below with a `copy()`, so copying a state is cheap.

`key()` is the control state the explorer hashes. A group's environment is deliberately not part of it:
groups exchange only tiles (through slots), never scalars, so every scalar a group holds — slots, items,
parities, predicates, trip counts — is a function of the group's own (pc, loop counter); and tile data is
not simulated during exploration. Slot views and pending MMA results are likewise numbered by the group's
own history.
"""
from __future__ import annotations

from typing import NamedTuple


class Slot(NamedTuple):
    """One slot of a channel's ring: which item it holds and how far that item got."""

    item: object = None          # item index held (None: never written)
    written: int = 0             # bit r: payload ring r was written (TMA issued or slot_store done)
    landed: int = 0              # bit r: payload ring r's data is in shared memory
    published: bool = False      # the full barrier completed a phase with every payload ring landed
    rel_count: int = 0           # arrivals on `empty` that released this item
    rel_groups: int = 0          # bit g: group g released this item
    readers: frozenset = frozenset()   # (group, mma seq) of incomplete mma_async reading the slot


class SlotData(NamedTuple):
    """What a slot holds besides its control state (kept apart so `Slot`s hash as plain tuples)."""

    data: tuple                  # per payload ring: tensor / OPAQUE / None
    last_read: object = None     # (op, group) of the last slot_read (for messages)
    writer: object = None        # (op, group) of the last write into the slot (for messages)


class Group:
    """A warp group's execution context: position, loop counter, values, MMA queue, registers."""

    __slots__ = ("pc", "k", "trip", "env", "done", "rest", "nb", "regs", "issued", "completed", "retired",
                 "mma_reads", "unfenced", "waits", "commits", "committed", "tile", "cta", "bases", "lead",
                 "_key")

    def __init__(self, env: dict, regs: int):
        self.pc = 0
        self.k = 0
        self.trip = 0
        self.env = env
        self.done = False
        self.rest = None        # blocking condition of the visible op the group rests at (derived from env)
        self.nb = None          # named-barrier generation this group waits to see completed
        self.regs = regs
        self.issued = 0         # mma_async issued
        self.completed = 0      # ... completed by the tensor core (in issue order)
        self.retired = 0        # ... retired by mma_wait (results readable)
        self.mma_reads = ()     # ((seq, ((chan, slot), ...)), ...) for issued, un-retired MMAs
        self.unfenced = frozenset()   # (chan, slot) written by slot_store and not yet fenced
        self.waits = {}         # (chan, which, slot) -> last mbarrier_wait op on it (for messages)
        self.commits = ()       # mma_commit arrivals not yet fired: ((MMAs to complete, barrier index, count, op), ...)
        self.committed = 0      # MMAs covered by a fired mma_commit (Blackwell's way of retiring them)
        self.tile = 0           # the tile of the CTA's walk the group runs (a persistent launch: several)
        self.cta = ()           # that tile's coordinates (program ids)
        self.bases = ()         # per channel: items the CTA's earlier tiles put (a persistent ring's position)
        self.lead = 0           # tiles of the CTA before the group's first (the other overlap copy's), not yet
        #                         counted in `bases` (they are, at the first ring access, from this tile's count)
        self._key = None

    def copy(self) -> "Group":
        g = Group.__new__(Group)
        g.pc, g.k, g.trip, g.env, g.done, g.rest, g.nb = self.pc, self.k, self.trip, dict(self.env), \
            self.done, self.rest, self.nb
        g.regs, g.issued, g.completed, g.retired = self.regs, self.issued, self.completed, self.retired
        g.mma_reads, g.unfenced, g.waits = self.mma_reads, self.unfenced, dict(self.waits)
        g.commits, g.committed = self.commits, self.committed
        g.tile, g.cta, g.bases, g.lead = self.tile, self.cta, self.bases, self.lead
        g._key = None
        return g

    def key(self) -> tuple:
        # cached: a group is never mutated after its key is taken (the engine copies it before every change)
        if self._key is None:
            self._key = (self.pc, self.k, self.done, self.nb, self.regs, self.issued, self.completed, self.retired,
                         self.unfenced, tuple(c[:3] for c in self.commits), self.tile)
        return self._key


class CTAState:
    """One CTA: its groups, mbarriers (pending, tx, phase, completed phases), slots, TMAs in flight and
    named barriers (id -> (arrived threads, generation))."""

    __slots__ = ("groups", "bars", "bar_last", "slots", "sdata", "tmas", "nbars", "nb_last", "steps", "tmem",
                 "tmem_freed")

    def __init__(self, groups, bars, slots, sdata, tmem_buffers: int = 0):
        self.groups = groups
        self.bars = bars
        self.bar_last = [None] * len(bars)     # (op, group) that last arrived / completed tx on each barrier
        self.slots = slots
        self.sdata = sdata
        self.tmas = ()                         # ((chan, ring, slot, item, bar index, bytes, data, op, group),)
        self.nbars = {}
        self.nb_last = {}                      # named barrier id -> (op, group) that arrived last
        self.steps = 0
        self.tmem = (None,) * tmem_buffers     # Blackwell: who wrote each tensor-memory buffer last
        self.tmem_freed = False

    def copy(self) -> "CTAState":
        """A copy sharing the groups: `Engine.apply` copies a group before it changes it (copy on write)."""
        s = CTAState.__new__(CTAState)
        s.groups = list(self.groups)
        s.bars, s.bar_last, s.slots, s.sdata = list(self.bars), list(self.bar_last), list(self.slots), \
            list(self.sdata)
        s.tmas, s.nbars, s.nb_last, s.steps = self.tmas, dict(self.nbars), dict(self.nb_last), self.steps
        s.tmem, s.tmem_freed = self.tmem, self.tmem_freed
        return s

    def key(self) -> tuple:
        return (tuple([g.key() for g in self.groups]), tuple(self.bars), tuple(self.slots),
                tuple(sorted([t[:4] for t in self.tmas])) if self.tmas else (),
                tuple(sorted(self.nbars.items())) if self.nbars else (), self.tmem, self.tmem_freed)
