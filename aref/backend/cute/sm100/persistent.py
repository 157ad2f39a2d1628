"""Persistent launches of the Blackwell templates: the part of a role that differs when a CTA walks tiles.

The tile loop and the ring positions that continue across a CTA's tiles are the Hopper templates' (
`aref.backend.cute.module._function_lines`, `AccessEmitter.ring_base`). What tensor memory adds:

  * the MMA warp writes an accumulator before the wait that acquires its ring slot (the slot is published
    after the loop): one tile's MMAs would overwrite what the previous tile's epilogue still reads, so the
    group acquires those rings at each tile start (`acquire_accumulators`);
  * an accumulator published once per tile has two stages where its columns allow (`plan.doubled`): its
    tensor is the stage of the tile's ring slot (`mma_target`);
  * tensor memory serves every tile: it is freed once, after the last tile, and the syncs that guard that
    release (the MMA warp's wait for its last MMAs, the release barrier) move there too (`after_last_tile`).

`PersistentRole` is a mixin of `Sm100RoleEmitter`, placed before `RoleEmitter` in its bases.
"""
from __future__ import annotations

from aref.backend.cute.errors import BackendError
from aref.backend.cute.values import Scalar
from aref.ir import Op, OpKind


class PersistentRole:
    """The persistent-launch hooks of a Blackwell role (see the module docstring); inert when not persistent."""

    def emit(self):
        self.acquired = not (self.plan.persistent and self.g.issues_mma)
        setup, out = super().emit()
        if self.after_tiles.lines:
            self.final("# after the last tile")
            self.final.extend(self.after_tiles)
        return setup, out

    def after_last_tile(self, op: Op) -> bool:
        """Persistent: whether `op` guards the release of tensor memory — the MMA warp's wait for its own last
        MMAs and the named barrier at which every group is done with tensor memory — and so runs once, after
        the CTA's last tile (run per tile, it would hold the MMAs of a tile until the previous tile's epilogue
        has stored it)."""
        if not self.plan.persistent or self.plan.tmem is None:
            return False
        if op.kind in (OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE):
            return op.attrs.id == self.plan.tmem.dealloc_barrier
        return op.kind is OpKind.MMA_WAIT and self.region == "post" and self.gp.group.warps == 1

    def emit_after_tiles(self, op: Op, handler) -> None:
        self.out("# (once, after the last tile)")
        out, self.out = self.out, self.after_tiles
        try:
            handler(op)
        finally:
            self.out = out

    def emit_op(self, op: Op) -> None:
        if not self.acquired and (self.region != "pre" or op.kind is OpKind.MMA_ASYNC):
            self.acquire_accumulators()
        super().emit_op(op)

    def emit_loop(self) -> None:
        if not self.acquired:
            self.acquire_accumulators()
        super().emit_loop()

    def acquire_accumulators(self) -> None:
        """Persistent: the MMAs of a CTA's next tile write the tensor memory that the group publishes in place
        after the loop, which the readers of the previous tile may still hold. So at each tile start the group
        waits for those rings' `empty` barriers (the same slot and phase as the waits after the loop, which
        then return at once): MMAs into tensor memory acquire their columns before they write them."""
        self.acquired = True
        prod = {id(r): op for op in self.gp.all_ops() for r in op.results}
        for region, block in self.gp.regions():
            if region not in ("epilogue", "post"):
                continue
            for op in block.ops:
                if not (op.kind is OpKind.MBAR_WAIT and op.attrs.which == "empty"
                        and not self.plan.channel(op.attrs.channel).buffers):
                    continue
                for v in op.operands[1:3]:
                    c = prod.get(id(v))
                    if c is None or c.kind is not OpKind.CONST or op.pred is not None:
                        raise BackendError(f"a persistent kernel whose tensor-memory ring '{op.attrs.channel}' is "
                                           f"acquired at a slot known only after the loop; the Blackwell "
                                           f"templates acquire it at the tile start", op.loc,
                                           hint="compile without --persistent")
                    self.env[id(v)] = Scalar.const(c.attrs.value)
                self.out(f"# the tile's MMAs write {op.attrs.channel}'s tensor memory: its readers of the "
                         f"previous tile must have released it")
                self.op_mbarrier_wait(op)

    def mma_target(self, key, name: str, buffer: str, tiled_mma: str, m: int, n: int) -> str:
        """The accumulator tensor of `tiled_mma` (m×n) over `buffer`'s columns: a kernel-scope constant, or,
        for an accumulator with two persistent stages (`plan.doubled`), the stage of this tile's ring slot."""
        b = self.tbuf(buffer)
        layout = f"{tiled_mma}.make_fragment_C({tiled_mma}.partition_shape_C(({m}, {n}))).layout"
        ring = self.plan.doubled.get(buffer)
        if ring is None:
            return self.local(key, name, f"cute.make_tensor({self.tmem()} + {b.col}, {layout})")
        stage = self.names(name)
        self.out(f"{stage} = cute.make_tensor({self.tmem()} + {b.col} + {b.cols // 2} * "
                 f"({self.ring_base(ring)} % 2), {layout})  # this tile's accumulator stage")
        return stage

    def op_tmem_dealloc(self, op: Op) -> None:
        line = f"cute.arch.dealloc_tmem({self.tmem()}, {self.plan.tmem.columns})"
        if self.plan.persistent:               # the columns serve every tile of the CTA
            self.out("# (tensor memory is freed after the last tile)")
            self.after_tiles(line)
        else:
            self.out(line)

    def op_named_bar_sync(self, op: Op) -> None:
        if self.after_last_tile(op):
            self.emit_after_tiles(op, super().op_named_bar_sync)
        else:
            super().op_named_bar_sync(op)

    def op_named_bar_arrive(self, op: Op) -> None:
        if self.after_last_tile(op):
            self.emit_after_tiles(op, super().op_named_bar_arrive)
        else:
            super().op_named_bar_arrive(op)

    def op_mma_wait(self, op: Op) -> None:
        if self.after_last_tile(op):
            self.emit_after_tiles(op, self.mma_wait)
        else:
            self.mma_wait(op)
