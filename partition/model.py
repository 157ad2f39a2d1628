"""What a partition is: warp groups (roles) and the group of every op of a Tile IR kernel.

Some ops belong to no group because every group that needs them recomputes them: constants, program ids,
scalar index math and views (`replicated`). A user channel's `get`/`consumed` are replicated into every
group that uses the tiles it hands out (each consumer group takes every item). Every other op has exactly
one group; a value produced in one group and used in another crosses through an aref (see
`partition.distribute`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aref.errors import ArefError
from aref.ir import SIDE_EFFECTS, Kernel, Op, OpKind, ScalarType
from aref.ws import WarpGroup

REPLICATED = frozenset({OpKind.CONST, OpKind.PROGRAM_ID, OpKind.SCALAR_BINARY, OpKind.FULL, OpKind.ARANGE,
                        OpKind.TRANSPOSE, OpKind.EXPAND_DIMS, OpKind.SLICE, OpKind.CHANNEL, OpKind.GET,
                        OpKind.CONSUMED})


def replicated(op: Op) -> bool:
    """Does every group that needs `op` compute it itself? The kinds above, and any op on scalars alone
    (index math of any spelling: a scalar select, compare or cast): arefs carry tiles, never scalars."""
    if op.kind in REPLICATED:
        return True
    return bool(op.results) and op.kind not in SIDE_EFFECTS and all(
        isinstance(v.type, ScalarType) for v in op.operands + op.results)

# Register file per SM and the setmaxnreg range (PTX ISA, setmaxnreg: 24..256 in multiples of 8).
REGISTERS_PER_SM = 65536
MIN_REGS, MAX_REGS = 24, 256


class UnionFind:
    """Disjoint sets over hashable items (added on first use); `union(a, b)` hangs b's set under a's root."""

    def __init__(self, items=()):
        self.parent = {x: x for x in items}

    def __contains__(self, x) -> bool:
        return x in self.parent

    def find(self, x):
        parent = self.parent
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


@dataclass
class Partition:
    """Groups and the op → group assignment (`replicated` ops are absent)."""

    groups: list[WarpGroup]
    assign: dict[Op, int]
    mode: str = "plain"                 # plain | cooperative | pingpong | blackwell | optimal | custom
    pingpong: tuple[int, ...] = ()      # groups that take turns on the tensor core
    notes: list[str] = field(default_factory=list)

    def group_of(self, op: Op) -> int | None:
        return self.assign.get(op)


def needs_group(op: Op) -> bool:
    return not replicated(op)


def channel_puts(kernel: Kernel) -> list[list[Op]]:
    """The puts of each user channel, in program order."""
    if kernel.loop is None:
        return []
    return [[op for op in kernel.loop.body.ops if op.kind is OpKind.PUT and op.operands[0] is ch.result]
            for ch in kernel.channels()]


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
    for op in kernel.all_ops():
        if needs_group(op):
            g = part.assign.get(op)
            if g not in ids:
                raise ArefError(f"{op.kind.value} has no warp group", op.loc)
    for puts in channel_puts(kernel):
        if len({part.assign[p] for p in puts}) > 1:
            raise ArefError(f"the puts of one channel are placed in groups {sorted({part.assign[p] for p in puts})}; "
                            f"a channel has one producer group", puts[-1].loc,
                            hint="place every put of a channel in one group")
    check_registers(part.groups)


def check_registers(groups: list[WarpGroup]) -> None:
    total = 0
    for g in groups:
        if g.regs % 8 or not MIN_REGS <= g.regs <= MAX_REGS:
            raise ArefError(f"group {g.name}: {g.regs} registers per thread; setmaxnreg takes multiples of 8 in "
                            f"{MIN_REGS}..{MAX_REGS}")
        total += g.regs * g.threads
    if total > REGISTERS_PER_SM:
        detail = " + ".join(f"{g.name} {g.threads}×{g.regs}" for g in groups)
        raise ArefError(f"register budgets need {total} registers ({detail}) but an SM has {REGISTERS_PER_SM}",
                        hint="use fewer or smaller warp groups, or lower a group's budget")


# The largest budget `split_budget` gives a group (setmaxnreg's 256 less headroom, as FA3's 240): the
# solver's per-thread register limit, so a schedule it finds is one the budgets can hold.
MAX_GROUP_REGS = 240


def split_budget(fixed: list[tuple[str, str, int, int]], flexible: list[tuple[str, str, int]],
                 cap: int = MAX_GROUP_REGS) -> list[WarpGroup]:
    """Make groups: `fixed` (name, role, warps, regs) keep their budget; `flexible` (name, role, warps) share
    the rest of the register file evenly, rounded down to a multiple of 8 and capped at `cap`."""
    used = sum(w * 32 * r for _, _, w, r in fixed)
    threads = sum(w * 32 for _, _, w in flexible)
    share = cap if not threads else min(cap, (REGISTERS_PER_SM - used) // threads // 8 * 8)
    groups = [WarpGroup(i, n, role, w, r) for i, (n, role, w, r) in enumerate(fixed)]
    for n, role, w in flexible:
        groups.append(WarpGroup(len(groups), n, role, w, max(MIN_REGS, share)))
    return groups
