"""Aref lowering rules of Blackwell (sm_100a): MMAs write tensor memory and signal with `tcgen05.commit`.

On top of the common lowering (`aref.lower`: slots, parities, TMA rings, register hand-offs):

* A group that issues MMAs (FA4's MMA warp, or a 4-warp group that also computes) never waits for its own
  MMAs to hand their results on. Publishing an MMA result through a tensor-memory channel is
  `wait empty → (the MMA writes the slot's columns) → mma_commit full`: the commit arrives once the MMAs
  issued so far complete. Releasing a slot its MMAs read is `mma_commit empty`.
* The group waits for its MMAs (`mma_wait 0`, a commit to its own barrier and a parity wait in the code)
  only before its CUDA cores read an MMA result.
* A group that writes a tensor-memory tile computed from one it read releases what it read before
  publishing what it wrote, so the tile can be rewritten in place (the correction group's O). Where other
  groups also read the MMA result held in those columns (a promoted fp8 GEMM's `part`: one group adds it
  into `acc`, another zeroes it), the writer first waits on that result's `empty` barrier, as the MMA warp
  does before it accumulates there: its own program order only puts its own read first.
* Where the solver's graph stated the groups' streams (`WSKernel.streams`), a group that loads a tensor-memory
  tile whole into registers (`loaded_to_registers`) releases its slot right after the load.
* Tensor memory is planned (`aref.lower.tmem.plan_tensor_memory`), allocated by the first MMA-issuing group before
  the others start, and freed once every group using it has arrived at its named barrier.
"""
from __future__ import annotations

from aref.ir import (BarrierAttrs, MmaWaitAttrs, NamedBarrierAttrs, Op, OpKind, Space, TmemAttrs)
from aref.lower.common import _Lowering, _mma_origin
from aref.ops import MMA_KINDS, VIEWS
from aref.lower.subtile_sm100 import subtile_epilogues
from aref.lower.tmem import plan_tensor_memory
from aref.ir.ws import Channel, GroupProgram, NamedBarrier, WSKernel


def _in_tmem(ch: Channel) -> bool:
    return any(t.space is Space.TMEM for t in ch.payload)


def tensor_core_group(gp: GroupProgram) -> bool:
    return any(op.kind in MMA_KINDS for op in gp.all_ops())


def lower_kernel(ws: WSKernel) -> None:
    """The lowering of `aref.target.SM_100A` (its `lowering` module's entry), in place: `lower_blackwell`."""
    lower_blackwell(ws)


def lower_blackwell(ws: WSKernel) -> None:
    """Lower every group of pipelined sm_100a kernel `ws` (in place) and plan its tensor memory."""
    subtile_epilogues(ws)
    for ch in ws.channels:
        producer = ws.groups[ch.producer]
        if ch.kind == "store" and _in_tmem(ch) and tensor_core_group(producer) and not _stored_by_threads(ch, producer):
            ch.full_count = 1                       # one tcgen05.commit publishes the slot
    # before any group is lowered (its gets, puts and MMAs are still channel ops)
    successors = {ch.name: _in_place_successors(ws, ch) for ch in ws.channels if _in_tmem(ch)}
    for gp in ws.groups:
        if ws.streams:
            _release_after_load(gp, ws)
        _release_before_publish(gp, ws)
        _BlackwellLowering(ws, gp, successors).run()
        for _, block in gp.regions():
            _wait_before_writing(block.ops)
        _insert_mma_waits(gp)
    ws.tmem = plan_tensor_memory(ws)
    if ws.tmem is not None:
        _allocation(ws)
    register_budgets(ws)


class _BlackwellLowering(_Lowering):
    def __init__(self, kernel: WSKernel, gp: GroupProgram, successors: dict[str, list[Channel]]):
        super().__init__(kernel, gp)
        self.successors = successors
        self.tensor_core = tensor_core_group(gp)
        self.mma_reads = {ch.name for ch in kernel.channels if self.tensor_core and _mma_reads_slot(gp, ch)}
        self.published: dict[tuple[int, int], tuple] = {}   # (block, tile) -> (channel, slot, phase) of its put

    def put(self, op: Op, out: list[Op]) -> None:
        ch = self.chans[id(op.operands[0])]
        if not (self.tensor_core and ch.kind == "store" and _in_tmem(ch)
                and all(from_mma(v, self.gp) for v in op.operands[2:])):
            if ch.kind == "store" and _in_tmem(ch):
                # the columns also hold the MMA result accumulated on this tile and handed on through `later`:
                # its previous item must be released there too before CUDA cores overwrite them
                item = op.operands[1]
                for later in self.successors.get(ch.name, []):
                    if tuple(later.consumers) == (self.gp.group.id,):
                        continue    # its one reader is this group, which read it earlier in program order
                    slot = self.slot(later, item, out, op.loc)
                    flip = self.flipped(self.phase(later, item, out, op.loc), out, op.loc)
                    self.emit(out, op, OpKind.MBAR_WAIT, (later.empty, slot, flip), (),
                              BarrierAttrs(later.name, "empty"))
            super().put(op, out)
            return
        item, tiles = op.operands[1], op.operands[2:]
        slot = self.slot(ch, item, out, op.loc)
        phase = self.phase(ch, item, out, op.loc)
        flip = self.flipped(phase, out, op.loc)
        self.emit(out, op, OpKind.MBAR_WAIT, (ch.empty, slot, flip), (), BarrierAttrs(ch.name, "empty"))
        for j, t in enumerate(tiles):       # in place: the MMA wrote these columns (a zero tile: the tensor core)
            self.emit(out, op, OpKind.SLOT_STORE, (ch.rings[j], slot, item, t), (), _slot_attrs(ch, j))
            self.published[(id(out), id(t))] = (ch, slot, phase)
        self.emit(out, op, OpKind.MMA_COMMIT, (ch.full, slot, item), (), BarrierAttrs(ch.name, "full", 1))

    def emit(self, out, like: Op, kind, operands, results, attrs) -> Op:
        # an MMA accumulating in place on a tile this block published (a loop-carried state handed to CUDA
        # cores, then updated: S += kᵀ·v) writes over that item: it waits until the readers released it
        # (the empty barrier's phase of this item), not only, at the next put, for the item before
        acc = (id(out), id(operands[2])) if kind is OpKind.MMA_ASYNC and len(operands) > 2 else None
        if acc in self.published:
            ch, slot, phase = self.published.pop(acc)
            super().emit(out, like, OpKind.MBAR_WAIT, (ch.empty, slot, phase), (), BarrierAttrs(ch.name, "empty"))
        return super().emit(out, like, kind, operands, results, attrs)

    def consumed(self, op: Op, out: list[Op]) -> None:
        ch = self.chans[id(op.operands[0])]
        if ch.name not in self.mma_reads:
            super().consumed(op, out)
            return
        slot = self.slot(ch, op.operands[1], out, op.loc)
        self.emit(out, op, OpKind.MMA_COMMIT, (ch.empty, slot, op.operands[1]), (), BarrierAttrs(ch.name, "empty", 1))


def _in_place_successors(ws: WSKernel, ch: Channel) -> list[Channel]:
    """Tensor-memory rings sharing `ch`'s columns downstream: a tensor-core consumer's MMA accumulates in place
    on the tile it gets from `ch` and puts the result into them. (A writer of `ch` that is their one consumer,
    e.g. a correction group rescaling O, is ordered by its own release; one that shares them with other
    consumers still waits for theirs.)"""
    out = []
    for g in ch.consumers:
        gp = ws.groups[g]
        if not tensor_core_group(gp):
            continue
        ops = list(gp.all_ops())
        vals = {id(r) for op in ops if op.kind is OpKind.GET and op.operands[0] is ch.value for r in op.results}
        for op in ops:
            if op.kind in VIEWS and id(op.operands[0]) in vals or (
                    op.kind is OpKind.MMA and len(op.operands) > 2 and id(op.operands[2]) in vals):
                vals.add(id(op.result))
        chans = {id(c.value): c for c in ws.channels}
        for op in ops:
            if op.kind is OpKind.PUT and any(id(v) in vals for v in op.operands[2:]):
                later = chans[id(op.operands[0])]
                if later is not ch and _in_tmem(later) and later.region == ch.region and later not in out:
                    out.append(later)
    return out


def _stored_by_threads(ch: Channel, gp: GroupProgram) -> bool:
    """Does group `gp` put register math into tensor-memory channel `ch` (a tcgen05.st by every thread, so
    every thread arrives), rather than an MMA result that one tcgen05.commit publishes? A group that issues
    MMAs may do both (random program seed 902's optimal partition: a cast handed to the MMA warp)."""
    prod = gp.producers()
    made = [prod.get(id(v)) for op in gp.all_ops() if op.kind is OpKind.PUT and op.operands[0] is ch.value
            for v in op.operands[2:]]
    return any(op is not None and op.kind not in MMA_KINDS | VIEWS | {OpKind.FULL, OpKind.SELECT} for op in made)


def _mma_reads_slot(gp: GroupProgram, ch: Channel) -> bool:
    """Does an MMA of this group read `ch`'s slot (an operand, or the accumulator it updates in place)?"""
    got: set[int] = set()
    for op in gp.all_ops():
        if op.kind is OpKind.GET and op.operands[0] is ch.value:
            got |= {id(r) for r in op.results}
        elif op.kind in VIEWS | {OpKind.SELECT} and any(id(v) in got for v in op.operands):
            got.add(id(op.result))
    if gp.loop is not None:
        for init, c in zip(gp.loop.inits, gp.loop.carried):
            if id(init) in got:
                got.add(id(c))
    return any(op.kind is OpKind.MMA and any(id(v) in got for v in op.operands) for op in gp.all_ops())


def _slot_attrs(ch: Channel, j: int):
    from aref.ir import SlotAttrs
    return SlotAttrs(ch.name, j)


def from_mma(v, gp: GroupProgram, depth: int = 0) -> bool:
    """Is `v` an MMA result of this group, or a constant or select of such (an accumulator chain)? Such a
    tile lives in tensor memory where the group's MMAs (or the tensor core's zero fill) wrote it."""
    prod = gp.producers()
    op = prod.get(id(v))
    if op is None or depth > 32:
        return False
    if op.kind in (OpKind.MMA, OpKind.MMA_ASYNC, OpKind.FULL):
        return True
    if op.kind is OpKind.SELECT:
        return all(from_mma(x, gp, depth + 1) for x in op.operands[1:])
    return False


def read_by_tensor_core(v, gp: GroupProgram, depth: int = 0) -> bool:
    """Is the tensor-memory tile `v` (a slot_read) used only by this group's MMAs, through views? Then it is
    an operand or accumulator taken where it lies: no tcgen05.ld moves it into registers."""
    users = [op for op in gp.all_ops() if any(o is v for o in op.operands)]
    if not users or depth > 16:
        return False
    return all(read_by_tensor_core(u.result, gp, depth + 1) if u.kind in VIEWS | {OpKind.SELECT}
               else u.kind is OpKind.MMA_ASYNC
               for u in users)


# ------------------------------------------------------------------------------ in-place rewrites
def _release_before_publish(gp: GroupProgram, ws: WSKernel) -> None:
    """In each block, move the release of a tensor-memory slot up to just after its last reader (through
    views), ahead of later puts: a group that rewrites the tile in place (O ← O·α) then gives up the old
    item before it publishes the new one."""
    chans = {id(c.value): c for c in ws.channels}
    for _, block in gp.regions():
        ops = block.ops
        for i in range(len(ops)):
            op = ops[i]
            got = _tmem_get_of(ops, i, chans)
            if got is None:
                continue
            seen = {id(r) for r in ops[got].results}
            last = got
            for j in range(got + 1, i):
                if any(id(v) in seen for v in ops[j].operands):
                    last = j
                    if ops[j].kind in VIEWS:
                        seen.update(id(r) for r in ops[j].results)
            if last + 1 < i and all(o.stage == op.stage for o in ops[last + 1:i]):
                ops.insert(last + 1, ops.pop(i))


def _tmem_get_of(ops: list[Op], i: int, chans: dict) -> int | None:
    """Where `ops[i]` releases a tensor-memory slot: the index of the get of that item before it (else None)."""
    op = ops[i]
    if op.kind is not OpKind.CONSUMED or not _in_tmem(chans[id(op.operands[0])]):
        return None
    return next((j for j in range(i - 1, -1, -1) if ops[j].kind is OpKind.GET
                 and ops[j].operands[0] is op.operands[0] and ops[j].operands[1] is op.operands[1]), None)


def _release_after_load(gp: GroupProgram, ws: WSKernel) -> None:
    """In each block, move the release of a tensor-memory slot whose tile is loaded into registers
    (`loaded_to_registers`) up to just after its get: the columns are free once `tcgen05.ld` has returned, not
    after the last use of the register copy, so the MMA that rewrites them (the next iteration's S or hidden
    slice) runs while the group still computes on the copy. Only across ops of the release's own pipeline
    stage, and only where every use of the tile follows in the block.
    Applied where the solver's graph stated the groups' streams (`WSKernel.streams`): its reader node takes
    the tile at its start (mlp: II 992, simulated 1007 with the rule, 1121 without). The occupancy-free graph
    states no such order, and the programs lowered from it run slower with the rule (attention_bwd: 1248
    cycles per iteration instead of 1002; attention_fwd's own program 1681 instead of 1647: there the MMA
    warp's order, tuned against the late releases, then waits elsewhere — not analysed further)."""
    chans = {id(c.value): c for c in ws.channels}
    for _, block in gp.regions():
        ops = block.ops
        for i in range(len(ops)):
            op = ops[i]
            got = _tmem_get_of(ops, i, chans)
            if got is None or got + 1 >= i or any(o.stage != op.stage for o in ops[got:i]):
                continue
            between = {id(o) for o in ops[got + 1:i]}
            if all(loaded_to_registers(r, gp) and all(id(u) in between for u in _users(r, gp))
                   for r in ops[got].results):
                ops.insert(got + 1, ops.pop(i))


def loaded_to_registers(v, gp: GroupProgram) -> bool:
    """Is the tensor-memory tile `v` (a get's item or a slot_read) used by CUDA-core ops only? The sm100 backend
    then loads it whole into registers where it is read (`tcgen05.ld` + `wait::ld`, its role's `op_slot_read`)
    and the ops compute on that copy; the simulator reads it the same way (`aref.sim.program`)."""
    from aref import ops as ops_registry
    cuda_core = ops_registry.kinds_with(ops_registry.CUDA_CORE)
    users = _users(v, gp)
    return bool(users) and all(u.kind in cuda_core for u in users)


def _users(v, gp: GroupProgram) -> list[Op]:
    return [u for u in gp.all_ops() if any(o is v for o in u.operands)]


def _wait_before_writing(ops: list[Op]) -> None:
    """An MMA writes the tensor-memory slot it publishes when it is issued, not when its result is put: the
    `empty` wait of an in-place publish moves up to the first MMA of the block that writes those columns
    (the MMA producing the value and those it accumulates on), with the index math it needs."""
    prod = {id(r): i for i, op in enumerate(ops) for r in op.results}
    i = 0
    while i < len(ops):
        st = ops[i]
        i += 1
        if st.kind is not OpKind.SLOT_STORE or id(st.operands[3]) not in prod:
            continue
        first = prod[id(st.operands[3])]
        if ops[first].kind is not OpKind.MMA_ASYNC:
            continue
        while len(ops[first].operands) > 2 and id(ops[first].operands[2]) in prod \
                and ops[prod[id(ops[first].operands[2])]].kind is OpKind.MMA_ASYNC:
            first = prod[id(ops[first].operands[2])]
        wait = next((j for j in range(i - 2, first, -1) if ops[j].kind is OpKind.MBAR_WAIT
                     and ops[j].attrs.which == "empty" and ops[j].attrs.channel == st.attrs.channel), None)
        if wait is None:
            continue
        # the wait and the index math it reads that sits between the MMA and the wait move up together
        need = {id(v) for v in (*ops[wait].operands, *([ops[wait].pred] if ops[wait].pred else []))}
        moved = [wait]
        for j in range(wait - 1, first, -1):
            if any(id(r) in need for r in ops[j].results):
                moved.append(j)
                need |= {id(v) for v in ops[j].operands}
        block = [ops[j] for j in sorted(moved)]
        if ops[wait].pred is not ops[first].pred:
            # the MMA writes the columns whether or not the put publishes them (a carried value's put of the
            # next iteration's item, skipped in the last one): its wait takes the MMA's predicate; the
            # empty barrier's phase for the next item is the release of this one, which the readers make
            w = ops[wait]
            block[block.index(w)] = Op(w.kind, w.operands, w.results, w.attrs, w.loc, pred=ops[first].pred,
                                       stage=w.stage)
        for j in sorted(moved, reverse=True):
            del ops[j]
        ops[first:first] = block
        prod = {id(r): k for k, op in enumerate(ops) for r in op.results}


# ------------------------------------------------------------------------------------- MMA waits
def _insert_mma_waits(gp: GroupProgram) -> None:
    """`mma_wait 0` before the first CUDA-core read of an MMA result since the group last issued an MMA.
    On Blackwell a wait covers every MMA issued so far (a commit to the group's own barrier)."""
    if not any(op.kind is OpKind.MMA_ASYNC for op in gp.all_ops()):
        return
    prod = gp.producers()
    issued = False
    for region, block in gp.regions():
        out: list[Op] = []
        if region == "loop":
            issued = issued or any(op.kind is OpKind.MMA_ASYNC for op in block.ops)
        for op in block.ops:
            if issued and _reads_mma_result(op, prod, gp):
                out.append(Op(OpKind.MMA_WAIT, (), (), MmaWaitAttrs(0), op.loc))
                issued = False
            out.append(op)
            issued = issued or op.kind is OpKind.MMA_ASYNC
        if region == "loop" and any(op.kind is OpKind.MMA_ASYNC for op in block.ops):
            issued = True
        block.ops = out


def _reads_mma_result(op: Op, prod, gp: GroupProgram) -> bool:
    """Does `op` read an MMA result with CUDA cores (not: another MMA, a view, a select, the in-place publish)?"""
    if op.kind is OpKind.TRANSPOSE and not read_by_tensor_core(op.result, gp):
        # register math reads the transpose: the backend moves the whole tile through the exchange tile here
        return any(_mma_origin(v, prod) for v in op.operands)
    if op.kind in (OpKind.MMA_ASYNC, OpKind.MMA_WAIT, OpKind.MMA_COMMIT, OpKind.SELECT) or op.kind in VIEWS:
        return False
    if op.kind is OpKind.SLOT_STORE and op.operands[0].type.tile.space is Space.TMEM and from_mma(op.operands[3], gp):
        return False
    return any(_mma_origin(v, prod) for v in op.operands)


# ------------------------------------------------------------------------------- allocation
def _allocation(ws: WSKernel) -> None:
    """tmem_alloc first in the allocating group; every group using tensor memory arrives at a named barrier
    when done with it, and the allocator frees the columns after waiting there."""
    plan = ws.tmem
    users = [gp for gp in ws.groups if _uses_tmem(gp, ws)]
    if ws.groups[plan.allocator] not in users:
        users.append(ws.groups[plan.allocator])
    threads = sum(gp.group.threads for gp in users)
    bid = max((nb.id for nb in ws.named_barriers), default=0) + 1
    plan.dealloc_barrier = bid
    ws.named_barriers.append(NamedBarrier(bid, threads, "tensor memory freed after its last use"))
    cols = TmemAttrs(plan.columns)
    for gp in users:
        # every group that may end with an MMA in flight waits for its own MMAs before it says it is done with
        # tensor memory: the allocator frees the columns, and no MMA may write them after (a random partition's
        # MMA group was not the allocator and arrived with its last MMA running: seed 2608 on sm_100a)
        if _unobserved_mma(gp) or _mma_pending_at_end(gp):
            gp.post.ops.append(Op(OpKind.MMA_WAIT, (), (), MmaWaitAttrs(0), ws.loc))
        if gp.group.id == plan.allocator:
            gp.pre.ops.insert(0, Op(OpKind.TMEM_ALLOC, (), (), cols, ws.loc))
            gp.post.ops.append(Op(OpKind.NAMED_BAR_SYNC, (), (), NamedBarrierAttrs(bid, threads), ws.loc))
            gp.post.ops.append(Op(OpKind.TMEM_DEALLOC, (), (), cols, ws.loc))
        else:
            gp.post.ops.append(Op(OpKind.NAMED_BAR_ARRIVE, (), (), NamedBarrierAttrs(bid, threads), ws.loc))


def _mma_pending_at_end(gp: GroupProgram) -> bool:
    """Does the group end with an MMA that no later `mma_wait` covers (in region order: pre, prologue, the
    last iteration of the loop, epilogue, post)? A commit is not enough: a consumer whose run-time trip count
    skips the last item never waits for it (a random program's CTA (0, 1) freed tensor memory under a
    running MMA), so the allocator waits for its own MMAs before freeing the columns (once, at the end)."""
    pending = False
    for _, block in gp.regions():
        for op in block.ops:
            if op.kind is OpKind.MMA_ASYNC:
                pending = True
            elif op.kind is OpKind.MMA_WAIT:
                pending = False
    return pending


def _unobserved_mma(gp: GroupProgram) -> bool:
    """Does the loop's last iteration issue an MMA whose result nothing reads after the loop (a carried state
    the program drops)? Its completion reaches no other group, so the allocator waits for it before freeing
    the columns it writes."""
    lp = gp.loop
    if lp is None:
        return False
    prod = {id(r): op for op in lp.body.ops for r in op.results}
    used = {id(v) for region, block in gp.regions() if region in ("epilogue", "post")
            for op in block.ops for v in op.operands}
    for y, r in zip(lp.yields, lp.results):
        op = prod.get(id(y))
        while op is not None and op.kind is OpKind.SELECT:
            op = prod.get(id(op.operands[1]))
        if op is not None and op.kind is OpKind.MMA_ASYNC and id(r) not in used:
            return True
    return False


def _uses_tmem(gp: GroupProgram, ws: WSKernel) -> bool:
    tmem = {id(r) for ch in ws.channels if _in_tmem(ch) for r in ch.rings}
    return any(op.kind is OpKind.MMA_ASYNC or (op.kind in (OpKind.SLOT_READ, OpKind.SLOT_STORE)
                                                and id(op.operands[0]) in tmem) for op in gp.all_ops())


# ------------------------------------------------------------------------------- register budgets
ONE_WARP_REGS = 48                  # load, MMA and epilogue warps: addresses and loop state (FA4's "other")


def register_budgets(ws: WSKernel) -> None:
    """Per-group register budgets (setmaxnreg) from the resource model's liveness (`aref.resources.
    register_demand` in tcgen05's row layout: the figure the backend checks its code against): one-warp groups
    share `ONE_WARP_REGS` (they and the padding warps of their warp group execute one setmaxnreg), each
    four-warp group gets what it needs, and the registers left over are shared out among the four-warp groups
    (multiples of 8, at most 256). When the needs add up to more than the register file, every four-warp group
    gets an equal share (the kernel still simulates) and the refusal is recorded in `ws.resource_error` with
    the excess per thread, so the optimal partitioner solves again under a tighter register cap."""
    from aref.resources import ResourceError, register_demand
    from aref.ir.ws import WarpGroup
    from aref.resources import MAX_REGS, MIN_REGS, REGISTERS_PER_SM
    one = [gp for gp in ws.groups if gp.group.warps == 1]
    wide = [gp for gp in ws.groups if gp.group.warps != 1]
    one_warp_threads = -(-len(one) // 4) * 4 * 32
    demand = {gp.group.id: register_demand(gp, ws.arch) for gp in wide}
    need = {g: d.need for g, d in demand.items()}
    room = REGISTERS_PER_SM - one_warp_threads * ONE_WARP_REGS
    free = room - sum(need[gp.group.id] * gp.group.threads for gp in wide)
    over = [gp for gp in wide if need[gp.group.id] > MAX_REGS]
    if (free < 0 or over) and ws.resource_error is None:
        worst = max(wide, key=lambda gp: need[gp.group.id])
        d = demand[worst.group.id]
        detail = " + ".join(f"{gp.group.name} {gp.group.threads}×{need[gp.group.id]}" for gp in wide)
        if over:
            message = f"{d.describe()}: {d.need} registers per thread, more than the {MAX_REGS} a warp group " \
                      f"can be given (setmaxnreg)"
            excess = d.need - MAX_REGS
        else:
            message = f"register budgets need {room - free} registers ({detail}) beside the one-warp roles' " \
                      f"{one_warp_threads}×{ONE_WARP_REGS}, but an SM has {REGISTERS_PER_SM}"
            excess = -(-(-free) // max(1, sum(gp.group.threads for gp in wide)))
        hint = ("split the work over more groups or use smaller tiles" if over else
                "use smaller tiles, or fewer independent chains of register math (each gets its own warp group)")
        # a group over setmaxnreg's limit is refused at the user's line where its tiles peak (as on Hopper)
        where = getattr(d.at, "loc", None) if over else None
        ws.resource_error = ResourceError(message, where or ws.loc, hint=f"{hint}: {d.remedy()}" if over else hint,
                                          excess=excess, register_file=not over)
    if free < 0 or over:
        share = max(MIN_REGS, min(MAX_REGS, room // max(1, sum(gp.group.threads for gp in wide)) // 8 * 8))
        need = {g: share for g in need}
        free = room - sum(share * gp.group.threads for gp in wide)
    budgets = dict(need)
    while wide:                       # share the rest out, 8 registers per thread at a time
        grow = [gp for gp in wide if budgets[gp.group.id] + 8 <= MAX_REGS and free >= 8 * gp.group.threads]
        if not grow:
            break
        for gp in sorted(grow, key=lambda g: budgets[g.group.id]):
            if free >= 8 * gp.group.threads and budgets[gp.group.id] + 8 <= MAX_REGS:
                budgets[gp.group.id] += 8
                free -= 8 * gp.group.threads
    for gp in ws.groups:
        regs = ONE_WARP_REGS if gp.group.warps == 1 else budgets[gp.group.id]
        g = gp.group
        gp.group = WarpGroup(g.id, g.name, g.role, g.warps, regs)
