"""Reduction entries: max, sum and min along one axis of a tile.

Float tiles reduce in float32 (then round to their dtype), int32 tiles in integer arithmetic (sums wrap as
int32 adds do). Booleans do not reduce: cast them to int32 to count.
"""
from __future__ import annotations

from aref.ir import typing_rules as rules
from aref.errors import ArefTypeError
from aref.ir import DType, OpKind
from aref.ops.registry import (CUDA_CORE, REDUCING, REDUCTION, RUNNING_MAX, Case, Cost, Emit, Hints, OpDef, ReduceSpec,
                      register)
from aref.ops.elementwise import FLOATS, ROLES3


def _reduce_rule(fn: str):
    def rule(types, attrs, loc):
        (x,) = types
        if x.dtype is DType.bool_:
            raise ArefTypeError(f"a {fn} reduction of a boolean tile", loc,
                                hint="cast to int32 first, e.g. `mask.to(aref.int32).sum(axis)`")
        return (rules.reduce_type(x, attrs.axis, loc),)
    return rule


def _reduce_interp(fn: str):
    def run(op, vals, cta):
        x, axis = vals[0], op.attrs.axis
        if x.is_floating_point():
            x = x.float()
        if fn == "sum":
            return x.sum(dim=axis, dtype=x.dtype)
        return x.amax(dim=axis) if fn == "max" else x.amin(dim=axis)
    return run


def _cycles(op, m, rng=None):
    return max(1, -(-op.operands[0].type.numel // m.fma_per_clk))


REDUCE_COST = Cost("fma", _cycles)
# identity and combination per compute type; the backend adds the layout's loops and shuffles
SPECS = {
    ("max", "float"): ReduceSpec("-cutlass.Float32.inf", "cute.arch.fmax({a}, {b})"),
    ("max", "int"): ReduceSpec("cutlass.Int32(-2147483648)", "cutlass.max({a}, {b})"),
    ("min", "float"): ReduceSpec("cutlass.Float32.inf", "cute.arch.fmin({a}, {b})"),
    ("min", "int"): ReduceSpec("cutlass.Int32(2147483647)", "cutlass.min({a}, {b})"),
    ("sum", "float"): ReduceSpec("cutlass.Float32(0.0)", "({a} + {b})"),
    ("sum", "int"): ReduceSpec("cutlass.Int32(0)", "({a} + {b})"),
}
ORACLES = {"max": lambda x, axis: x.amax(axis), "min": lambda x, axis: x.amin(axis),
           "sum": lambda x, axis: x.sum(axis)}


def _cases(fn: str) -> tuple[Case, ...]:
    """Along rows and columns of a 2-D tile (broadcast back, so the result is a tile again), and a
    vector to one value."""
    o = ORACLES[fn]
    red = lambda x, axis: getattr(x, fn)(axis)                      # noqa: E731
    return (Case(f"{fn}-axis1", lambda x, y: x - red(x, 1)[:, None], lambda x, y: x - o(x, 1)[:, None]),
            Case(f"{fn}-axis0", lambda x, y: x - red(x, 0)[None, :], lambda x, y: x - o(x, 0)[None, :]),
            Case(f"{fn}-vector", lambda x, y: x - red(red(x, 1), 0), lambda x, y: x - o(o(x, 1), 0)),
            Case(f"{fn}-col-vector", lambda x, y: x - red(red(x, 0), 0), lambda x, y: x - o(o(x, 0), 0)))
for fn in ("max", "sum", "min"):
    register(OpDef(
        OpKind.REDUCE, fn, f"{fn} along one axis (`.{fn}(axis)`, `aref.row{fn}`)",
        frozenset({REDUCTION, CUDA_CORE} | ({RUNNING_MAX} if fn == "max" else set())), REDUCE_COST,
        type_rule=_reduce_rule(fn), interpret=_reduce_interp(fn),
        cute=tuple(Emit(form=REDUCING, reduce=SPECS[(fn, cls)], operands=cls) for cls in ("float", "int")),
        # float32 sums: the GPU adds in another order than torch (a few ulp of the sum's magnitude)
        hints=Hints(dtypes=FLOATS + (DType.int32,), cases=_cases(fn), roles=ROLES3, random=True,
                    tol=(1e-4, 1e-5)),
        surface=f".{fn}(axis)"))

