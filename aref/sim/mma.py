"""Tensor-core MMAs in the simulator: issue (operand checks, the slots and tensor memory they read and
write), completion in issue order, and tcgen05.commit arrivals once the MMAs before them completed. A mixin
of `Engine`."""
from __future__ import annotations

from aref.interp.tile import evaluate, round_result
from aref.sim import tensor_memory
from aref.sim.values import OPAQUE, Pending, SlotView


class MmaUnit:
    """The tensor-core half of `aref.sim.engine.Engine`."""

    def _mma_commit(self, st, gi, g, ins) -> None:
        """tcgen05.commit: the arrival fires once the MMAs this group issued so far have completed; on `empty`
        the group gives the slot up now (its in-flight MMAs still read it until the arrival)."""
        c, which = ins.bar
        slot = self._scalar(g, gi, ins, 1)
        i = self._bar(ins, slot, gi)
        if which == "empty":
            self._release(st, gi, g, ins, c, slot, ins.op.attrs.count, by_commit=True)
        g.commits = g.commits + ((g.issued, i, ins.op.attrs.count, ins),)

    def _fire_commit(self, st, gi, k) -> None:
        st.groups[gi] = g = st.groups[gi].copy()
        target, i, count, ins = g.commits[k]
        g.commits = g.commits[:k] + g.commits[k + 1:]
        g.committed = max(g.committed, target)
        self._arrive(st, gi, ins, i, count, 0)

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
        out = OPAQUE if opaque or not self.values else round_result(evaluate(ins.op, vals, g.cta),
                                                                    ins.op.results[0])
        seq = g.issued
        buffer = tensor_memory.buffer_of_mma(self, ins, g)
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
        for s_seq, keys in g.mma_reads:
            if s_seq == seq:
                for c, slot in keys:
                    si = self.prog.slot_base[c] + slot
                    s = st.slots[si]
                    st.slots[si] = s._replace(readers=s.readers - {(gi, seq)})
