"""Register math that crosses threads: reductions along either axis, and moving a value between layouts.

In the accumulator layout (see `aref.resources.layout`) a row lives in the 4 threads of a quad and a
column in 8 lanes of each of the group's 4 warps. So:

  * along a row (axis 1 of a 2-D tile, a column vector to a scalar): a loop over this thread's columns,
    then butterfly shuffles across lanes 1 and 2 apart;
  * along a column (axis 0 of a 2-D tile, a row vector to a scalar): a loop over this thread's rows,
    shuffles across lanes 4, 8 and 16 apart (the other rows of the warp), then the 4 warps' partials meet in
    the group's shared exchange tile and every thread combines them in the same order;
  * a vector read in the other orientation, or a transposed register tile, is written to the exchange tile
    by coordinate and read back in the layout its user needs.

Every exchange is `group barrier; write; group barrier; read` with the warp group's own named barrier, so
reuse of the exchange tile by the next exchange never races with the readers of the previous one. The
identity and combination of each reduction come from the op's registry entry (`ReduceSpec`).
"""
from __future__ import annotations

from aref import ops
from aref.backend.cute.analysis import BackendError, CUTLASS_DTYPE
from aref.resources.layout import ACC, COL, ROW, SCALAR
from aref.backend.cute.render import COMPUTE_TYPE, NARROW, Ctx, Index, Nest, root_ctx
from aref.backend.cute.values import Buffer, Reg, strip_parens
from aref.ir import DType, Op, Value

ROW_LANES = (1, 2)           # the lanes holding the other columns of a row
COL_LANES = (4, 8, 16)       # the lanes holding the other rows of a column, within a warp


class CrossThread:
    """Mixin of `MathEmitter` (needs its buffers, renderer, output and the group's exchange tile)."""

    # --------------------------------------------------------------------------------------- exchange
    def exchange(self) -> str:
        """The group's shared exchange tile (planned by `analysis` from `layout.exchange_elements`)."""
        buf = self.plan.scratch.get((self.g.index, ("exchange",)))
        if buf is None:
            raise BackendError("internal: register math needs the group's exchange tile, which the plan did "
                               "not reserve", self.loc)
        return self.arg(buf.name)

    def group_sync(self, why: str) -> None:
        self.out(f"cute.arch.barrier(barrier_id={self.g.group_barrier}, number_of_threads=aref.WARP_GROUP_THREADS)"
                 f"  # {why}")

    def xvector(self, n: int, dtype: DType) -> str:
        cls = ops.compute_class(dtype)
        return self.local(("xvec", n, cls), f"xchg_{cls}", f"aref.exchange_vector({self.exchange()}, {n}, "
                          f"{COMPUTE_TYPE[cls] if cls != 'bool' else 'cutlass.Int32'})")

    def in_layout(self, v: Value, buf: Buffer, layout: str) -> Buffer:
        """`buf` (holding `v`) as read in `layout`: itself, or a copy moved through the exchange tile."""
        if buf.layout == layout or layout == SCALAR and buf.layout == SCALAR:
            return buf
        if {buf.layout, layout} != {ROW, COL}:
            raise BackendError(f"internal: a {buf.layout} register value read as {layout}", self.loc)
        key = (buf.name, id(v), layout)
        alt = self.converted.get(key)
        if alt is not None and self.holder.get(alt.name) is v:
            return alt
        n = buf.shape[0]
        new = self.new_buffer(v, hint=f"{buf.name}_{layout}", layout=layout)
        xv = self.xvector(n, buf.dtype)
        src = "aref.row_index(group_tidx, i_)" if buf.layout == ROW else "aref.col_index(group_tidx, i_)"
        dst = "aref.col_index(group_tidx, i_)" if layout == COL else "aref.row_index(group_tidx, i_)"
        self.out(f"# {buf.name} is a vector along the {'rows' if buf.layout == ROW else 'columns'}; read it along "
                 f"the {'columns' if layout == COL else 'rows'} through the exchange tile")
        self.group_sync("earlier readers of the exchange tile are done")
        with self.out.block(f"for i_ in cutlass.range_constexpr({buf.extents[0]}):"):
            self.out(f"{xv}[{src}] = {buf.name}[i_]")
        self.group_sync("every value is written")
        with self.out.block(f"for i_ in cutlass.range_constexpr({new.extents[0]}):"):
            self.out(f"{new.name}[i_] = {xv}[{dst}]")
        self.converted[key] = new
        return new

    def transpose_registers(self, op: Op) -> None:
        """A transposed register tile for register math: written by coordinate, read back transposed."""
        src_v = op.operands[0]
        t = src_v.type
        if t.dtype is DType.bool_:
            raise BackendError("a transposed boolean register tile; compare after transposing the operands", op.loc)
        src = self.materialize(src_v)
        self.check_not_inflight(src)
        rows, cols = t.shape
        dst = self.new_buffer(op.result)
        dt = f"cutlass.{CUTLASS_DTYPE[t.dtype]}"
        x = self.exchange()
        self.out(f"# {src.name}ᵀ: through the exchange tile ({rows}×{cols} written, {cols}×{rows} read)")
        self.group_sync("earlier readers of the exchange tile are done")
        self.out(f"cute.autovec_copy({src.name}, {self.thr(self.layout_mma(cols))}.partition_C("
                 f"aref.exchange_view({x}, {rows}, {cols}, False, {dt})))")
        self.group_sync("the whole tile is written")
        view = self.names(f"{src.name}_T_view")
        self.out(f"{view} = aref.rows_view({self.thr(self.layout_mma(rows))}.partition_C("
                 f"aref.exchange_view({x}, {rows}, {cols}, True, {dt})))")
        with self.out.block(f"for r in cutlass.range_constexpr({dst.rows}):"):
            with self.out.block(f"for c in cutlass.range_constexpr({dst.cols}):"):
                self.out(f"{dst.rc}[r, c] = {view}[r, c]")
        self.env[id(op.result)] = Reg(dst)

    # -------------------------------------------------------------------------------------- reductions
    def reduce(self, op: Op) -> None:
        src, res = op.operands[0], op.result
        s_layout, r_layout = self.layout_of(src), self.layout_of(res)
        along_cols = s_layout == ACC and op.attrs.axis == 1 or s_layout == COL and r_layout == SCALAR
        along_rows = s_layout == ACC and op.attrs.axis == 0 or s_layout == ROW and r_layout == SCALAR
        cls = ops.compute_class(src.type.dtype)
        try:
            e = ops.cute_emission(ops.entry(op), self.role_key(), s_layout, cls)
        except ops.NoEmission as err:
            raise BackendError(str(err), op.loc) from None
        spec = e.reduce
        buf = self.new_buffer(res, hint=self.hint(res) or f"{r_layout}_{op.attrs.fn}", layout=r_layout)

        def combine(a: str, b: str) -> str:
            return strip_parens(spec.combine.format(a=a, b=b))

        def store(target: str, x: str) -> str:
            return f"{target} = {self.convert_to(x, res.type.dtype)}"

        if not along_rows and not along_cols:               # a unit axis: the value itself
            self.compute_into(buf, res, src)
            self.env[id(res)] = Reg(buf)
            return
        if s_layout == ACC:
            outer, inner = (("r", buf.rows), ("c", src.type.shape[1] // 4)) if along_cols else \
                (("c", buf.cols), ("r", src.type.shape[0] // 32))
            nest = Nest([outer, inner])
            ctx = Ctx(Index("r"), Index("c"))
        else:
            nest = Nest([("r" if along_rows else "c", src.type.shape[0] // (32 if along_rows else 4))])
            ctx = root_ctx(s_layout)
        expr = strip_parens(self.render(src, ctx, nest, top=False))
        keep = len(nest.loops) - 1                          # the depth holding one reduced value
        nest.levels[keep].append(f"x = {spec.identity}")
        nest.levels[-1].append(f"x = {combine('x', expr)}")
        lanes = ROW_LANES if along_cols else COL_LANES
        for lane in lanes:
            nest.after[keep].append(f"x = {combine('x', f'cute.arch.shuffle_sync_bfly(x, offset={lane})')}")
        target = buf.at("r", None) if r_layout == ROW else buf.at(None, "c") if r_layout == COL else buf.at(None, None)
        nest.after[keep].append(store(target, "x") + ("  # the row's other columns live in the quad"
                                                      if along_cols and s_layout == ACC else ""))
        self.emit_nest(nest)
        if along_rows:
            self.combine_warps(buf, res, combine)
        self.env[id(res)] = Reg(buf)

    def combine_warps(self, buf: Buffer, res: Value, combine) -> None:
        """Each warp holds a partial over its rows: the 4 partials meet in the exchange tile."""
        dtype = DType.float32 if buf.dtype.is_float else buf.dtype
        if buf.layout == COL:
            n = buf.shape[-1]
            xv = self.xvector(4 * n, dtype)
            self.out("# the 4 warps' partials of each column meet in the exchange tile")
            self.group_sync("earlier readers of the exchange tile are done")
            with self.out.block("if group_tidx % 32 < 4:"):
                with self.out.block(f"for c in cutlass.range_constexpr({buf.cols}):"):
                    self.out(f"{xv}[(group_tidx // 32) * {n} + aref.col_index(group_tidx, c)] = {buf.at(None, 'c')}")
            self.group_sync("every warp's partial is written")
            with self.out.block(f"for c in cutlass.range_constexpr({buf.cols}):"):
                col = self.names("col")
                self.out(f"{col} = aref.col_index(group_tidx, c)")
                acc = f"{xv}[{col}]"
                for w in range(1, 4):
                    acc = combine(acc, f"{xv}[{w * n} + {col}]")
                self.out(f"{buf.at(None, 'c')} = {self.convert_to(acc, res.type.dtype)}")
        else:
            self.out("# the 4 warps' partials meet in the exchange tile")
            self.meet_warp_partials(buf.at(None, None), "group_tidx % 32 == 0", "group_tidx // 32",
                                    buf.at(None, None), res, combine)

    def meet_warp_partials(self, value: str, writer: str, warp: str, target: str, res: Value, combine) -> None:
        """One value per warp (`value`, written where `writer` holds, at index `warp`) meets the other three
        warps' in the group's exchange tile; every thread combines the four in the same order into `target`."""
        xv = self.xvector(4, DType.float32 if res.type.dtype.is_float else res.type.dtype)
        self.group_sync("earlier readers of the exchange tile are done")
        with self.out.block(f"if {writer}:"):
            self.out(f"{xv}[{warp}] = {value}")
        self.group_sync("every warp's partial is written")
        acc = f"{xv}[0]"
        for w in range(1, 4):
            acc = combine(acc, f"{xv}[{w}]")
        self.out(f"{target} = {self.convert_to(acc, res.type.dtype)}")

    def convert_to(self, text: str, dtype: DType) -> str:
        """A computed (float32 / Int32 / Boolean) value as stored in a register tensor of `dtype`."""
        if dtype in NARROW:
            ctor = f"cutlass.{CUTLASS_DTYPE[dtype]}"
            text = strip_parens(text)
            if text.startswith("aref.rounded(") and text.endswith(f", {ctor})"):
                text = text[len("aref.rounded("):-len(f", {ctor})")]      # the store rounds it
            return f"{ctor}({strip_parens(text)})"
        return strip_parens(text)

    def emit_nest(self, nest: Nest, depth: int = 0) -> None:
        """Write a loop nest: each depth's statements, the next loop, then the statements after it."""
        for line in nest.levels[depth]:
            self.out(line)
        if depth < len(nest.loops):
            var, n = nest.loops[depth]
            with self.out.block(f"for {var} in cutlass.range_constexpr({n}):"):
                self.emit_nest(nest, depth + 1)
        for line in nest.after[depth]:
            self.out(line)

    def nest_for(self, layout: str, t) -> Nest:
        """The loop nest over this thread's elements of a `t` tile held in `layout`."""
        if layout == SCALAR:
            return Nest([])
        rows, cols = ("r", t.shape[0] // 32), ("c", t.shape[-1] // 4)
        return Nest([rows, cols] if layout == ACC else [rows] if layout == ROW else [cols])

    def compute_into(self, buf: Buffer, v: Value, src: Value | None = None) -> None:
        """Write value `src` (default `v`) element by element into `buf` (which holds `v` afterwards)."""
        src = src if src is not None else v
        nest = self.nest_for(buf.layout, v.type)
        expr = self.render(src, root_ctx(buf.layout), nest, top=True)
        nest.levels[-1].append(f"{buf.at('r', 'c')} = {self.convert_to(expr, buf.dtype)}")
        self.emit_nest(nest)
