"""Blackwell semantics for the simulator: tensor-memory buffers and `tcgen05.commit`.

Tensor memory is a set of buffers (the kernel's `TmemPlan`); several tensor-memory rings may map to one
buffer (a tile rewritten in place, P over S). Each buffer remembers who wrote it last — an item of a ring,
or an MMA of some group — and every access is checked against that:

  * a write (an MMA issued into the buffer, a `slot_store` by CUDA cores) may replace an item only when all
    its consumers released it, or when the writer is the one consumer still holding it (in place: it has
    read what it needs, in program order);
  * a read (`slot_read`, an MMA operand) must find the item it expects still resident; an item overwritten
    since it was published is a `read-after-release`;
  * after `tmem_dealloc` nothing may touch tensor memory, and no MMA may still be in flight.

`mma_commit` is an arrival that fires when every MMA its group issued before it has completed (MMAs
complete in issue order): the engine queues it on the group and fires it from `mma_complete`. A commit on
an `empty` barrier releases the slot for its group at issue (the group reads it no more; its in-flight MMAs
do, and the arrival waits for them).
"""
from __future__ import annotations

from aref.sim.values import SimViolation

MMA_OWNER = "mma"


class TensorMemory:
    """Static tensor-memory facts of a program: which buffer each ring and each MMA uses."""

    def __init__(self, kernel, chans, plan=None, doubled=frozenset()):
        plan = plan if plan is not None else getattr(kernel, "tmem", None)
        # one entry per buffer slot: a ring CUDA cores fill may have several
        self.names, index = [], {}
        for b in (plan.buffers if plan is not None else []):
            index[b.name] = len(self.names)
            self.names += [b.name] if b.depth == 1 else [f"{b.name}[{s}]" for s in range(b.depth)]
        self.of_chan = {c: index[plan.ring_buffer[ch.name]] for c, ch in enumerate(chans)
                        if plan is not None and ch.name in plan.ring_buffer}
        # a buffer of two stages that a persistent launch doubled (`aref.sim.launch`): its MMAs write the stage
        # of their channel's ring position
        self.staged = {plan.ring_buffer[ch.name]: c for c, ch in enumerate(chans) if ch.name in doubled}
        # aliases share columns: a write to one invalidates what the other held
        self.alias = {}
        if plan is not None:
            for b in plan.buffers:
                if b.alias_of is not None:
                    self.alias.setdefault(index[b.name], set()).add(index[b.alias_of])
                    self.alias.setdefault(index[b.alias_of], set()).add(index[b.name])

    def __bool__(self) -> bool:
        return bool(self.names)


def buffer_of_mma(eng, ins, g) -> int | None:
    name = getattr(ins.op.attrs, "tmem", "")
    if not name:
        return None
    tm = eng.prog.tmem
    if name in tm.staged:                  # a doubled accumulator: the stage of its ring's position
        c = tm.staged[name]
        return tm.of_chan[c] + g.bases[c] % 2
    return tm.names.index(name)


def check_read(eng, st, gi, ins, chan: int, slot: int, item, what: str) -> None:
    """A read of `item` in `slot` of tensor-memory ring `chan` must find it resident."""
    tm = eng.prog.tmem
    if chan not in tm.of_chan:
        return
    b = tm.of_chan[chan] + slot
    _check_allocated(eng, st, gi, ins)
    owner = st.tmem[b]
    name = eng.prog.chans[chan].name
    if owner is None or owner[:2] != (chan, item):
        now = _describe(eng, owner)
        raise SimViolation("read-after-release", f"{what} item {item} of channel {name} from tensor memory "
                                                 f"{tm.names[b]}, which now holds {now}", ins.op, gi)
    if len(owner) > 2 and owner[2] is not None:
        writer, seq = owner[2]
        if st.groups[writer].completed <= seq:
            raise SimViolation("read-unpublished-slot", f"{what} item {item} of channel {name} from tensor memory "
                                                        f"{tm.names[b]} before mma_async #{seq} of group "
                                                        f"{eng.prog.groups[writer].name} that writes it completed "
                                                        f"(it was published without waiting for the MMA: "
                                                        f"mma_commit)", ins.op, gi)


def write(eng, st, gi, ins, buffer: int, new_owner, in_place_of=None) -> None:
    """Group gi writes `buffer` (and every buffer sharing its columns); `in_place_of` is the (chan, item) the
    writer accumulates on (an MMA's accumulator), which it may overwrite while holding it."""
    _check_allocated(eng, st, gi, ins)
    for b in (buffer, *sorted(eng.prog.tmem.alias.get(buffer, ()))):
        owner = st.tmem[b]
        if owner is None or owner[:2] == in_place_of or not isinstance(owner[0], int):
            continue
        chan, item = owner[:2]
        ch = eng.prog.chans[chan]
        s = st.slots[eng.prog.slot_base[chan] + item % ch.depth]
        if s.item != item:
            continue                 # the ring moved on: that item was released
        holders = [c for c in ch.consumers if not s.rel_groups >> c & 1]
        if holders and holders != [gi]:
            who = ", ".join(eng.prog.groups[c].name for c in holders)
            raise SimViolation("write-to-borrowed-slot",
                               f"writes tensor memory {eng.prog.tmem.names[b]} while item {item} of channel "
                               f"{ch.name} there is still held by {who}", ins.op, gi)
    tm = list(st.tmem)
    tm[buffer] = new_owner
    for b in eng.prog.tmem.alias.get(buffer, ()):
        tm[b] = ("clobbered", buffer)
    st.tmem = tuple(tm)


def publish(eng, st, gi, ins, chan: int, slot: int, item, value_seq) -> None:
    """The MMA group's in-place `slot_store`: the MMA result `value_seq` (its issue number in group gi, or None
    for a constant the tensor core writes) becomes `item` of ring `chan`."""
    b = eng.prog.tmem.of_chan[chan] + slot
    if value_seq is not None and st.tmem[b] != (MMA_OWNER, gi, value_seq) and (st.tmem[b] or ())[:2] != (chan, item):
        name = eng.prog.chans[chan].name
        raise SimViolation("malformed", f"publishes MMA result #{value_seq} as item {item} of channel {name}, "
                                        f"but tensor memory {eng.prog.tmem.names[b]} holds "
                                        f"{_describe(eng, st.tmem[b])}", ins.op, gi)
    if value_seq is None:
        write(eng, st, gi, ins, b, (chan, item))
    tm = list(st.tmem)
    # remember the MMA that writes the item: reading it before that MMA completes is a race
    tm[b] = (chan, item, None if value_seq is None else (gi, value_seq))
    st.tmem = tuple(tm)


def dealloc(eng, st, gi, ins) -> None:
    for o, g in enumerate(st.groups):
        if g.completed < g.issued:
            raise SimViolation("mma-in-flight-at-exit", f"frees tensor memory while {g.issued - g.completed} MMAs "
                                                        f"of group {eng.prog.groups[o].name} are in flight", ins.op,
                               gi)
    st.tmem_freed = True


def _check_allocated(eng, st, gi, ins) -> None:
    if st.tmem_freed:
        raise SimViolation("malformed", "touches tensor memory after tmem_dealloc freed it", ins.op, gi)


def _describe(eng, owner) -> str:
    if owner is None:
        return "nothing written yet"
    if owner[0] == MMA_OWNER:
        return f"the result of mma_async #{owner[2]} of group {eng.prog.groups[owner[1]].name}"
    if owner[0] == "clobbered":
        return f"the columns of {eng.prog.tmem.names[owner[1]]}, written since"
    return f"item {owner[1]} of channel {eng.prog.chans[owner[0]].name}"
