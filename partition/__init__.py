"""Warp-group partitioning of Tile IR.

Will own the heuristic (Tawa task-aware) partitioner, the optimal partitioner (an adapter to `solve`),
loop distribution and compiler-inserted arefs.
"""
