"""Disjoint sets: the partitioner groups ops that must share a warp group, the pipeline and the tensor-memory
plan group tiles that share storage."""
from __future__ import annotations


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
