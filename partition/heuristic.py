"""The heuristic (Tawa, task-aware) partitioner.

Walking use-def chains back from the side-effecting sinks (stores), the loads — TMA address/iteration work —
form the producer, tile statements form the consumers, and the epilogue goes with a consumer:

Hopper (sm_90a), following FA3 and CUTLASS:
  * producer warp group: every `load` (TMA) and the user channel puts that publish loads;
  * consumers, one of three knobs (`HeuristicOptions.consumers`):
      - "plain":        one consumer warp group does all tile work;
      - "cooperative":  K consumer groups split the tile rows (see `partition.rowsplit`) — or, when rows mix,
                        another index space such as attention backward's key block (`partition.dimsplit`,
                        FA3's split) — and share every channel of the producer;
      - "pingpong":     one consumer group per independent sub-tile (e.g. attention with SUBTILE=2); they take
                        turns on the tensor core, ordered by named barriers;
      - "auto":         pingpong if the loop has ≥ 2 independent sub-tiles with MMAs, else cooperative when
                        the rows split into ≥ 64-row halves, else plain.
Blackwell (sm_100a), following FA4 and Triton's Blackwell warp specialization: one load warp, one MMA-issue
warp (all MMAs), a softmax/compute warp group per sub-tile, a correction warp group (accumulator rescaling and
the final normalization) when there is such work, and an epilogue warp for the stores.
"""
from __future__ import annotations

from dataclasses import dataclass

from aref import ops as ops_registry
from aref.errors import ArefError
from aref.ir import Kernel, Op, OpKind, Value, index_math
from aref.ops import VIEWS
from aref.target import target_of
from partition.model import (Partition, UnionFind, assignable_ops, check_partition, one_producer_per_channel,
                             replicated_ops, split_budget)

CONSUMER_MODES = ("auto", "plain", "cooperative", "pingpong")


@dataclass(frozen=True)
class HeuristicOptions:
    """Knobs of the heuristic partitioner (see the module docstring)."""

    consumers: str = "auto"
    num_consumers: int = 2
    compute_groups: int | None = None    # Blackwell: at most this many CUDA-core groups (None: one per chain)

    def __post_init__(self):
        if self.consumers not in CONSUMER_MODES:
            raise ArefError(f"unknown consumer mode {self.consumers!r}", hint=f"use one of {CONSUMER_MODES}")
        if self.num_consumers < 1:
            raise ArefError("num_consumers must be at least 1")
        if self.compute_groups is not None and self.compute_groups < 1:
            raise ArefError("compute_groups must be at least 1 (or None: one group per chain of register math)")


def producers_of(kernel: Kernel) -> dict[int, Op]:
    """Value id → the op producing it, for every op of the kernel."""
    return {id(r): op for op in kernel.all_ops() for r in op.results}


def is_load_put(op: Op, prod: dict[int, Op]) -> bool:
    return op.kind is OpKind.PUT and all(
        prod.get(id(v)) is not None and prod[id(v)].kind is OpKind.LOAD for v in op.operands[1:])


def components(kernel: Kernel, ops: list[Op]) -> list[list[Op]]:
    """Independent sub-tiles: ops connected by data flow, not counting values every group can have
    (constants, views, channel gets) — those are shared, not a link between sub-tiles."""
    prod = producers_of(kernel)
    member = set(ops)
    sets = UnionFind(ops)
    rep = replicated_ops(kernel)

    # loop-carried values link the op that yields to the ops that read the carried value
    alias: dict[int, Value] = {}
    if kernel.loop is not None:
        for c, y, r in zip(kernel.loop.carried, kernel.loop.yields, kernel.loop.results):
            alias[id(c)] = y
            alias[id(r)] = y

    puts: dict[int, list[Op]] = {}
    for op in kernel.all_ops():
        if op.kind is OpKind.PUT:
            puts.setdefault(id(op.operands[0]), []).append(op)

    def source(v: Value, seen=0):
        if id(v) in alias and seen < 8:
            return source(alias[id(v)], seen + 1)
        op = prod.get(id(v))
        if op is not None and op.kind is OpKind.GET and seen < 8:
            # a tile computed by one sub-tile and handed to another through a user channel links them (loaded
            # tiles are shared: their source is a load, which links nothing)
            i = op.results.index(v) if v in op.results else 0
            for p in puts.get(id(op.operands[0]), [])[:1]:
                return source(p.operands[1 + i], seen + 1)
        if op is None or op.kind in (OpKind.GET, OpKind.FULL, OpKind.ARANGE, OpKind.CHANNEL) or (
                op in rep and op.kind not in VIEWS):
            return None
        if op.kind in VIEWS:
            return source(op.operands[0], seen)
        return op

    for op in ops:
        for v in op.operands:
            src = source(v)
            if src is not None and src in member:
                sets.union(op, src)
    groups: dict[Op, list[Op]] = {}
    for op in ops:
        groups.setdefault(sets.find(op), []).append(op)
    return list(groups.values())


def heuristic_partition(kernel: Kernel, arch: str, options: HeuristicOptions | None = None
                        ) -> tuple[Kernel, Partition]:
    """Assign every op to a warp group. Returns the kernel (row-split for cooperative consumers) and the
    partition."""
    options = options or HeuristicOptions()
    if target_of(arch).mma == "tcgen05":        # one thread issues the MMAs: FA4's one-warp load and MMA roles
        part = _blackwell(kernel, options.compute_groups)
    else:
        kernel, part = _hopper(kernel, options)
    one_producer_per_channel(kernel, part.assign)
    check_partition(kernel, part)
    return kernel, part


def _hopper(kernel: Kernel, options: HeuristicOptions) -> tuple[Kernel, Partition]:
    prod = producers_of(kernel)
    work = [op for op in assignable_ops(kernel) if not (op.kind is OpKind.LOAD or is_load_put(op, prod))]
    comps = [c for c in components(kernel, work) if any(op.kind is OpKind.MMA for op in c)]
    mode = options.consumers
    if mode == "auto":
        if len(comps) >= 2:
            mode = "pingpong"
        else:
            from partition.rowsplit import can_row_split
            mode = "cooperative" if can_row_split(kernel, options.num_consumers) is None else "plain"
    if mode == "pingpong":
        if len(comps) < 2:
            raise ArefError(f"ping-pong consumers need two independent sub-tiles; @{kernel.name} has "
                            f"{len(comps)} with tensor-core work", kernel.loc,
                            hint="split the rows into sub-tiles (e.g. attention's SUBTILE=2), or use "
                                 "consumers='cooperative' or 'plain'")
        n = min(len(comps), max(2, options.num_consumers))
        groups = split_budget([("producer", "producer", 4, 24)],
                              [(f"consumer{i}", "consumer", 4) for i in range(n)])
        assign = _producer_assign(kernel, prod)
        comp_of = {op: i % n for i, c in enumerate(comps) for op in c}
        for op in work:
            assign[op] = 1 + comp_of.get(op, 0)
        return kernel, Partition(groups, assign, "pingpong", tuple(range(1, n + 1)))
    if mode == "cooperative":
        from partition.rowsplit import NotSplittable, can_row_split, row_split
        if can_row_split(kernel, options.num_consumers) is None:
            kernel, replica = row_split(kernel, options.num_consumers)
        else:
            # rows mix (attention backward's transposes): split another index space, e.g. FA3's key block
            from partition.dimsplit import dim_split
            try:
                kernel, replica = dim_split(kernel, options.num_consumers)
            except NotSplittable as other:
                why = can_row_split(kernel, options.num_consumers)
                raise NotSplittable(f"{why.message}; nor does another index space split: {other.message}",
                                    why.loc, hint=why.hint) from None
        prod = producers_of(kernel)
        groups = split_budget([("producer", "producer", 4, 40)],
                              [(f"consumer{i}", "consumer", 4) for i in range(options.num_consumers)])
        assign = _producer_assign(kernel, prod)
        for op in assignable_ops(kernel):
            if op not in assign:
                assign[op] = 1 + replica.get(op, 0)
        return kernel, Partition(groups, assign, "cooperative")
    groups = split_budget([("producer", "producer", 4, 40)], [("consumer", "consumer", 4)])
    assign = _producer_assign(kernel, prod)
    for op in work:
        assign[op] = 1
    return kernel, Partition(groups, assign, "plain")


def _producer_assign(kernel: Kernel, prod) -> dict[Op, int]:
    return {op: 0 for op in assignable_ops(kernel) if op.kind is OpKind.LOAD or is_load_put(op, prod)}


def _pack(comps: list[list[Op]], k: int | None) -> list[list[Op]]:
    """The chains of register math in at most `k` groups: each chain, largest first, joins the group with the
    fewest ops so far (a group runs its chains one after another, in program order)."""
    if k is None or len(comps) <= k:
        return comps
    bins: list[list[Op]] = [[] for _ in range(k)]
    for c in sorted(comps, key=len, reverse=True):
        min(bins, key=len).extend(c)
    return [b for b in bins if b]


def _blackwell(kernel: Kernel, compute_groups: int | None = None) -> Partition:
    """FA4 / Triton-Blackwell roles: load warp, MMA warp, softmax groups, correction group, epilogue. Each
    independent chain of the loop's register math gets a four-warp group, at most `compute_groups` of them."""
    prod = producers_of(kernel)
    loop_ops = set(kernel.loop.body.ops) if kernel.loop is not None else set()
    post_ops = set(kernel.post.ops)
    role: dict[Op, str] = {}
    for op in assignable_ops(kernel):
        if op.kind is OpKind.LOAD or is_load_put(op, prod):
            role[op] = "load"
        elif op.kind is OpKind.MMA:
            role[op] = "mma"
        elif op.kind is OpKind.STORE and op in post_ops:
            role[op] = "epilogue"
    # correction: in-loop rescaling of an MMA accumulator (the `o * alpha` that feeds PV's accumulator)
    for op in loop_ops:
        if op.kind is OpKind.MMA and len(op.operands) == 3:
            acc_src = prod.get(id(op.operands[2]))
            if acc_src is not None and acc_src in loop_ops and acc_src.kind is OpKind.BINARY:
                role[acc_src] = "correction"
    has_correction = "correction" in role.values()
    compute = [op for op in assignable_ops(kernel) if op not in role and op not in post_ops]
    comps = _pack(components(kernel, compute), compute_groups) if compute else []
    post_compute = [op for op in assignable_ops(kernel) if op in post_ops and op not in role]
    fixed = [("load", "load", 1, 48), ("mma", "mma", 1, 48)]
    epi_warps = 1 if (has_correction or comps) else 4      # GEMM: the epilogue also converts the accumulator
    fixed.append(("epilogue", "epilogue", epi_warps, 48 if epi_warps == 1 else 168))
    if has_correction:
        fixed.append(("correction", "correction", 4, 80))
    names = [("softmax" if any(ops_registry.has_trait(op, ops_registry.EXPONENTIAL) for op in c)
              else "compute") for c in comps]
    flexible = [(f"{n}{i}", n, 4) for i, n in enumerate(names)]
    groups = split_budget(fixed, flexible, cap=192)
    gid = {g.name: g.id for g in groups}
    assign = {op: gid[r] for op, r in role.items()}
    for i, c in enumerate(comps):
        for op in c:
            assign[op] = gid[flexible[i][0]]
    tail = gid["correction"] if has_correction else (gid[flexible[-1][0]] if flexible else gid["epilogue"])
    for op in post_compute:
        assign[op] = tail
    if next(g for g in groups if g.id == tail).warps == 4:
        # a post-loop store of index math (recomputed by whoever reads it) is stored by a four-warp group: the
        # one-warp epilogue holds no register tiles
        index = index_math(list(kernel.all_ops()))
        for op in post_ops:
            if role.get(op) == "epilogue" and prod.get(id(op.operands[-1])) in index:
                assign[op] = tail
    return Partition(groups, assign, "blackwell")
