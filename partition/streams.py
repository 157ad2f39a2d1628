"""What the optimal partitioner's graph nodes cost the warp groups that run them (the solver's group
occupancy), and the latencies of the hand-offs between groups — as the lowering and the timing model
realize them.

A warp group is one instruction stream: the timing model (`aref.sim.timing`) runs its ops one after the
other. Synchronous work — CUDA-core ops, tensor-memory loads and stores, shared-memory stores, barrier
waits — holds the group for its whole cost (`aref.target.machine.op_cost`); an MMA or a TMA copy holds it for
`async_issue_cycles`, an arrive likewise. The lowering (`aref.lower`) turns every cross-group value into a
channel: the producer waits for a free slot, stores its registers into shared memory (at the port's rate),
fences when an MMA reads them (async proxy) and arrives; each consumer group waits for the full slot and
releases it after use. A wait costs `sync_cycles` once it can proceed. A group that reads an MMA result
itself waits for the MMA (`mma_wait`).

The channels of those hand-offs take shared memory (`handoff_memory`, per slot; the solver counts the
slots from its stages), and so do values the loop's groups hand to each other after the loop
(`add_post_handoffs`: the epilogue runs with the group that computes what it reads, as
`partition.optimal._place_rest` places it, and the other values it reads come to it).
"""
from __future__ import annotations

from aref.ir import Kernel, Op, OpKind, Space, TileType, Value
from aref.ops import VIEWS
from aref.ops.memory import tma_bytes
from aref.target.machine import ISSUE, Machine, mma_issue_cycles, op_cost
from aref.resources.memory import packing_hosts, resident_staging, staging_hosts, staging_tile, tile_bytes
from partition.model import value_owner


def op_stream_cycles(op: Op, m: Machine) -> int:
    """Cycles `op` holds the instruction stream of its group (0 for views)."""
    k = op.kind
    if k in (OpKind.MMA, OpKind.MMA_ASYNC, OpKind.LOAD, OpKind.TMA_LOAD):
        return m.async_issue_cycles
    if k is OpKind.STORE:                    # stage the tile into shared memory, then issue the TMA store
        return -(-tma_bytes(op) // m.smem_bytes_per_clk) + m.async_issue_cycles
    unit, cycles = op_cost(op, m)
    return cycles if unit != ISSUE or cycles else 0


def cluster_stream_cycles(ops: list[Op], m: Machine, tmem_bytes: int = 0) -> int:
    """A fused CUDA-core cluster: its ops run one after another, plus its tensor-memory traffic."""
    return sum(op_stream_cycles(o, m) for o in ops) + (tmem_bytes // m.tmem_bytes_per_clk if tmem_bytes else 0)


def store_cycles(nbytes: int, m: Machine) -> int:
    """Registers of a warp group into shared memory."""
    return -(-nbytes // m.smem_bytes_per_clk)


def send_cycles(nbytes: int, m: Machine, *, async_reader: bool, mma_result: bool = False,
                in_tmem: bool = False) -> int:
    """The producer group's cost of handing a value to another group.

    Registers go through a shared-memory slot: wait for it, store, fence for an MMA reader, arrive; an MMA
    result in registers is waited for first. A tensor-memory value (Blackwell) only signals: the MMA
    result by a commit, a CUDA-core value after it waited for a free slot and fenced its stores (the
    lowering's `mbarrier_wait empty`, `tmem_store_fence`, `mbarrier_arrive full`)."""
    if in_tmem:
        return m.async_issue_cycles + (0 if mma_result else 2 * m.sync_cycles)
    cost = m.sync_cycles + store_cycles(nbytes, m) + m.async_issue_cycles
    if async_reader:
        cost += m.sync_cycles
    if mma_result:
        cost += m.sync_cycles
    return cost


def receive_cycles(m: Machine) -> int:
    """A consumer group's cost per channel: wait for the full slot, release it after use."""
    return m.sync_cycles + m.async_issue_cycles


def wait_cycles(m: Machine) -> int:
    """A group's synchronous wait for its own MMA's result."""
    return m.sync_cycles


def transfer_latency(nbytes: int, m: Machine, *, async_reader: bool) -> int:
    """Cycles from the value being ready in the producer's registers until the consumer group can use it:
    the slot wait, the store, the fence, the arrive and the consumer's wake-up."""
    cost = m.sync_cycles + store_cycles(nbytes, m) + m.async_issue_cycles + m.sync_cycles
    return cost + (m.sync_cycles if async_reader else 0)


def load_latency(op: Op, m: Machine) -> int:
    """Cycles from a TMA load's issue until its consumer proceeds: the mean memory latency, the copy's
    transfer at its arrival rate and the consumer's wake-up from the full barrier."""
    return op_cost(op, m)[1] + m.sync_cycles


def release_latency(m: Machine) -> int:
    """From a slot's last reader finishing until the producer can reuse the slot: the consumer's release
    arrive and the producer's wake-up."""
    return m.async_issue_cycles + m.sync_cycles


def handoff_memory(values: list[Value]) -> dict[str, int]:
    """Shared memory one slot of a channel carrying `values` between groups takes (their shared tiles)."""
    nbytes = sum(tile_bytes(TileType(tuple(v.type.shape), v.type.dtype, Space.SMEM)) for v in values
                 if isinstance(v.type, TileType))
    return {"smem": nbytes} if nbytes else {}


def add_post_handoffs(kernel, ex, replicated: set) -> None:
    """State in `ex.graph` the values the epilogue after the loop reads from other groups' nodes: each post
    op runs with the node owning the last of its operands that has one (`_place_rest`'s rule), and every
    other operand owned by another node comes to it through a one-slot channel when the two run apart."""
    placed: dict[Op, str | None] = dict(ex.node_of)     # the loop's nodes, then the post ops as placed
    owner = value_owner(kernel, placed)

    seen: set[tuple] = set()
    added = []
    for op in kernel.post.ops:
        if op in replicated:
            continue
        data = op.operands[1:] if op.kind is OpKind.STORE else op.operands
        node = next((n for n in (owner(v) for v in reversed(data)) if n is not None), None)
        placed[op] = node
        for v in data:
            src = owner(v)
            if node is None or src is None or src == node or (id(v), node) in seen:
                continue
            seen.add((id(v), node))
            fp = handoff_memory([v])
            if fp:
                added.append(ex.graph.add_post_handoff(src, node, fp))
    add_post_staging(kernel, ex, placed)
    # a store after the loop stages its tile in a hand-off slot its group has released, if one is large
    # enough (`aref.resources.memory.smem_plan`): its staging bytes, already budgeted, are not taken twice
    staged = dict(resident_staging(kernel))
    for op in kernel.post.ops:
        need = staged.get(op)
        if need is None or len(staging_tile(op).shape) != 2:
            continue
        host = next((ph for ph in added if ph.dst == placed.get(op) and ph.footprint.get("smem", 0) >= need), None)
        if host is not None:
            host.footprint["smem"] -= need
            added.remove(host)


def add_post_staging(kernel, ex, placed: dict) -> None:
    """State in `ex.graph` the staging of each store after the loop that a tile loaded before the loop may
    hold (`aref.resources.memory.staging_hosts`, left out of the loop's budget): the tile holds it only where
    every node reading the tile runs in the store's group (`smem_plan` reuses a ring only its group reads),
    or a loop store's staging tile does where that store's node runs there (`packing_hosts`); else it takes
    its own bytes (attention_bwd: dK and dV stored by the group of their MMAs, K and V read by another)."""
    packing = packing_hosts(kernel)
    for op, need, host in staging_hosts(kernel):
        node = placed.get(op)
        if host is None or node is None:
            continue
        readers = sorted(_reader_nodes(host.result, kernel, placed))
        hosts = [readers] if readers else []
        hosts += [[ex.node_of[s]] for s in packing.get(op, []) if s in ex.node_of]
        ex.graph.add_post_staging(node, {"smem": need}, hosts)


def _reader_nodes(v: Value, kernel, placed: dict) -> set[str]:
    """The nodes (`placed`: op -> node) whose ops read `v`, through views and casts of it."""
    out: set[str] = set()
    todo, seen = [v], set()
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        for u in users(x, kernel):
            if u is None:
                continue
            if placed.get(u) is not None:
                out.add(placed[u])
            elif u.kind in VIEWS or u.kind is OpKind.CAST:
                todo.extend(u.results)
    return out


def mma_reads_from_tmem(mma: Op, i: int, transposed: bool) -> bool:
    """Does Blackwell's `mma` read its operand `i`, a (`transposed`) view of a tile a group computed, from
    tensor memory? An accumulator (operand 2) is updated in place there; operand A (0) when a thread holds
    a whole row of a 128-row tile (tcgen05 reads A from tensor memory K-major, one row per lane). Anything
    else goes through shared memory. The one rule of the solver's graph (`tmem_operand`) and the loop
    distribution's channels (`partition.distribute`)."""
    return i == 2 or (i == 0 and not transposed and mma.operands[0].type.shape[0] == 128)


def tmem_operand(v: Value, kernel: Kernel, transposed: bool = False, depth: int = 0) -> bool:
    """Does the lowering hand `v` to an MMA through tensor memory (`mma_reads_from_tmem`, through views and
    casts)?"""
    if depth > 8:
        return False
    for u in users(v, kernel):
        if u is None:
            continue
        if u.kind is OpKind.MMA:
            if any(x is v and mma_reads_from_tmem(u, i, transposed) for i, x in enumerate(u.operands[:3])):
                return True
        elif (u.kind in VIEWS or u.kind is OpKind.CAST) and tmem_operand(
                u.results[0], kernel, transposed != (u.kind is OpKind.TRANSPOSE), depth + 1):
            return True
    return False


def users(v: Value, kernel: Kernel) -> list[Op | None]:
    """The ops reading `v` (None for a value the loop yields and nothing else reads)."""
    return [op for op in kernel.all_ops() if any(x is v for x in op.operands)] or (
        [None] if kernel.loop is not None and any(y is v for y in kernel.loop.yields) else [])


# ------------------------------------------------------------------ Blackwell's occupancy-free graph
def in_place_readers(ex, sources) -> None:
    """Blackwell: an MMA accumulating on its own previous result does so in place in tensor memory, so every
    other node reading that previous result (linear attention's state, read for q·S) must have read it before
    the MMA of the same iteration overwrites it: an ordering edge from each such reader to the MMA."""
    g = ex.graph
    for n, ops in ex.members.items():
        mma = ops[0]
        if ex.kind[n] != "gemm" or len(mma.operands) < 3:
            continue
        if (mma, 1) not in sources(mma.operands[2]):
            continue
        carried = mma.operands[2]
        for r, rops in ex.members.items():
            if r == n:
                continue
            if any(v is carried for o in rops for v in o.operands):
                g.add_edge(r, n, g.ops[r].duration, 0, data=False)


def recomputed(ops: list[Op], prod: dict, rep, body: list[Op]) -> list[Op]:
    """The loop body's replicated ops (index math, masks: `partition.model.replicated_ops`) that `ops` read,
    directly or through each other: the group running `ops` recomputes them every iteration."""
    out: list[Op] = []
    stack = [v for o in ops for v in o.operands]
    while stack:
        p = prod.get(id(stack.pop()))
        if p is None or p not in rep or p not in body or p in out or p in ops:
            continue
        out.append(p)
        stack.extend(p.operands)
    return out


def loaded_items(ops: list[Op], sources, body: list[Op]) -> set[int]:
    """The ring items (ids of a user channel's put, or of a load published alone) whose loaded tiles `ops`
    read: a group waits for each once per iteration and releases it once."""
    out: set[int] = set()
    for o in ops:
        for v in o.operands:
            for s, _ in sources(v):
                if s.kind is OpKind.LOAD and s in body:
                    put = put_of(s, body)
                    out.add(id(put if put is not None else s))
    return out


# ------------------------------------------------------------------------ user channels in the graph
def put_of(load: Op, body: list[Op]) -> Op | None:
    """The user channel `put` that publishes `load`'s tile, if any."""
    return next((p for p in body if p.kind is OpKind.PUT and any(v is load.result for v in p.operands[1:])), None)


def whole_puts(ex, body: list[Op], m) -> None:
    """The tiles of one put share a barrier: a reader of any of them waits until every copy has landed."""
    g = ex.graph
    by_put: dict[int, list[str]] = {}
    for n, ops in ex.members.items():
        if ex.kind[n] == "tma":
            put = put_of(ops[0], body)
            if put is not None:
                by_put.setdefault(id(put), []).append(n)
    for loads in by_put.values():
        readers = sorted({e.dst for e in g.edges if e.src in loads and e.distance == 0})
        for n in loads:
            have = {e.dst for e in g.edges if e.src == n and e.distance == 0}
            for r in readers:
                if r not in have:
                    g.add_edge(n, r, load_latency(ex.members[n][0], m), data=False)


def release_anchors(kernel, ex, result, index: dict) -> dict[int, tuple[int, int]]:
    """Where the solver frees each user channel's slot: when the last op reading its tiles ends (the ring
    edges of `_ring_reuse` assume that), as (stage, residue) anchors of the channel's `consumed`. Only with
    the group streams modelled: on Blackwell a tcgen05.commit of the MMA warp frees the slot, later than
    the graph's reader end, and the pipeline's own release rule is faster in the timing model (gemm 323
    cycles per iteration instead of 335). Also ("end", index of a reader's op): where that reader ends, so a
    group releases its own hold when its own readers are done (`pipeline.schedule.anchored_schedule`)."""
    body = kernel.loop.body.ops
    g = ex.graph
    out = {}
    for op in body:
        if op.kind is not OpKind.CONSUMED:
            continue
        put = next((p for p in body if p.kind is OpKind.PUT and p.operands[0] is op.operands[0]), None)
        loads = {ex.node_of.get(prod) for prod in (producer(v, body) for v in put.operands[1:])} if put else set()
        readers = {e.dst for e in g.edges if e.src in loads and e.distance == 0}
        if readers:
            end = max(result.schedule[r] + g.ops[r].duration for r in readers)
            out[index[op]] = (end // result.ii, end % result.ii)
        for r in readers:
            # each consumer group's own release arrives when its own readers end (the slot is free at the
            # last arrival, the `consumed` anchor above): keyed ("end", reader op) for the pipeline
            r_end = result.schedule[r] + g.ops[r].duration
            for o in ex.members[r]:
                out[("end", index[o])] = (r_end // result.ii, r_end % result.ii)
    return out


def producer(v: Value, body: list[Op]) -> Op | None:
    return next((o for o in body if any(r is v for r in o.results)), None)


# ------------------------------------------------------------------ Blackwell's MMA warp
MMA_WARP = "mma_warp"
# the scalar ops a barrier wait computes in the loop (`aref.lower`'s slot and phase of the item: item mod
# depth, the quotient mod 2; the quotients and constants are shared between channels and not counted)
SLOT_MATH = 2


def scalar_cycles() -> int:
    """What one scalar op (index math) costs its group's stream: the op registry's figure."""
    from aref.ops.tiles import SCALAR_COST
    return SCALAR_COST.cycles(None, None)


def mma_warp_streams(ex, body: list[Op], m: Machine) -> None:
    """Blackwell's own-stream graph: the loop's MMAs issue from one warp (FA4's MMA warp, as the heuristic's
    Blackwell partitions and every partition the solver found for the examples give them), and what each
    MMA costs that warp's instruction stream goes on a unit of its own (`MMA_WARP`, one per SM), so the
    sum over the MMAs fits in the II. As the lowering (`aref.lower.sm100`) issues an MMA: it waits for
    the full slot of each channel it reads first (one wait per put: a load's ring, a tile another group
    hands over), and for the empty slot of its result where another group reads it; it issues the MMA (a
    tcgen05.mma per K atom, `aref.target.machine.mma_issue_cycles`); then it commits the result's full barrier and
    the release of each channel whose last reader it is. Every wait and commit holds the warp `sync_cycles`
    (the timing model's cost). The tensor core takes the MMA after the waits and the issue: its `tc` use
    starts there, the result's readers wait that much longer and its operands need be ready only then.
    An MMA's own accumulator chain and MMA-to-MMA operands need no barrier (the warp issues in order). A tile
    another group computes reaches the tensor core after that group's arrive, the warp's wait returning and
    the MMA's issue (linear_attention's q·S started ~100 cycles after the cast state's arrive, which the
    graph had it start at). Each wait first computes its slot and parity (`SLOT_MATH` scalar ops, one more
    where the warp waits as a producer for an empty slot): attention_fwd's MMA warp runs 34 such ops per
    iteration in the timing model, 24 of them counted here (its shared quotients and constants are not)."""
    g = ex.graph
    gemms = [n for n in g.ops if ex.kind[n] == "gemm"]
    if not gemms:
        return
    order = {n: i for i, n in enumerate(g.ops)}

    def channel(src: str):
        if ex.kind[src] == "tma":                 # the loads of one put share its ring's barriers
            put = put_of(ex.members[src][0], body)
            return ("put", id(put)) if put is not None else src
        return src

    readers: dict = {}
    for e in g.edges:
        if e.dst in gemms and e.data and e.src not in gemms:
            readers.setdefault(channel(e.src), set()).add(e.dst)
    waits = dict.fromkeys(gemms, 0)
    commits = dict.fromkeys(gemms, 0)
    math = dict.fromkeys(gemms, 0)                # scalar ops of the waits' slot and parity
    for rs in readers.values():
        rs = sorted(rs, key=order.get)
        waits[rs[0]] += 1
        math[rs[0]] += SLOT_MATH
        commits[rs[-1]] += 1
    for n in gemms:
        if any(e.src == n and e.data and e.dst not in gemms for e in g.edges):
            waits[n] += 1                         # the result's slot free, then its full barrier
            math[n] += SLOT_MATH + 1              # ... whose parity the producer flips
            commits[n] += 1
    before = {n: waits[n] * m.sync_cycles + math[n] * scalar_cycles()
              + mma_issue_cycles(ex.members[n][0], m) for n in gemms}
    g.add_unit(MMA_WARP, 1)
    for n in gemms:
        node = g.ops[n]
        node.usage[MMA_WARP] = before[n] + commits[n] * m.sync_cycles
        node.offset = {**node.offset, "tc": node.offset.get("tc", 0) + before[n]}
    for e in g.edges:
        if e.src == e.dst:
            continue
        shift = before.get(e.src, 0) - before.get(e.dst, 0)
        if e.data and e.dst in before and e.src not in before and ex.kind[e.src] != "tma":
            # a tile another group hands over: the warp's wait for it returns after the producer's arrive,
            # then it issues the MMA (the shift alone lets those run before the tile comes)
            shift += m.sync_cycles + mma_issue_cycles(ex.members[e.dst][0], m)
        e.delay = max(0, e.delay + shift)


def accumulates_in_place(mma: Op, kernel: Kernel) -> bool:
    """Does `mma` make a loop-carried value by accumulating on that value itself (linear_attention's state:
    S += kᵀ·v), so that a reader in another group is off the value's chain? Then the lowering hands the
    value over right after the MMA, as the next iteration's item (`partition.distribute._early_handoff`): its
    tcgen05.commit fires when that MMA ends (the tensor core runs the MMAs in the warp's order, so those
    issued before it have ended too). Where the value reaches the MMA through the reader (attention's O,
    rescaled by the correction group) it crosses at the loop's top."""
    lp = kernel.loop
    if lp is None or mma.kind is not OpKind.MMA or len(mma.operands) < 3:
        return False
    return any(c is mma.operands[2] and y is mma.result for c, y in zip(lp.carried, lp.yields))


def carried_handoffs(ex, kernel: Kernel, mma_commit_cycles: int) -> None:
    """Blackwell's own-stream graph: an MMA result carried into the next iteration and read there by another
    group (attention's O, read by the correction group) is handed over at the top of the MMA warp's next
    iteration (`partition.distribute`: a carried value crosses at the loop's top), by a tcgen05.commit that
    tracks every MMA the warp issued before it. So the reader of iteration i + 1 waits for each MMA of
    iteration i, not only for the one that made the value: an edge from every other MMA to the reader,
    distance 1, as the value's own (its end plus the commit reaching the group). A value its MMA accumulates
    on in place is handed over right after that MMA (`accumulates_in_place`): its own edge states it
    (linear_attention's state waited for the O MMA, ~300 cycles a step on its reader's chain, at the top)."""
    g = ex.graph
    gemms = [n for n in g.ops if ex.kind[n] == "gemm"]
    carried = {(e.src, e.dst) for e in g.edges
               if e.data and e.distance == 1 and e.src in gemms and e.dst not in gemms
               and not accumulates_in_place(ex.members[e.src][0], kernel)}
    for src, dst in sorted(carried):
        for o in gemms:
            if o != src:
                g.add_edge(o, dst, g.ops[o].duration + mma_commit_cycles, 1, data=False)


def group_order(ex, own_stream: dict[str, int]) -> None:
    """Blackwell's own-stream graph: a CUDA-core node holds its group's instruction stream for its own
    stream (`own_stream`: its ops, waits and hand-off per iteration) from its start, so two nodes of one group
    do not overlap modulo the II (`solve.Op.issue`, the machine's `stream_order`), as the group runs them one
    after another. Set after the graph's edges: a node's results still leave it at its ops' end (the edges
    state that), not its stream's. Without it the solver put linear_attention's state cast (640 cycles of its
    own) and the rescale of q·S (336) in one group at II 1224, and the group ran them in 1345. Not by default:
    the solver then spreads attention_fwd's softmax and correction nodes over more groups than the
    registers take (the timing guard solves it where the schedule overlaps a group's nodes:
    `group_overlap`)."""
    for n, cycles in own_stream.items():
        ex.graph.ops[n].issue = cycles


def group_overlap(ex, result) -> bool:
    """Does the solver's schedule have one group run two CUDA-core nodes at once, modulo the II, by their own
    streams (the own-stream recurrences: a group runs them one after another, `group_order`)?"""
    g, ii = ex.graph, result.ii
    own = {e.src: e.delay for e in g.edges if e.src == e.dst and e.distance == 1 and not e.data}
    spans: dict = {}
    for n, cycles in own.items():
        if n in result.schedule and ex.kind.get(n) not in ("gemm", "tma"):
            spans.setdefault(result.assignment[n], []).append((result.schedule[n] % ii, min(cycles, ii)))
    for group in spans.values():
        for i, (a, la) in enumerate(group):
            for b, lb in group[i + 1:]:
                if (b - a) % ii < la or (a - b) % ii < lb:
                    return True
    return False


def tensor_core_order(ex, result, index: dict) -> dict:
    """Where the solver's tensor-core order would not survive issue-when-ready: a Hopper consumer group issues
    its wgmma as soon as its operands are ready, and the tensor core serves MMAs first come first served, so an
    MMA X that the schedule starts after another group's MMA P of the same iteration, though X's operands are
    ready before P starts (its in-edges: `ready`), would take P's turn and push P's chain back. For each such
    X: ("tc_after", index of X's op) -> index of the latest such P's op (the pipeline then has X's group wait
    for P's issue, `pipeline.order`). An X whose latest such P belongs to another iteration is left out (its
    turn would pair with the wrong iteration's issue)."""
    g, ii, sched = ex.graph, result.ii, result.schedule
    mmas = [n for n in ex.members if ex.kind[n] == "gemm" and n in sched]
    out = {}
    for x in mmas:
        ready = max((sched[e.src] + e.delay - e.distance * ii for e in g.edges
                     if e.dst == x and e.src != x and e.src in sched), default=None)
        if ready is None:
            continue
        turns = [(sched[p] + k * ii, k, p) for p in mmas if result.assignment[p] != result.assignment[x]
                 for k in range(-2, 3) if ready <= sched[p] + k * ii < sched[x]]
        if turns:
            _, k, p = max(turns)
            if k == 0:
                out[("tc_after", index[ex.members[x][0]])] = index[ex.members[p][0]]
    return out


def ring_reuse(ex, body: list[Op], m, occupancy: bool = False, mma_commit_cycles: int = 64,
               whole_item: bool = False, latest_copy: bool = False) -> None:
    """A load into a user channel of depth D reuses the slot of iteration i − D: it may not start before every
    reader of that slot (the ops using the loaded tiles) has finished and released it — so the schedule fits
    the user's ring (`occupancy`: the graph states the release latency too; the occupancy-free graph counts
    the readers' ends only).
    And the ring's round trip bounds the II as it bounds the program: a reader of iteration i + D finds its
    item no sooner than the slot's round trip after it started on iteration i — its own work, its release
    reaching the producer (a tcgen05.commit for a Blackwell MMA, else an mbarrier arrive), the copies'
    issue, latency (`Machine.ring_latency`: a ring read in order waits for its late copies) and the item's
    transfer, the reader's wake-up and, for an MMA, its issue (D·II ≥ that: a reader's own recurrence, so it
    bounds the II without moving the loads in the schedule). `ex`: the `partition.optimal.Extraction` being
    built; `mma_commit_cycles`: a tcgen05.commit reaching a waiting group.
    `whole_item`: the ring hands out and frees a put's tiles as one item (one full barrier, one release after
    the last reader), so the round trip runs from any reader of an item's tiles releasing it to any reader of
    the item D puts later waiting for it: an edge for each ordered pair of the put's readers (the last one's
    release to the first one's wait, whichever the schedule makes them), not only each reader's own
    recurrence (linear_attention on sm_100a: q·Kᵀ waits for the item that the previous O MMA two items
    back released; per reader the graph proved II 800, the program ran at 2171; on Hopper mlp's W1/W2 item:
    the depth-3 ring's round trip from the second MMA's release to the first MMA's wait three items later
    left no slack at II 1432, the program ran at 1544; stated, II 1504). `latest_copy` (Blackwell's
    own-stream graph): the item lands with the latest of its copies (`Machine.ring_latency`'s `copies`:
    linear_attention's Q, K and V at depth 2). Hopper's graph keeps one copy's latency: with the latest
    copy's, mlp's II went to 1528 and linear_attention's to 2048, whose schedules lowered to 1701 and 2483
    cycles per iteration (+11% and +21%; 1544 and 2006 with one copy's)."""
    g = ex.graph
    loads = {id(ops[0].result): ops[0] for n, ops in ex.members.items() if ex.kind[n] == "tma"}
    trips: dict[str, int] = {}
    pairs: dict[tuple[str, str, int], int] = {}
    for n, ops in ex.members.items():
        if ex.kind[n] != "tma":
            continue
        put = put_of(ops[0], body)
        if put is None:
            continue
        depth = put.operands[0].type.depth
        readers = {e.dst for e in g.edges if e.src == n and e.distance == 0}
        for r in sorted(readers):
            g.add_edge(r, n, g.ops[r].duration + (release_latency(m) if occupancy else 0), depth,
                       data=False)
        # the item lands when its last copy has: its bytes share the copy engine
        item = [loads[id(v)] for v in put.operands[1:] if id(v) in loads]
        landed = max(-(-sum(tma_bytes(o) for o in item) // m.tma_bytes_per_clk),
                     max(-(-tma_bytes(o) // m.tma_copy_rate) for o in item))
        # (`latest_copy`: a whole item lands with the latest of its copies, each of its own latency)
        latency = m.ring_latency(depth, len(item) if whole_item and latest_copy else 1)
        refill = m.async_issue_cycles * len(item) + latency + landed + m.sync_cycles

        def trip(r1: str, r2: str) -> int:
            """r1's work and release, the refill, r2's wake-up and, for an MMA, its issue (it starts then)."""
            release = mma_commit_cycles if m.target.has_tensor_memory and ex.kind[r1] == "gemm" else m.sync_cycles
            issue = mma_issue_cycles(ex.members[r2][0], m) if ex.kind[r2] == "gemm" else 0
            return g.ops[r1].duration + release + refill + issue
        for r in sorted(readers):
            trips[(r, depth)] = max(trips.get((r, depth), 0), trip(r, r))
        if whole_item:
            put_loads = {ex.node_of.get(o) for o in item}
            item_readers = sorted({e.dst for e in g.edges if e.src in put_loads and e.distance == 0})
            for r1 in item_readers:
                for r2 in item_readers:
                    if r1 != r2:
                        pairs[(r1, r2, depth)] = max(pairs.get((r1, r2, depth), 0), trip(r1, r2))
    for (r, depth), trip in sorted(trips.items()):
        g.add_edge(r, r, trip, depth, data=False)
    for (r1, r2, depth), trip in sorted(pairs.items()):
        g.add_edge(r1, r2, trip, depth, data=False)
