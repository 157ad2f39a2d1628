"""tcgen05's row layout for a Blackwell role's register math (the half of `Sm100RoleEmitter` that places
register tiles).

A warp group holds an (R, C) register tile the way tcgen05.ld delivers it (`sm100.support`): R = 128 gives
each thread one whole row, R = 64 half a row. `RowLayout` gives `MathEmitter`'s layout-independent machinery
(liveness, fusion, the registry's element templates and reduce specs) that layout: register index r is the
thread's one row (a loop of 1), c the columns of that row it holds; a row vector is one value per thread, a
vector along the columns the elements of the thread's row (or, read from its slot, shared memory indexed by
the column of each element); row reductions are thread-local loops.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from aref import ops
from aref.backend.cute.analysis import CUTLASS_DTYPE, BackendError, ident
from aref.backend.cute.render import NARROW, Ctx, Index, Nest
from aref.backend.cute.values import Buffer, Reg, SmemTile, strip_parens
from aref.ir import DType, Op, OpKind, Space, TileType, Value
from aref.resources.layout import ACC, COL, ROW, SCALAR, extent

ROWS = (64, 128)


def per_thread_cols(rows: int, cols: int) -> int:
    """Columns of its row one thread holds: all of them at 128 rows, half at 64 (threads t and t ^ 16)."""
    return cols if rows == 128 else cols // 2


@dataclass
class RowBuffer(Buffer):
    """A register tile in the row layout: this thread's elements of its row, as a (1, n) tensor (`acc`), or
    one value for its row (`row`), or a vector along the columns held as the elements of the thread's row of
    the group's `tile_rows`-row tiles (`col`: element c is the vector's entry at the column of element c), or
    one CTA-uniform value (`scalar`). Register index r is always 0."""

    tile_rows: int = 128

    @property
    def rows(self) -> int:
        return 1

    @property
    def cols(self) -> int:
        if self.layout == COL:                  # rank 1 (C,) or a (1, C) row: C entries
            return per_thread_cols(self.tile_rows, self.shape[-1])
        return per_thread_cols(*self.shape)

    @property
    def elements(self) -> int:
        return self.cols if self.layout in (ACC, COL) else 1


class RowLayout:
    """Register storage and element indexing in tcgen05's row layout (a mixin of the Blackwell role emitter)."""

    def my_row(self, rows: int) -> str:
        return self.local(("row", rows), f"row{rows}", f"sm100.coords({rows}, 32, tidx)[0][0]")

    def check_rows(self, t: TileType) -> None:
        if t.shape[0] not in ROWS:
            raise BackendError(f"a register tile {t} in warp group '{self.gp.group.name}'; the Blackwell templates "
                               f"hold 64- or 128-row tiles per warp group (tcgen05's row layout)", self.loc,
                               hint="split the rows into 64- or 128-row sub-tiles")

    # ------------------------------------------------------------------------------ register storage
    # The layout-independent part of register math (liveness, fusion, the registry's element templates
    # and reduce specs) is `MathEmitter`'s; these hooks give it tcgen05's row layout: register index r is
    # the thread's one row (a loop of 1), c the columns of that row it holds.
    def col_rows(self, t: TileType) -> int:
        """Rows of the tiles a vector along the columns is combined with: the group's 2-D register tiles, whose
        row layout (which columns a thread holds) the vector takes."""
        if self._col_rows is None:
            self._col_rows = sorted({v.type.shape[0] for op in self.gp.all_ops() for v in op.results
                                     if isinstance(v.type, TileType) and len(v.type.shape) == 2
                                     and v.type.space is not Space.SMEM and v.type.shape[0] > 1})
            # a group without 2-D register tiles holds its column vectors whole in every thread (the 128-row
            # layout, the resource model's count)
            self._col_rows = self._col_rows or [128]
        if len(self._col_rows) != 1 or self._col_rows[0] not in ROWS:
            raise BackendError(f"a vector along the columns of a tile ({t}) in warp group '{self.gp.group.name}' "
                               f"beside register tiles of {self._col_rows} rows; the Blackwell templates hold "
                               f"it in the row layout of the group's 64- or 128-row tiles, one row count per group",
                               self.loc, hint="use one tile height (64 or 128 rows) for the tiles the vector is "
                                              "broadcast over, or compile for sm_90a")
        return self._col_rows[0]

    def check_fits(self, t: TileType, layout: str) -> None:
        if layout == COL:
            self.col_rows(t)
        if layout in (ACC, ROW):
            self.check_rows(t)

    def alloc_buffer(self, name: str, t: TileType, layout: str) -> Buffer:
        dt = f"cutlass.{CUTLASS_DTYPE.get(t.dtype, 'Boolean')}"
        buf = RowBuffer(name, tuple(t.shape), t.dtype, "", layout=layout)
        if layout == ACC:
            self.setup(f"{name} = sm100.row_tile({t.shape[0]}, {t.shape[1]}, {dt})")
            buf.rc = name
        elif layout == COL:
            buf.tile_rows = self.col_rows(t)
            self.setup(f"{name} = cute.make_rmem_tensor({buf.cols}, {dt})")
        else:
            self.setup(f"{name} = cute.make_rmem_tensor(1, {dt})")
        return buf

    def nest_for(self, layout: str, t) -> Nest:
        # the rows of the tile whose elements the nest visits
        self.nest_rows = t.shape[0] if layout == ACC else self.col_rows(t) if layout == COL else None
        if layout == SCALAR:
            return Nest([])
        if layout == ROW:
            return Nest([("r", 1)])
        self.check_fits(t, layout)
        if layout == COL:
            return Nest([("c", per_thread_cols(self.nest_rows, extent(t, COL)))])
        return Nest([("r", 1), ("c", per_thread_cols(*t.shape))])

    def slice_ctx(self, op: Op, ctx: Ctx) -> Ctx:
        """A column slice of a 128-row register tile is a shift of the column index (the thread holds its
        whole row); rows are threads, and a 64-row tile's columns are split between two threads."""
        a, src = op.attrs, op.operands[0].type
        if len(src.shape) != 2 or a.axis != 1 or src.shape[0] != 128:
            raise BackendError(f"a {'row' if a.axis == 0 or len(src.shape) == 1 else 'column'} slice of the "
                               f"register tile {src}; the Blackwell row layout slices the columns of 128-row "
                               f"tiles only (rows are threads)", op.loc,
                               hint="slice the tile in tensor or shared memory before it reaches registers")
        return Ctx(ctx.r, ctx.c.shift(a.start) if ctx.c else ctx.c, ctx.orient)

    def op_slice(self, op: Op) -> None:
        """A column block of a (1, C) row or (C,) vector along the columns in a slot (an epilogue chunk's
        columns, `aref.lower.subtile_sm100`): a column offset into the slot; anything else as the common views."""
        src = self.env[id(op.operands[0])]
        t = op.operands[0].type
        if isinstance(src, SmemTile) and not src.transposed and op.attrs.axis == len(t.shape) - 1 \
                and (self.layout_of(op.result) == COL
                     or self.layout_of(op.result) == ACC and _tiles_columns(t.shape[-1], op.attrs)):
            # (an (R, C) tile's chunk is read through a (R, width) tile of the slot: `smem_view`)
            self.env[id(op.result)] = replace(src, tile=op.result.type, col0=src.col0 + op.attrs.start)
            return
        super().op_slice(op)

    def transpose_registers(self, op: Op) -> None:
        """A transposed register tile for register math, through the group's exchange tile: each thread writes
        its elements of the source at their (row, column), and after the group's barrier reads its elements of
        the transpose (its row there is a column of the source)."""
        src_v, res = op.operands[0], op.result
        t = src_v.type
        if t.dtype is DType.bool_:
            raise BackendError("a transposed boolean register tile; compare after transposing the operands", op.loc)
        rows, cols = t.shape
        self.check_rows(t)
        self.check_rows(res.type)
        src = self.materialize(src_v)
        dst = self.new_buffer(res)
        xv = self.xvector(rows * cols, t.dtype)
        wide = DType.float32 if t.dtype.is_float else DType.int32
        self.out(f"# {src.name}ᵀ: through the exchange tile ({rows}×{cols} written by row, read by column)")
        self.group_sync("earlier readers of the exchange tile are done")
        with self.out.block(f"for c in cutlass.range_constexpr({per_thread_cols(rows, cols)}):"):
            self.out(f"{xv}[{self.my_row(rows)} * {cols} + sm100.col_index({rows}, {cols}, tidx, c)] = "
                     f"{self.convert_to(src.at('0', 'c'), wide)}")
        self.group_sync("the whole tile is written")
        with self.out.block(f"for c in cutlass.range_constexpr({per_thread_cols(cols, rows)}):"):
            back = f"{xv}[sm100.col_index({cols}, {rows}, tidx, c) * {cols} + {self.my_row(cols)}]"
            self.out(f"{dst.at('0', 'c')} = {self.convert_to(back, res.type.dtype)}")
        self.env[id(res)] = Reg(dst)

    def reduce(self, op: Op) -> None:
        """Along a row (axis 1): a loop over the thread's columns, plus one shuffle at 64 rows; the identity
        and combination are the op's registry entry's."""
        src, res = op.operands[0], op.result
        s_layout, r_layout = self.layout_of(src), self.layout_of(res)
        if s_layout == ACC and op.attrs.axis == 0 and src.type.shape[0] in ROWS:
            self.reduce_columns(op)
            return
        if s_layout == ROW and r_layout == SCALAR and src.type.shape[0] in ROWS:
            self.reduce_rows(op)
            return
        if not (s_layout == ACC and op.attrs.axis == 1):
            if s_layout == ACC or s_layout == ROW and r_layout == SCALAR:
                raise BackendError(f"a {op.attrs.fn} reduction across rows (of {src.type}); in the Blackwell "
                                   f"row layout each row is a thread, so only row reductions (axis 1) and "
                                   f"column reductions (axis 0) of 128-row tiles are implemented", op.loc,
                                   hint="reduce along axis 1, or transpose the tile in shared memory first")
            super().reduce(op)                                 # along a unit axis: the value itself
            return
        self.check_rows(src.type)
        rows, cols = src.type.shape
        self.nest_rows = rows
        spec = self.reduce_spec(op, s_layout)
        buf = self.new_buffer(res, hint=self.hint(res) or f"row_{op.attrs.fn}", layout=r_layout)
        nest = Nest([("r", 1), ("c", per_thread_cols(rows, cols))])
        expr = strip_parens(self.render(src, Ctx(Index("r"), Index("c")), nest, top=False))
        nest.levels[1].append(f"x = {spec.identity}")
        nest.levels[2].append(f"x = {strip_parens(spec.combine.format(a='x', b=expr))}")
        if rows == 64:
            other = "cute.arch.shuffle_sync_bfly(x, offset=16)"
            nest.after[1].append(f"x = {strip_parens(spec.combine.format(a='x', b=other))}  # threads t and "
                                 f"t^16 hold one row")
        target = buf.at("r", None) if r_layout == ROW else buf.at(None, None)
        nest.after[1].append(f"{target} = {self.convert_to('x', res.type.dtype)}"
                             + ("  # the thread's whole row" if rows == 128 else ""))
        self.emit_nest(nest)
        self.env[id(res)] = Reg(buf)

    def reduce_spec(self, op: Op, layout):
        """The op registry's reduction emission for `op`'s source in `layout` (identity and combine)."""
        try:
            return ops.cute_emission(ops.entry(op), self.role_key(), layout,
                                     ops.compute_class(op.operands[0].type.dtype)).reduce
        except ops.NoEmission as err:
            raise BackendError(str(err), op.loc) from None

    def reduce_rows(self, op: Op) -> None:
        """A vector along the rows (one value per row, held by the row's thread) to one value: butterfly
        shuffles over the warp's rows (at 64 rows threads t and t ^ 16 hold the same row, so lanes 1..8), then
        the 4 warps' partials meet in the group's exchange tile and every thread combines them in the same
        order, so all hold the same result."""
        src, res = op.operands[0], op.result
        rows = src.type.shape[0]
        spec = self.reduce_spec(op, ROW)

        def combine(a: str, b: str) -> str:
            return strip_parens(spec.combine.format(a=a, b=b))
        buf = self.new_buffer(res, hint=self.hint(res) or f"all_{op.attrs.fn}", layout=SCALAR)
        x = self.names(f"x_{op.attrs.fn}")
        self.out(f"# {op.attrs.fn} over the {rows} rows: the warp's rows by shuffles, then the 4 warps' partials "
                 f"meet in the exchange tile")
        self.out(f"{x} = {self.convert_to(self.materialize(src).at('0', None), res.type.dtype)}")
        for lane in (1, 2, 4, 8) + ((16,) if rows == 128 else ()):
            self.out(f"{x} = {combine(x, f'cute.arch.shuffle_sync_bfly({x}, offset={lane})')}")
        self.meet_warp_partials(x, "tidx % 32 == 0", "warp_in_group", buf.at(None, None), res, combine)
        self.env[id(res)] = Reg(buf)

    def reduce_columns(self, op: Op) -> None:
        """Along the columns (axis 0) of a 64- or 128-row tile: per column, butterfly shuffles over the warp's
        rows (32 rows a warp at 128; 16 at 64, where lanes t and t ^ 16 hold the two halves of a row's columns,
        tcgen05's 16x32bx2 layout), then the 4 warps' partials meet in the group's exchange tile and every
        thread combines them in the same order (so all hold the same (C,) result, a vector along the columns)."""
        src, res = op.operands[0], op.result
        rows, cols = src.type.shape
        self.nest_rows = rows
        spec = self.reduce_spec(op, ACC)

        def combine(a: str, b: str) -> str:
            return strip_parens(spec.combine.format(a=a, b=b))

        def column(n_rows: int, c: str) -> str:     # the tile column of a thread's register element c
            return c if n_rows == 128 else f"sm100.col_index({n_rows}, {cols}, tidx, {c})"
        buf = self.new_buffer(res, hint=self.hint(res) or f"col_{op.attrs.fn}", layout=COL)
        xv = self.xvector(4 * cols, DType.float32 if res.type.dtype.is_float else res.type.dtype)
        self.out(f"# {op.attrs.fn} over the rows: the warp's rows by shuffles, then the 4 warps' partials meet "
                 f"in the exchange tile")
        self.group_sync("earlier readers of the exchange tile are done")
        nest = Nest([("r", 1), ("c", per_thread_cols(rows, cols))])
        expr = strip_parens(self.render(src, Ctx(Index("r"), Index("c")), nest, top=False))
        nest.levels[2].append(f"x = {expr}")
        for lane in (1, 2, 4, 8) + ((16,) if rows == 128 else ()):
            nest.levels[2].append(f"x = {combine('x', f'cute.arch.shuffle_sync_bfly(x, offset={lane})')}")
        # one lane per distinct set of columns writes the warp's partial (lanes 0 and 16 at 64 rows)
        nest.levels[2].append(f"if tidx % {32 if rows == 128 else 16} == 0:")
        nest.levels[2].append(f"    {xv}[warp_in_group * {cols} + {column(rows, 'c')}] = x")
        self.emit_nest(nest)
        self.group_sync("every warp's partial is written")
        with self.out.block(f"for c in cutlass.range_constexpr({buf.cols}):"):
            at = column(buf.tile_rows, "c")
            acc = f"{xv}[{at}]"
            for w in range(1, 4):
                acc = combine(acc, f"{xv}[{w * cols} + {at}]")
            self.out(f"{buf.at(None, 'c')} = {self.convert_to(acc, res.type.dtype)}")
        self.env[id(res)] = Reg(buf)

    def smem_element(self, s: SmemTile, v: Value, ctx: Ctx, nest: Nest) -> str:
        if s.transposed:
            raise BackendError("register math on a transposed shared-memory tile", self.loc)
        ring = self.arg(self.plan.channel(s.channel).buffers[s.index].name)
        slot = strip_parens(s.slot.expr)
        if s.col0 and ctx.layout not in (COL, ACC):
            raise BackendError(f"internal: a column block of the {s.tile} slot tile read in the {ctx.layout} "
                               f"layout", self.loc)
        if ctx.layout == ACC:
            text = f"{self.smem_view(s)}[{ctx.c}]"
        elif ctx.layout == COL:        # a vector along the columns: rank 1, or a (1, C) row of a 2-D tile
            col = self.column_of(s.tile.shape[-1], ctx) + (f" + {s.col0}" if s.col0 else "")
            text = f"{ring}[{col}, {slot}]" if len(s.tile.shape) == 1 else f"{ring}[{s.row0}, {col}, {slot}]"
        else:
            row = self.my_row(self.rows_of(v)) + (f" + {s.row0}" if s.row0 else "") if ctx.layout == ROW \
                else str(s.row0)
            text = f"{ring}[{row}, {slot}]" if len(s.tile.shape) == 1 else f"{ring}[{row}, 0, {slot}]"
            text = f"cutlass.Float32({text})" if s.tile.dtype in NARROW else text
            # one shared-memory read per row, not per element of it
            if ctx.layout != ROW or not nest.loops:
                return text
            name = self.names(f"row_{v.name or ident(s.channel)}")
            nest.levels[nest.depth_of(ctx)].append(f"{name} = {text}")
            return name
        return f"cutlass.Float32({text})" if s.tile.dtype in NARROW else text

    def rows_of(self, v: Value) -> int:
        """Rows of the tiles this value is combined with (a row vector has the rows of its tile)."""
        return v.type.shape[0]

    def smem_view(self, s: SmemTile, rows_view: bool = False) -> str:
        cp = self.plan.channel(s.channel)
        ring = cp.buffers[s.index]
        rows, cols = s.tile.shape
        if rows != ring.tile.shape[0]:
            raise BackendError("a row block of a shared-memory tile in register math", self.loc)
        self.check_rows(s.tile)
        name = self.names(f"{ring.name[2:]}_rows")
        tile = f"{self.arg(ring.name)}[None, None, {strip_parens(s.slot.expr)}]"
        if cols != ring.tile.shape[1]:
            # an epilogue chunk's columns (`aref.lower.subtile_sm100`): the (rows, cols) tile of the slot at col0
            if s.col0 % cols:
                raise BackendError(f"internal: columns {s.col0}.. of a shared-memory tile in chunks of {cols}",
                                   self.loc)
            tile = f"cute.local_tile({tile}, ({rows}, {cols}), (0, {s.col0 // cols}))"
        self.out(f"{name} = sm100.smem_rows({tile}, {rows}, {cols}, tidx)")
        return name

    def index_of(self, n: int, ctx: Ctx) -> str:
        """An index tile (`arange(n)`) read along the rows (the thread's row) or along the columns (the column
        of the thread's register element c, in the row layout of the tile being computed)."""
        if ctx.layout == ROW:
            return self.my_row(n)
        return self.column_of(n, ctx)

    def column_of(self, n: int, ctx: Ctx) -> str:
        """The tile column of register element `ctx.c` of this thread's row (of the tile being computed, n
        columns), from the tcgen05.ld partition (a constant per element at 128 rows, where the thread holds
        its whole row)."""
        rows = self.nest_rows
        if rows is None:
            raise BackendError(f"a vector of {n} columns read outside a 2-D tile; the Blackwell templates index "
                               f"columns only within a 64- or 128-row tile", self.loc)
        return f"sm100.col_index({rows}, {n}, tidx, {ctx.c})"

    def render_op(self, op: Op, args: list[str], ctx: Ctx, nest: Nest) -> str:
        """The registry's expression, except index tiles (`index_of`) and exp2 of a tile under the `exp2_fma`
        option: a share of each row's elements on the FMA units (FA4's software exp2)."""
        if op.kind is OpKind.ARANGE and ctx.layout in (ROW, COL):
            return self.index_of(op.result.type.shape[0], ctx)
        share = getattr(self.plan, "exp2_fma", 0.0)
        if share and ctx.layout == ACC and ops.entry(op) is ops.lookup(OpKind.UNARY, "exp2"):
            if not 0.0 < share <= 1.0:
                raise BackendError(f"exp2_fma is a share of the elements, in (0, 1]; got {share}", op.loc)
            return f"sm100.exp2_mixed({strip_parens(args[0])}, {ctx.c}, 16, {max(1, round(share * 16))})"
        return super().render_op(op, args, ctx, nest)


def _tiles_columns(cols: int, a) -> bool:
    """Is a slice of `a.size` columns at `a.start` one tile of an (R, cols) tile cut into equal power-of-two
    column blocks (what `cute.local_tile` of the slot and tcgen05's row copy take)?"""
    return a.size >= 8 and a.size & (a.size - 1) == 0 and cols % a.size == 0 and a.start % a.size == 0
