"""Loop distribution: a partitioned Tile IR kernel → one program per warp group, joined by arefs.

Each group gets its own copy of the pre-loop code, the loop and the post-loop code with only its ops, plus
the ops it can recompute (constants, program ids, index math, views). A value made in one group and used in
another crosses through an aref:

* the user's channels stay: the put runs in its group, and every group that uses the tiles a `get` hands out
  takes every item itself (so cooperative and ping-pong consumers share the producer's channels);
* every other crossing gets a compiler channel. Tiles first used by the same op travel together in one
  channel, as Tawa does; a loaded tile always lands in a channel (TMA writes shared memory), even when its
  user is in the loading group;
* a loop-carried value belongs to the group that computes its next value; other groups receive it at the
  top of each iteration. Values needed after the loop are handed over after it.

Channel ops carry the logical item index: iteration·(items per iteration) + j in the loop, 0 outside.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aref.errors import CompilerBugError
from aref.ir import (ArefType, Block, ConstAttrs, DType, FnAttrs, Kernel, Loop, NoAttrs, Op,
                     OpKind, ScalarType, Space, Value)
from aref.ops import VIEWS
from aref.resources.layout import column_reads, rank1
from aref.verify import expected_result_types
from aref.ir.ws import Channel, GroupProgram, WSKernel
from aref.target import target_of
from partition.model import Partition
from partition.streams import accumulates_in_place, mma_reads_from_tmem



@dataclass
class _Crossing:
    """Values sent from one group to others through one compiler channel."""

    src: int
    values: list[Value]
    dsts: tuple[int, ...]
    def_region: str
    kind: str
    tmem: bool = False               # Blackwell: the tiles live in tensor memory (MMA results / operands)
    channel: Channel | None = None
    # per destination group: region of the first use and of the last use
    use_regions: dict[int, tuple[str, str]] = field(default_factory=dict)
    # per destination group: values computed from the tiles that are read from the slot where they are used
    # (Blackwell's vectors along the columns, `column_reads`), so the slot is released after their readers
    held: dict[int, set[int]] = field(default_factory=dict)


class _Facts:
    """Where each value of the Tile IR comes from: producing op, region, owning group."""

    def __init__(self, kernel: Kernel, part: Partition):
        self.kernel = kernel
        self.part = part
        self.prod: dict[int, Op] = {}
        self.region: dict[int, str] = {}
        self.op_region: dict[Op, str] = {}
        for name, block in (("pre", kernel.pre), ("post", kernel.post)):
            for op in block.ops:
                self.op_region[op] = name
        lp = kernel.loop
        if lp is not None:
            for op in lp.body.ops:
                self.op_region[op] = "loop"
            for v in (lp.iv, *lp.carried):
                self.region[id(v)] = "loop"
            for v in lp.results:
                self.region[id(v)] = "post"
        for op, reg in self.op_region.items():
            for r in op.results:
                self.prod[id(r)] = op
                self.region[id(r)] = reg
        self.carry_index: dict[int, int] = {}
        if lp is not None:
            for i, (c, r) in enumerate(zip(lp.carried, lp.results)):
                self.carry_index[id(c)] = i
                self.carry_index[id(r)] = i
        self._owner: dict[int, int | None] = {}

    def owner(self, v: Value, depth: int = 0) -> int | None:
        """The group that computes `v`; None for values every group may recompute (or global tensors)."""
        if id(v) in self._owner:
            return self._owner[id(v)]
        op = self.prod.get(id(v))
        if op is not None:
            g = self.part.assign.get(op)
        elif id(v) in self.carry_index and depth < 16:
            g = self.owner(self.kernel.loop.yields[self.carry_index[id(v)]], depth + 1)
        else:
            g = None
        self._owner[id(v)] = g
        return g

    def is_load(self, v: Value) -> bool:
        op = self.prod.get(id(v))
        return op is not None and op.kind is OpKind.LOAD


def distribute(kernel: Kernel, part: Partition, arch: str) -> WSKernel:
    """The partitioned level: one program per group, every crossing through an aref."""
    facts = _Facts(kernel, part)
    needs = {g.id: _demand(kernel, part, facts, g.id) for g in part.groups}
    _release_unread_items(kernel, part, needs)
    user = _user_channels(kernel, part, facts, needs)
    tma_puts = {id(c.value) for c in user if c.kind == "tma"}
    crossings = _crossings(kernel, part, facts, needs, tma_puts, arch)
    channels = user + _compiler_channels(crossings, kernel)
    programs = [_build(kernel, part, facts, needs[g.id], g, crossings, channels) for g in part.groups]
    return WSKernel(kernel.name, kernel.params, kernel.constexprs, kernel.grid, arch, "partitioned", programs,
                    channels, pingpong=part.pingpong, loc=kernel.loc)


# ------------------------------------------------------------------------------------ demand analysis
def _uses_through_views(v: Value, users: dict[int, list[Op]]) -> list[Op]:
    out = []
    for u in users.get(id(v), []):
        if u.kind in VIEWS:
            out.extend(_uses_through_views(u.result, users))
        else:
            out.append(u)
    return out


def _demand(kernel: Kernel, part: Partition, facts: _Facts, g: int) -> set:
    """Ops (and loop-carried indices) group g executes: its own ops, what it recomputes, the channel gets
    and releases of user channels whose tiles it uses."""
    want: set = set()
    carried: set[int] = set()
    stack: list[Op] = [op for op, grp in part.assign.items() if grp == g]
    channel_ops: dict[int, list[Op]] = {}
    for op in kernel.all_ops():
        if op.kind in (OpKind.GET, OpKind.CONSUMED):
            channel_ops.setdefault(id(op.operands[0]), []).append(op)

    def need_value(v: Value):
        op = facts.prod.get(id(v))
        if op is not None:
            owner = part.assign.get(op)
            if owner is None and op not in want:          # recompute it here
                stack.append(op)
            return
        if id(v) in facts.carry_index:
            i = facts.carry_index[id(v)]
            if facts.owner(v) in (None, g) and i not in carried:
                carried.add(i)
                lp = kernel.loop
                need_value(lp.inits[i])
                need_value(lp.yields[i])
        if v is getattr(kernel.loop, "iv", None):
            need_value(kernel.loop.trip_count)

    if kernel.loop is not None:
        need_value(kernel.loop.trip_count)
        for c in kernel.loop.carried:      # the owner of a carried value keeps it, even if others read it
            if facts.owner(c) == g:
                need_value(c)
    while stack:
        op = stack.pop()
        if op in want:
            continue
        want.add(op)
        if op.kind is OpKind.GET:       # a group that takes an item of a user channel takes all of them
            for other in channel_ops.get(id(op.operands[0]), []):
                if other not in want:
                    stack.append(other)
        for v in op.operands:
            if facts.owner(v) in (None, g):       # values of other groups arrive through channels instead
                need_value(v)
        if facts.op_region.get(op) == "loop":
            need_value(kernel.loop.iv)
    want |= {("carry", i) for i in carried}
    return want


def _release_unread_items(kernel: Kernel, part: Partition, needs: dict[int, set]) -> None:
    """A user channel whose tiles no group reads is still a FIFO its producer fills: someone must take and
    release every item, or the producer waits forever for a free slot. Its producer does."""
    if kernel.loop is None:
        return
    for ch_op in kernel.channels():
        ops = [op for op in kernel.loop.body.ops if op.kind in (OpKind.PUT, OpKind.GET, OpKind.CONSUMED)
               and op.operands[0] is ch_op.result]
        taken = [op for op in ops if op.kind is not OpKind.PUT]
        puts = [op for op in ops if op.kind is OpKind.PUT]
        if puts and taken and not any(op in want for want in needs.values() for op in taken):
            needs[part.assign[puts[0]]].update(taken)


# --------------------------------------------------------------------------------------- crossings
def _crossings(kernel: Kernel, part: Partition, facts: _Facts, needs: dict[int, set],
               tma_puts: set[int], arch: str) -> list[_Crossing]:
    """Every value used by a group other than its owner — and every loaded tile used by anything but a put
    into a TMA user channel (a TMA copy lands in shared memory) — grouped into channels by (source, kind,
    region, destinations, first user)."""
    users: dict[int, list[Op]] = {}
    for op in kernel.all_ops():
        for v in op.operands:
            users.setdefault(id(v), []).append(op)
    order = {op: i for i, op in enumerate(kernel.all_ops())}
    sends: dict[int, dict[int, list[Op]]] = {}     # value id -> dst group -> using ops
    values: dict[int, Value] = {}
    in_order = {g: [op for op in kernel.all_ops() if op in want] for g, want in needs.items()}
    for g, want in in_order.items():
        for op in want:
            if op.kind in VIEWS:
                continue
            for v in op.operands:
                src = facts.owner(v)
                crossing = src is not None and src != g
                loaded = facts.is_load(v) and not (op.kind is OpKind.PUT and id(op.operands[0]) in tma_puts)
                if crossing or loaded:
                    sends.setdefault(id(v), {}).setdefault(g, []).append(op)
                    values[id(v)] = v
    # views used by a group read their base value: route the base
    for g, want in in_order.items():
        for op in want:
            if op.kind in VIEWS:
                base = op.operands[0]
                src = facts.owner(base)
                if (src is not None and src != g) or facts.is_load(base):
                    users_here = [u for u in _uses_through_views(op.result, users) if u in needs[g]]
                    if users_here:
                        sends.setdefault(id(base), {}).setdefault(g, []).extend(users_here)
                        values[id(base)] = base
    held: dict[tuple[int, int], set[int]] = {}
    tensor_memory = target_of(arch).has_tensor_memory
    if tensor_memory:
        _hold_column_vectors(kernel, needs, sends, values, users, held)
    groups: dict[tuple, _Crossing] = {}
    for vid, per_dst in sends.items():
        v = values[vid]
        src = facts.owner(v)
        if src is None:
            src = part.assign[facts.prod[vid]]
        dsts = tuple(sorted(per_dst))
        first = min((u for us in per_dst.values() for u in us), key=lambda u: order.get(u, 0))
        kind = "tma" if facts.is_load(v) else "store"
        tmem = tensor_memory and kind == "store" and _tensor_memory_tile(v, facts, per_dst)
        # a tensor-memory tile is its own buffer and its own channel (the tensor-memory plan maps a channel to
        # one buffer): two such tiles for one first user (FA's P and the rescaled O) cross in two channels
        key = (src, kind, tmem, facts.region[vid], dsts, id(first), vid if tmem else None)
        cr = groups.get(key)
        if cr is None:
            cr = groups[key] = _Crossing(src, [], dsts, facts.region[vid], kind, tmem)
        cr.values.append(v)
        for d in per_dst:
            cr.held.setdefault(d, set()).update(held.get((vid, d), ()))
        for d, us in per_dst.items():
            regs = sorted({facts.op_region[u] for u in us}, key=("pre", "loop", "post").index)
            prev = cr.use_regions.get(d)
            lo = regs[0] if prev is None else min(prev[0], regs[0], key=("pre", "loop", "post").index)
            hi = regs[-1] if prev is None else max(prev[1], regs[-1], key=("pre", "loop", "post").index)
            cr.use_regions[d] = (lo, hi)
    return sorted(groups.values(), key=lambda c: min(order.get(facts.prod.get(id(v)), -1) for v in c.values))


def _hold_column_vectors(kernel: Kernel, needs: dict[int, set], sends, values, users, held) -> None:
    """Blackwell: a vector along the columns that reaches a group through a slot is read from the slot by
    every op of that group that uses it (`aref.resources.layout.column_reads`: the row layout would copy it
    into every thread). Those readers count as the slot's users, so the slot is held until the last one
    (a vector loaded before the loop and broadcast in it keeps its slot through the loop)."""
    yielded = {id(y) for y in kernel.loop.yields} if kernel.loop is not None else set()
    for vid, per_dst in sends.items():
        v = values[vid]
        if not rank1(v):
            continue
        for g, us in per_dst.items():
            def users_of(x: Value, g=g) -> list:
                return [u for u in users.get(id(x), []) if u in needs[g]] + ([None] if id(x) in yielded else [])
            chain = column_reads(v, users_of)
            if chain is not None:
                members, readers = chain
                us.extend(u for u in readers if u not in us)
                held[vid, g] = members


def _tensor_memory_tile(v: Value, facts: _Facts, per_dst: dict[int, list[Op]]) -> bool:
    """On Blackwell an MMA writes its accumulator to tensor memory and reads its A operand and accumulator
    from there (FA4 keeps S, P and O in tensor memory); such tiles cross groups in tensor memory."""
    src = v
    if id(v) in facts.carry_index:            # a loop-carried value (or loop result): made by its yield
        src = facts.kernel.loop.yields[facts.carry_index[id(v)]]
    op = facts.prod.get(id(src))
    if op is not None and op.kind is OpKind.MMA:
        return True

    def base(x: Value) -> tuple[Value, bool]:
        """The tile a view chain starts from, and whether the chain transposes it."""
        p = facts.prod.get(id(x))
        if p is not None and p.kind in VIEWS:
            b, t = base(p.operands[0])
            return b, t != (p.kind is OpKind.TRANSPOSE)
        return x, False

    def in_tmem(u: Op, i: int) -> bool:
        b, transposed = base(u.operands[i])
        return b is v and mma_reads_from_tmem(u, i, transposed)

    return any(u.kind is OpKind.MMA and any(in_tmem(u, i) for i in (0, 2) if i < len(u.operands))
               for us in per_dst.values() for u in us)


def _channel_region(cr: _Crossing) -> str:
    lo = min((r[0] for r in cr.use_regions.values()), key=("pre", "loop", "post").index)
    hi = max((r[1] for r in cr.use_regions.values()), key=("pre", "loop", "post").index)
    if cr.def_region == "loop":
        return "loop"
    if cr.def_region == "post":
        return "post"
    if lo == "pre" and hi == "pre":
        return "pre"
    return "pre-post" if lo != "post" else "pre→post"


def _compiler_channels(crossings: list[_Crossing], kernel: Kernel) -> list[Channel]:
    out = []
    names: dict[str, int] = {}
    for cr in crossings:
        producers = {id(r): op for op in kernel.all_ops() for r in op.results}
        base = "_".join((v.name or _kind_name(producers.get(id(v)))).split(".")[0] for v in cr.values[:3])
        n = names.get(base, 0)
        names[base] = n + 1
        name = f"{base}.x" if n == 0 else f"{base}_{n}.x"
        payload = tuple(v.type.with_space(Space.TMEM if cr.tmem else Space.SMEM) for v in cr.values)
        value = Value(ArefType(payload, 1), name)
        loc = next((op.loc for op in kernel.all_ops() if any(r is cr.values[0] for r in op.results)),
                   kernel.loc)
        ch = Channel(name, value, 1, payload, cr.src, cr.dsts, cr.kind, _channel_region(cr), False, loc)
        cr.channel = ch
        out.append(ch)
    return out


def _kind_name(op: Op | None) -> str:
    if op is None:
        return "v"
    return op.attrs.fn if op.kind in (OpKind.UNARY, OpKind.BINARY, OpKind.REDUCE) else op.kind.value


def _user_channels(kernel: Kernel, part: Partition, facts: _Facts, needs) -> list[Channel]:
    out = []
    for ch_op in kernel.channels():
        ch = ch_op.result
        puts = [op for op in kernel.loop.body.ops if op.kind is OpKind.PUT and op.operands[0] is ch]
        producer = part.assign[puts[0]]
        consumers = tuple(sorted(g for g, want in needs.items()
                                 if any(isinstance(o, Op) and o.kind is OpKind.GET and o.operands[0] is ch
                                        for o in want)))
        if not consumers:
            consumers = (producer,)
        loaded = all(facts.is_load(v) and part.assign.get(facts.prod[id(v)]) == producer
                     for p in puts for v in p.operands[1:])
        out.append(Channel(ch_op.attrs.name, ch, ch_op.attrs.depth, ch.type.payload, producer, consumers,
                           "tma" if loaded else "store", "loop", True, ch_op.loc, items_per_iter=len(puts)))
    return out


# ------------------------------------------------------------------------------------- program build
# channel region -> (where consumers get the item, where they release it)
CHANNEL_REGIONS = {"pre": ("pre", "pre"), "pre-post": ("pre", "post"), "loop": ("loop", "loop"),
                   "post": ("post", "post"), "pre→post": ("post", "post")}


class _Builder:
    """Builds one group's program: clones its ops and inserts the channel ops it takes part in."""

    def __init__(self, kernel, part, facts, want, group, crossings, channels):
        self.kernel, self.part, self.facts, self.want, self.group = kernel, part, facts, want, group
        self.g = group.id
        self.m: dict[int, Value] = {}
        self.sends = [c for c in crossings if c.src == self.g]
        self.recvs = [c for c in crossings if self.g in c.dsts]
        self.user = {c.value: c for c in channels if c.user}
        self.iv: Value | None = None
        self.consts: dict[tuple, Value] = {}
        self.index = {op: i for i, op in enumerate(kernel.all_ops())}
        self.origin: dict[Op, int] = {}

    # -- helpers
    def val(self, v: Value) -> Value:
        if id(v) in self.m:
            return self.m[id(v)]
        if v.type.__class__.__name__ in ("TensorType", "ArefType"):
            return v                       # kernel parameters and channels are shared by all groups
        raise CompilerBugError(f"group {self.group.name} uses %{v.name or v.id}, which it neither computes nor "
                               f"receives", self.kernel.loc, pass_name="loop distribution")

    def clone(self, op: Op, out: list[Op], operands=None) -> Op:
        ops_ = tuple(self.val(v) for v in op.operands) if operands is None else operands
        types = [r.type for r in op.results]
        if op.kind in VIEWS:        # a view of a tile received through a channel lives in shared memory
            types = list(expected_result_types(Op(op.kind, ops_, op.results, op.attrs, op.loc)))
        res = tuple(Value(t, r.name) for t, r in zip(types, op.results))
        for a, b in zip(op.results, res):
            self.m[id(a)] = b
        new = Op(op.kind, ops_, res, op.attrs, op.loc)
        out.append(new)
        if op in self.index:
            self.origin[new] = self.index[op]
        return new

    def const(self, x: int, out: list[Op], loc) -> Value:
        key = (id(out), x)                   # one constant per block and value keeps the IR readable
        if key not in self.consts:
            v = Value(ScalarType(DType.int32))
            out.append(Op(OpKind.CONST, (), (v,), ConstAttrs(x), loc))
            self.consts[key] = v
        return self.consts[key]

    def item(self, region: str, j: int, n: int, out: list[Op], loc) -> Value:
        if region != "loop":
            return self.const(j, out, loc)
        if n == 1 and j == 0:
            return self.iv
        scaled = self.iv
        if n != 1:
            scaled = Value(ScalarType(DType.int32))
            out.append(Op(OpKind.SCALAR_BINARY, (self.iv, self.const(n, out, loc)), (scaled,), FnAttrs("mul"), loc))
        if j == 0:
            return scaled
        item = Value(ScalarType(DType.int32))
        out.append(Op(OpKind.SCALAR_BINARY, (scaled, self.const(j, out, loc)), (item,), FnAttrs("add"), loc))
        return item

    def users_in(self, cr: _Crossing, region: str) -> list[Op]:
        """The group's ops in `region` that read the crossing's tiles, directly or through views of them
        (a slice or transpose borrows the slot's buffer: its readers must run before the release too)."""
        ids = {id(v) for v in cr.values} | cr.held.get(self.g, set())
        for reg in ("pre", "loop", "post"):            # views may be taken in one region and read in a later one
            for op in self.region_ops(reg):
                if op.kind in VIEWS and id(op.operands[0]) in ids:
                    ids.add(id(op.result))
        return [op for op in self.region_ops(region) if any(id(v) in ids for v in op.operands)]

    def region_ops(self, region: str) -> list[Op]:
        block = {"pre": self.kernel.pre, "post": self.kernel.post}.get(region)
        if block is None:
            block = self.kernel.loop.body if self.kernel.loop is not None else Block()
        # channel declarations are kernel-level, shared by all groups
        return [op for op in block.ops if op in self.want and op.kind is not OpKind.CHANNEL]

    # -- channel ops
    def put(self, cr: _Crossing, region: str, out: list[Op]) -> None:
        item = self.item(region, 0, 1, out, cr.channel.loc)
        out.append(Op(OpKind.PUT, (cr.channel.value, item, *(self.val(v) for v in cr.values)), (), NoAttrs(),
                      cr.channel.loc))

    def get(self, cr: _Crossing, region: str, out: list[Op], loc) -> None:
        item = self.item(region, 0, 1, out, loc)
        res = tuple(Value(t, v.name) for t, v in zip(cr.channel.payload, cr.values))
        out.append(Op(OpKind.GET, (cr.channel.value, item), res, NoAttrs(), loc))
        for v, r in zip(cr.values, res):
            self.m[id(v)] = r

    def consumed(self, cr: _Crossing, region: str, out: list[Op], loc) -> None:
        item = self.item(region, 0, 1, out, loc)
        out.append(Op(OpKind.CONSUMED, (cr.channel.value, item), (), NoAttrs(), loc))

    def put_ahead(self, cr: _Crossing, item: Value, values: list[Value], out: list[Op]) -> None:
        """Put `values` as item `item` of a channel put ahead of its items (`Channel.lead`), where that item
        exists: the loop's last iteration has no next one, and a loop that does not run has no first."""
        exists = Value(ScalarType(DType.bool_))
        out.append(Op(OpKind.SCALAR_BINARY, (item, self.val(self.kernel.loop.trip_count)), (exists,),
                      FnAttrs("lt"), cr.channel.loc))
        out.append(Op(OpKind.PUT, (cr.channel.value, item, *values), (), NoAttrs(), cr.channel.loc, pred=exists))

    # -- regions
    def emit_region(self, region: str, out: list[Op], carried_sends: list[_Crossing] = (),
                    early_sends: list[_Crossing] = ()) -> None:
        """Emit the group's ops of `region` with its channel ops. `carried_sends`: loop-carried values put at
        the top of each iteration; `early_sends`: carried values put as the next iteration's item right after
        the op that yields them (`_early_handoff`)."""
        ops = self.region_ops(region)
        for cr in carried_sends:
            self.put(cr, region, out)
        get_before: dict[Op, list[_Crossing]] = {}
        get_at_end: list[_Crossing] = []
        release_after: dict[Op, list[_Crossing]] = {}
        release_at_start: list[_Crossing] = []
        for cr in self.recvs:
            get_region, release_region = CHANNEL_REGIONS[cr.channel.region]
            users = self.users_in(cr, region)
            if get_region == region:
                if users:
                    get_before.setdefault(users[0], []).append(cr)
                else:
                    get_at_end.append(cr)
            if release_region == region:
                if users:
                    release_after.setdefault(users[-1], []).append(cr)
                else:
                    release_at_start.append(cr)
        for cr in release_at_start:
            self.consumed(cr, region, out, cr.channel.loc)
        put_after: dict[Op, list[_Crossing]] = {}
        for cr in self.sends:
            if cr.def_region != region or cr in carried_sends or cr in early_sends:
                continue
            producers = [op for op in ops if any(r is v for v in cr.values for r in op.results)]
            put_after.setdefault(producers[-1], []).append(cr)
        early_after: dict[Op, list[_Crossing]] = {}
        for cr in early_sends:
            yields = [self.kernel.loop.yields[self.facts.carry_index[id(v)]] for v in cr.values]
            producers = [op for op in ops if any(r is y for y in yields for r in op.results)]
            early_after.setdefault(producers[-1], []).append(cr)
        counters: dict[tuple, int] = {}
        for op in ops:
            for cr in get_before.get(op, []):
                self.get(cr, region, out, op.loc)
            if op.kind in (OpKind.PUT, OpKind.GET, OpKind.CONSUMED):
                ch = self.user[op.operands[0]]
                key = (op.kind, id(ch.value))
                j = counters.get(key, 0)
                counters[key] = j + 1
                item = self.item(region, j, ch.items_per_iter, out, op.loc)
                if op.kind is OpKind.PUT:
                    self.clone(op, out, (ch.value, item, *(self.val(v) for v in op.operands[1:])))
                else:
                    self.clone(op, out, (ch.value, item))
            else:
                self.clone(op, out)
            for cr in put_after.get(op, []):
                self.put(cr, region, out)
            for cr in early_after.get(op, []):             # the next iteration's item, as soon as it is made
                yields = [self.kernel.loop.yields[self.facts.carry_index[id(v)]] for v in cr.values]
                self.put_ahead(cr, self.item(region, 1, 1, out, cr.channel.loc), [self.val(y) for y in yields],
                               out)
            for cr in release_after.get(op, []):
                self.consumed(cr, region, out, op.loc)
        for cr in get_at_end:
            self.get(cr, region, out, cr.channel.loc)


def _early_handoff(cr: _Crossing, facts: _Facts, want) -> bool:
    """Is the loop-carried value `cr` carries handed over right after the MMA that makes it, as the next
    iteration's item, rather than at the top of the next iteration? On Blackwell a carried MMA result in
    tensor memory is signalled by a tcgen05.commit, which tracks every MMA the warp issued before it: at the
    loop's top it also waits for the MMAs issued after the carried one. Where the MMA accumulates on the
    value in place (linear_attention's state S: the reader only casts a copy for q·S) that put the O MMA,
    whose chain runs through the reader, ahead of the state (1599 cycles per iteration; right after the
    state's MMA: 1345). The rule and the solver's graph: `partition.streams.accumulates_in_place`."""
    if not cr.tmem:
        return False
    lp = facts.kernel.loop
    for v in cr.values:
        i = facts.carry_index.get(id(v))
        made = facts.prod.get(id(lp.yields[i])) if i is not None else None
        if made is None or made not in lp.body.ops or made not in want \
                or not accumulates_in_place(made, facts.kernel) or made.operands[2] is not v:
            return False
    return True


def _build(kernel, part, facts, want, group, crossings, channels) -> GroupProgram:
    b = _Builder(kernel, part, facts, want, group, crossings, channels)
    prog = GroupProgram(group)
    b.emit_region("pre", prog.pre.ops)
    lp = kernel.loop
    carried = sorted(i for i in (x[1] for x in want if isinstance(x, tuple)))
    has_loop = lp is not None and (carried or any(op in want for op in lp.body.ops)
                                   or any(c.def_region == "loop" for c in b.sends)
                                   or any(c.use_regions[b.g][0] == "loop" for c in b.recvs))
    if has_loop:
        b.iv = Value(lp.iv.type, lp.iv.name)
        b.m[id(lp.iv)] = b.iv
        inits = tuple(b.val(lp.inits[i]) for i in carried)
        cvals = tuple(Value(lp.carried[i].type, lp.carried[i].name) for i in carried)
        for i, c in zip(carried, cvals):
            b.m[id(lp.carried[i])] = c
        body: list[Op] = []
        top = [c for c in b.sends if c.def_region == "loop"
               and any(id(v) in facts.carry_index and facts.region[id(v)] == "loop" for v in c.values)
               and not any(facts.prod.get(id(v)) in lp.body.ops for v in c.values)]
        early = [c for c in top if _early_handoff(c, facts, want)]
        for cr in early:     # the first item, the carried value's initial one, before a loop that runs at all
            cr.channel.lead = 1
            b.put_ahead(cr, b.const(0, prog.pre.ops, cr.channel.loc),
                        [b.m[id(lp.inits[facts.carry_index[id(v)]])] for v in cr.values], prog.pre.ops)
        b.emit_region("loop", body, [c for c in top if c not in early], early)
        yields = tuple(b.val(lp.yields[i]) for i in carried)
        results = tuple(Value(lp.results[i].type, lp.results[i].name) for i in carried)
        for i, r in zip(carried, results):
            b.m[id(lp.results[i])] = r
        prog.loop = Loop(b.iv, b.val(lp.trip_count), inits, cvals, Block(body), yields, results, lp.loc)
    post_top = [c for c in b.sends if c.def_region == "post"
                and not any(facts.prod.get(id(v)) in kernel.post.ops for v in c.values)]
    b.emit_region("post", prog.post.ops, post_top)
    prog.origin = b.origin
    prog.trip_count = b.m.get(id(lp.trip_count)) if lp is not None else None
    return prog
