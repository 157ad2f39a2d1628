"""The optimal partitioner: Tile IR → the solver's dependence graph → warp groups and a modulo schedule.

Extraction (`extract_graph`) builds one graph node per unit of work of the loop body, with cycles from the
machine model (`aref.target.machine.op_cost`): each TMA load (a streaming op on its own group), each MMA, each
store, and CUDA-core clusters — connected CUDA-core ops fused, keeping the ops that rescale an MMA
accumulator (FA's `o * alpha`) apart so the solver may place them on their own group (FA4's correction).
Edges are the Tile IR's data dependences (loop-carried ones with distance 1); MMA results read by CUDA-core
work are blocking (a wgmma wait / tcgen05.ld); register results crossing groups pay a transfer through shared
memory. Memory: the loop's shared-memory budget excludes what the pre-loop code keeps resident (Q tiles),
the mbarriers and alignment slack; Blackwell adds 512 tensor-memory columns.

`optimal_partition` solves it (`solve.solve`: smallest II, proven) and maps the answer back
(`partition.assignment`): every Tile IR op gets its node's group, and `anchors` give the pipeline each op's
(stage, residue) so the groups' loops follow the solver's schedule.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import solve as S
from solve.memo import solve_once
from aref import ops as ops_registry
from aref import resources
from aref.errors import SolverError
from aref.ir import Kernel, Op, OpKind, TileType, Value
from aref.ops import MMA_KINDS, TILE_SOURCES, VIEWS
from aref.target.machine import machine_for, op_cost, tmem_tile_columns, unit_busy
from aref.resources.memory import resident_tiles_bytes, tile_bytes
from partition import streams
from partition.assignment import partition_from_schedule
from partition.clusters import acyclic_clusters, reservation_table
from partition.model import Partition, UnionFind, replicated_ops

CUDA_CORE = ops_registry.kinds_with(ops_registry.CUDA_CORE)      # the op registry's CUDA-core kinds
THREADS = 128
BARRIER_CYCLES = 64            # a hand-off's barrier round trip in the occupancy-free graph (ASSUMPTION)
MMA_COMMIT_CYCLES = 64         # tcgen05.commit reaching a waiting group (ASSUMPTION, as the solver's graphs)
CYCLE_QUANTUM = 16             # granularity of the extracted cycle costs (see extract_graph)
MBARRIER_RESERVE = 2 * 1024    # barrier block + allocator alignment slack in shared memory


@dataclass
class Extraction:
    """The graph and how its nodes map to Tile IR ops."""

    graph: S.Graph
    members: dict[str, list[Op]] = field(default_factory=dict)
    node_of: dict[Op, str] = field(default_factory=dict)
    kind: dict[str, str] = field(default_factory=dict)
    occupancy: bool = False        # the graph states the groups' instruction streams (see extract_graph)
    own_streams: bool = False      # (Blackwell) each node states its own stream (`reservations`)


def _tile_registers(t) -> int:
    return resources.tile_registers(t) if isinstance(t, TileType) else 0


def _transfer_cycles(registers: int, machine) -> int:
    """The occupancy-free graph's hand-off latency of `registers` per thread (Blackwell's graph)."""
    return 2 * registers * 4 * THREADS // machine.smem_bytes_per_clk + BARRIER_CYCLES


def extract_graph(kernel: Kernel, arch: str, max_groups: int | None = None,
                  allow_transfers: bool = True, quantum: int = CYCLE_QUANTUM,
                  register_cap: int | None = None, occupancy: bool | None = None,
                  channel_memory: bool = True, group_costs: bool = False, operands: bool = False,
                  reservations: bool | None = None, detached_stores: bool | None = None,
                  group_streams: bool = False, group_order: bool = False) -> Extraction:
    """The solver's view of `kernel`'s loop body on `arch`'s machine model, with cycle costs rounded up to
    `quantum` cycles (the machine model's figures are estimates at about that precision; whole quanta let the
    search work in quantum units, which is what makes proofs fast — the solver is exact on this graph).

    `occupancy` states what each node costs the warp group that runs it (`partition.streams`: one
    instruction stream per group, hand-offs included). By default only on Hopper: there the lowering's
    groups run exactly those streams (attention backward's softmax/dS group was over its II without the
    rule). On Blackwell the lowering still differs from the graph where it matters more (the MMA warp
    waits for each MMA; S and O copies, see tests/test_cli_compare.py KNOWN_GAPS), and with the costs the
    attention-forward model takes minutes instead of seconds to solve; there the graph has no group
    occupancy, load latencies, whole-put barriers or release latencies, but states each CUDA-core node's
    own stream (`reservations`) — except for a loop with no MMA, which has no MMA warp: on Blackwell too
    its graph states the streams (occupancy).
    `register_cap`: the most registers per thread a group may use (default: what a group can be given).
    `channel_memory`: the occupancy graph states the shared memory of its hand-off channels (`solve.graph`).
    `group_costs` (where `occupancy` is off): the nodes state their stream costs and per group the sum fits
    in II (`solve.Machine.stream_order` off: a linear rule, seconds to solve). Off by default on Blackwell:
    the lowered programs of the partitions it leads to run slower than the default graph's (attention_bwd:
    1592 cycles per iteration against 1001 when last measured; the default's now runs at 975).
    `operands` (Hopper): a CUDA-core node's group holds the register tiles it reads while it runs
    (`solve.Edge.operand_registers`).
    `reservations`: a CUDA-core node takes each unit when its ops do, one after another in its group
    (`partition.clusters.reservation_table`: `solve.Op.segments`), not all its units from its start. By
    default on Blackwell (None): there it makes the graph a model of each node's own instruction stream —
    its duration is its ops' cycles one after another, and a recurrence of the node bounds the II by that
    stream plus the masks it recomputes, its waits for MMA results and for the ring items it reads, and its
    hand-offs (attention_causal's softmax: 2288 cycles, not the MUFU's 1040; it simulates at 2322;
    attention_bwd's softmax: 976, 928 before it counted its wait for the Q/dO item whose LSE and Δ it reads,
    and its program runs at 979 in the steady state), and the MMAs' barrier waits, issues and commits take the
    MMA warp's stream (`streams.mma_warp_streams`). Off, the occupancy-free graph of before:
    `aref.search._never_slower` lowers its schedule too and keeps the faster program (attention backward's
    schedule at the stream graph's II lowers to a slower one: see `group_streams`).
    `detached_stores` (with `occupancy`): a TMA store is fire and forget, as the lowering and the timing model
    run it (no wait of its group waits for the copy), so a blocking op of its group may start while the copy
    runs (`solve.Op.detached`: only the staging holds the group). By default (None) on Hopper: attention_bwd's
    group of dV, dQ, its scale and store was bound by its store's 1168 cycles in flight (II 1872 where the
    program ran 1788; detached: II 1824, its schedule runs 1819). Its partitions fit since the graph states
    which stores after the loop stage in a tile loaded before it (`streams.add_post_staging`): without that,
    the one it picked needed 16 KB of staging the budget did not see. The timing guard
    (`aref.search._never_slower`) lowers the waited stores' schedule too and keeps the faster program.
    `group_streams` (with the own streams of `reservations`): a group runs its nodes one after another, so
    their own streams add up within the II (`solve.Op.stream`). attention_bwd's graph without it puts the
    softmax node (976 cycles of its own) and dQ's load, scale and staging (496) on one group at II 976, which
    lowers to ~2066 cycles per iteration (the timing guard keeps the occupancy-free graph's program); with it
    they take two groups at the same II. Off by default: on attention_fwd at the large size each softmax
    group's max, exponentials and rescale take 1936 cycles against its II of 1440, and the search proves
    every II up to 1432 infeasible but finds no schedule within 60 s. `group_order` (own streams): a group's
    nodes hold its stream one at a time (`streams.group_order`; the timing guard's alternative)."""
    if kernel.loop is None:
        raise SolverError("the optimal partitioner schedules the kernel's loop; this kernel has none", kernel.loc,
                          hint="a kernel without an aref.range loop has nothing to pipeline: use the heuristic "
                               "partition")
    m = machine_for(arch)
    # Blackwell's occupancy-free graph answers its MMA lowerings (above); a loop with no MMA has none of
    # them: its groups run their CUDA-core streams (a tile's stores staged by the group itself) exactly as
    # on Hopper, and without the streams the graph's II missed them (rowwise: II 1168, the group ran 1489)
    occ = occupancy if occupancy is not None else not m.target.has_tensor_memory or not any(
        op.kind in MMA_KINDS for op in kernel.loop.body.ops)
    costs = occ or group_costs
    if reservations is None:
        reservations = m.target.has_tensor_memory and not occ
    if detached_stores is None:
        detached_stores = occ and not m.target.has_tensor_memory
    own_streams = reservations and m.target.has_tensor_memory and not occ
    # one resource model: a tile handed to an MMA takes tensor-memory columns where the lowering puts it
    # there (`streams.tmem_operand`: a 64-row P goes through shared memory), as many as the lowering's plan
    # gives it (`aref.target.machine.tmem_tile_columns`: a 64-row tile takes a 128-row tile's columns)
    tmem_operand = streams.tmem_operand
    slots = occ and channel_memory
    body = kernel.loop.body.ops
    prod = {id(r): op for op in kernel.all_ops() for r in op.results}
    yield_of = {id(c): y for c, y in zip(kernel.loop.carried, kernel.loop.yields)}
    rep = replicated_ops(kernel)
    chan_puts = {}
    for op in body:
        if op.kind is OpKind.PUT:
            chan_puts.setdefault(id(op.operands[0]), []).append(op)

    def sources(v: Value, seen: int = 0) -> list[tuple[Op, int]]:
        """Work ops whose result `v` is (through views, channel gets, loop-carried values), with distance."""
        if seen > 32:
            return []
        if id(v) in yield_of:
            return [(o, d + 1) for o, d in sources(yield_of[id(v)], seen + 1)]
        op = prod.get(id(v))
        if op is None or op.kind in TILE_SOURCES or (op in rep and op.kind not in VIEWS
                                                                      and op.kind is not OpKind.GET):
            return []
        if op.kind in VIEWS:
            return sources(op.operands[0], seen + 1)
        if op.kind is OpKind.GET:
            idx = op.results.index(v) if v in op.results else 0
            puts = chan_puts.get(id(op.operands[0]), [])
            return [s for p in puts[:1] for s in sources(p.operands[1 + idx], seen + 1)]
        if op not in body:
            return []                     # pre-loop values (resident tiles) are not loop work
        return [(op, 0)]

    # ---- CUDA-core clusters: fuse connected work, keeping accumulator rescales apart
    acc_feeder = {prod[id(op.operands[2])] for op in body if op.kind is OpKind.MMA and len(op.operands) == 3
                  and prod.get(id(op.operands[2])) in body and prod[id(op.operands[2])].kind in CUDA_CORE}
    cuda = [op for op in body if op.kind in CUDA_CORE and op not in rep]
    sets = UnionFind(cuda)

    for op in cuda:
        for v in op.operands:
            for src, d in sources(v):
                if d == 0 and src in sets and (src in acc_feeder) == (op in acc_feeder):
                    sets.union(src, op)

    units = {"tc": 1, "tma": 1, "mufu": 1, "fma": 1}
    if m.target.has_tensor_memory:
        units.update({"tmem_ld": 1, "tmem_st": 1})      # tcgen05.ld / tcgen05.st paths
    # the loop's rings get what the resource model leaves after the resident tiles and the stores' staging
    memory = {"smem": m.smem_per_block - MBARRIER_RESERVE - resident_tiles_bytes(kernel)}
    if m.target.has_tensor_memory:
        memory["tmem"] = m.tmem_columns
    # registers: a group's tiles plus its role's own state, within what a group can be given (the model's)
    machine = S.Machine(max_groups=max_groups or (5 if m.target.has_tensor_memory else 3),
                        registers_per_thread=register_cap or resources.BUDGET_CAP, registers_per_sm=m.registers,
                        threads_per_group=THREADS, reg_granularity=m.setmaxnreg_step,
                        base_registers=resources.ROLE_OVERHEAD, memory=memory, allow_transfers=allow_transfers,
                        stream_order=not (costs and not occ))
    g = S.Graph(units, machine, name=kernel.name)
    ex = Extraction(g)
    counts: dict[str, int] = {}

    def name_for(op: Op, base: str) -> str:
        hint = next((r.name for r in op.results if r.name), None)
        stem = f"{base}_{hint}" if hint else base
        counts[stem] = counts.get(stem, 0) + 1
        return stem if counts[stem] == 1 else f"{stem}{counts[stem]}"

    own_stream: dict[str, int] = {}           # Blackwell: a CUDA-core node's own instruction stream
    sends: dict[str, int] = {}                # ... and the hand-off of its results (registers -> a slot)
    clusters: dict[Op, list[Op]] = {}
    for op in cuda:
        clusters.setdefault(sets.find(op), []).append(op)
    clusters = acyclic_clusters(clusters, body, sources)
    holds_mma_tile: set[Op] = set()
    if m.target.has_tensor_memory:
        # Blackwell: softmax reads S from tensor memory into registers (tcgen05.ld, one row per thread) and
        # holds it through the row max and the exponentials, while only the running max / sum vectors live
        # across iterations. As in Twill's graphs the cluster splits into a row-max node and an exp node, each
        # holding S while it runs, and small nodes for the loop-carried statistics.
        yielded = {id(y) for y in kernel.loop.yields}
        for root, ops in list(clusters.items()):
            reads_mma = [o for o in ops if any(s.kind is OpKind.MMA for v in o.operands for s, d in sources(v)
                                                if d == 0)]
            if not any(o.kind is OpKind.REDUCE for o in reads_mma):
                continue
            state = [o for o in ops if any(id(r) in yielded for r in o.results)]
            # before the statistics update: the row max and what feeds it; after it: the exponentials
            after = set(state)
            for o in ops:                                  # program order is a topological order
                if o not in after and any(s in after for v in o.operands for s, d in sources(v) if d == 0):
                    after.add(o)
            head = [o for o in ops if o not in after]
            tail = [o for o in ops if o in after and o not in state]
            del clusters[root]
            for part in [head, tail] + [[o] for o in state]:
                if part:
                    clusters[part[0]] = part
            holds_mma_tile |= {head[0]} | ({tail[0]} if tail and any(o in reads_mma for o in tail) else set())
    for op in body:
        if op.kind is OpKind.LOAD:
            n = name_for(op, "load")
            stream = {}
            if costs:
                put = streams.put_of(op, body)
                loads = [o for v in put.operands[1:] for o in [prod.get(id(v))] if o is not None] if put else [op]
                # the producer waits for a free slot and arms its barrier once per put, then issues each copy
                first = m.sync_cycles + m.async_issue_cycles if loads and loads[0] is op else 0
                issue = streams.op_stream_cycles(op, m) + first
                stream = {"issue": issue, "offset": {"tma": issue} if occ else {},
                          "receive_cost": streams.receive_cycles(m),
                          "channel": f"put@{body.index(put)}" if put is not None else ""}
            g.add_op(n, {"tma": unit_busy(op, m)}, footprint={"smem": tile_bytes(op.result.type)},
                     streaming=True, depth=_load_depth(op, body), kind="tma", **stream)
            ex.members[n], ex.kind[n] = [op], "tma"
        elif op.kind is OpKind.MMA:
            n = name_for(op, "mma")
            _, cyc = op_cost(op, m)
            nbytes = op.result.type.nbytes
            fp = ({"tmem": tmem_tile_columns(op.result.type)} if m.target.has_tensor_memory
                  else {"registers": _tile_registers(op.result.type)})
            reader = _feeds_mma(op.result, kernel)
            # Hopper: the result leaves in registers through shared memory, after the group waits for it;
            # Blackwell: it stays in tensor memory and a tcgen05.commit signals the consumer (FA4)
            issue_costs = {}
            if costs:
                issue_costs = dict(issue=streams.op_stream_cycles(op, m),
                                   send_cost=streams.send_cycles(nbytes, m, async_reader=reader, mma_result=True,
                                                                 in_tmem=m.target.has_tensor_memory),
                                   receive_cost=streams.receive_cycles(m), wait_cost=streams.wait_cycles(m))
            if occ:
                g.add_op(n, {"tc": cyc}, footprint=fp, kind="gemm", offset={"tc": streams.op_stream_cycles(op, m)},
                         transfer_cost=0 if m.target.has_tensor_memory else
                         streams.transfer_latency(nbytes, m, async_reader=reader) + streams.wait_cycles(m),
                         handoff=streams.handoff_memory([op.result])
                         if slots and not m.target.has_tensor_memory else None,
                         **issue_costs)
            else:
                g.add_op(n, {"tc": cyc}, footprint=fp, kind="gemm",
                         transfer_cost=0 if m.target.has_tensor_memory else _transfer_cycles(fp["registers"], m),
                         **issue_costs)
            ex.members[n], ex.kind[n] = [op], "gemm"
        elif op.kind is OpKind.STORE:
            n = name_for(op, "store")
            # the group stages the tile into shared memory, then the copy engine stores it
            stream = ({"issue": streams.op_stream_cycles(op, m), "offset": {"tma": streams.op_stream_cycles(op, m)},
                       "detached": detached_stores}
                      if occ else {"issue": streams.op_stream_cycles(op, m)} if costs else {})
            g.add_op(n, {"tma": op_cost(op, m)[1]}, kind="store", **stream)
            ex.members[n], ex.kind[n] = [op], "store"
        elif op in clusters:
            ops = clusters[op]
            usage: dict[str, int] = {}
            for o in ops:
                unit, cyc = op_cost(o, m)
                if unit in units:
                    usage[unit] = usage.get(unit, 0) + cyc
            tmem_traffic = 0
            if m.target.has_tensor_memory:
                # tiles read from / written to tensor memory move over its load / store paths
                loaded = {id(v): v for o in ops for v in o.operands
                          if any(s.kind is OpKind.MMA for s, d in sources(v))}
                stored = [r for o in ops for r in o.results
                          if any(u not in ops for u in _users(r, kernel)) and tmem_operand(r, kernel)]
                tmem_traffic = sum(v.type.nbytes for v in loaded.values()) + sum(r.type.nbytes for r in stored)
                ld = sum(v.type.nbytes for v in loaded.values()) // m.tmem_bytes_per_clk
                st = sum(r.type.nbytes for r in stored) // m.tmem_bytes_per_clk
                if ld:
                    usage["tmem_ld"] = ld
                if st:
                    usage["tmem_st"] = st
            table = (reservation_table(ops, m, units, loaded.values() if m.target.has_tensor_memory else (),
                                        stored if m.target.has_tensor_memory else ()) if reservations else {})
            if table:
                usage = {u: sum(c for _, c in pieces) for u, pieces in table.items()}
            live_out = [r for o in ops for r in o.results
                        if any(u not in ops for u in _users(r, kernel))]
            # on Blackwell, tiles feeding an MMA (P, the rescaled O) are written to tensor memory: they take
            # columns there, not registers, and do not cross groups through shared memory
            in_tmem = [r for r in live_out if m.target.has_tensor_memory and tmem_operand(r, kernel)]
            moved = [r for r in live_out if r not in in_tmem]
            regs = sum(_tile_registers(r.type) for r in moved)
            moved_regs = regs
            tmem_cols = sum(tmem_tile_columns(r.type) for r in in_tmem)
            if op in holds_mma_tile:
                from_mma = [v for o in ops for v in o.operands
                            if any(s.kind is OpKind.MMA for s, d in sources(v) if d == 0)]
                regs = max([regs] + [_tile_registers(v.type) for v in from_mma])
            is_exp = any(ops_registry.has_trait(o, ops_registry.EXPONENTIAL) for o in ops)
            is_max = op in holds_mma_tile and not is_exp
            kind = ("rescale" if op in acc_feeder else "max" if is_max else "exp" if is_exp
                    else "state" if m.target.has_tensor_memory and all(
                        any(y is r for y in kernel.loop.yields for r in o.results) for o in ops)
                    else "compute")
            n = name_for(ops[-1], kind)
            footprint = {k: v for k, v in (("registers", regs), ("tmem", tmem_cols)) if v}
            moved_bytes = sum(r.type.nbytes for r in moved)
            reader = any(_feeds_mma(r, kernel) for r in moved)
            send = streams.send_cycles(moved_bytes, m, async_reader=reader) if moved else 0
            if in_tmem:                            # P or the rescaled O written to tensor memory, then signalled
                send += streams.send_cycles(0, m, async_reader=False, in_tmem=True)
            if occ:
                g.add_op(n, usage, footprint=footprint or None, kind=kind, segments=table or None,
                         issue=streams.cluster_stream_cycles(ops, m, tmem_traffic), send_cost=send,
                         receive_cost=streams.receive_cycles(m),
                         transfer_cost=streams.transfer_latency(moved_bytes, m, async_reader=reader),
                         handoff=streams.handoff_memory(moved) if slots else None)
            else:
                issue_costs = (dict(issue=streams.cluster_stream_cycles(ops, m, tmem_traffic), send_cost=send,
                                    receive_cost=streams.receive_cycles(m)) if costs else {})
                if own_streams:
                    # its ops, the index math and masks its group recomputes for them, the waits for the
                    # MMA results it reads and its hand-offs run one after another in one group, once per
                    # iteration: the node's next instance starts no sooner (a recurrence of the node)
                    mma_reads = {s for o in ops for v in o.operands for s, d in sources(v) if s.kind is OpKind.MMA}
                    own = ops + streams.recomputed(ops, prod, rep, body)
                    # ... and the waits for the loaded tiles it reads: one per ring item (a put's tiles share
                    # one full barrier and one release)
                    items = streams.loaded_items(own, sources, body)
                    sends[n] = send
                    own_stream[n] = (streams.cluster_stream_cycles(own, m, tmem_traffic) + send
                                     + streams.receive_cycles(m) * (len(mma_reads) + len(items)))
                    if group_streams:   # ... and its group runs its other nodes on the same stream
                        issue_costs["stream"] = own_stream[n]
                g.add_op(n, usage, footprint=footprint or None, kind=kind, segments=table or None,
                         transfer_cost=_transfer_cycles(moved_regs, m) if moved_regs else BARRIER_CYCLES,
                         **issue_costs)
            ex.members[n], ex.kind[n] = ops, kind
    for n, ops in ex.members.items():
        for o in ops:
            ex.node_of[o] = n
    seen: set[tuple] = set()
    # Hopper: registers per thread of the other nodes' tiles a CUDA-core node reads (a tile received from
    # another group's slot, or its own group's, is held in registers while the node runs, as the lowering's
    # liveness holds it: attention's S beside P and O in the softmax group); an MMA reads its operands from
    # shared memory and accumulates in its own result's registers
    # (an elementwise result computed in place of a same-typed operand, as O's rescale, takes no more)
    operand_regs: dict[tuple[str, str], dict[int, int]] = {}
    for n, ops in ex.members.items():
        if not operands or m.target.has_tensor_memory or ex.kind[n] in ("gemm", "tma", "store"):
            continue
        in_place = [(r.type.shape, r.type.dtype) for o in ops for r in o.results if isinstance(r.type, TileType)
                    and any(u not in ops for u in _users(r, kernel))]
        for o in ops:
            for v in o.operands:
                for src, d in sources(v):
                    sn = ex.node_of.get(src)
                    if sn is None or sn == n or ex.kind[sn] == "tma" or id(v) in operand_regs.get((sn, n), {}):
                        continue
                    kind = (v.type.shape, v.type.dtype) if isinstance(v.type, TileType) else None
                    if kind in in_place:
                        in_place.remove(kind)
                        operand_regs.setdefault((sn, n), {})[id(v)] = 0
                    else:
                        operand_regs.setdefault((sn, n), {})[id(v)] = _tile_registers(v.type)
    for n, ops in ex.members.items():
        for o in ops:
            for v in o.operands[1:] if o.kind is OpKind.STORE else o.operands:
                for src, d in sources(v):
                    sn = ex.node_of.get(src)
                    if sn is None or (sn == n and d == 0) or (sn, n, d) in seen:
                        continue
                    seen.add((sn, n, d))
                    src_node = g.ops[sn]
                    if not occ:
                        # (a node's own stream, where the graph states it: its result is handed on at its end)
                        delay = 0 if src_node.streaming else src_node.duration
                    else:
                        delay = streams.load_latency(src, m) if src_node.streaming else src_node.duration
                    if ex.kind[n] == "gemm" and sn in sends:
                        # (own streams) the MMA warp is a group of its own: a CUDA-core result reaches it
                        # through its hand-off (the cast state's 32 KB store into shared memory, its fence
                        # and arrive: linear_attention's q·S waited ~340 cycles past the cast's end)
                        delay += sends[sn]
                    if ex.kind[n] == "gemm":                # an MMA reads its operands when the tensor core
                        delay = max(0, delay - g.ops[n].offset.get("tc", 0))  # takes it, after its issue
                    blocking = ex.kind[sn] == "gemm" and ex.kind[n] != "gemm"
                    tmem = m.target.has_tensor_memory and (ex.kind[sn] == "gemm" or ex.kind[n] == "gemm")
                    transfer_cost = None
                    if tmem and ex.kind[sn] == "gemm" and sn != n:
                        # tcgen05.commit reaching the waiting group; an MMA's own accumulator chain needs
                        # none: the MMA warp issues them in order and the tensor core runs them back to back
                        delay += MMA_COMMIT_CYCLES
                    if blocking and occ:                    # the wait returns sync_cycles after the MMA ends
                        delay += streams.wait_cycles(m)
                        if not tmem:                        # ... which a hand-off's own wait then need not add
                            transfer_cost = src_node.transfer_cost - streams.wait_cycles(m)
                    # a result in two memories: an MMA reads its tensor-memory part, others its registers
                    parts = sorted(src_node.footprint)
                    memories = None
                    if len(parts) > 1:
                        memories = ["tmem"] if ex.kind[n] == "gemm" else [p for p in parts if p != "tmem"]
                    # an MMA reading a handed-over slot asynchronously releases it a step later (the
                    # pipeline's MMA issue depth on Hopper)
                    hold = 1 if slots and ex.kind[n] == "gemm" and sn != n and not src_node.streaming else 0
                    g.add_edge(sn, n, delay, d, blocking=blocking, transfer=False if tmem else None,
                               transfer_cost=transfer_cost, memories=memories, hold=hold,
                               operand_registers=sum(operand_regs.get((sn, n), {}).values()))
    if occ:
        streams.whole_puts(ex, body, m)
        if slots:
            streams.add_post_handoffs(kernel, ex, rep)
    # a ring item is one full barrier and one release wherever the graph states the groups' streams (Hopper's
    # consumers read it as Blackwell's MMA warp does): its round trip runs from any reader to any reader
    streams.ring_reuse(ex, body, m, occ, MMA_COMMIT_CYCLES, whole_item=own_streams or occ,
                       latest_copy=own_streams)
    if m.target.has_tensor_memory:
        streams.in_place_readers(ex, sources)
    if own_streams:
        streams.mma_warp_streams(ex, body, m)     # the MMA warp's stream: its waits, issues and commits
        streams.carried_handoffs(ex, kernel, MMA_COMMIT_CYCLES)
    for n, cycles in own_stream.items():
        g.add_edge(n, n, cycles, 1, data=False)
    if group_order and not group_streams:         # (`stream` states them there, without their order)
        streams.group_order(ex, own_stream)
    ex.occupancy, ex.own_streams = occ, own_streams
    S.round_up_to_quantum(g, quantum)
    if not g.ops:
        raise SolverError(f"the loop of @{kernel.name} computes nothing the kernel reads: the optimal partitioner "
                          f"has nothing to schedule", kernel.loop.loc,
                          hint="use the loop's results or remove the loop; the heuristic partition compiles it")
    try:
        g.validate()
    except S.GraphError as exc:
        # the loop's resident buffers alone exceed a budget of the machine: the user's sizes, not a solver bug
        raise SolverError(f"no warp-specialized schedule of @{kernel.name} fits {m.name}: {exc}", kernel.loc,
                          hint="lower the channel depths or the tile sizes") from None
    return ex



def _feeds_mma(v: Value, kernel: Kernel, depth: int = 0) -> bool:
    """Is `v` (through views and casts) an operand of an MMA?"""
    if depth > 8:
        return False
    for u in _users(v, kernel):
        if u is None:
            continue
        if u.kind is OpKind.MMA:
            return True
        if u.kind in VIEWS | {OpKind.CAST} and _feeds_mma(u.results[0], kernel, depth + 1):
            return True
    return False


def _load_depth(op: Op, body: list[Op]) -> int:
    for p in body:
        if p.kind is OpKind.PUT and any(v is r for v in p.operands[1:] for r in op.results):
            return p.operands[0].type.depth
    return 2


_users = streams.users


# ------------------------------------------------------------------------------------- the mapping
def solve_loop(kernel: Kernel, arch: str, *, time_limit: float, encoding: str = "interval",
               register_cap: int | None = None, allow_transfers: bool = True, progress=None,
               explain_found: bool = True, operands: bool = False, channel_memory: bool = True,
               reservations: bool | None = None, detached_stores: bool | None = None, group_order: bool = False):
    """Extract `kernel`'s loop graph and solve it: (extraction, result, proof). `proof` says why no partition
    of the graph with its hand-off channels' shared memory was found: the solver's proof that none fits the
    SM, or its time-out without one (`solve_partition` then solves the row split, or the graph without that
    memory, `channel_memory=False`, whose partition the lowering's resource model refuses by that rule,
    recorded on its Barrier IR, which the simulator still runs). `reservations`: `extract_graph`'s (False on
    Blackwell: the occupancy-free graph), as `detached_stores`."""
    ex = extract_graph(kernel, arch, register_cap=register_cap, allow_transfers=allow_transfers,
                       channel_memory=channel_memory, operands=operands, detached_stores=detached_stores,
                       group_order=group_order, **({} if reservations is None else {"reservations": reservations}))
    result = solve_once(ex.graph, S.SolveOptions(encoding=encoding, time_limit=time_limit, progress=progress,
                                                 explain_found=explain_found))
    g = ex.graph
    metered = g.post_handoffs or g.post_staging or any(o.handoff for o in g.ops.values())
    if channel_memory and metered and (_hardware_limits(result) or result.status == S.TIMEOUT):
        proof = "; ".join(r for inf in result.infeasible for r in inf.reasons)
        if result.status == S.TIMEOUT:
            proof = (f"none found in {time_limit:g} s" + (f": {proof}" if proof else ""))
        return ex, result, proof
    return ex, result, ""


def solve_partition(kernel: Kernel, options, *, encoding: str = "interval", progress=None,
                    explain_found: bool = False):
    """The solve the optimal partitioner lowers (`options`: its `CompileOptions`): the kernel's graph with its
    hand-off channels' memory; where no partition of it is found, the row split's (`_row_split_fallback`),
    else the graph without that memory. Returns (kernel, extraction, result, proof, why the rows split)."""
    def solve(k: Kernel, **how):
        return solve_loop(k, options.arch, time_limit=options.solver_time_limit, encoding=encoding,
                          progress=progress, register_cap=options.solver_register_cap,
                          allow_transfers=options.solver_transfers, explain_found=explain_found,
                          operands=options.solver_operands,
                          reservations=False if options.solver_occupancy_free else None,
                          detached_stores=options.solver_detached_stores,
                          group_order=options.solver_group_order, **how)
    ex, result, proof = solve(kernel)
    split = _row_split_fallback(kernel, result, proof, options, solve)
    if split is not None:
        kernel, (ex, result, proof), why = split
        return kernel, ex, result, proof, why
    if proof:
        ex, result, _ = solve(kernel, channel_memory=False)
    return kernel, ex, result, proof, ""


def optimal_partition(kernel: Kernel, options) -> tuple[Kernel, Partition, dict[int, tuple[int, int]]]:
    """Solve, then place every Tile IR op in its node's group. Returns the kernel, the partition and the
    anchors {index of the op in kernel.all_ops(): (stage, residue)} for the pipeline."""
    kernel, ex, result, proof, why = solve_partition(kernel, options)
    if result.status not in (S.OPTIMAL, S.FEASIBLE_TIMEOUT):
        why = "; ".join(r for inf in result.infeasible for r in inf.reasons) or result.message
        hint = ("raise solver_time_limit (aref solve --time-limit S)" if result.status == S.TIMEOUT
                else "use the heuristic partition, or give the loop more resources")
        raise SolverError(f"no warp-specialized schedule for @{kernel.name}: {result.status}"
                          + (f" ({why})" if why else ""), kernel.loc, hint=hint)
    part = partition_from_schedule(kernel, ex, result, options.arch)
    index = {op: i for i, op in enumerate(kernel.all_ops())}
    anchors = {}
    for n, ops in ex.members.items():
        if ex.kind[n] == "tma":
            continue                           # the producer runs ahead by its ring depth, unstaged
        cyc = result.schedule[n]
        for o in ops:
            anchors[index[o]] = (cyc // result.ii, cyc % result.ii)
    if ex.occupancy:     # where the graph states the streams, the solver knows when each slot is freed
        anchors.update(streams.release_anchors(kernel, ex, result, index))
        anchors.update(streams.tensor_core_order(ex, result, index))
    # the lowering may rely on the nodes' stated streams (a tensor-memory tile released after its load)
    part.streams = ex.occupancy or ex.own_streams
    part.group_overlap = ex.own_streams and not options.solver_group_order and streams.group_overlap(ex, result)
    part.notes.append(f"II={result.ii} (lower bound {result.lower_bound}, "
                      f"{'proven optimal' if result.proven_optimal else 'not proven'})")
    if proof:
        part.notes.append(f"no schedule fits the SM with its hand-off channels' shared memory ({proof})")
    if why:
        part.notes.append(f"rows split over {options.num_consumers} replicas: {why}")
    return kernel, part, anchors


def _row_split_fallback(kernel: Kernel, result, proof: str, options, solve):
    """Where no partition of the kernel's own graph fits the SM (a proof naming shared memory or registers:
    e.g. two 128-row fp32 accumulators, too many registers for one group and, in two, a 64 KB hand-off after
    the loop beside the ring) or none is found in the time limit (causal attention's 128-row tile), the
    solver's space grows by the cooperative consumers' rewrite: the tile rows split over `num_consumers`
    replicas (`partition.rowsplit`), whose nodes the solver places and schedules like any other. Returns
    (split kernel, its solve, why), or None when the kernel's own answer stands, the rows do not split, or
    the split kernel fits no better."""
    limits = proof or _hardware_limits(result)
    if not limits or result.status not in (S.INFEASIBLE, S.TIMEOUT) or options.target.mma != "wgmma" \
            or options.num_consumers < 2:
        return None
    from partition.rowsplit import can_row_split, row_split
    if can_row_split(kernel, options.num_consumers) is not None:
        return None
    split, _ = row_split(kernel, options.num_consumers)
    ex, res, why_not = solve(split)
    if why_not or res.status not in (S.OPTIMAL, S.FEASIBLE_TIMEOUT):
        return None
    why = (f"no partition of the unsplit tile found ({limits})" if result.status == S.TIMEOUT
           else f"no partition of the unsplit tile fits the SM ({limits})")
    return split, (ex, res, why_not), why


def _hardware_limits(result) -> str:
    """The SM resources ("shared memory", "registers") a proven infeasibility names, as words ('' if none)."""
    if result.status != S.INFEASIBLE:
        return ""
    families = {f for inf in result.infeasible for f in inf.families}
    words = (["shared memory"] if any(f.startswith("memory:") for f in families) else []) + \
        (["registers"] if any(f.startswith("registers:") for f in families) else [])
    return " and ".join(words)
