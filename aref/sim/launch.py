"""Launches simulated as the backend runs them: persistent CTAs walking several tiles with every ring
continuing across tiles, and (Hopper) epilogue overlap's two consumer copies.

A `Launch` says how the kernel is launched; `Prog(kernel, launch)` turns it into per-group instruction lists
and tile walks the engine executes unchanged:

* **Persistent** (`aref.backend.cute`'s `persistent=True`): CTA c walks tiles c, c + ctas, c + 2·ctas, … of
  the grid (x fastest, as `aref.tile_order.tile_coords` without rasterization), each group running its
  whole program once per tile. A ring does not restart at a tile: its position at the start of the n-th
  tile is the number of items the CTA's earlier tiles put into it (a loop channel's `items_per_iter` × the
  tile's trip count; one item per tile for the others), and every slot, parity and item of the tile is
  shifted by it, as the backend's `<ring>_base` does. So a wait on a ring's first use within a tile is a
  wait on the previous tile's items — the waits a one-tile launch never exercises. `setmaxnreg` runs in the
  first tile only, `tmem_dealloc` in the last.
  On Blackwell the backend doubles each accumulator the MMA warp publishes once per tile after its loop
  (`doubled_accumulators`, the rule of `aref.backend.cute.sm100.plan._double_accumulators`): the ring gets
  two slots and the tensor-memory buffer two stages, the ring position picking the stage.
* **2-CTA clusters** (Hopper, `cluster=(2, 1)` or `(1, 2)`: `aref.backend.cute.cluster`): the two CTAs of a
  cluster, neighbours along one grid axis, run as one simulated unit with each group and channel twice (the
  copies of CTA rank 1 named `<group>@1`). A TMA load that is the same in both CTAs (`shared_loads`: its
  coordinates, predicate and trip count do not depend on the program id along the axis, and its box splits
  in two) is a multicast: each CTA loads one half of the tile into the slot of both CTAs, completing half
  the bytes on both CTAs' `full` barrier; a slot is readable once both halves landed. A ring holding a
  shared tile is released by the consumers of both CTAs (each release arrives on the `empty` barrier of
  both: a remote arrive) and its `empty` count doubles, since a refill writes into both CTAs.
* **Epilogue overlap** (Hopper, with persistent): two copies of the kernel's one consumer take the CTA's
  tiles alternately (copy c the tiles with tile_count % 2 == c) and hand each other turns with a pair of
  named barriers, in the order `aref.backend.cute.overlap.TURNS` states: the main loops (every ring wait
  and release) in tile order, each epilogue (what follows the last ring access) overlapping the other
  copy's next main loop. The copies' register budgets are the backend's concern: the simulation leaves
  their `setmaxnreg` out.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from aref.ir import OpKind

# The turns of the epilogue-overlap copies (`aref.backend.cute.overlap.TURNS`): (copy, point, action) -> the
# condition on the tile's count in the CTA's walk and on whether the CTA has a tile after it
TURNS = {
    (0, "main", "wait"): "tile_count > 0",
    (0, "main", "pass"): "has_next",
    (0, "epilogue", "wait"): "has_next",
    (0, "epilogue", "pass"): "has_next",
    (1, "main", "wait"): "True",
    (1, "main", "pass"): "True",
    (1, "epilogue", "wait"): "True",
    (1, "epilogue", "pass"): "has_next",
}
TURN_CONDITIONS = ("tile_count > 0", "has_next", "True")


class LaunchError(ValueError):
    """The kernel cannot be launched as asked (`Launch`): the backend refuses that launch too."""


@dataclass(frozen=True)
class Launch:
    """How a kernel is launched. `persistent`: `ctas` CTAs walk the grid's tiles round-robin (None: as many as
    give each CTA `tiles_per_cta` tiles); `epilogue_overlap` (Hopper, persistent): two consumer copies on
    alternate tiles; `min_tiles` (control state only): tiles each CTA walks at least."""

    persistent: bool = False
    ctas: int | None = None
    tiles_per_cta: int = 3
    epilogue_overlap: bool = False
    # control-state runs only: a CTA walks at least this many tiles, going round the grid again where it has
    # fewer (the same program over a larger grid; tile values would be stored twice)
    min_tiles: int = 0
    cluster: tuple = (1, 1)

    def __post_init__(self):
        if self.epilogue_overlap and not self.persistent:
            raise ValueError("epilogue overlap alternates a persistent CTA's tiles: launch with persistent=True")
        if self.ctas is not None and self.ctas < 1:
            raise ValueError(f"ctas must be ≥ 1, got {self.ctas}")
        if tuple(self.cluster) not in ((1, 1), (2, 1), (1, 2)):
            raise ValueError(f"cluster {self.cluster}: clusters are (2, 1) or (1, 2) CTAs, or (1, 1) for none")
        if self.clustered and self.persistent:
            raise ValueError("a cluster launch is not persistent (the backend refuses it too)")

    @property
    def clustered(self) -> bool:
        return tuple(self.cluster) != (1, 1)

    @property
    def axis(self) -> int:
        return tuple(self.cluster).index(2)

    def rank_coords(self, cta: tuple, rank: int) -> tuple:
        """Program ids of CTA `rank` of cluster `cta` (the cluster's coordinates, halved along its axis)."""
        a = self.axis
        return cta[:a] + (2 * cta[a] + rank,) + cta[a + 1:]

    def num_ctas(self, grid) -> int:
        tiles = num_tiles(grid)
        return self.ctas if self.ctas is not None else max(1, -(-tiles // self.tiles_per_cta))

    def ctas_of(self, grid) -> list[tuple]:
        """The CTAs the launch runs: the grid's, or (persistent) (c,) for each persistent CTA."""
        if not self.persistent:
            import itertools
            if self.clustered:                 # one per cluster
                if grid[self.axis] % 2:
                    raise LaunchError(f"grid {tuple(grid)} has {grid[self.axis]} CTAs along axis {self.axis}, not "
                                     f"a multiple of the cluster's 2")
                grid = tuple(n // 2 if i == self.axis else n for i, n in enumerate(grid))
            return list(itertools.product(*(range(n) for n in grid)))
        return [(c,) for c in range(min(self.num_ctas(grid), num_tiles(grid)))]

    def walk(self, grid, cta: tuple) -> list[tuple]:
        """Tile coordinates the CTA runs, in order."""
        if not self.persistent:
            return [tuple(cta)]
        n, tiles = self.num_ctas(grid), num_tiles(grid)
        count = max(len(range(cta[0], tiles, n)), self.min_tiles)
        return [tile_coords((cta[0] + k * n) % tiles, grid) for k in range(count)]


def num_tiles(grid) -> int:
    n = 1
    for g in grid:
        n *= g
    return n


def tile_coords(t: int, grid) -> tuple:
    """Coordinates of tile number `t` of `grid`, x fastest (`aref.tile_order.tile_coords`, raster 0)."""
    out = []
    for g in grid:
        out.append(t % g)
        t //= g
    return tuple(out)


def items_per_tile(ch, trip: int) -> int:
    """Items one tile puts into channel `ch` whose loop runs `trip` times (the backend's `items_per_tile`)."""
    return ch.items_per_iter * trip if ch.region == "loop" else ch.items_per_iter


# ------------------------------------------------------------------------------------------ Blackwell
def doubled_accumulators(kernel, persistent: bool) -> set[str]:
    """Channels whose ring and tensor-memory buffer a persistent Blackwell launch doubles: a depth-1 ring
    published once per tile after the loop (region "post") by a one-warp group that issues MMAs, its buffer
    alone in its columns (no alias, no other ring), every slot (and wait parity) a constant, and free columns
    above it within 512 (`aref.backend.cute.sm100.plan._double_accumulators`). Buffers are doubled in
    channel order, each taking the columns above it."""
    plan = kernel.tmem
    from aref.target import target_of
    if not persistent or not target_of(kernel.arch).has_tensor_memory or plan is None:
        return set()
    const = {id(op.result) for gp in kernel.groups for op in gp.all_ops() if op.kind is OpKind.CONST}
    mma_groups = {gp.group.id for gp in kernel.groups
                  if any(op.kind is OpKind.MMA_ASYNC for op in gp.all_ops()) and gp.group.warps == 1}
    buffers = {b.name: dataclasses.replace(b) for b in plan.buffers}
    used = plan.used
    out = set()
    for ch in kernel.channels:
        name = plan.ring_buffer.get(ch.name)
        if name is None or ch.depth != 1 or ch.region != "post" or ch.items_per_iter != 1:
            continue
        b = buffers[name]
        producer = kernel.groups[ch.producer].group
        if (b.depth != 1 or b.alias_of is not None or any(x.alias_of == name for x in buffers.values())
                or sum(r == name for r in plan.ring_buffer.values()) != 1 or producer.id not in mma_groups):
            continue
        ring_ops = [op for gp in kernel.groups for op in gp.all_ops()
                    if getattr(op.attrs, "channel", None) == ch.name and len(op.operands) > 1]
        if not all(id(op.operands[1]) in const and (op.kind is not OpKind.MBAR_WAIT or id(op.operands[2]) in const)
                   for op in ring_ops):
            continue
        top = (b.col + b.cols, b.col + 2 * b.cols)
        if any(x is not b and x.col < top[1] and top[0] < x.col + x.cols for x in buffers.values()):
            continue
        if _pow2(max(used, top[1])) > 512:
            continue
        b.cols, b.depth = 2 * b.cols, 2
        used = max(used, top[1])
        out.add(ch.name)
    return out


def _pow2(n: int) -> int:
    p = 32
    while p < n:
        p *= 2
    return p


def doubled_plan(plan, doubled: set[str]):
    """The tensor-memory plan with each doubled channel's buffer of two stages."""
    if not doubled:
        return plan
    names = {plan.ring_buffer[c] for c in doubled}
    return dataclasses.replace(plan, buffers=[dataclasses.replace(b, depth=2) if b.name in names else b
                                              for b in plan.buffers])


# ------------------------------------------------------------------------------------------ clusters
def _varying(gp, axis: int) -> set:
    """Ids of group `gp`'s values that depend on `program_id(axis)`, through loop-carried values and a loop
    whose trip count depends on it (`aref.backend.cute.cluster._varying`)."""
    vary: set = set()
    ops = list(gp.all_ops())
    loop = gp.loop
    while True:
        n = len(vary)
        for op in ops:
            if op.kind is OpKind.PROGRAM_ID and op.attrs.axis == axis or \
                    any(id(v) in vary for v in op.operands) or (op.pred is not None and id(op.pred) in vary):
                vary.update(id(r) for r in op.results)
        if loop is not None:
            if id(loop.trip_count) in vary:
                vary.add(id(loop.iv))
                vary.update(id(c) for c in loop.carried)
            for c, i, y, r in zip(loop.carried, loop.inits, loop.yields, loop.results):
                if id(i) in vary or id(y) in vary:
                    vary.update((id(c), id(r)))
        if len(vary) == n:
            return vary


def _halvable(box, dtype) -> bool:
    if len(box) == 1:
        return box[0] * dtype.nbytes % 32 == 0
    return box[0] % 16 == 0


def shared_loads(kernel, axis: int) -> set:
    """Ids of the `tma_load` ops both CTAs of a cluster along `axis` make alike (multicast): coordinates,
    predicate and loop trip count independent of `program_id(axis)`, a box that splits in two
    (`aref.backend.cute.cluster.plan_cluster`)."""
    out = set()
    for gp in kernel.groups:
        vary = _varying(gp, axis)
        in_loop = {id(op) for op in (gp.loop.body.ops if gp.loop is not None else ())}
        for op in gp.all_ops():
            if op.kind is not OpKind.TMA_LOAD:
                continue
            rank = len(op.operands[0].type.shape)
            coords = op.operands[1:1 + rank]
            alike = not (op.pred is not None and id(op.pred) in vary) and \
                not (id(op) in in_loop and id(gp.loop.trip_count) in vary)
            box = tuple(op.attrs.tile_shape) or op.operands[-4].type.tile.shape
            if alike and not any(id(v) in vary for v in coords) and _halvable(box, op.operands[0].type.dtype):
                out.add(id(op))
    return out


# ------------------------------------------------------------------------------------------ overlap
def overlap_consumer(kernel) -> int:
    """The group epilogue overlap copies: the kernel must be one producer and one consumer that puts into no
    channel (`aref.backend.cute.overlap.check`)."""
    producers = {ch.producer for ch in kernel.channels}
    ids = [gp.group.id for gp in kernel.groups]
    consumers = [i for i, gid in enumerate(ids) if gid not in producers]
    if len(kernel.groups) != 2 or len(consumers) != 1 or kernel.pingpong or kernel.named_barriers:
        raise ValueError(f"epilogue overlap copies the kernel's one consumer warp group; this kernel has the groups "
                         f"{', '.join(gp.group.name for gp in kernel.groups)}")
    return consumers[0]
