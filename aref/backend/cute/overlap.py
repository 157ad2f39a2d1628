"""Epilogue overlap on Hopper persistent kernels (CUTLASS's "ping-pong" kernel schedule).

Two copies of the kernel's one consumer warp group take alternate tiles of the CTA's round-robin walk (copy
`c` the tiles with `tile_count % 2 == c`), so one copy's epilogue (the stores after its last ring access)
runs while the other copy's main loop keeps the tensor cores busy. The producer is unchanged and fills the
rings in tile order; every ring position of a tile is the one the plain persistent kernel uses
(`<ring>_base = tile_count * items_per_tile`), whichever copy takes the tile.

Ring phases stay exact because the copies take *turns*: a turn is one copy's main loop (every ring wait and
release of its tile) or one copy's epilogue, and the CTA's turns run in the order

    main(t0) main(t1) epilogue(t0) epilogue(t1) main(t2) main(t3) epilogue(t2) epilogue(t3) ...

(t0, t2, … copy 0's tiles, t1, t3, … copy 1's). Main loops are serialized in tile order, so the rings are
consumed in position order exactly as by one consumer: no copy waits on a slot's `full` barrier while the
other still has earlier positions of that ring outstanding, the case where an mbarrier's parity aliases (a
wait for position p returns at once when the slot is two phases behind). Epilogues are serialized too (they
share the staging tiles; a copy passes its epilogue turn only after its TMA stores have read them), and each
overlaps the other copy's main loop. A turn is handed over with a pair of named barriers, one per copy: the
copy whose turn ends arrives on the other copy's barrier, the copy whose turn begins syncs on its own
(256 threads: 128 arrive, 128 sync). `TURNS` says when each copy waits and passes; `tests/backend/
test_epilogue_overlap.py` runs it as a model over many tiles and interleavings.

Blackwell (sm_100a) needs none of this: its persistent kernels already double the tensor-memory accumulator
(`sm100.plan._double_accumulators`), so the MMA warp's next tile runs while the epilogue reads the other stage
— that is the overlap; `check_sm100` refuses only a kernel whose accumulator could not be doubled.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass

from aref.backend.cute.errors import BackendError
from aref.backend.cute.roles import classify
from aref.ir import Op, OpKind, SetMaxNRegAttrs
from aref.target import target_of

HINT_OFF = "turn epilogue_overlap off"

# When copy `c` waits for its turn (syncs on its own order barrier) before, and passes the turn (arrives on the
# other copy's barrier) after, its main loop and its epilogue: conditions on `tile_count` (the tile's index in
# the CTA's walk; copy c takes tile_count % 2 == c) and `has_next` (the CTA has a tile after this one). A turn
# is waited for only when a turn precedes it in the order above, and passed only when one follows, so every
# arrive meets exactly one sync and none is left pending at exit.
TURNS = {
    # copy 0 (tile_count even): main(t) follows epilogue(t-1) of copy 1; when t is the CTA's last tile the
    # same copy runs main(t) and epilogue(t) back to back, with no hand-over
    (0, "main", "wait"): "tile_count > 0",
    (0, "main", "pass"): "has_next",
    (0, "epilogue", "wait"): "has_next",
    (0, "epilogue", "pass"): "has_next",
    # copy 1 (tile_count odd): main(t) follows main(t-1), epilogue(t) follows epilogue(t-1); after it comes
    # copy 0's main(t+1) if the CTA has that tile
    (1, "main", "wait"): "True",
    (1, "main", "pass"): "True",
    (1, "epilogue", "wait"): "True",
    (1, "epilogue", "pass"): "has_next",
}


@dataclass
class OverlapPlan:
    """The second consumer copy of an epilogue-overlapped kernel: which group is copied, the named barriers of
    the copies (their own group syncs, then their turn barriers) and the copy's warp-group index."""

    group: int                      # index of the copied consumer group in the plan's groups
    copy_index: int                 # warp-group index of copy 1 (after the IR's groups)
    group_barriers: tuple[int, int]  # each copy's own named barrier (stores, group syncs)
    order_barriers: tuple[int, int]  # each copy's turn barrier: it syncs on its own, arrives on the other's
    regs: int                       # each copy's setmaxnreg budget


def check(ws, persistent: bool) -> int:
    """The one rule of a Hopper epilogue overlap: a persistent kernel of one TMA producer and one whole-tile
    consumer that puts into no channel, with compile-time ring positions per tile. Returns the consumer's
    group index; raises `BackendError` naming the line to change."""
    if not persistent:
        raise BackendError("epilogue overlap alternates a persistent CTA's tiles between two consumer copies; "
                           "this launch is not persistent", ws.loc, hint="launch with persistent=True or " + HINT_OFF)
    roles = [classify(gp)[0] for gp in ws.groups]
    consumers = [i for i, r in enumerate(roles) if r != "tma_producer"]
    ids = {ws.groups[i].group.id: ws.groups[i].group.name for i in consumers}
    for ch in ws.channels:
        if ch.producer in ids:
            raise BackendError(f"warp group '{ids[ch.producer]}' puts into channel '{ch.name}': epilogue overlap "
                               f"runs two copies of a consumer on alternate tiles, and the group reading the "
                               f"channel would see the copies' items out of order", ch.loc,
                               hint=("put only loaded tiles into the channel (the producer's TMA loads), or "
                                     if ch.user else "partition with consumers='plain' (one group computes the "
                                     "whole tile, no hand-off between consumers), or ") + HINT_OFF)
    if len(consumers) != 1 or len(ws.groups) != 2 or ws.pingpong or ws.named_barriers:
        names = ", ".join(f"'{gp.group.name}'" for gp in ws.groups)
        raise BackendError(f"epilogue overlap copies the kernel's one consumer warp group; this kernel has the "
                           f"groups {names}", ws.loc,
                           hint="compile with consumers='plain' (one whole-tile consumer) or " + HINT_OFF)
    return consumers[0]


def prepare(ws, persistent: bool):
    """(`ws` with the budgets of the producer and two consumer copies, the consumer's group index), or a
    `BackendError` naming the rule the kernel breaks (`check`, `with_budgets`)."""
    group = check(ws, persistent)
    return with_budgets(ws, group), group


def check_items(plan) -> None:
    """Every ring's items per tile a compile-time constant (each copy finds a tile's ring position from its
    tile count alone; a running sum would miss the other copy's tiles)."""
    for cp in plan.channels:
        if not isinstance(plan.items_per_tile.get(cp.ch.name, 0), int):
            raise BackendError(f"channel '{cp.ch.name}' carries a number of items per tile known only at run time "
                               f"(its loop's trip count depends on the tile): with epilogue overlap each consumer "
                               f"copy skips the other's tiles and cannot sum their items", cp.ch.loc,
                               hint="make the loop's trip count a compile-time constant, or " + HINT_OFF)


def check_scratch(plan, group: int) -> None:
    """A consumer's own shared tiles (exchange, staged operands) would be written by both copies at once."""
    for (g, _), b in plan.scratch.items():
        if g == group:
            raise BackendError(f"the consumer keeps {b.purpose} in shared memory ({b.name}); with epilogue "
                               f"overlap both copies would use that one tile, one copy's epilogue running during "
                               f"the other's main loop", plan.ws.loc,
                               hint="keep the operand in shared memory as loaded (no transpose or staging of a "
                                    "register tile), or " + HINT_OFF)


def with_budgets(ws, group: int):
    """A copy of `ws` whose setmaxnreg budgets count the consumer twice (the resource model's
    `assign_budgets` over the IR's groups and the second copy, launch registers of one more warp group).
    Raises `BackendError` at the line of the consumer's peak when two whole-tile copies do not fit."""
    from aref.resources import register_demand
    from aref.resources.budgets import assign_budgets, launch_registers
    from aref.resources.registers import ResourceError
    ws = copy.deepcopy(ws)
    gp = ws.groups[group]
    twin = dataclasses.replace(gp.group, id=max(g.group.id for g in ws.groups) + 1, name=gp.group.name + "_1")
    demands = {g.group.id: register_demand(g, ws.arch) for g in ws.groups}
    demands[twin.id] = demands[gp.group.id]
    try:
        budget = assign_budgets([g.group for g in ws.groups] + [twin], demands, ws.loc)
    except ResourceError as refusal:
        raise BackendError(f"epilogue overlap runs two copies of warp group '{gp.group.name}', each holding a "
                           f"whole tile: {refusal.message}", refusal.loc,
                           hint=f"use smaller tiles, or {HINT_OFF}") from None
    base = launch_registers(ws.total_threads + twin.threads)
    for g in ws.groups:
        regs = budget[g.group.id]
        g.group = dataclasses.replace(g.group, regs=regs)
        g.pre.ops = [op for op in g.pre.ops if op.kind is not OpKind.SETMAXNREG]
        if regs != base:
            g.pre.ops.insert(0, Op(OpKind.SETMAXNREG, (), (), SetMaxNRegAttrs(regs, regs > base), ws.loc))
    return ws


def plan_overlap(plan, group: int) -> OverlapPlan:
    """Named barriers for the copies (after every id the plan gave out) and their turn barriers."""
    g = plan.groups[group]
    first = max(x.group_barrier for x in plan.groups) + 1
    ids = (g.group_barrier, first, first + 1, first + 2)
    if ids[-1] > 15:
        raise BackendError(f"epilogue overlap needs 3 more named barriers; the kernel uses {first - 1} of the 15",
                           plan.ws.loc, hint=HINT_OFF)
    check_items(plan)
    check_scratch(plan, group)
    # the role's group syncs name the copy's own barrier, a constexpr of the shared role function
    g.group_barrier = "GROUP_BARRIER"
    return OverlapPlan(group, len(plan.groups), ids[:2], ids[2:], g.gp.group.regs)


# ------------------------------------------------------------------------------------------- emission
def _sync_lines(plan, lines: list[str]) -> set[int]:
    """Indices of the lines that wait on or release a ring slot (they name a ring's mbarriers)."""
    names = "|".join(re.escape(f"{cp.name}_{w}") for cp in plan.channels for w in ("full", "empty"))
    pat = re.compile(rf"\b({names})\b")
    return {i for i, line in enumerate(lines) if not line.lstrip().startswith("#") and pat.search(line)}


def main_loop_end(plan, lines: list[str], indent: int) -> int:
    """The index after the last statement at `indent` (the tile body's level) that contains a ring access:
    the main loop ends there, the epilogue is what follows."""
    syncs = _sync_lines(plan, lines)
    if not syncs:
        raise BackendError("epilogue overlap: the consumer accesses no ring", plan.ws.loc, hint=HINT_OFF)
    last = max(syncs)
    end = last + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    if not any(line.strip() and not line.lstrip().startswith("#") for line in lines[end:]):
        raise BackendError("epilogue overlap: the consumer has no epilogue after its last ring access (nothing "
                           "to overlap with the next tile's main loop)", plan.ws.loc, hint=HINT_OFF)
    return end


def turn_lines(ov: OverlapPlan, point: str, action: str, pad: str) -> list[str]:
    """The hand-over of `point`'s turn ("main" / "epilogue", "wait" / "pass") for both copies, as
    compile-time branches on the role's `COPY`."""
    out = []
    for c in (0, 1):
        cond = TURNS[(c, point, action)]
        bar = ov.order_barriers[c] if action == "wait" else ov.order_barriers[1 - c]
        call = "barrier" if action == "wait" else "barrier_arrive"
        stmt = f"cute.arch.{call}(barrier_id={bar}, number_of_threads=2 * aref.WARP_GROUP_THREADS)"
        out.append(f"{pad}{'if' if c == 0 else 'else'}{' cutlass.const_expr(COPY == 0)' if c == 0 else ''}:")
        if cond == "True":
            out.append(f"{pad}    {stmt}")
        else:
            out += [f"{pad}    if {cond}:", f"{pad}        {stmt}"]
    return out


def wrap_tile_body(plan, ov: OverlapPlan, body: list[str], pad: str) -> list[str]:
    """The consumer's tile body (lines at `pad`) with its turns: wait before the main loop, pass after it,
    wait before the epilogue, and pass after it once the epilogue's TMA stores have read the staging tiles
    (the other copy writes them next)."""
    end = main_loop_end(plan, body, len(pad))
    order = ("main(t0) main(t1) epilogue(t0) epilogue(t1) main(t2) ...; named barriers "
             f"{ov.order_barriers[0]} (copy 0's turn) and {ov.order_barriers[1]} (copy 1's)")
    return ([f"{pad}has_next = tile + num_ctas < NUM_TILES  # the CTA has a tile after this one",
             f"{pad}# epilogue overlap: the copies take turns, {order}",
             f"{pad}# ---- main loop turn: the rings are consumed in tile order, as by one consumer"]
            + turn_lines(ov, "main", "wait", pad) + body[:end] + turn_lines(ov, "main", "pass", pad)
            + [f"{pad}# ---- epilogue turn: overlaps the other copy's main loop"]
            + turn_lines(ov, "epilogue", "wait", pad) + body[end:]
            + [f"{pad}# the other copy stages its tile next: these stores must have read the staging tiles",
               f"{pad}aref.staging_free(warp_in_group)"]
            + turn_lines(ov, "epilogue", "pass", pad))


def describe(plan) -> str:
    """The module docstring's line of the second copy."""
    ov = plan.overlap
    name = plan.groups[ov.group].gp.group.name
    return (f"  {ov.copy_index} {name + '_1':<10} the second copy of {name}: the two take alternate tiles, "
            f"main loops in tile order (named barriers {ov.order_barriers[0]}, {ov.order_barriers[1]}), "
            f"each epilogue overlapping the other copy's main loop")


def check_sm100(plan) -> None:
    """Blackwell: the overlap is the doubled tensor-memory accumulator of a persistent kernel; refuse a
    kernel that is not persistent or whose accumulator could not be doubled."""
    if not plan.persistent:
        raise BackendError("epilogue overlap needs a persistent launch (on sm_100a its next tile's MMAs write the "
                           "second stage of the accumulator while the epilogue reads the first)", plan.ws.loc,
                           hint="launch with persistent=True or " + HINT_OFF)
    if not plan.doubled:
        columns = target_of(plan.ws.arch).tmem_columns
        raise BackendError("epilogue overlap on sm_100a doubles the tensor-memory accumulator, and this kernel's "
                           "could not be doubled (a ring of depth 1 published once per tile after the loop by the "
                           f"MMA warp, with free columns above it within the SM's {columns})", plan.ws.loc,
                           hint="use a smaller accumulator tile (BN), or " + HINT_OFF)
