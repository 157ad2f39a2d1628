"""TMA multicast over a cluster of 2 CTAs on Hopper (sm_90a): the launch option `cluster=(2, 1)` / `(1, 2)`.

The two CTAs of a cluster are neighbours along one grid axis (`axis`: 0 for (2, 1), 1 for (1, 2)). A TMA load
whose box coordinates, predicate and loop trip count do not depend on `program_id(axis)` fetches the same tile
in both CTAs (GEMM's B tile for a cluster along M): it is *shared*. Each CTA loads half of a shared tile with a
multicast TMA that writes both CTAs' shared memory at the same ring slot and signals both CTAs' `full` barrier
of that slot, so each CTA reads the tile from L2 once per cluster instead of once per CTA.

The ring protocol across the two CTAs (`tests/backend/test_cluster.py` runs it as a model):

* every CTA's `full` barrier still expects the whole slot's bytes (its own half of each shared tile, the
  peer's half, and its own unshared tiles): the producer's `arrive_expect_tx` is unchanged;
* a slot of a ring holding a shared tile (a *shared ring*) may be refilled only when the consumers of BOTH
  CTAs released it, since the refill writes into both: each consumer release arrives on the `empty` barrier
  of that slot in each CTA of the cluster (a remote mbarrier arrive) and the `empty` arrival count doubles;
* the barriers' initialisation is made visible cluster-wide (`mbarrier_init_fence`, then a cluster
  arrive/wait instead of the CTA barrier) before any CTA issues a TMA that signals its peer's barriers;
* no CTA exits while its peer may still multicast into it or arrive on its barriers: a cluster arrive/wait
  ends the kernel.

What is refused (`BackendError` at the kernel's line, saying what to change): another cluster shape, an
architecture other than sm_90a, a persistent launch, a rasterized tile order, a grid extent along the axis that is not even, a kernel
with no shared tile, a ring access whose count depends on
`program_id(axis)`. A box that a kernel loads both shared and not (a Gram matrix's A·Aᵀ) gets a second,
multicast TMA atom for the shared loads.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from aref.backend.cute.errors import BackendError
from aref.ir import OpKind

HINT_OFF = "launch without a cluster (cluster=(1, 1))"
SIZE = 2                   # CTAs per cluster
MASK = (1 << SIZE) - 1     # multicast to every CTA of the cluster (ranks 0 and 1 along either axis)


@dataclass
class ClusterPlan:
    """A cluster launch: its shape, the shared loads (ids of their `tma_load` ops), the rings that hold them
    and the TMA atoms that multicast."""

    shape: tuple[int, int, int]
    axis: int
    shared: set = field(default_factory=set)          # id(tma_load op)
    rings: set = field(default_factory=set)           # channel names
    tmas: set = field(default_factory=set)            # TmaPlan names of multicast atoms
    atoms: dict = field(default_factory=dict)         # id(shared tma_load op) -> its multicast TmaPlan


def normalize(cluster) -> tuple[int, int]:
    """`cluster` as a pair; (1, 1) is no cluster."""
    c = tuple(int(x) for x in (cluster or (1, 1)))
    while len(c) > 2 and c[-1] == 1:
        c = c[:-1]
    return c + (1,) * (2 - len(c)) if len(c) < 2 else c


def active(cluster) -> bool:
    return normalize(cluster) != (1, 1)


def halvable(box: tuple[int, ...], dtype) -> bool:
    """Whether each CTA can multicast half of `box`: the atom splits its outermost mode in two, which must leave
    whole 16-byte rows of a 1-D box (TMA's box granule) and whole 8-row swizzle atoms of a 2-D one; a box
    that cannot be split is loaded by each CTA on its own."""
    if len(box) == 1:
        return box[0] * dtype.nbytes % (2 * 16) == 0
    return box[0] % (2 * 8) == 0


def _varying(gp, axis: int) -> set:
    """Ids of the values of group `gp` that depend on `program_id(axis)` (transitively, through loop-carried
    values and a loop whose trip count depends on it)."""
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


def _in_loop(gp, op) -> bool:
    return gp.loop is not None and any(o is op for o in gp.loop.body.ops)


def _runs_alike(gp, op, vary: set) -> bool:
    """Whether `op` runs the same number of times in both CTAs of the cluster."""
    if op.pred is not None and id(op.pred) in vary:
        return False
    return not (_in_loop(gp, op) and id(gp.loop.trip_count) in vary)


def plan_cluster(plan, cluster, persistent: bool = False) -> ClusterPlan | None:
    """The cluster launch of Hopper kernel `plan` (a `KernelPlan`), or None for `cluster=(1, 1)`; raises
    `BackendError` naming the line and what to change for a kernel the protocol cannot hold for."""
    if not active(cluster):
        return None
    ws = plan.ws
    c = normalize(cluster)
    if len(c) != 2 or sorted(c) != [1, SIZE]:
        raise BackendError(f"cluster {c}: the multicast templates take clusters of {SIZE} CTAs along one grid "
                           f"axis, (2, 1) or (1, 2)", ws.loc, hint="use cluster=(2, 1) or (1, 2), or " + HINT_OFF)
    axis = c.index(SIZE)
    if persistent:
        raise BackendError("a cluster launch is not persistent: the two CTAs of a cluster must walk tiles that "
                           "share their loads in lockstep, which the round-robin scheduler does not",
                           ws.loc, hint="launch with persistent=False, or " + HINT_OFF)
    if plan.raster > 1:
        raise BackendError(f"a cluster launch walks tiles in grid order: with raster={plan.raster} the two CTAs of a "
                           f"cluster (neighbours in the launch grid) may take tiles of different rows and columns",
                           ws.loc, hint="launch with raster=0, or " + HINT_OFF)
    grid = tuple(ws.grid) + (1,) * (3 - len(ws.grid))
    if grid[axis] % SIZE:
        raise BackendError(f"grid {tuple(ws.grid)} has {grid[axis]} CTAs along axis {axis}, not a multiple of the "
                           f"cluster's {SIZE}", ws.loc,
                           hint=f"choose tile sizes that make grid axis {axis} even, cluster along the other "
                                f"axis, or " + HINT_OFF)
    cp = ClusterPlan((*c, 1), axis)
    unshared_tmas = set()
    for g in plan.groups:
        gp = g.gp
        vary = _varying(gp, axis)
        for op in gp.all_ops():
            if op.kind is not OpKind.TMA_LOAD:
                continue
            t = plan.tensor_of(op.operands[0])
            key = (t.name, tuple(op.attrs.tile_shape))
            if key in plan.copies:
                continue                       # loaded with ordinary loads: each CTA its own
            tma = plan.tma(t.name, op.attrs.tile_shape, plan.channel(op.attrs.channel).buffers[op.attrs.index].name)
            coords = op.operands[1:1 + len(t.shape)]
            if any(id(v) in vary for v in coords) or not _runs_alike(gp, op, vary) or \
                    not halvable(tuple(op.attrs.tile_shape), t.dtype):
                unshared_tmas.add(tma.name)
                continue
            # (a group that loads with TMA is a pure producer: `roles.classify` refuses one that also computes,
            # which could otherwise wait on its peer's consumers while they wait on it)
            cp.shared.add(id(op))
            cp.rings.add(op.attrs.channel)
            cp.atoms[id(op)] = tma
    for op_id, tma in list(cp.atoms.items()):
        if tma.name in unshared_tmas:     # one atom for shared and own tiles (a Gram matrix's A·Aᵀ): a second,
            name = f"{tma.name}_mc"       # multicast atom of the same box for the shared loads
            if not any(x.name == name for x in plan.tmas):
                plan.tmas.append(dataclasses.replace(tma, name=name))
            tma = next(x for x in plan.tmas if x.name == name)
        cp.atoms[op_id] = tma
        cp.tmas.add(tma.name)
    if not cp.shared:
        raise BackendError(f"no loaded tile is the same in both CTAs of a cluster along grid axis {axis}: every "
                           f"TMA load's coordinates (or trip count) depend on program_id({axis}), or its box "
                           f"cannot be split in two TMA boxes (`halvable`)", ws.loc,
                           hint="cluster along the other axis, or " + HINT_OFF)
    for g in plan.groups:                  # every access of a shared ring runs alike in both CTAs
        vary = _varying(g.gp, axis)
        for op in g.gp.all_ops():
            if op.kind in (OpKind.MBAR_WAIT, OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX) and \
                    getattr(op.attrs, "channel", None) in cp.rings and not _runs_alike(g.gp, op, vary):
                raise BackendError(f"ring '{op.attrs.channel}' holds a tile shared by the cluster's CTAs, but warp "
                                   f"group '{g.gp.group.name}' accesses it a number of times that depends on "
                                   f"program_id({axis})", op.loc, hint="cluster along the other axis, or " + HINT_OFF)
    return cp


def empty_count(plan, channel) -> int:
    """The `empty` arrival count of a ring: doubled for a shared ring (both CTAs' consumers release it)."""
    n = channel.ch.empty_count
    cp = getattr(plan, "cluster", None)      # (the sm_100a plans have no cluster launch)
    return n * SIZE if cp is not None and channel.ch.name in cp.rings else n


def atom_of(plan, op, tma):
    """The TMA atom that issues load `op`: its multicast one when the tile is shared, else `tma`."""
    cp = plan.cluster
    return cp.atoms.get(id(op), tma) if cp is not None else tma


def partition_coord(plan, tma_name: str) -> str:
    """`tma_partition`'s CTA coordinate and layout: the CTA's rank in the cluster over 2 for a multicast atom
    (each CTA loads its half of the box), else the whole box."""
    if plan.cluster is not None and tma_name in plan.cluster.tmas:
        return f"cute.arch.block_idx_in_cluster(), cute.make_layout({SIZE})"
    return "0, cute.make_layout(1)"


def host_atom(plan, tma_name: str) -> tuple[str, str]:
    """(the TMA op, extra arguments) of a load atom on the host."""
    if plan.cluster is not None and tma_name in plan.cluster.tmas:
        return "CopyBulkTensorTileG2SMulticastOp()", f", num_multicast={SIZE}"
    return "CopyBulkTensorTileG2SOp()", ""


def sync(out, why: str) -> None:
    """A barrier of every thread of both CTAs of the cluster (release / acquire at cluster scope), at the
    kernel's level where every thread passes."""
    out(f"# {why}")
    out("cute.arch.cluster_arrive()")
    out("cute.arch.cluster_wait()")


def describe(plan) -> str:
    """The module docstring's lines of a cluster launch."""
    cp = plan.cluster
    return (f"Cluster {cp.shape[:2]}: TMA multicast of {', '.join(sorted(cp.tmas))} (half a box per CTA, to both); "
            f"rings {', '.join(sorted(cp.rings))} released by both CTAs' consumers\n"
            f"(remote arrives, empty counts doubled); cluster arrive/wait after barrier init and before exit.")
