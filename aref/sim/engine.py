"""Barrier IR semantics: what one step of a group, a TMA landing or an MMA completing does to a CTA state.

The engine is deterministic; the schedulers (`aref.sim.run`: random and exhaustive, `aref.sim.timing`:
discrete-event) choose which enabled action happens next:

  (GROUP, g)   group g executes the visible op it rests at, then its local ops up to the next visible op
  (TMA, j)     the j-th TMA copy in flight lands in its slot and completes its bytes on the full barrier
  (MMA, g)     the oldest incomplete mma_async of group g completes (a group's MMAs complete in order)

mbarriers follow the hardware: per (barrier, slot) a pending-arrival count, a signed transaction count and a
phase bit; a phase completes when both counts reach zero, which flips the bit and re-arms the arrival count.
`mbarrier_wait(bar, slot, parity)` can proceed once the phase bit differs from `parity`.

Every rule of the contract in `aref.ir.ws` is checked where it can first be seen, raising `SimViolation`.
"""
from __future__ import annotations

import torch

from aref.ir.dtypes import to_torch
from aref.interp.tile import evaluate, round_result
from aref.ir import OpKind
from aref.ops import VIEWS
from aref.lower import launch_threads
from aref.ops.memory import load_box, tma_bytes
from aref.target.machine import machine_for
from aref.sim.program import EAGER, LOOP_END, LOOP_ENTER, MalformedIR, Prog
from aref.sim import tensor_memory
from aref.sim.state import CTAState, Group, Slot, SlotData
from aref.sim.values import OPAQUE, UNDEF, Pending, SimViolation, SlotView

GROUP, TMA, MMA = 0, 1, 2
_PLAIN = (int, float, bool, torch.Tensor)
# ops whose result is a view of their operand (`aref.ops.VIEWS`): a view of a slot stays tied to the slot


class Engine:
    """Executes one CTA of `prog` on `tensors` (by parameter name). With `compute_values=False` tiles are
    OPAQUE and only the control state (scalars, barriers, slots, MMA queues) is simulated."""

    def __init__(self, prog: Prog, tensors: dict, cta: tuple, compute_values: bool = True, machine=None):
        self.prog, self.cta, self.values = prog, tuple(cta), compute_values
        self.machine = machine or machine_for(prog.kernel.arch)
        glob = dict(prog.globals)
        for name, vid in prog.param_ids.items():
            glob[vid] = tensors[name] if compute_values else tensors.get(name, OPAQUE)
        self.glob = glob
        self.threads = [g.threads for g in prog.groups]
        m = self.machine
        total = launch_threads(prog.kernel)
        # Registers each thread holds at launch: the whole file shared evenly, as a kernel compiled for this
        # block size gets (capped per thread, rounded down to the allocation step).
        self.launch_regs = min(m.max_regs_per_thread, m.registers // max(total, 1)) // m.setmaxnreg_step \
            * m.setmaxnreg_step
        # (group, Instr) of every executed op and loop marker, in order, when a list (the timing model's view)
        self.trace: list | None = None
        # the timing model's longer loop (`aref.sim.timing.extend_loop`): per group, the id of its value of the
        # loop's trip count, which comes out `extra_trips` larger
        self.extra_trips = 0
        self.trip_ids: list = [None] * len(prog.groups)

    # ------------------------------------------------------------------------------------ state set-up
    def initial(self) -> CTAState:
        p = self.prog
        groups = [Group(dict(self.glob), self.launch_regs) for _ in p.programs]
        bars = [(init, 0, 0, 0) for init in p.bar_init]
        slots = [Slot() for ch in p.chans for _ in range(ch.depth)]
        sdata = [SlotData((None,) * p.nrings[c]) for c, ch in enumerate(p.chans) for _ in range(ch.depth)]
        st = CTAState(groups, bars, slots, sdata, len(p.tmem.names))
        for gi in range(len(groups)):
            self._advance(st, gi)
        return st

    # ------------------------------------------------------------------------------------ scheduling
    def actions(self, st: CTAState) -> tuple[list, list]:
        """(enabled group steps, enabled async completions); both empty when the CTA is finished or stuck."""
        steps = [(GROUP, gi) for gi, g in enumerate(st.groups) if not g.done and self._enabled(st, gi, g)]
        asyncs = [(TMA, j) for j in range(len(st.tmas))]
        asyncs += [(MMA, gi) for gi, g in enumerate(st.groups) if g.completed < g.issued]
        return steps, asyncs

    def apply(self, st: CTAState, action) -> None:
        kind, x = action
        st.steps += 1
        if kind == GROUP:
            st.groups[x] = g = st.groups[x].copy()     # copy on write: states may share groups
            if self.trace is not None:
                self.trace.append((x, self.prog.programs[x][g.pc]))
            if self._visible(st, x, g, self.prog.programs[x][g.pc]):
                g.pc += 1
                self._advance(st, x)
        elif kind == TMA:
            self._land(st, x)
        else:
            self._mma_complete(st, x)

    def finished(self, st: CTAState) -> bool:
        return all(g.done for g in st.groups)

    def _enabled(self, st, gi, g) -> bool:
        r = g.rest
        if r is None:
            return True
        tag = r[0]
        if tag == "bar":
            return st.bars[r[1]][2] != r[2]
        if tag == "mma":
            return g.issued - g.completed <= r[1]
        if tag == "nb":
            return g.nb is None or st.nbars.get(r[1], (0, 0))[1] > g.nb
        # "reg": setmaxnreg.inc waits until the register pool can give the group its new allocation
        others = sum(o.regs * self.threads[i] for i, o in enumerate(st.groups) if i != gi)
        return others + r[1] * self.threads[gi] <= self.machine.registers

    # ------------------------------------------------------------------------------------ operands
    def _fail(self, kind, msg, ins, gi):
        raise SimViolation(kind, msg, ins.op if ins is not None else None, gi)

    def _raw(self, g, gi, ins, i):
        try:
            v = g.env[ins.args[i]]
        except KeyError:
            self._fail("undefined-value", f"operand {i} ({self._vname(ins.op.operands[i])}) is not defined in "
                                          f"this group (not in scope here)", ins, gi)
        if v is UNDEF:
            self._fail("undefined-value", f"operand {i} ({self._vname(ins.op.operands[i])}) was not computed: "
                                          f"the op defining it was predicated off", ins, gi)
        return v

    def _scalar(self, g, gi, ins, i) -> int:
        v = self._raw(g, gi, ins, i)
        if v is OPAQUE:
            raise MalformedIR(f"{ins.op.kind.value} at {ins.op.loc.short()}: control operand {i} depends on tile "
                              f"data; run with compute_values=True")
        if isinstance(v, (Pending, SlotView)):
            self._fail("malformed", f"operand {i} is a tile where a scalar is expected", ins, gi)
        return int(v)

    def _vname(self, v) -> str:
        return v.name and f"%{v.name}" or f"value #{v.id}"

    def _check_view(self, st, gi, view: SlotView, ins) -> None:
        s = st.slots[self.prog.slot_base[view.chan] + view.slot]
        name = self.prog.chans[view.chan].name
        if s.item != view.item:
            self._fail("read-after-release", f"reads item {view.item} of slot {view.slot} of channel {name}, but "
                                             f"the slot now holds item {s.item}", ins, gi)
        if s.rel_groups >> gi & 1:
            self._fail("read-after-release", f"reads item {view.item} of slot {view.slot} of channel {name} after "
                                             f"this group released it (arrive on empty)", ins, gi)

    # ------------------------------------------------------------------------------------ local execution
    def _advance(self, st, gi) -> None:
        """Run group gi's local ops up to its next visible op (whose predicate is true) or its end."""
        g = st.groups[gi]
        prog = self.prog.programs[gi]
        env = g.env
        while g.pc < len(prog):
            ins = prog[g.pc]
            if ins.kind == LOOP_ENTER or ins.kind == LOOP_END:
                if self.trace is not None:
                    self.trace.append((gi, ins))
                self._loop(g, gi, ins)
                continue
            if ins.pred is not None:
                c = env.get(ins.pred, UNDEF)
                if c is UNDEF or c is OPAQUE or isinstance(c, (Pending, SlotView)):
                    self._fail("undefined-value", "its predicate has no defined scalar value", ins, gi)
                if not c:
                    for r in ins.res:
                        env[r] = UNDEF
                    g.pc += 1
                    continue
            if ins.visible:
                g.rest = self._rest(st, gi, g, ins)
                return
            if self.trace is not None:
                self.trace.append((gi, ins))
            if ins.kind in EAGER:
                self._visible(st, gi, g, ins)
            else:
                self._compute(st, gi, g, ins)
            g.pc += 1
        g.done, g.rest = True, None

    def _loop(self, g, gi, ins) -> None:
        loop, env = ins.loop, g.env

        def take(values):
            out = []
            for v in values:
                if id(v) not in env:
                    raise SimViolation("undefined-value", f"loop value {self._vname(v)} is not defined in this "
                                                          f"group", None, gi)
                out.append(env[id(v)])
            return out

        if ins.kind == LOOP_ENTER:
            trip = env.get(id(loop.trip_count), UNDEF)
            if trip is UNDEF or trip is OPAQUE:
                raise SimViolation("undefined-value", "the loop's trip count is not defined in this group", None, gi)
            g.trip, g.k = int(trip), 0
            vals = take(loop.inits)
            if g.trip <= 0:
                for v, x in zip(loop.results, vals):
                    env[id(v)] = x
                g.pc = ins.target
                return
            env[id(loop.iv)] = 0
            for v, x in zip(loop.carried, vals):
                env[id(v)] = x
            g.pc += 1
            return
        vals = take(loop.yields)
        g.k += 1
        if g.k < g.trip:
            env[id(loop.iv)] = g.k
            for v, x in zip(loop.carried, vals):
                env[id(v)] = x
            g.pc = ins.target
            return
        # leaving the loop: body values go out of scope (the contract's scoping rule), results come in
        for op in loop.body.ops:
            for r in op.results:
                env.pop(id(r), None)
        for v in (loop.iv, *loop.carried):
            env.pop(id(v), None)
        for v, x in zip(loop.results, vals):
            env[id(v)] = x
        g.pc += 1

    def _in_tmem(self, chan: int) -> bool:
        return any(r.type.tile.space.value == "tmem" for r in self.prog.chans[chan].rings)

    def _compute(self, st, gi, g, ins) -> None:
        k, op, env = ins.kind, ins.op, g.env
        if k is OpKind.TMEM_ALLOC:
            return                    # done before any group starts (with the mbarrier initialisation)
        if k in (OpKind.FENCE_PROXY_ASYNC, OpKind.TMEM_STORE_FENCE):
            # each fence covers the stores into its own memory: shared memory or (Blackwell) tensor memory
            tmem = k is OpKind.TMEM_STORE_FENCE
            g.unfenced = frozenset(e for e in g.unfenced if self._in_tmem(e[0]) != tmem)
            return
        if k is OpKind.SELECT:
            # a renaming (a skipped pipeline step passes state through): only the condition is read here
            c = self._scalar(g, gi, ins, 0)
            env[ins.res[0]] = env.get(ins.args[1 if c else 2], UNDEF)
            return
        vals, view, opaque = [], None, False
        for i, a in enumerate(ins.args):
            v = env.get(a, UNDEF)
            if v.__class__ in _PLAIN:          # fast path: numbers and tensors need no checks
                vals.append(v)
                continue
            v = self._raw(g, gi, ins, i)
            if isinstance(v, Pending):
                if v.seq >= g.retired:
                    self._fail("mma-result-not-ready", f"operand {i} ({self._vname(op.operands[i])}) is the "
                                                       f"result of mma_async #{v.seq} of this group, which no "
                                                       f"mma_wait has retired", ins, gi)
                v = v.tensor
            if isinstance(v, SlotView):
                self._check_view(st, gi, v, ins)
                view, v = v, v.tensor
            opaque = opaque or v is OPAQUE
            vals.append(v)
        if (not self.values and (ins.tile_out or k is OpKind.STORE)) or opaque:
            out = OPAQUE
        else:
            out = evaluate(op, vals, self.cta)
            if ins.res and (ins.tile_out or isinstance(out, torch.Tensor)):
                out = round_result(out, op.results[0])
        if ins.res:
            env[ins.res[0]] = view.derive(out) if view is not None and k in VIEWS else out
            if self.extra_trips and ins.res[0] == self.trip_ids[gi]:
                env[ins.res[0]] = out + self.extra_trips

    def _rest(self, st, gi, g, ins):
        """The condition the visible op `ins` blocks on (None: never blocks)."""
        k = ins.kind
        if k is OpKind.MBAR_WAIT:
            return ("bar", self._bar(ins, self._scalar(g, gi, ins, 1), gi), self._scalar(g, gi, ins, 2) & 1)
        if k is OpKind.MMA_WAIT:
            return ("mma", ins.op.attrs.pending)
        if k is OpKind.NAMED_BAR_SYNC:
            return ("nb", ins.op.attrs.id)
        if k is OpKind.SETMAXNREG and ins.op.attrs.increase:
            return ("reg", ins.op.attrs.regs)
        return None

    def _bar(self, ins, slot: int, gi) -> int:
        c, which = ins.bar
        depth = self.prog.chans[c].depth
        if not 0 <= slot < depth:
            self._fail("malformed", f"slot {slot} is outside the {depth} slots of channel "
                                    f"{self.prog.chans[c].name}", ins, gi)
        return self.prog.bar_base[c][0 if which == "full" else 1] + slot

    # ------------------------------------------------------------------------------------ visible ops
    def _visible(self, st, gi, g, ins) -> bool:
        """Execute the visible op group gi rests at; False if the group stays at it (named-barrier wait)."""
        k, op = ins.kind, ins.op
        if k is OpKind.MBAR_WAIT:
            c, which = ins.bar
            g.waits[(c, which, self._scalar(g, gi, ins, 1))] = op
        elif k is OpKind.MBAR_ARRIVE:
            self._mbar_arrive(st, gi, g, ins)
        elif k is OpKind.MBAR_EXPECT_TX:
            i = self._bar(ins, self._scalar(g, gi, ins, 1), gi)
            self._arrive(st, gi, ins, i, 1, op.attrs.bytes)
        elif k is OpKind.TMA_LOAD:
            self._tma_issue(st, gi, g, ins)
        elif k is OpKind.SLOT_STORE:
            c, r = ins.ring
            slot, item = self._scalar(g, gi, ins, 1), self._scalar(g, gi, ins, 2)
            v = self._raw(g, gi, ins, 3)
            seq = None
            if isinstance(v, Pending):
                if ins.tensor_pipe:
                    seq = v.seq          # published in place: the MMA writes the slot, mma_commit publishes it
                elif v.seq >= g.retired:
                    self._fail("mma-result-not-ready", f"stores the result of mma_async #{v.seq}, which no "
                                                       f"mma_wait has retired", ins, gi)
                v = v.tensor
            if isinstance(v, SlotView):
                self._check_view(st, gi, v, ins)
                v = v.tensor
            if c in self.prog.tmem.of_chan:
                if ins.tensor_pipe:
                    tensor_memory.publish(self, st, gi, ins, c, slot, item, seq)
                else:
                    tensor_memory.write(self, st, gi, ins, self.prog.tmem.of_chan[c] + slot, (c, item))
            si = self._write(st, gi, ins, c, slot, r, item)
            data = v if v is OPAQUE else v.to(to_torch(self.prog.chans[c].rings[r].type.tile.dtype))
            s, d = st.slots[si], st.sdata[si]
            st.slots[si] = s._replace(landed=s.landed | 1 << r)
            st.sdata[si] = d._replace(data=_put(d.data, r, data))
            if not ins.tensor_pipe:
                g.unfenced = g.unfenced | {(c, slot)}
        elif k is OpKind.SLOT_READ:
            self._slot_read(st, gi, g, ins)
        elif k is OpKind.MMA_ASYNC:
            self._mma_issue(st, gi, g, ins)
        elif k is OpKind.MMA_WAIT:
            g.retired = max(g.retired, g.issued - op.attrs.pending)
            g.mma_reads = tuple(e for e in g.mma_reads if e[0] >= g.retired)
        elif k is OpKind.MMA_COMMIT:
            self._mma_commit(st, gi, g, ins)
        elif k is OpKind.TMEM_DEALLOC:
            tensor_memory.dealloc(self, st, gi, ins)
        elif k in (OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE):
            return self._named(st, gi, g, ins)
        elif k is OpKind.SETMAXNREG:
            self._setmaxnreg(st, gi, g, ins)
        return True

    def _mma_commit(self, st, gi, g, ins) -> None:
        """tcgen05.commit: the arrival fires once the MMAs this group issued so far have completed; on `empty`
        the group gives the slot up now (its in-flight MMAs still read it until the arrival)."""
        c, which = ins.bar
        slot = self._scalar(g, gi, ins, 1)
        i = self._bar(ins, slot, gi)
        if which == "empty":
            self._release(st, gi, g, ins, c, slot, ins.op.attrs.count, by_commit=True)
        if g.completed >= g.issued:
            g.committed = max(g.committed, g.issued)
            self._arrive(st, gi, ins, i, ins.op.attrs.count, 0)
        else:
            g.commits = g.commits + ((g.issued, i, ins.op.attrs.count, ins),)

    def _mbar_arrive(self, st, gi, g, ins) -> None:
        c, which = ins.bar
        slot = self._scalar(g, gi, ins, 1)
        i = self._bar(ins, slot, gi)
        count = ins.op.attrs.count
        ch = self.prog.chans[c]
        if which == "empty":
            self._release(st, gi, g, ins, c, slot, count)
        elif (ch.async_read or self._in_tmem(c)) and (c, slot) in g.unfenced:
            self._fail("missing-proxy-fence", f"publishes slot {slot} of channel {ch.name}, written by slot_store "
                                              f"and read by the async proxy, without fence_proxy_async", ins, gi)
        self._arrive(st, gi, ins, i, count, 0)

    def _release(self, st, gi, g, ins, c, slot, count, by_commit=False) -> None:
        """Group gi gives up the item in `slot` (an arrive on empty, or an mma_commit on it: then its in-flight
        MMAs may still read the slot; the arrival waits for them)."""
        ch = self.prog.chans[c]
        si = self.prog.slot_base[c] + slot
        s = st.slots[si]
        item = self._scalar(g, gi, ins, 2) if len(ins.args) > 2 else s.item
        if s.item is None or s.item != item:
            held = "nothing" if s.item is None else f"item {s.item}"
            self._fail("arrive-overflow", f"releases item {item} of slot {slot} of channel {ch.name}, but the "
                                          f"slot holds {held} (an extra consumed()/arrive on empty)", ins, gi)
        if s.rel_groups >> gi & 1 or s.rel_count + count > ch.empty_count:
            self._fail("arrive-overflow", f"item {item} of slot {slot} of channel {ch.name} is released again "
                                          f"({s.rel_count} + {count} arrivals, the empty barrier expects "
                                          f"{ch.empty_count})", ins, gi)
        for seq, keys in g.mma_reads:
            if (c, slot) in keys and not by_commit:
                self._fail("release-while-reading", f"releases slot {slot} of channel {ch.name} while this "
                                                    f"group's mma_async #{seq} still reads it (no mma_wait "
                                                    f"retired it)", ins, gi)
        st.slots[si] = s._replace(rel_count=s.rel_count + count, rel_groups=s.rel_groups | 1 << gi)

    def _arrive(self, st, gi, ins, i, count, tx_bytes) -> None:
        pending, tx, phase, done = st.bars[i]
        if count > pending:
            c, which, s = self.prog.bar_where[i]
            self._fail("arrive-overflow", f"{count} arrival(s) on {which}[{s}] of channel "
                                          f"{self.prog.chans[c].name}, but only {pending} of "
                                          f"{self.prog.bar_init[i]} remain in this phase", ins, gi)
        st.bar_last[i] = (ins.op, gi)
        self._settle(st, i, pending - count, tx + tx_bytes, phase, done)

    def _settle(self, st, i, pending, tx, phase, done) -> None:
        if pending or tx:
            st.bars[i] = (pending, tx, phase, done)
            return
        st.bars[i] = (self.prog.bar_init[i], 0, phase ^ 1, done + 1)
        c, which, slot = self.prog.bar_where[i]
        if which == "full":
            si = self.prog.slot_base[c] + slot
            s = st.slots[si]
            full = (1 << self.prog.nrings[c]) - 1
            if s.item is not None and s.landed == full:
                st.slots[si] = s._replace(published=True)

    def _write(self, st, gi, ins, c, slot, r, item) -> int:
        ch = self.prog.chans[c]
        if not 0 <= slot < ch.depth:
            self._fail("malformed", f"slot {slot} is outside the {ch.depth} slots of channel {ch.name}", ins, gi)
        si = self.prog.slot_base[c] + slot
        s, bit = st.slots[si], 1 << r
        if s.item is not None and s.item == item:
            if s.written & bit:
                self._fail("write-to-borrowed-slot", f"payload {r} of item {item} in slot {slot} of channel "
                                                     f"{ch.name} is written twice", ins, gi)
            st.slots[si] = s._replace(written=s.written | bit)
            st.sdata[si] = st.sdata[si]._replace(writer=(ins.op, gi))
            return si
        why = None
        if s.item is not None:
            if s.rel_count < ch.empty_count:
                why = (f"item {s.item} is still borrowed ({s.rel_count} of {ch.empty_count} releases on the "
                       f"empty barrier)")
            elif s.readers:
                why = f"an mma_async of group {self.prog.groups[min(s.readers)[0]].name} still reads item {s.item}"
            elif s.written != s.landed:
                why = f"a TMA copy of item {s.item} into it is still in flight"
        if why:
            self._fail("write-to-borrowed-slot", f"writes item {item} into slot {slot} of channel {ch.name}, but "
                                                 f"{why}", ins, gi)
        st.slots[si] = Slot(item=item, written=bit)
        st.sdata[si] = SlotData((None,) * self.prog.nrings[c], None, (ins.op, gi))
        return si

    def _tma_issue(self, st, gi, g, ins) -> None:
        c, r = ins.ring
        n = len(ins.args)
        slot, item = self._scalar(g, gi, ins, n - 3), self._scalar(g, gi, ins, n - 1)
        coords = [self._scalar(g, gi, ins, i) for i in range(1, n - 4)]
        bi = self._bar(ins, slot, gi)
        self._write(st, gi, ins, c, slot, r, item)
        tile = self.prog.chans[c].rings[r].type.tile
        data = OPAQUE
        if self.values:
            src = self._raw(g, gi, ins, 0)
            data = load_box(src, coords, ins.op.attrs.tile_shape or tile.shape).to(to_torch(tile.dtype))
            if tuple(data.shape) != tile.shape:
                self._fail("malformed", f"the TMA box {tuple(data.shape)} does not match the ring's tile "
                                        f"{tile.shape}", ins, gi)
        st.tmas = st.tmas + ((c, r, slot, item, bi, tma_bytes(ins.op), data, ins.op, gi),)

    def _land(self, st, j) -> None:
        c, r, slot, item, bi, nbytes, data, op, gi = st.tmas[j]
        st.tmas = st.tmas[:j] + st.tmas[j + 1:]
        si = self.prog.slot_base[c] + slot
        s = st.slots[si]
        if s.item == item:     # a later write to the slot while this copy flew is reported at that write
            st.slots[si] = s._replace(landed=s.landed | 1 << r)
            st.sdata[si] = st.sdata[si]._replace(data=_put(st.sdata[si].data, r, data))
        pending, tx, phase, done = st.bars[bi]
        st.bar_last[bi] = (op, gi)
        self._settle(st, bi, pending, tx - nbytes, phase, done)

    def _slot_read(self, st, gi, g, ins) -> None:
        c, r = ins.ring
        slot, item = self._scalar(g, gi, ins, 1), self._scalar(g, gi, ins, 2)
        ch = self.prog.chans[c]
        if not 0 <= slot < ch.depth:
            self._fail("malformed", f"slot {slot} is outside the {ch.depth} slots of channel {ch.name}", ins, gi)
        si = self.prog.slot_base[c] + slot
        s = st.slots[si]
        if s.item != item or not s.published or not s.landed >> r & 1:
            if s.item != item:
                state = "holds nothing" if s.item is None else f"holds item {s.item}"
            elif not s.landed >> r & 1:
                state = "is still being written (its data has not landed)"
            else:
                state = "was not published by a completed phase of its full barrier"
            wait = g.waits.get((c, "full", slot))
            after = (f"; this group's last wait on full[{slot}] was `{self.prog.op_text(wait)}` "
                     f"(line {wait.loc.line})" if wait is not None else "; this group never waited on full"
                     f"[{slot}]")
            self._fail("read-unpublished-slot", f"reads item {item} from slot {slot} of channel {ch.name}, which "
                                                f"{state}{after}", ins, gi)
        if c in self.prog.tmem.of_chan:
            tensor_memory.check_read(self, st, gi, ins, c, slot, item, "reads")
        d = st.sdata[si]
        st.sdata[si] = d._replace(last_read=(ins.op, gi))
        # a tensor-memory tile loaded into registers: its uses read the copy, not the slot
        g.env[ins.res[0]] = d.data[r] if ins.to_registers else SlotView(c, slot, item, r, d.data[r])

    def _mma_issue(self, st, gi, g, ins) -> None:
        vals, keys, opaque = [], set(), False
        acc_item = None
        for i in range(len(ins.args)):
            v = self._raw(g, gi, ins, i)
            if isinstance(v, Pending):
                # the accumulator may chain from an in-flight MMA (hardware accumulates in place)
                if i != 2 and v.seq >= g.retired:
                    self._fail("mma-result-not-ready", f"operand {i} is the result of mma_async #{v.seq}, which "
                                                       f"no mma_wait has retired", ins, gi)
                v = v.tensor
            if isinstance(v, SlotView):
                self._check_view(st, gi, v, ins)
                keys.add((v.chan, v.slot))
                if v.chan in self.prog.tmem.of_chan:
                    tensor_memory.check_read(self, st, gi, ins, v.chan, v.slot, v.item, f"operand {i} reads")
                    if i == 2:
                        acc_item = (v.chan, v.item)
                # the tensor core reads A and B from shared memory through the async proxy: a generic-proxy
                # slot_store into the slot must have been followed by its writer's fence_proxy_async, whatever
                # the channel's flag says (the accumulator lives in registers / tensor memory instead)
                for o, og in enumerate(st.groups):
                    if i < 2 and (v.chan, v.slot) in og.unfenced:
                        self._fail("missing-proxy-fence", f"operand {i} reads slot {v.slot} of channel "
                                                          f"{self.prog.chans[v.chan].name} through the async proxy, "
                                                          f"but group {self.prog.groups[o].name} wrote it with "
                                                          f"slot_store and has not executed fence_proxy_async", ins,
                                   gi)
                v = v.tensor
            opaque = opaque or v is OPAQUE
            vals.append(v)
        out = OPAQUE if opaque or not self.values else round_result(evaluate(ins.op, vals, self.cta),
                                                                    ins.op.results[0])
        seq = g.issued
        buffer = tensor_memory.buffer_of_mma(self, ins)
        if buffer is not None:        # Blackwell: the MMA writes its tensor-memory buffer (in place on its acc)
            tensor_memory.write(self, st, gi, ins, buffer, (tensor_memory.MMA_OWNER, gi, seq), acc_item)
        g.issued += 1
        keys = tuple(sorted(keys))
        for c, slot in keys:
            si = self.prog.slot_base[c] + slot
            s = st.slots[si]
            st.slots[si] = s._replace(readers=s.readers | {(gi, seq)})
        g.mma_reads = g.mma_reads + ((seq, keys),)
        g.env[ins.res[0]] = Pending(seq, out)

    def _mma_complete(self, st, gi) -> None:
        st.groups[gi] = g = st.groups[gi].copy()
        seq = g.completed
        g.completed += 1
        while g.commits and g.commits[0][0] <= g.completed:      # tcgen05.commit arrivals now due
            target, i, count, ins = g.commits[0]
            g.commits = g.commits[1:]
            g.committed = max(g.committed, target)
            self._arrive(st, gi, ins, i, count, 0)
        for s_seq, keys in g.mma_reads:
            if s_seq == seq:
                for c, slot in keys:
                    si = self.prog.slot_base[c] + slot
                    s = st.slots[si]
                    st.slots[si] = s._replace(readers=s.readers - {(gi, seq)})

    def _named(self, st, gi, g, ins) -> bool:
        a = ins.op.attrs
        if g.nb is not None:          # the generation this group waited for has completed
            g.nb = None
            return True
        count, gen = st.nbars.get(a.id, (0, 0))
        count += self.threads[gi]
        st.nb_last[a.id] = (ins.op, gi)
        if count > a.threads:
            self._fail("arrive-overflow", f"named barrier {a.id}: {count} threads arrived, it expects {a.threads}",
                       ins, gi)
        if count == a.threads:
            st.nbars[a.id] = (0, gen + 1)
            return True
        st.nbars[a.id] = (count, gen)
        if ins.kind is OpKind.NAMED_BAR_SYNC:
            g.nb = gen
            return False
        return True

    def _setmaxnreg(self, st, gi, g, ins) -> None:
        a, m = ins.op.attrs, self.machine
        if not (m.setmaxnreg_min <= a.regs <= m.setmaxnreg_max and a.regs % m.setmaxnreg_step == 0):
            self._fail("register-budget", f"setmaxnreg {a.regs}: must be a multiple of {m.setmaxnreg_step} in "
                                          f"{m.setmaxnreg_min}..{m.setmaxnreg_max}", ins, gi)
        if a.increase != (a.regs >= g.regs) and a.regs != g.regs:
            self._fail("register-budget", f"setmaxnreg.{'inc' if a.increase else 'dec'} {a.regs} while the group "
                                          f"holds {g.regs} registers per thread", ins, gi)
        g.regs = a.regs


def _put(data: tuple, r: int, x) -> tuple:
    return data[:r] + (x,) + data[r + 1:]
