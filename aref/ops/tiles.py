"""Tile sources (`full`, `arange`), views (transpose, unit dimensions, slices), the pipeline's select and
CTA-uniform scalars (constants, program ids, index arithmetic)."""
from __future__ import annotations

from aref.ir import typing_rules as rules
from aref.errors import ArefTypeError, VerifyError
from aref.ir import DType, OpKind, ScalarType, Space, TileType
from aref.ops.registry import (ELEMENTWISE, EXPR, PIPELINE, PREDICATE, SCALAR, TILE_SOURCE, VIEW, VIEWING, Algebra, Case, Cost,
                      Emit, Hints, OpDef, lang, register)
from aref.ops.registry import TORCH as torch
from aref.ops.elementwise import FLOATS, FMA_COST, ISSUE, ROLES3

I32 = ScalarType(DType.int32)
VIEW_COST = Cost(ISSUE, lambda op, m, rng=None: 0)
SCALAR_COST = Cost(ISSUE, lambda op, m, rng=None: 1)


# ------------------------------------------------------------------------------------------ tile sources
def _full_rule(types, attrs, loc):
    return (TileType(attrs.shape, attrs.dtype, Space.RMEM),)


register(OpDef(
    OpKind.FULL, None, "a register tile filled with a constant (`aref.full`, `aref.zeros`)",
    frozenset({TILE_SOURCE}), FMA_COST, type_rule=_full_rule,
    interpret=lambda op, vals, cta: torch.full(op.attrs.shape, op.attrs.value, dtype=torch.float32),
    cute=(Emit(form=EXPR, template="{const}"),),
    hints=Hints(dtypes=FLOATS + (DType.int32,), roles=ROLES3, random=True,
                cases=(Case("full", lambda x, y: x + lang().full(x.shape, 3.0, x.dtype), lambda x, y: x + 3.0),
                       Case("full-row", lambda x, y: x * lang().full((x.shape[0], 1), 2.0, x.dtype),
                            lambda x, y: x * 2.0))),
    surface="aref.full"))


def _arange_rule(types, attrs, loc):
    return (TileType((attrs.n,), DType.int32, Space.RMEM),)


register(OpDef(
    OpKind.ARANGE, None, "the int32 tile [0, n) (`aref.arange`, for masks and indices)",
    frozenset({TILE_SOURCE}), FMA_COST, type_rule=_arange_rule,
    interpret=lambda op, vals, cta: torch.arange(op.attrs.n, dtype=torch.int32),
    # the element's own coordinate along its orientation, from the accumulator layout (support.row_index)
    cute=(Emit(form=EXPR, template="aref.row_index(group_tidx, {row})", layouts=frozenset({"row"}),
               helpers=("row_index",)),
          Emit(form=EXPR, template="aref.col_index(group_tidx, {col})", layouts=frozenset({"col"}),
               helpers=("col_index",)),
          Emit(form=EXPR, template="0", layouts=frozenset({"scalar"}))),      # arange(1)
    hints=Hints(dtypes=FLOATS + (DType.int32,), roles=ROLES3, random=True,
                cases=(Case("rows", lambda x, y: x + lang().arange(x.shape[0])[:, None],
                            lambda x, y: x + torch.arange(x.shape[0], dtype=x.dtype)[:, None]),
                       Case("cols", lambda x, y: x + lang().arange(x.shape[1])[None, :],
                            lambda x, y: x + torch.arange(x.shape[1], dtype=x.dtype)[None, :]),
                       Case("mask", lambda x, y: lang().where(lang().arange(x.shape[0])[:, None]
                                                              >= lang().arange(x.shape[1])[None, :], x, y),
                            lambda x, y: torch.where(torch.arange(x.shape[0])[:, None]
                                                     >= torch.arange(x.shape[1])[None, :], x, y)))),
    surface="aref.arange"))


# ----------------------------------------------------------------------------------------------- views
register(OpDef(
    OpKind.TRANSPOSE, None, "`.T` of a 2-D tile (a free view of shared-memory tiles)", frozenset({VIEW}),
    VIEW_COST, type_rule=lambda types, attrs, loc: (rules.transpose_type(types[0], loc),),
    interpret=lambda op, vals, cta: vals[0].permute(op.attrs.perm),
    # of a register tile: an exchange through shared memory (the backend's staging path)
    cute=(Emit(form=VIEWING),),
    hints=Hints(dtypes=FLOATS + (DType.int32,), roles=ROLES3, random=True,
                cases=(Case("T", lambda x, y: x.T + y, lambda x, y: x.T + y, square=True),)), surface=".T"))

register(OpDef(
    OpKind.EXPAND_DIMS, None, "a unit dimension for broadcasting (`x[:, None]`, `x[None, :]`)",
    frozenset({VIEW}), VIEW_COST,
    type_rule=lambda types, attrs, loc: (rules.expand_dims_type(types[0], attrs.axis, loc),),
    interpret=lambda op, vals, cta: vals[0].unsqueeze(op.attrs.axis), cute=(Emit(form=VIEWING),),
    hints=Hints(dtypes=FLOATS + (DType.int32,), roles=ROLES3, random=True,
                cases=(Case("rows", lambda x, y: x * y.max(1)[:, None], lambda x, y: x * y.amax(1)[:, None]),
                       Case("cols", lambda x, y: x * y.min(0)[None, :], lambda x, y: x * y.amin(0)[None, :]),
                       # a row reduction's vector read along the columns (moves through the exchange tile)
                       Case("row-as-col", lambda x, y: x + y.max(1)[None, :], lambda x, y: x + y.amax(1)[None, :],
                            square=True))),
    surface="x[:, None]"))

register(OpDef(
    OpKind.SLICE, None, "rows or columns [start, start+size) of a tile (cooperative consumers' halves)",
    frozenset({VIEW}), VIEW_COST,
    type_rule=lambda types, attrs, loc: (rules.slice_type(types[0], attrs.axis, attrs.start, attrs.size, loc),),
    interpret=lambda op, vals, cta: vals[0].narrow(op.attrs.axis, op.attrs.start, op.attrs.size),
    cute=(Emit(form=VIEWING),),
    # register slices are index shifts: a whole 64-row wgmma atom, or 8 columns
    hints=Hints(roles=ROLES3, gaps={(None, "acc"): "a register slice must start on a 64-row wgmma atom (rows) "
                                                   "or on a multiple of 8 columns"})))


def _select_rule(types, attrs, loc):
    if types[0] != ScalarType(DType.bool_) or types[1] != types[2]:
        raise VerifyError("select takes an i1 condition and two values of one type", loc)
    return (types[1],)


register(OpDef(
    OpKind.SELECT, None, "the pipeline's choice between two states of a value (a skipped step passes through)",
    frozenset({PIPELINE, ELEMENTWISE}), VIEW_COST, type_rule=_select_rule,
    interpret=lambda op, vals, cta: vals[1] if vals[0] else vals[2],
    cute=(Emit(template="aref.where({a}, {b}, {c})", operands="float", helpers=("where",)),
          Emit(template="{T}(cutlass.select_({a}, {T}({b}), {T}({c})))")),
    hints=Hints(roles=ROLES3)))


# --------------------------------------------------------------------------------------------- scalars
# a constant's scalar type is the one its builder chose (a number beside an f16 tile is an f16 constant):
# the verifier checks only that it is a scalar, so the entry has no type rule
register(OpDef(OpKind.CONST, None, "a compile-time scalar", frozenset({SCALAR}), SCALAR_COST,
               interpret=lambda op, vals, cta: op.attrs.value, cute=(Emit(template="{const}"),)))
register(OpDef(OpKind.PROGRAM_ID, None, "this CTA's index along a grid axis", frozenset({SCALAR}), SCALAR_COST,
               type_rule=lambda types, attrs, loc: (I32,),
               interpret=lambda op, vals, cta: cta[op.attrs.axis] if op.attrs.axis < len(cta) else 0,
               hints=Hints(dtypes=(DType.float32, DType.int32), roles=ROLES3,
                           cases=(Case("pid", lambda x, y: x + lang().program_id(0) * 7, lambda x, y: x),)),
               surface="aref.program_id"))


def _scalar_rule(predicate: bool):
    def rule(types, attrs, loc):
        if list(types) != [I32, I32]:
            raise VerifyError(f"scalar {attrs.fn} needs two i32 operands", loc)
        return (ScalarType(DType.bool_),) if predicate else (I32,)
    return rule


SCALARS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "min": min, "max": max,
}
PREDICATES = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
              "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}
SPELL = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
         "min": lambda a, b: lang().minimum(a, b), "max": lambda a, b: lang().maximum(a, b)}


def _scalar_case(fn: str) -> Case:
    """`x + fn(pid + 5, 3)` in a one-CTA grid (pid = 0): index math on a runtime scalar."""
    spell, f = SPELL[fn], SCALARS[fn]
    return Case(fn, lambda x, y: x + spell(lang().program_id(0) + 5, 3), lambda x, y: x + f(5, 3))


SCALAR_TEMPLATES = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})", "floordiv": "({a} // {b})",
                    "mod": "({a} % {b})", "min": "cutlass.min({a}, {b})", "max": "cutlass.max({a}, {b})",
                    "lt": "({a} < {b})", "le": "({a} <= {b})", "gt": "({a} > {b})", "ge": "({a} >= {b})",
                    "eq": "({a} == {b})", "ne": "({a} != {b})"}
SCALAR_AFFINE = {"add": "sum", "sub": "difference", "mul": "product"}
def _scalar_interp(fn: str, f):
    def run(op, vals, cta):
        x, y = int(vals[0]), int(vals[1])
        if y == 0 and fn in ("floordiv", "mod"):
            raise ArefTypeError(f"integer {'division' if fn == 'floordiv' else 'modulo'} by zero in index math "
                                f"(a runtime divisor is 0 in CTA {cta})", op.loc if op is not None else None,
                                hint="make sure the divisor cannot be 0 (program ids and the loop index start at 0)")
        return f(x, y)
    return run


for table, pred in ((SCALARS, False), (PREDICATES, True)):
    for fn, f in table.items():
        register(OpDef(
            OpKind.SCALAR_BINARY, fn, f"i32 scalar {fn}" + (" (pipeline guards)" if pred else ""),
            frozenset({SCALAR} | ({PREDICATE} if pred else set())), SCALAR_COST, type_rule=_scalar_rule(pred),
            interpret=_scalar_interp(fn, f),
            cute=(Emit(template=SCALAR_TEMPLATES[fn]),), algebra=Algebra(affine=SCALAR_AFFINE.get(fn)),
            # predicates come from pipelining (prologue / epilogue guards): the pipelined examples carry them
            hints=Hints(dtypes=(DType.float32, DType.int32), cases=(_scalar_case(fn),), roles=ROLES3)
            if not pred else Hints(carrier="gemm")))
