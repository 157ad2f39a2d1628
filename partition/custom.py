"""Partitions given explicitly: an op → group map for any assignment of ops to warp groups.

Used to test that loop distribution, pipelining and aref lowering are correct for every partition, not just
the ones the heuristic or the solver choose, and by users who want to pin ops to groups by hand.
"""
from __future__ import annotations

from aref.ir import Kernel
from aref.ir.ws import WarpGroup
from partition.model import (Partition, REGISTERS_PER_SM, assignable_ops, check_partition,  # noqa: F401
                             one_producer_per_channel)


def custom_partition(kernel: Kernel, groups_of: list[int], warps: int = 4) -> Partition:
    """Place `assignable_ops(kernel)[i]` in group `groups_of[i]`; groups are numbered 0..max, each with
    `warps` warps and an even share of the register file. The puts of one user channel all go to the group
    of its first put (a channel has one producer)."""
    ops = assignable_ops(kernel)
    if len(groups_of) != len(ops):
        raise ValueError(f"{len(ops)} ops to place, {len(groups_of)} groups given")
    n = max(groups_of, default=0) + 1
    regs = min(240, REGISTERS_PER_SM // (n * warps * 32) // 8 * 8)
    groups = [WarpGroup(i, f"g{i}", "compute", warps, regs) for i in range(n)]
    part = Partition(groups, dict(zip(ops, groups_of)), "custom")
    one_producer_per_channel(kernel, part.assign)
    check_partition(kernel, part)
    return part
