"""A group's walk over the tiles of a launch (`aref.sim.launch`): each tile's program ids, the ring positions
a persistent CTA's rings continue from, the ops of its first or last tile only. A mixin of `Engine`."""
from __future__ import annotations

from aref.sim.launch import items_per_tile
from aref.sim.values import UNDEF


class TileWalk:
    """The tile-walk half of `aref.sim.engine.Engine`."""

    def _start_tile(self, g, gi: int, n: int) -> None:
        """Group g (index gi) at the start of tile n of its walk: the tile's program ids, ring positions
        (`Prog.bases`) and turn conditions (`Prog.conditions`), a fresh environment."""
        coords, count, has_next = self.walks[gi][n]
        p = self.prog
        g.tile, g.cta, g.pc, g.k, g.trip = n, coords, 0, 0, 0
        if n == 0:
            g.lead = count
        env = g.env if n == 0 else dict(self.glob)
        if p.launch.persistent:
            env.update(p.tile_consts.get(gi, {}))
            for c, v in enumerate(p.bases):
                env[id(v)] = g.bases[c]
            cond = p.conditions
            env[id(cond["tile_count > 0"])] = count > 0
            env[id(cond["has_next"])] = has_next
            env[id(cond["True"])] = True
        g.env = env

    def _next_tile(self, g, gi: int) -> bool:
        """At the end of group g's program: go on with its next tile, every ring advanced by the items this
        tile put (and those of the tiles between, the other overlap copy's), or False at the end of its walk."""
        walk = self.walks[gi]
        if g.tile + 1 >= len(walk):
            return False
        step = walk[g.tile + 1][1] - walk[g.tile][1]
        tid = self.prog.trip_count_ids[gi]
        trip = g.env.get(tid) if tid is not None else None
        bases = list(g.bases)
        for c, ch in enumerate(self.prog.chans):
            # (a group that computes no trip count uses no loop channel: `Prog._persistent`)
            bases[c] += step * items_per_tile(ch, trip if isinstance(trip, int) else 0)
        g.bases = tuple(bases)
        self._start_tile(g, gi, g.tile + 1)
        return True

    # ------------------------------------------------------------------------------------ scheduling
    def _lead_bases(self, g, gi: int) -> None:
        """The ring positions at the first tile of an epilogue-overlap copy that does not start the CTA's
        walk: the items of the tiles before it, which have this tile's trip count (the backend requires
        items per tile that are compile-time constants for the overlap)."""
        tid = self.prog.trip_count_ids[gi]
        trip = g.env.get(tid) if tid is not None else None
        trip = trip if isinstance(trip, int) else 0
        g.bases = tuple(b + g.lead * items_per_tile(ch, trip) for b, ch in zip(g.bases, self.prog.chans))
        g.lead = 0
        for c, v in enumerate(self.prog.bases):
            g.env[id(v)] = g.bases[c]

    def _this_tile(self, g, gi: int, once: str) -> bool:
        return g.tile == 0 if once == "first" else g.tile + 1 == len(self.walks[gi])

    def _ring_pos(self, g, ins) -> None:
        """A persistent launch's ring position (`aref.sim.launch`): the slot, wait parity and item of the op
        that follows, shifted by the items the CTA's earlier tiles put into the ring."""
        c, which = ins.ring
        base, depth = g.bases[c], self.prog.chans[c].depth
        env = g.env
        vals = [env.get(a, UNDEF) if a is not None else None for a in ins.args]
        if any(v is not None and v.__class__ is not int for v in vals):
            for r in ins.res:
                if r is not None:
                    env[r] = UNDEF              # the op reports the undefined operand
            return
        slot, parity, item = vals
        res = ins.res
        env[res[0]] = (base + slot) % depth
        if parity is not None:
            local = parity if which == "full" else 1 - parity
            phase = (base + slot + depth * local) // depth % 2
            env[res[1]] = phase if which == "full" else 1 - phase
        if item is not None:
            env[res[2]] = base + item
