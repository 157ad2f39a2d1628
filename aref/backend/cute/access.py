"""Memory access of a role: ring positions, TMA loads and their ordinary-load fallback, and stores.

`AccessEmitter` is the half of `RoleEmitter` that moves tiles between global and shared memory:

  * ring slots and parities, shifted by each ring's position at the tile start in persistent kernels (a
    running sum when trip counts depend on the tile);
  * TMA loads, one elected thread arming the slot's transaction bytes; a box TMA cannot describe
    (`aref.resources.memory.tma_problem`) is loaded by the producer warp itself with bounds-checked loads
    (zeros outside the tensor, as TMA fills) before the arrive that publishes the slot;
  * stores: a staging tile in shared memory and one elected TMA store (clipped at the tensor's edge by the
    hardware), or, where TMA cannot describe the box, stores from registers with a bounds check per element
    (atomic adds for `reduce="add"`); row vectors are staged one value per row.
"""
from __future__ import annotations

from aref.backend.cute import cluster
from aref.backend.cute.analysis import CUTLASS_DTYPE
from aref.backend.cute.values import Scalar, coordinate, paren, strip_parens
from aref.ir import Op, OpKind, Value
from aref.resources.memory import swizzled


class AccessEmitter:
    # ------------------------------------------------------------------------------------------- barriers
    # persistent kernels: a CTA's n-th tile continues every ring where the previous tile left it, so the
    # IR's per-tile slot / parity (functions of the item modulo 2·depth) are shifted by `<ring>_base`,
    # the ring position (n · items per tile) mod 2·depth at the start of the tile.
    # With a trip count that depends on the tile, the position is a running sum, advanced at the end of each
    # tile by the items the tile used (`base_updates`).
    def ring_base(self, channel: str) -> str:
        cp = self.plan.channel(channel)
        name = f"{cp.name}_base"
        if name not in self.bases and name not in self.base_inits:
            per_tile = self.plan.items_per_tile[channel]
            if isinstance(per_tile, int):
                self.bases[name] = (f"{name} = (tile_count * {per_tile}) % {2 * cp.ch.depth}  "
                                    f"# ring position at this tile")
            else:
                self.base_inits[name] = f"{name} = 0  # ring position at this CTA's next tile (run-time trip counts)"
                self.base_channels[name] = channel
        return name

    def advance_bases(self) -> list[str]:
        """The end-of-tile updates of run-time ring positions: + per-iteration items × this tile's trip count."""
        from aref.backend.cute.analysis import trip_value
        out = []
        n = trip_value(self.gp)
        for name, channel in self.base_channels.items():
            items = self.plan.items_per_tile[channel]
            depth = self.plan.channel(channel).ch.depth
            trip = strip_parens(self.scalar(n).expr)
            count = f"{items.per_iter} * ({trip})" if items.per_iter != 1 else paren(trip)
            fixed = f" + {items.fixed}" if items.fixed else ""
            out.append(f"{name} = ({name} + {count}{fixed}) % {2 * depth}")
        return out

    def slot_of(self, channel: str, slot: Scalar) -> Scalar:
        if not self.plan.persistent:
            return slot
        depth = self.plan.channel(channel).ch.depth
        return Scalar(f"({self.ring_base(channel)} + {paren(slot.expr)}) % {depth}")

    def bar(self, v_bar: Value, slot: Value, which: str, channel: str) -> str:
        cp = self.plan.channel(channel)
        ptr = self.arg(f"{cp.name}_{which}")
        s = self.slot_of(channel, self.scalar(slot))
        return ptr if s.static and s.value == 0 else f"{ptr} + {strip_parens(s.expr) if s.static else paren(s.expr)}"

    def op_mbarrier_wait(self, op: Op) -> None:
        a = op.attrs
        parity = self.scalar(op.operands[2])
        if self.plan.persistent:
            depth = self.plan.channel(a.channel).ch.depth
            slot = self.scalar(op.operands[1])
            if slot.static and parity.static:
                pos = f"{self.ring_base(a.channel)} + {slot.value + depth * (parity.value if a.which == 'full' else 1 - parity.value)}"
            else:
                local = parity.expr if a.which == "full" else f"(1 - {paren(parity.expr)})"
                pos = f"{self.ring_base(a.channel)} + {paren(slot.expr)} + {depth} * {local}"
            parity = Scalar(f"(({pos}) // {depth}) % 2" if a.which == "full" else f"1 - ((({pos}) // {depth}) % 2)")
        self.out(f"cute.arch.mbarrier_wait({self.bar(op.operands[0], op.operands[1], a.which, a.channel)}, "
                 f"{strip_parens(parity.expr)})")

    op_mbar_wait = op_mbarrier_wait

    def op_mbar_expect_tx(self, op: Op) -> None:
        ptr = self.bar(op.operands[0], op.operands[1], "full", op.attrs.channel)
        tx = op.attrs.bytes
        for load in self.slot_loads(op):
            if self.is_copy(load):
                # TMA cannot describe this box: the warp loads it itself, before the arrive that publishes it
                self.copy_load(load)
                tx -= self.plan.channel(load.attrs.channel).buffers[load.attrs.index].tile.nbytes
        with self.out.block("with cute.arch.elect_one():"):
            if tx:
                self.out(f"cute.arch.mbarrier_arrive_and_expect_tx({ptr}, {tx})")
            else:
                self.out(f"cute.arch.mbarrier_arrive({ptr})  # no TMA bytes: every payload tile is loaded already")

    def slot_loads(self, op: Op) -> list[Op]:
        """The TMA loads that fill the slot `op` (an arrive.expect_tx) arms: they follow it in its block."""
        ops = self.block_ops
        i = next(k for k, o in enumerate(ops) if o is op)
        out = []
        for o in ops[i + 1:]:
            if o.kind is not OpKind.TMA_LOAD or o.attrs.channel != op.attrs.channel:
                break
            out.append(o)
        return out

    def is_copy(self, op: Op) -> bool:
        return (self.plan.tensor_of(op.operands[0]).name, tuple(op.attrs.tile_shape)) in self.plan.copies

    # ----------------------------------------------------------------------------------------------- TMA
    def op_tma_load(self, op: Op) -> None:
        a = op.attrs
        if self.is_copy(op):
            self.out("# (loaded with ordinary loads above, before the arrive)")
            return
        t = self.plan.tensor_of(op.operands[0])
        rank = len(t.shape)
        coords = [self.scalar(v) for v in op.operands[1:1 + rank]]
        slot = self.scalar(op.operands[2 + rank])
        buf = self.plan.channel(a.channel).buffers[a.index]
        tma = cluster.atom_of(self.plan, op, self.plan.tma(t.name, a.tile_shape, buf.name))
        s_part, g_part = self.tma_partition(tma, buf.name, len(a.tile_shape), rank)
        slot = self.slot_of(a.channel, slot)
        lead = rank - len(a.tile_shape)
        idx = ", ".join(coordinate(c) for c in coords[lead:] + coords[:lead])
        bar = self.bar(op.operands[-2], op.operands[2 + rank], "full", a.channel)
        self.out(f"cute.copy({self.arg(tma.name)}, {g_part}[None, {idx}], {s_part}[None, {strip_parens(slot.expr)}], "
                 f"tma_bar_ptr={bar}{self.multicast(op)})")

    def multicast(self, op: Op) -> str:
        """The copy's multicast mask when its tile is shared by the cluster's CTAs (`cluster`)."""
        cp = self.plan.cluster
        return f", mcast_mask=cutlass.Int16({cluster.MASK})" if cp is not None and id(op) in cp.shared else ""

    def box_args(self, t, coords: list[Scalar], tiled: int) -> tuple[str, str, str]:
        """(the tensor seen at its leading coordinates, the box index, whether those coordinates are in range)
        for an ordinary load or store of a box of tensor plan `t`."""
        rank = len(t.shape)
        lead = rank - tiled
        tensor = self.arg(t.name)
        if lead:
            idx = ", ".join(["None"] * tiled + [coordinate(c) for c in coords[:lead]])
            tensor = f"{tensor}[{idx}]"
        tile = "(" + ", ".join(coordinate(c) for c in coords[lead:]) + ("," if tiled == 1 else "") + ")"
        checks = [f"({coordinate(c)} >= 0) & ({coordinate(c)} < {t.shape[d]})" for d, c in enumerate(coords[:lead])
                  if not (c.static and 0 <= c.value < t.shape[d])]
        return tensor, tile, " & ".join(checks) if checks else "True"

    def copy_load(self, op: Op) -> None:
        a = op.attrs
        t = self.plan.tensor_of(op.operands[0])
        rank = len(t.shape)
        coords = [self.scalar(v) for v in op.operands[1:1 + rank]]
        buf = self.plan.channel(a.channel).buffers[a.index]
        slot = strip_parens(self.slot_of(a.channel, self.scalar(op.operands[2 + rank])).expr)
        why = self.plan.copies[(t.name, tuple(a.tile_shape))]
        lane = self.local(("lane",), "lane", "cute.arch.lane_idx()")
        dst = f"{self.arg(buf.name)}[{'None, None' if len(buf.tile.shape) == 2 else 'None'}, {slot}]"
        box = tuple(a.tile_shape)
        self.out(f"# {t.name} box {box}: {why}")
        if t.empty:
            self.out(f"aref.zero_box({dst}, {box}, {lane})  # every element is out of bounds")
            return
        src, tile, valid = self.box_args(t, coords, len(a.tile_shape))
        self.out(f"aref.load_box({src}, {dst}, {box}, {tile}, {valid}, {lane})")

    def tma_partition(self, tma, smem: str, tiled: int, rank: int, staging=None) -> tuple[str, str]:
        key = ("tma", tma.name, smem)
        if key not in self.frags:
            short = f"{tma.tensor}_staged" if tma.store else (smem[2:] if smem.startswith("s_") else smem)
            s_name, g_name = self.names(f"{short}_tma"), self.names(f"{tma.tensor}_tiles")
            nones = ", ".join(["None"] * rank) + ("," if rank == 1 else "")
            box = ", ".join(str(b) for b in tma.box) + ("," if len(tma.box) == 1 else "")
            s_src = staging or self.arg(smem)
            self.setup(f"{s_name}, {g_name} = cpasync.tma_partition(")
            cta = cluster.partition_coord(self.plan, tma.name)      # a multicast atom: this CTA's half
            self.setup(f"    {self.arg(tma.name)}, {cta}, cute.group_modes({s_src}, 0, {tiled}),")
            self.setup(f"    cute.group_modes(cute.local_tile({self.arg(tma.name + '_gmem')}, ({box}), ({nones})), "
                       f"0, {tiled}),")
            self.setup(")")
            self.frags[key] = (s_name, g_name)
        return self.frags[key]

    # ----------------------------------------------------------------------------------------- epilogue
    def op_store(self, op: Op) -> None:
        t = self.plan.tensor_of(op.operands[0])
        if id(op) in self.plan.direct:
            self.direct_store(op, t)
            return
        stage = self.plan.staging[id(op)]
        value = op.operands[-1]
        coords = [self.scalar(c) for c in op.operands[1:-1]]
        rank, tiled = len(t.shape), len(op.attrs.tile_shape)
        tma = self.plan.tma(t.name, op.attrs.tile_shape, stage.name, store=True, reduce=op.attrs.reduce)
        s_tensor = self.staging_tensor(stage)
        s_part, g_part = self.tma_partition(tma, stage.name, tiled, rank, staging=s_tensor)
        host = self.plan.host_of(stage)
        if tiled == 1:
            vec = self.row_vector(value)
        else:
            vec = None
            buf = self.materialize(value)
        if {stage.name, host and host.name} & self.pending_store or self.in_loop or self.plan.persistent:
            self.out("# the previous TMA store from this staging tile (an earlier one's) must have read it")
            self.out("aref.staging_free(warp_in_group)")
            self.out(f"cute.arch.barrier(barrier_id={self.g.group_barrier}, number_of_threads=aref.WARP_GROUP_THREADS)")
        if vec is not None:
            rows = value.type.shape[0]
            cols = min(self.plan.layout_n)
            self.out(f"aref.stage_rows({self.arg(self.layout_mma(cols))}, {vec}, {s_tensor}, {rows}, {cols}, "
                     f"group_tidx, barrier_id={self.g.group_barrier})")
        else:
            mma = self.arg(self.layout_mma(value.type.shape[1]))
            fn = "store_tile" if value.type.dtype.bits == 16 else "store_tile_f32"
            self.out(f"aref.{fn}({mma}, {buf.name}, {s_tensor}, group_tidx, barrier_id={self.g.group_barrier})")
        lead = rank - tiled
        idx = ", ".join(coordinate(c) for c in coords[lead:] + coords[:lead])
        self.out(f"aref.issue_store({self.arg(tma.name)}, {s_part}, {g_part}[None, {idx}], warp_in_group)")
        self.pending_store.add(stage.name)
        if host is not None:
            self.pending_store.add(host.name)

    def direct_store(self, op: Op, t) -> None:
        """Masked stores from registers where TMA cannot describe the box (see the plan's `direct`)."""
        value = op.operands[-1]
        coords = [self.scalar(c) for c in op.operands[1:-1]]
        tiled = len(op.attrs.tile_shape)
        dst, tile, valid = self.box_args(t, coords, tiled)
        reduce = op.attrs.reduce == "add"
        if t.empty:
            self.out(f"# {t.name} has no elements: the store writes nothing")
            return
        self.out(f"# {t.name} box {tuple(op.attrs.tile_shape)}: {self.plan.direct[id(op)]}; masked stores from "
                 f"registers{' (atomic adds)' if reduce else ''}")
        if tiled == 2 and value.type.shape[1] == 1:       # a (R, 1) column, held as a row vector
            self.out(f"aref.store_column({self.row_vector(value)}, {dst}, {value.type.shape[0]}, {tile}, {valid}, "
                     f"group_tidx, reduce={reduce})")
            return
        if tiled == 1:
            vec = self.row_vector(value)
            cols = min(self.plan.layout_n)
            self.out(f"aref.store_rows({self.arg(self.layout_mma(cols))}, {vec}, {dst}, {value.type.shape[0]}, {cols}, "
                     f"{tile}, {valid}, group_tidx, reduce={reduce})")
            return
        buf = self.materialize(value)
        self.out(f"aref.store_box({self.arg(self.layout_mma(value.type.shape[1]))}, {buf.name}, {dst}, "
                 f"{tuple(value.type.shape)}, {tile}, {valid}, group_tidx, reduce={reduce})")

    def row_vector(self, v: Value) -> str:
        """A register row vector holding `v` (one value per row of this thread), computing it if needed."""
        return self.materialize(v).name               # a slot's row vector: read from shared memory into registers

    def staging_tensor(self, stage) -> str:
        host = self.plan.host_of(stage)
        if host is None:
            return self.arg(stage.name)
        offset = stage.item.offset // host.tile.dtype.nbytes
        recast = "recast_tile" if swizzled(stage.tile) else "recast_vector"     # swizzled or plain layout
        return self.local(("stage", stage.name), "staging",
                          f"aref.{recast}({self.arg(host.name)}, {self.arg(stage.layout)}, "
                          f"cutlass.{CUTLASS_DTYPE[stage.tile.dtype]}" + (f", {offset})" if offset else ")"))
