"""What a partition is: warp groups (roles) and the group of every op of a Tile IR kernel.

Register budgets given here are provisional: the lowering sets every Hopper group's setmaxnreg budget from
the resource model's liveness (`aref.resources`), whose launch rule `check_registers` re-exports.

Some ops belong to no group because every group that needs them recomputes them: constants, program ids,
scalar index math and views (`replicated`). A user channel's `get`/`consumed` are replicated into every
group that uses the tiles it hands out (each consumer group takes every item). Every other op has exactly
one group; a value produced in one group and used in another crosses through an aref (see
`partition.distribute`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aref.errors import ArefError
from aref.ir import SIDE_EFFECTS, Kernel, Op, OpKind, ScalarType, index_math
from aref.ops import CHANNEL_KINDS, INDEX_SOURCE_KINDS, VIEWS
from aref.resources import (MAX_REGS, MIN_REGS, REGISTERS_PER_SM, check_budgets as check_registers,  # noqa: F401
                            split_budget)
from aref.ir.unionfind import UnionFind  # noqa: F401  (the partitioner's modules import it from here)
from aref.ir.ws import WarpGroup

# index sources and views, and the aref protocol but its put (each consumer gets and releases its own items)
REPLICATED = INDEX_SOURCE_KINDS | VIEWS | (CHANNEL_KINDS - {OpKind.PUT})


def replicated(op: Op) -> bool:
    """Does every group that needs `op` compute it itself, whatever its operands? The kinds above, and any op
    on scalars alone (index math of any spelling: a scalar select, compare or cast): arefs carry tiles, never
    scalars. `replicated_ops` adds the tiles computed from index math alone."""
    if op.kind in REPLICATED:
        return True
    return bool(op.results) and op.kind not in SIDE_EFFECTS and all(
        isinstance(v.type, ScalarType) for v in op.operands + op.results)


def replicated_ops(kernel: Kernel) -> frozenset[Op]:
    """The ops of `kernel` that belong to no group: `replicated` ones and all index math. Recomputing a mask
    costs each group that reads it a few integer ops per element; handing it over would cost a ring slot, two
    barriers per item and a boolean tile in shared memory."""
    ops = list(kernel.all_ops())
    return frozenset(op for op in ops if replicated(op)) | index_math(ops)


@dataclass
class Partition:
    """Groups and the op → group assignment (`replicated` ops are absent)."""

    groups: list[WarpGroup]
    assign: dict[Op, int]
    mode: str = "plain"                 # plain | cooperative | pingpong | blackwell | optimal | custom
    pingpong: tuple[int, ...] = ()      # groups that take turns on the tensor core
    notes: list[str] = field(default_factory=list)
    # the optimal partitioner's graph stated each group's instruction stream (`partition.streams`): its reader
    # of a tensor-memory tile takes the tile at its start, which the Blackwell lowering then realizes
    streams: bool = False
    # ... and its schedule runs two nodes of one group at once by their own streams (`streams.group_overlap`)
    group_overlap: bool = False

    def group_of(self, op: Op) -> int | None:
        return self.assign.get(op)


def assignable_ops(kernel: Kernel) -> list[Op]:
    """The ops that need a group (every op but `replicated_ops`), in program order."""
    rep = replicated_ops(kernel)
    return [op for op in kernel.all_ops() if op not in rep]


def channel_puts(kernel: Kernel) -> list[list[Op]]:
    """The puts of each user channel, in program order."""
    if kernel.loop is None:
        return []
    return [[op for op in kernel.loop.body.ops if op.kind is OpKind.PUT and op.operands[0] is ch.result]
            for ch in kernel.channels()]


def value_owner(kernel: Kernel, assigned: dict):
    """`owner(v)`: what `assigned` (op → group or node; the caller may grow it) gives the work that computes
    `v` — its producer, through loop-carried values, or else the first of the producer's operands that has
    one. A loaded tile has none: it reaches whoever reads it and draws no compute to the TMA group."""
    prod = {id(r): op for op in kernel.all_ops() for r in op.results}
    carried = {}
    if kernel.loop is not None:
        for c, y, r in zip(kernel.loop.carried, kernel.loop.yields, kernel.loop.results):
            carried[id(r)] = carried[id(c)] = y

    def owner(v, seen: int = 0):
        if seen > 32:
            return None
        if id(v) in carried:
            return owner(carried[id(v)], seen + 1)
        op = prod.get(id(v))
        if op is None or op.kind is OpKind.LOAD:
            return None
        if op in assigned:
            return assigned[op]
        return next((g for g in (owner(x, seen + 1) for x in op.operands) if g is not None), None)
    return owner


def one_producer_per_channel(kernel: Kernel, assign: dict[Op, int]) -> None:
    """A channel is one FIFO filled by one group: every put of a user channel joins its first put's group
    (the item a put fills is its place in the iteration's sequence of puts, which only one group can count).
    Values a moved put publishes then reach it through compiler channels."""
    for puts in channel_puts(kernel):
        for p in puts[1:]:
            if puts[0] in assign:
                assign[p] = assign[puts[0]]


def check_partition(kernel: Kernel, part: Partition) -> None:
    """Every op that needs a group has exactly one valid group, a channel's puts share one, and budgets fit
    the register file."""
    ids = {g.id for g in part.groups}
    if [g.id for g in part.groups] != list(range(len(part.groups))):
        raise ArefError("warp group ids must be 0..n-1 in order")
    for op in assignable_ops(kernel):
        if part.assign.get(op) not in ids:
            raise ArefError(f"{op.kind.value} has no warp group", op.loc)
    for puts in channel_puts(kernel):
        if len({part.assign[p] for p in puts}) > 1:
            raise ArefError(f"the puts of one channel are placed in groups {sorted({part.assign[p] for p in puts})}; "
                            f"a channel has one producer group", puts[-1].loc,
                            hint="place every put of a channel in one group")
    check_registers(part.groups)
