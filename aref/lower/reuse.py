"""Shared memory a group may reuse after the loop once it is dead: the slot of a channel outside the loop whose
every reader has released it.

FlashAttention-3 at head dim 256 stages its output in Q's buffer: Q is read by the loop's MMAs only, and
after the loop O needs a 128×256 staging tile that does not fit beside Q and the K/V rings. The rule is
general: a channel with one item, put before the store and never refilled (not persistent), is dead once
every reader released its slot. A group that is the only reader knows that from its own release
(`aref.resources.memory.smem_plan` places its staging there without a wait); any other group waits on the
slot's `empty` barrier for the phase of that item — the wait a producer would make before refilling it —
right before it first writes what the dead slot holds: a TMA store's staging tile, or the slot of a channel
after the loop that it fills for another group to store (on Blackwell the epilogue warp's TMA store reads
the correction group's output from such a slot: that slot is the staging). Cooperative consumers reading two
halves of one Q tile both wait, so neither writes into rows the other still reads.

The wait is inserted only where the plan does not fit without it, and only where it cannot deadlock: no
reader's release of the dead slot may depend on what the waiting group signals from the wait on (its arrives
and named barriers after it, and transitively what other groups signal once they have waited for those).
The simulator runs the wait as any other (`aref.sim`), so an order it would block shows up there as a
deadlock.
"""
from __future__ import annotations

from aref.ir import BarrierAttrs, ConstAttrs, DType, Op, OpKind, ScalarType, Space, Value
from aref.ir.ws import Channel, GroupProgram, WSKernel
from aref.resources.memory import store_tma_problem, swizzled

RELEASES = (OpKind.MBAR_ARRIVE, OpKind.MMA_COMMIT)


def _one_item(kernel: WSKernel, ch: Channel) -> bool:
    """Does the channel carry exactly one item, put outside the loop without a predicate?"""
    if ch.region == "loop" or not ch.rings:
        return False
    producer = kernel.groups[ch.producer]
    puts = [(region, op) for region, block in producer.regions() for op in block.ops
            if op.kind is OpKind.MBAR_WAIT and op.attrs.channel == ch.name and op.attrs.which == "empty"]
    return len(puts) == 1 and puts[0][0] != "loop" and puts[0][1].pred is None


def _release(gp: GroupProgram, ch: Channel) -> Op | None:
    """The group's unconditional release of the channel's slot (an arrive or an MMA commit on `empty`)."""
    return next((op for op in gp.all_ops() if op.kind in RELEASES and op.attrs.channel == ch.name
                 and op.attrs.which == "empty" and op.pred is None), None)


def dead_slots(kernel: WSKernel) -> list[Channel]:
    """Channels whose slot is dead once every reader released it: one item, swizzled shared tiles (what a 2-D
    staging tile may be laid over), released by every reader; the largest first."""
    out = [ch for ch in kernel.channels
           if _one_item(kernel, ch) and all(t.space is Space.SMEM and swizzled(t) for t in ch.payload)
           and all(_release(kernel.groups[c], ch) is not None for c in ch.consumers)]
    return sorted(out, key=lambda ch: -ch.slot_bytes)


def _writes_dead_memory(kernel: WSKernel, gp: GroupProgram, op: Op) -> bool:
    """Does `op`, after the loop, start writing shared memory a dead slot may hold: a TMA store from registers
    (its 2-D swizzled staging tile), or the first wait of the group's put into a one-item channel after the loop
    whose payload is swizzled shared tiles?"""
    if op.kind is OpKind.STORE:
        v = op.operands[-1].type
        return store_tma_problem(op) is None and v.space is not Space.SMEM and len(v.shape) == 2 \
            and swizzled(v.with_space(Space.SMEM))
    if op.kind is OpKind.MBAR_WAIT and op.attrs.which == "empty":
        ch = kernel.channel(op.attrs.channel)
        return ch.producer == gp.group.id and ch.region == "post" and _one_item(kernel, ch) \
            and all(t.space is Space.SMEM and swizzled(t) for t in ch.payload)
    return False


def _signals(ops: list[Op]) -> set[tuple]:
    """The barriers `ops` arrive at: (channel, which) of mbarriers, ("named", id) of named barriers."""
    out = set()
    for op in ops:
        if op.kind in RELEASES or op.kind is OpKind.MBAR_EXPECT_TX:
            out.add((op.attrs.channel, getattr(op.attrs, "which", "full")))
        elif op.kind is OpKind.TMA_LOAD:
            out.add((op.attrs.channel, "full"))
        elif op.kind in (OpKind.NAMED_BAR_ARRIVE, OpKind.NAMED_BAR_SYNC):
            out.add(("named", op.attrs.id))
    return out


def _waits(kernel: WSKernel, ops: list[Op]) -> list[tuple | None]:
    """What each op may block on: (channel, which) of an mbarrier wait, ("named", id) of a named-barrier sync,
    else None. A producer's first wait on the `empty` barrier of a channel outside the loop never blocks (the
    opposite parity of a fresh barrier), so it is None too."""
    consts = {id(op.result): op.attrs.value for op in ops if op.kind is OpKind.CONST and op.results}
    seen: set[str] = set()
    out = []
    for op in ops:
        w = None
        if op.kind is OpKind.MBAR_WAIT:
            w = (op.attrs.channel, op.attrs.which)
            first = op.attrs.which == "empty" and op.attrs.channel not in seen
            if op.attrs.which == "empty":
                seen.add(op.attrs.channel)
            if first and kernel.channel(op.attrs.channel).region != "loop" and consts.get(id(op.operands[2])) == 1:
                w = None
        elif op.kind is OpKind.NAMED_BAR_SYNC:
            w = ("named", op.attrs.id)
        out.append(w)
    return out


def _blocked(kernel: WSKernel, gp: GroupProgram, at: int) -> dict[int, int]:
    """For every other group: the position in its program order from which it may have to wait for what group
    `gp` signals after its post-loop op `at` (directly or through other groups), i.e. its first wait on such a
    barrier; groups that never do are left out."""
    after = _signals(gp.post.ops[at:])
    programs = {g.group.id: list(g.all_ops()) for g in kernel.groups if g is not gp}
    waits = {gid: _waits(kernel, ops) for gid, ops in programs.items()}
    blocked: dict[int, int] = {}
    changed = True
    while changed:
        changed = False
        for gid, ops in programs.items():
            start = next((i for i, w in enumerate(waits[gid]) if w is not None and w in after), None)
            if start is None or blocked.get(gid, len(ops)) <= start:
                continue
            blocked[gid] = start
            after |= _signals(ops[start:])
            changed = True
    return blocked


def _safe(kernel: WSKernel, gp: GroupProgram, at: int, ch: Channel) -> bool:
    """Can group `gp` wait before its post-loop op `at` for every reader's release of `ch` without a deadlock?"""
    blocked = _blocked(kernel, gp, at)
    for c in ch.consumers:
        if c == gp.group.id:
            continue            # its own release comes first in its program (checked by the caller's order)
        ops = list(kernel.groups[c].all_ops())
        rel = _release(kernel.groups[c], ch)
        if c in blocked and ops.index(rel) >= blocked[c]:
            return False
    return True


def dead_slot_waits(kernel: WSKernel) -> list[tuple[GroupProgram, Op]]:
    """Insert, in place, a wait for the release of a dead slot (module docstring) before the first post-loop op
    of every group that writes memory it may hold. Returns the (group, op) pairs inserted (`undo` removes them
    where they do not make the plan fit)."""
    chans = dead_slots(kernel)
    inserted = []
    for gp in kernel.groups:
        at = next((i for i, op in enumerate(gp.post.ops) if _writes_dead_memory(kernel, gp, op)), None)
        if at is None:
            continue
        for ch in chans:
            if ch.producer == gp.group.id or ch.consumers == (gp.group.id,):
                continue        # the producer never reads it; the only reader needs no wait (its own release)
            own = _release(gp, ch) if gp.group.id in ch.consumers else None
            if own is not None and own not in gp.post.ops[:at] and own not in gp.pre.ops:
                continue        # it releases the slot later itself
            if not _safe(kernel, gp, at, ch):
                continue
            loc = gp.post.ops[at].loc
            zero = Value(ScalarType(DType.int32))
            const = Op(OpKind.CONST, (), (zero,), ConstAttrs(0), loc)
            # item 0 lives in slot 0; the wait for its phase (parity 0) returns once every reader arrived
            wait = Op(OpKind.MBAR_WAIT, (ch.empty, zero, zero), (), BarrierAttrs(ch.name, "empty"), loc)
            gp.post.ops[at:at] = [const, wait]
            inserted += [(gp, const), (gp, wait)]
            break
    return inserted


def undo(inserted: list[tuple[GroupProgram, Op]]) -> None:
    for gp, op in inserted:
        gp.post.ops = [o for o in gp.post.ops if o is not op]
