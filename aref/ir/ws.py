"""The warp-specialized IR levels: Partitioned → Pipelined → Barrier IR.

A `WSKernel` holds one `GroupProgram` per warp group and the channels (arefs) between them. Every group
program has the same shape:

    pre        straight-line setup (the group's copy of the pre-loop code)
    prologue   pipeline fill: predicated ops of the first steps            (empty before pipelining)
    loop       the group's copy of the loop (the steady state once pipelined)
    epilogue   pipeline drain: predicated ops of the last steps            (empty before pipelining)
    post       the group's copy of the post-loop code

Scoping: `pre` values are visible everywhere after; loop-body values only in the body; loop results in
`epilogue` and `post`.

Channel ops carry the logical item index they act on (operand 1), so every level knows which payload
an op touches: PUT(ch, item, *tiles), GET(ch, item) -> tiles, CONSUMED(ch, item).

Barrier IR op semantics (what the simulator executes and the CuTe backend emits):
  mbarrier_wait(bar, slot, parity)         block until the phase of bar[slot] with parity `parity` has
                                           completed, i.e. until the barrier's current phase bit != parity
  mbarrier_arrive(bar, slot, item)         `count` arrivals on bar[slot] (attrs.count); on `empty`, releases
                                           the slot that held `item`
  mbarrier_arrive_expect_tx(bar, slot)     one arrival plus `bytes` expected transaction bytes
  tma_load(tensor, *coords, ring, slot, bar, item)
                                           asynchronous global→shared copy of a tile box into ring[slot];
                                           when it lands it completes its bytes on bar[slot]
  slot_store(ring, slot, item, value)      registers → shared memory (generic proxy), synchronous
  slot_read(ring, slot, item) -> tile      a view of the payload in ring[slot] (must hold `item`, complete)
  fence_proxy_async                        order this group's generic-proxy shared writes before later
                                           async-proxy reads (wgmma, TMA store)
  tmem_store_fence                         complete this group's tensor-memory stores (tcgen05.st) before
                                           the arrive that publishes them (Blackwell rings in tensor memory)
  mma_async(a, b[, acc]) -> acc            issue a tensor-core MMA; its result is usable only after an
                                           mma_wait that retires it; it reads smem operands until then
  mma_wait(pending=n)                      block until at most n of this group's MMAs are in flight
  mma_commit(bar, slot, item)              Blackwell (tcgen05.commit): one arrival on bar[slot] once every MMA
                                           this group issued so far has completed; how MMA results reach other
                                           groups and how slots MMAs read are released
  tmem_alloc / tmem_dealloc(columns)       Blackwell: the kernel's tensor memory, allocated by one group before
                                           the others start and freed after they all arrived at its barrier
On Blackwell MMA results live in tensor memory (`WSKernel.tmem` says where): `mma_async` names its buffer,
and a `slot_store` of an MMA result into a tensor-memory ring by the group that issued it writes nothing
(the MMA wrote the slot's columns in place; a constant zero tile is written by the tensor core).
  named_barrier_sync/arrive(id, threads)   hardware named barrier (ping-pong ordering)
  setmaxnreg(regs, increase)               register reallocation for the whole group
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aref.errors import SrcInfo, UNKNOWN_LOC
from aref.ir import Block, Loop, Op, OpKind, Param, TileType, Value
from aref.ir.printer import Namer, format_op, with_loc

ROLES = ("producer", "consumer", "load", "mma", "softmax", "correction", "epilogue", "compute")


@dataclass(frozen=True)
class WarpGroup:
    """A role: `warps` warps (4 = one warpgroup) with a per-thread register budget (setmaxnreg)."""

    id: int
    name: str
    role: str
    warps: int
    regs: int

    @property
    def threads(self) -> int:
        return self.warps * 32


@dataclass
class Channel:
    """An aref between warp groups: the user's or compiler-inserted.

    `kind` says how the payload is written: "tma" (asynchronous TMA copies complete a transaction count) or
    "store" (a group writes register tiles to shared memory and arrives with its thread count).
    `region` says where its items live: "loop" (one or more per iteration), "pre", "post", or "pre-post"
    (put before the loop, released after it). The lowering fills in the mbarrier rings and buffers.
    """

    name: str
    value: Value
    depth: int
    payload: tuple[TileType, ...]
    producer: int
    consumers: tuple[int, ...]
    kind: str
    region: str
    user: bool
    loc: SrcInfo = UNKNOWN_LOC
    items_per_iter: int = 1
    async_read: bool = False        # some consumer reads the payload through the async proxy (MMA operand)
    # a loop channel whose producer puts the next iteration's item (iteration i puts item i + lead; the first
    # `lead` items before the loop): a carried value handed over right after the op that makes it
    lead: int = 0
    # Barrier IR resources
    full: Value | None = None
    empty: Value | None = None
    rings: tuple[Value, ...] = ()
    full_count: int = 0
    empty_count: int = 0
    tx_bytes: int = 0

    @property
    def slot_bytes(self) -> int:
        return sum(t.nbytes for t in self.payload)


@dataclass(frozen=True)
class NamedBarrier:
    id: int
    threads: int
    purpose: str


@dataclass
class GroupProgram:
    group: WarpGroup
    pre: Block = field(default_factory=Block)
    prologue: Block = field(default_factory=Block)
    loop: Loop | None = None
    epilogue: Block = field(default_factory=Block)
    post: Block = field(default_factory=Block)
    stages: int = 0                 # pipeline stages after the first (0: not pipelined)
    mma_depth: int = 0              # MMA groups allowed in flight while issuing (fine pipelining)
    origin: dict = field(default_factory=dict)   # op -> index of the Tile IR op it was cloned from
    # this group's value of the Tile IR loop's trip count (None: the group does not compute it): what its
    # loop's count and its peeled iterations' items derive from (the timing model's longer loop, `extra_trips`)
    trip_count: Value | None = None

    def regions(self) -> list[tuple[str, Block]]:
        out = [("pre", self.pre), ("prologue", self.prologue)]
        if self.loop is not None:
            out.append(("loop", self.loop.body))
        out += [("epilogue", self.epilogue), ("post", self.post)]
        return out

    def all_ops(self):
        for _, block in self.regions():
            yield from block.ops

    def producers(self) -> dict[int, Op]:
        """Value id → the op producing it; a loop-carried value maps to the producer of its yield (else of its
        init), a loop result to its yield's producer."""
        prod = {id(r): op for op in self.all_ops() for r in op.results}
        if self.loop is not None:
            for c, y, i in zip(self.loop.carried, self.loop.yields, self.loop.inits):
                src = prod.get(id(y)) or prod.get(id(i))
                if src is not None:
                    prod[id(c)] = src
            for r, y in zip(self.loop.results, self.loop.yields):
                if id(y) in prod:
                    prod[id(r)] = prod[id(y)]
        return prod


@dataclass
class WSKernel:
    """A warp-specialized kernel at the partitioned, pipelined or barrier level."""

    name: str
    params: tuple[Param, ...]
    constexprs: dict
    grid: tuple[int, ...]
    arch: str
    level: str
    groups: list[GroupProgram]
    channels: list[Channel]
    named_barriers: list[NamedBarrier] = field(default_factory=list)
    pingpong: tuple[int, ...] = ()     # groups that take turns on the tensor core, in order
    # the solver's tensor-core order kept across groups (`pipeline.order`): (syncing group, its MMA's attrs,
    # arriving group, its MMA's attrs, named barrier id, threads)
    tc_turns: list = field(default_factory=list)
    loc: SrcInfo = UNKNOWN_LOC
    # a solver's modulo schedule: Tile IR op index -> (stage, residue); None for the heuristic pipeline
    anchors: dict | None = None
    # that schedule's graph stated each group's instruction stream (`partition.model.Partition.streams`)
    streams: bool = False
    # the optimal partitioner's schedule runs two nodes of one group at once (`Partition.group_overlap`)
    group_overlap: bool = False
    # the resource model's refusal of the groups' register budgets (Barrier IR): the backend raises it, the
    # simulator and the timing model still run the kernel (registers do not change what it computes)
    resource_error: Exception | None = None
    # Blackwell: where tiles live in tensor memory (`aref.lower.tmem.TmemPlan`), set by the aref lowering
    tmem: object | None = None
    # an optimal partition's program replaced by the heuristic's, faster in the timing model: why (else None)
    fallback: str | None = None
    # what the partitioner says of its choice (the solver's II and proof, a row split and why)
    notes: list[str] = field(default_factory=list)

    def channel(self, name: str) -> Channel:
        return next(c for c in self.channels if c.name == name)

    def channel_of(self, value: Value) -> Channel:
        return next(c for c in self.channels if c.value is value)

    @property
    def total_threads(self) -> int:
        return sum(g.group.threads for g in self.groups)


# ------------------------------------------------------------------------------------------ printing
def _channel_line(ch: Channel, groups: list[GroupProgram], name) -> str:
    gname = {g.group.id: g.group.name for g in groups}
    payload = ", ".join(str(t) for t in ch.payload)
    text = (f"channel {name(ch.value)} depth={ch.depth} [{payload}] {ch.kind} {ch.region} "
            f"{gname.get(ch.producer, ch.producer)} -> {', '.join(gname.get(c, str(c)) for c in ch.consumers)}")
    if ch.full is not None:
        text += (f" full={name(ch.full)}(count={ch.full_count}" + (f", tx={ch.tx_bytes}B" if ch.tx_bytes else "")
                 + f") empty={name(ch.empty)}(count={ch.empty_count}) rings=({', '.join(name(r) for r in ch.rings)})")
    if not ch.user:
        text += " (compiler)"
    return text


def print_ws(kernel: WSKernel) -> str:
    """Readable text of a warp-specialized kernel at any level."""
    name = Namer()
    out = []
    params = ", ".join(f"{name(p.value)}: {p.value.type}" for p in kernel.params)
    out.append(f"ws_kernel @{kernel.name}({params}) grid={kernel.grid} arch={kernel.arch} level={kernel.level}")
    for ch in kernel.channels:
        out.append(with_loc(_channel_line(ch, kernel.groups, name), ch.loc, "  "))
    for nb in kernel.named_barriers:
        out.append(f"  named_barrier {nb.id} threads={nb.threads} ({nb.purpose})")
    if kernel.pingpong:
        out.append(f"  pingpong order: {', '.join(kernel.groups[g].group.name for g in kernel.pingpong)}")
    if kernel.tmem is not None:
        out += ["  " + line for line in kernel.tmem.lines()]

    def annotate(op: Op) -> str:
        parts = []
        if op.stage is not None:
            parts.append(f"[stage {op.stage}]")
        if op.pred is not None:
            parts.append(f"if {name(op.pred)}")
        return " ".join(parts)

    for gp in kernel.groups:
        g = gp.group
        extra = f" stages={gp.stages + 1}" if gp.stages else ""
        extra += f" mma_depth={gp.mma_depth}" if gp.mma_depth else ""
        out.append(f"  group {g.id} \"{g.name}\" role={g.role} warps={g.warps} regs={g.regs}{extra} {{")
        for region, block in gp.regions():
            if region == "loop":
                loop = gp.loop
                iters = ", ".join(f"{name(c)} = {name(i)}" for c, i in zip(loop.carried, loop.inits))
                head = f"for {name(loop.iv)} in range({name(loop.trip_count)})"
                head += f" iter_args({iters})" if iters else ""
                out.append(with_loc(head + " {", loop.loc, "    "))
                for op in block.ops:
                    out.append(with_loc(format_op(op, name, annotate(op)), op.loc, "      "))
                if loop.yields:
                    out.append(f"      yield {', '.join(name(y) for y in loop.yields)}")
                results = ", ".join(name(r) for r in loop.results)
                out.append("    }" + (f" -> {results}" if results else ""))
                continue
            if not block.ops:
                continue
            if region != "pre" or gp.stages:
                out.append(f"    {region}:")
            for op in block.ops:
                out.append(with_loc(format_op(op, name, annotate(op)), op.loc, "    "))
        out.append("  }")
    return "\n".join(out) + "\n"


def ops_of_kind(gp: GroupProgram, *kinds: OpKind) -> list[Op]:
    return [op for op in gp.all_ops() if op.kind in kinds]
