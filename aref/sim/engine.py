"""Barrier IR semantics: what one step of a group, a TMA landing or an MMA completing does to a CTA state.

The engine is deterministic; the schedulers (`aref.sim.run`: random and exhaustive, `aref.sim.timing`:
discrete-event) choose which enabled action happens next:

  (GROUP, g)   group g executes the visible op it rests at, then its local ops up to the next visible op
  (TMA, j)     the j-th TMA copy in flight lands in its slot and completes its bytes on the full barrier
  (MMA, g)     the oldest incomplete mma_async of group g completes (a group's MMAs complete in order)
  (COMMIT, (g, k))  the k-th pending mma_commit of group g arrives on its barrier (once the MMAs issued before
               it completed: tcgen05.commit's arrival is asynchronous, and two commits' arrivals are not
               ordered, even on one MMA's completion)

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
from aref.sim.program import EAGER, LOOP_END, LOOP_ENTER, RING_POS, MalformedIR, Prog
from aref.sim import tensor_memory
from aref.sim.mma import MmaUnit
from aref.sim.state import CTAState, Group, Slot, SlotData
from aref.sim.walk import TileWalk
from aref.sim.values import OPAQUE, UNDEF, Pending, SimViolation, SlotView

GROUP, TMA, MMA, COMMIT = 0, 1, 2, 3
_PLAIN = (int, float, bool, torch.Tensor)
# ops whose result is a view of their operand (`aref.ops.VIEWS`): a view of a slot stays tied to the slot


class Engine(TileWalk, MmaUnit):
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
        # each group's walk over the launch's tiles: (coordinates, count in the CTA's walk, a tile follows)
        walk = prog.launch.walk(prog.kernel.grid, self.cta)
        tiles = [(t, n, n + 1 < len(walk)) for n, t in enumerate(walk)]
        self.walks = [tiles] * prog.ngroups
        if prog.launch.clustered:      # each CTA of the cluster its own program ids
            self.walks = [[(prog.launch.rank_coords(self.cta, prog.rank_of[gi]), 0, False)]
                          for gi in range(prog.ngroups)]
        for gi, (_, copy) in prog.copy_of.items():     # epilogue overlap: the copies take alternate tiles
            self.walks[gi] = [t for t in tiles if t[1] % 2 == copy]
        m = self.machine
        total = launch_threads(prog.kernel)
        # Registers each thread holds at launch: the whole file shared evenly, as a kernel compiled for this
        # block size gets (capped per thread, rounded down to the allocation step).
        self.launch_regs = min(m.max_regs_per_thread, m.registers // max(total, 1)) // m.setmaxnreg_step \
            * m.setmaxnreg_step
        # (group, Instr) of every executed op and loop marker, in order, when a list (the timing model's view)
        self.trace: list | None = None
        # another trip count than the inputs give (`set_trips`: the timing model's longer loop, the check's
        # protocol sizes): per group, the id of its value of the loop's trip count, which comes out
        # `extra_trips` larger, or `trip_value` where that is set
        self.extra_trips = 0
        self.trip_value: int | None = None
        # a group is copied before a step changes it (the explorer's states share groups); a run that keeps
        # no earlier state can do without
        self.copy_on_write = True
        self.trip_ids: list = [None] * len(prog.groups)

    def set_trips(self, extra: int = 0, value: int | None = None) -> None:
        """Run the loop `extra` iterations beyond its trip count, or (`value`) exactly `value` times: each group's
        value of the Tile IR loop's trip count (`GroupProgram.trip_count`) comes out changed where the group
        computes it, so its loop's count and the items of the iterations its pipeline peels follow, as with
        another input size along the loop. Tile values must not be computed (no input has to exist)."""
        if not extra and value is None:
            return
        if self.values:
            raise ValueError("another trip count than the inputs give runs on the control state only "
                             "(compute_values=False)")
        groups = [self.prog.kernel.groups[i] for i in self.prog.source]
        ids = [id(gp.trip_count) if gp.trip_count is not None else None for gp in groups]
        for gi, gp in enumerate(groups):
            if gp.loop is not None and not any(ins.res and ins.res[0] == ids[gi] for ins in self.prog.programs[gi]):
                raise ValueError(f"group {gp.group.name} does not compute the loop's trip count, so its loop cannot "
                                 f"run another number of times")
        self.extra_trips, self.trip_value, self.trip_ids = extra, value, ids

    # ------------------------------------------------------------------------------------ state set-up
    def initial(self) -> CTAState:
        p = self.prog
        groups = [Group(dict(self.glob), self.launch_regs) for _ in p.programs]
        bars = [(init, 0, 0, 0) for init in p.bar_init]
        slots = [Slot() for ch in p.chans for _ in range(ch.depth)]
        sdata = [SlotData((None,) * p.nrings[c]) for c, ch in enumerate(p.chans) for _ in range(ch.depth)]
        st = CTAState(groups, bars, slots, sdata, len(p.tmem.names))
        for gi, g in enumerate(groups):
            g.bases = (0,) * len(p.chans)
            if not self.walks[gi]:
                g.done = True                  # a persistent CTA (or overlap copy) with no tile
                continue
            self._start_tile(g, gi, 0)
            self._advance(st, gi)
        return st

    def actions(self, st: CTAState) -> tuple[list, list]:
        """(enabled group steps, enabled async completions); both empty when the CTA is finished or stuck."""
        steps = [(GROUP, gi) for gi, g in enumerate(st.groups) if not g.done and self._enabled(st, gi, g)]
        asyncs = [(TMA, j) for j in range(len(st.tmas))]
        asyncs += [(MMA, gi) for gi, g in enumerate(st.groups) if g.completed < g.issued]
        asyncs += [(COMMIT, (gi, k)) for gi, g in enumerate(st.groups) for k, c in enumerate(g.commits)
                   if c[0] <= g.completed]
        return steps, asyncs

    def apply(self, st: CTAState, action) -> None:
        kind, x = action
        st.steps += 1
        if kind == GROUP:
            g = st.groups[x]
            if self.copy_on_write:                     # states the explorer keeps may share groups
                st.groups[x] = g = g.copy()
            if self.trace is not None:
                self.trace.append((x, self.prog.programs[x][g.pc]))
            if self._visible(st, x, g, self.prog.programs[x][g.pc]):
                g.pc += 1
                self._advance(st, x)
        elif kind == TMA:
            self._land(st, x)
        elif kind == MMA:
            self._mma_complete(st, x)
        else:
            self._fire_commit(st, *x)

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
        rank = self.prog.rank_of
        others = sum(o.regs * self.threads[i] for i, o in enumerate(st.groups) if i != gi and rank[i] == rank[gi])
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
        while True:
            if g.pc >= len(prog):
                if not self._next_tile(g, gi):
                    break
                env = g.env
                continue
            ins = prog[g.pc]
            if ins.once is not None and not self._this_tile(g, gi, ins.once):
                g.pc += 1                  # persistent: an op of the CTA's first or last tile only
                continue
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
            if ins.kind == RING_POS:
                if g.lead:
                    self._lead_bases(g, gi)
                self._ring_pos(g, ins)
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
            # a renaming (a skipped pipeline step passes state through): only the condition is read here. In
            # registers the select reads both accumulators, so neither may be one a wgmma is still writing
            # (ptxas would otherwise wait for, or serialize, every wgmma); in tensor memory it renames columns.
            c = self._scalar(g, gi, ins, 0)
            if ins.reg_select:
                for i in (1, 2):
                    v = env.get(ins.args[i])
                    if isinstance(v, Pending) and v.seq >= g.retired:
                        self._fail("read-running-mma", f"operand {i} ({self._vname(op.operands[i])}) is the "
                                                       f"accumulator of mma_async #{v.seq} of this group, which "
                                                       f"no mma_wait has retired: the merge reads registers the "
                                                       f"MMA is still writing", ins, gi)
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
            out = ins.rule(op, vals, g.cta) if ins.rule is not None else evaluate(op, vals, g.cta)
            if ins.res and (ins.tile_out or isinstance(out, torch.Tensor)):
                out = round_result(out, op.results[0])
        if ins.res:
            env[ins.res[0]] = view.derive(out) if view is not None and k in VIEWS else out
            if ins.res[0] == self.trip_ids[gi]:
                env[ins.res[0]] = out + self.extra_trips if self.trip_value is None else self.trip_value

    def _rest(self, st, gi, g, ins):
        """The condition the visible op `ins` blocks on (None: never blocks)."""
        k = ins.kind
        if k is OpKind.MBAR_WAIT:
            return ("bar", self._bar(ins, self._scalar(g, gi, ins, 1), gi), self._scalar(g, gi, ins, 2) & 1)
        if k is OpKind.MMA_WAIT:
            return ("mma", ins.op.attrs.pending)
        if k is OpKind.NAMED_BAR_SYNC:
            return ("nb", self.prog.nb_key(gi, ins.op.attrs.id))
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
            cols = op.attrs.cols
            si = self.prog.slot_base[c] + slot
            # a column chunk of an item whose earlier chunks this group stored (`SlotAttrs.cols`)
            more = bool(cols) and 0 <= slot < self.prog.chans[c].depth and st.slots[si].item == item \
                and st.slots[si].written & 1 << r and st.sdata[si].writer[1] == gi
            if c in self.prog.tmem.of_chan and not more:
                if ins.tensor_pipe:
                    tensor_memory.publish(self, st, gi, ins, c, slot, item, seq)
                else:
                    tensor_memory.write(self, st, gi, ins, self.prog.tmem.of_chan[c] + slot, (c, item))
            if not more:
                si = self._write(st, gi, ins, c, slot, r, item)
            tile = self.prog.chans[c].rings[r].type.tile
            data = v if v is OPAQUE else v.to(to_torch(tile.dtype))
            s, d = st.slots[si], st.sdata[si]
            if cols and data is not OPAQUE:
                # columns not stored yet read as NaN (a float payload), so a missing chunk shows in the values
                whole = d.data[r] if more and isinstance(d.data[r], torch.Tensor) else torch.full(
                    tuple(tile.shape), float("nan") if tile.dtype.is_float else 0, dtype=to_torch(tile.dtype))
                whole = whole.clone()
                whole[..., cols[0]:cols[0] + cols[1]] = data
                data = whole
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
        if ins.remote:         # a cluster's multicast ring: the release arrives in the other CTA too
            p = self.prog
            peer = p.peer(c)
            self._release(st, gi, g, ins, peer, slot, count)
            self._arrive(st, gi, ins, i - p.bar_base[c][1] + p.bar_base[peer][1], count, 0)

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
        tile = self.prog.chans[c].rings[r].type.tile
        nbytes = tma_bytes(ins.op)
        p = self.prog
        if ins.multicast:      # a cluster's shared tile: this CTA's half, into the slot of both CTAs
            half = r if p.rank_of[gi] == 0 else p.half[(c, r)]
            dests = [(c, bi), (p.peer(c), bi - p.bar_base[c][0] + p.bar_base[p.peer(c)][0])]
            for cc, _ in dests:
                self._write(st, gi, ins, cc, slot, half, item)
            r, nbytes = half, nbytes // 2
        else:
            dests = [(c, bi)]
            self._write(st, gi, ins, c, slot, r, item)
        data = OPAQUE
        if self.values:
            src = self._raw(g, gi, ins, 0)
            data = load_box(src, coords, ins.op.attrs.tile_shape or tile.shape).to(to_torch(tile.dtype))
            if tuple(data.shape) != tile.shape:
                self._fail("malformed", f"the TMA box {tuple(data.shape)} does not match the ring's tile "
                                        f"{tile.shape}", ins, gi)
        st.tmas = st.tmas + tuple((cc, r, slot, item, b, nbytes, data, ins.op, gi) for cc, b in dests)

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
        need = self.prog.ring_mask(c, r)
        if s.item != item or not s.published or s.landed & need != need:
            if s.item != item:
                state = "holds nothing" if s.item is None else f"holds item {s.item}"
            elif s.landed & need != need:
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

    def _named(self, st, gi, g, ins) -> bool:
        a = ins.op.attrs
        if g.nb is not None:          # the generation this group waited for has completed
            g.nb = None
            return True
        key = self.prog.nb_key(gi, a.id)           # (each CTA of a cluster has its own named barriers)
        count, gen = st.nbars.get(key, (0, 0))
        count += self.threads[gi]
        st.nb_last[key] = (ins.op, gi)
        if count > a.threads:
            self._fail("arrive-overflow", f"named barrier {a.id}: {count} threads arrived, it expects {a.threads}",
                       ins, gi)
        if count == a.threads:
            st.nbars[key] = (0, gen + 1)
            return True
        st.nbars[key] = (count, gen)
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
