"""Elementwise entries: unary and binary math, comparisons, `where` and casts.

Numerics (the interpreter's, which the backend reproduces): a float result is computed in float32 and then
rounded to its dtype (`aref.ops.round_to`); integer results use int32 arithmetic (wrapping); booleans come
from comparisons. Tiles and runtime scalars mix with numpy broadcasting (`aref.ir.typing_rules.elementwise`).
"""
from __future__ import annotations

from aref.ir import typing_rules as rules
from aref.errors import ArefTypeError
from aref.ir import DType, OpKind, TileType
from aref.ops.registry import (CUDA_CORE, ELEMENTWISE, EXPONENTIAL, MUFU, PREDICATE, Algebra, Case, Cost, Emit, Hints, OpDef,
                      lang, register, torch_fn)
from aref.ops.registry import TORCH as torch

ISSUE = "issue"
FLOATS = (DType.float32, DType.float16, DType.bfloat16)
ROLES3 = ("mma_consumer", "compute", "epilogue")


# ---------------------------------------------------------------------------------------------- costs
def _numel(t) -> int:
    return t.numel if isinstance(t, TileType) else 1


def _per_element(rate: str):
    def cycles(op, m, rng=None):
        t = op.results[0].type
        if not isinstance(t, TileType):
            return 1
        return max(1, -(-_numel(t) // getattr(m, rate)))
    return cycles


def _unit(unit: str):
    def of(op):
        return unit if isinstance(op.results[0].type, TileType) else ISSUE
    of.tile_unit = unit
    return of


FMA_COST = Cost(_unit("fma"), _per_element("fma_per_clk"))
MUFU_COST = Cost(_unit("mufu"), _per_element("mufu_per_clk"))


# ------------------------------------------------------------------------------------------- helpers
def as_tensor(x):
    """An operand value as a tensor: 16-bit and fp8 tiles widen to float32, ints and booleans stay."""
    if isinstance(x, torch.Tensor):
        return x.float() if x.dtype not in (torch.bool, torch.int32) else x
    if isinstance(x, bool):
        return torch.tensor(x)
    return torch.tensor(x, dtype=torch.float32 if isinstance(x, float) else torch.int32)


def _is_float_result(op) -> bool:
    return op.results[0].type.dtype.is_float


def _bool_gate(types, what: str, loc) -> None:
    if any(t.dtype is DType.bool_ for t in types):
        raise ArefTypeError(f"{what} on a boolean value", loc,
                            hint="booleans come from comparisons: select with `aref.where(cond, a, b)`, or cast "
                                 "with `.to(aref.int32)` to count")


# ---------------------------------------------------------------------------------------------- unary
def _unary_rule(fn: str, float_only: bool):
    def rule(types, attrs, loc):
        (x,) = types
        _bool_gate(types, f"aref.{fn}" if fn != "neg" else "negation", loc)
        if float_only and not x.dtype.is_float:
            raise ArefTypeError(f"aref.{fn} needs a float tile, got {x.dtype.name}", loc,
                                hint="cast with `.to(aref.float32)`")
        return (rules.elementwise(types, x.dtype, loc),)
    return rule


def _unary_interp(f):
    def run(op, vals, cta):
        x = as_tensor(vals[0])
        return f(x.float() if _is_float_result(op) else x)
    return run


def _abs_int(emit, op, a):
    return emit(OpKind.WHERE, None, [emit(OpKind.COMPARE, "lt", [a, "0"]), emit(OpKind.UNARY, "neg", [a]), a])


_POSITIVE = (0.25, 4.0)
UNARIES = [
    # fn, torch, oracle, CuTe template, transcendental, domain
    ("exp", torch_fn("exp"), torch_fn("exp"), "cute.math.exp({a}, fastmath=True)", True, (-4.0, 4.0)),
    ("exp2", torch_fn("exp2"), torch_fn("exp2"), "cute.math.exp2({a}, fastmath=True)", True, (-4.0, 4.0)),
    ("log", torch_fn("log"), torch_fn("log"), "cute.math.log({a}, fastmath=True)", True, _POSITIVE),
    ("log2", torch_fn("log2"), torch_fn("log2"), "cute.math.log2({a}, fastmath=True)", True, _POSITIVE),
    ("sqrt", torch_fn("sqrt"), torch_fn("sqrt"), "cute.math.sqrt({a}, fastmath=True)", True, _POSITIVE),
    ("rsqrt", torch_fn("rsqrt"), torch_fn("rsqrt"), "cute.math.rsqrt({a}, fastmath=True)", True, _POSITIVE),
    ("abs", torch_fn("abs"), torch_fn("abs"), "cute.math.absf({a})", False, (-4.0, 4.0)),
    ("neg", torch_fn("neg"), torch_fn("neg"), "(-{a})", False, (-4.0, 4.0)),
]
for fn, f, oracle, template, transcendental, domain in UNARIES:
    traits = {ELEMENTWISE, CUDA_CORE} | ({MUFU} if transcendental else set())
    if fn in ("exp", "exp2"):
        traits.add(EXPONENTIAL)
    integer = not transcendental
    emits = (Emit(template=template, operands="float"),)
    if fn == "neg":
        emits += (Emit(template=template, operands="int"),)
    register(OpDef(
        OpKind.UNARY, fn, f"elementwise {fn}" + (" (float tiles)" if transcendental else ""),
        frozenset(traits), MUFU_COST if transcendental else FMA_COST,
        type_rule=_unary_rule(fn, float_only=transcendental), interpret=_unary_interp(f),
        cute=emits, decompose=_abs_int if fn == "abs" else None,
        # fast-math MUFU approximations: ~2 ulp, plus the argument's own rounding for exp of large values
        hints=Hints(dtypes=FLOATS + ((DType.int32,) if integer else ()), domain=domain,
                    cases=(Case(fn, (lambda fn: lambda x, y: -x if fn == "neg" else getattr(lang(), fn)(x))(fn),
                                (lambda f: lambda x, y: f(x))(oracle)),),
                    roles=ROLES3, random=True, tol=(1e-5, 2e-6) if not transcendental else (1e-5, 1e-5)),
        surface=None if fn == "neg" else f"aref.{fn}"))


# --------------------------------------------------------------------------------------------- binary
def _binary_rule(fn: str):
    def rule(types, attrs, loc):
        a, b = types
        _bool_gate(types, SPELLING.get(fn, f"aref.{fn}"), loc)
        dtype = rules.promote(a.dtype, b.dtype, loc)
        if fn == "div" and not dtype.is_float:
            raise ArefTypeError("`/` on integer tiles", loc, hint="cast to a float type first with `.to(...)`")
        if fn in ("floordiv", "mod") and dtype.is_float:
            raise ArefTypeError(f"{SPELLING[fn]} on float tiles", loc,
                                hint="`//` and `%` take integer tiles (index math); for floats use `/`")
        return (rules.elementwise(types, dtype, loc),)
    return rule


def _binary_interp(f, fn: str):
    def run(op, vals, cta):
        x, y = as_tensor(vals[0]), as_tensor(vals[1])
        if _is_float_result(op):
            x, y = x.float(), y.float()
        elif fn in ("floordiv", "mod") and bool((y == 0).any()):
            raise ArefTypeError(f"integer {'division' if fn == 'floordiv' else 'modulo'} by zero in a tile "
                                f"(a divisor element is 0 in CTA {cta})", op.loc,
                                hint="make sure no divisor element can be 0")
        return f(x, y)
    return run


def _minmax_int(cmp: str):
    def decompose(emit, op, a, b):
        return emit(OpKind.WHERE, None, [emit(OpKind.COMPARE, cmp, [a, b]), a, b])
    return decompose


def _floordiv(x, y):
    return torch.div(x, y, rounding_mode="floor")


def _binary_builder(fn: str):
    ops_ = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
            "div": lambda x, y: x / y, "floordiv": lambda x, y: x // y, "mod": lambda x, y: x % y,
            "maximum": lambda x, y: lang().maximum(x, y), "minimum": lambda x, y: lang().minimum(x, y)}
    return ops_[fn]


SPELLING = {"add": "`+`", "sub": "`-`", "mul": "`*`", "div": "`/`", "floordiv": "`//`", "mod": "`%`"}
BINARIES = [
    # fn, torch, CuTe template, operand classes, surface
    ("add", torch_fn("add"), "({a} + {b})", ("float", "int"), "+"),
    ("sub", torch_fn("sub"), "({a} - {b})", ("float", "int"), "-"),
    ("mul", torch_fn("mul"), "({a} * {b})", ("float", "int"), "*"),
    ("div", torch_fn("div"), "({a} / {b})", ("float",), "/"),
    # Python semantics (floor, remainder with the divisor's sign): torch's and the DSL's Int32 operators
    ("floordiv", _floordiv, "({a} // {b})", ("int",), "//"),
    ("mod", torch_fn("remainder"), "({a} % {b})", ("int",), "%"),
    ("maximum", torch_fn("maximum"), "cute.arch.fmax({a}, {b})", ("float",), "aref.maximum"),
    ("minimum", torch_fn("minimum"), "cute.arch.fmin({a}, {b})", ("float",), "aref.minimum"),
]
ALGEBRA = {"add": Algebra(identity=0.0, affine="sum"), "sub": Algebra(identity=0.0, right_only=True,
                                                                      affine="difference"),
           "mul": Algebra(identity=1.0, absorbing=0.0, affine="product"),
           "div": Algebra(identity=1.0, right_only=True, reciprocal=True),
           "maximum": Algebra(identity=-float("inf")), "minimum": Algebra(identity=float("inf"))}
for fn, f, template, classes, surface in BINARIES:
    register(OpDef(
        OpKind.BINARY, fn, f"elementwise {fn}", frozenset({ELEMENTWISE, CUDA_CORE}), FMA_COST,
        type_rule=_binary_rule(fn), interpret=_binary_interp(f, fn),
        cute=tuple(Emit(template=template, operands=cls) for cls in classes),
        decompose=_minmax_int("gt" if fn == "maximum" else "lt") if fn in ("maximum", "minimum") else None,
        hints=Hints(dtypes=(() if fn in ("floordiv", "mod") else FLOATS)
                    + ((DType.int32,) if fn != "div" else ()),
                    domain=(0.25, 4.0) if fn == "div" else (1.0, 9.0) if fn in ("floordiv", "mod") else (-4.0, 4.0),
                    cases=(Case(fn, _binary_builder(fn), f),), roles=ROLES3, random=True, tol=(1e-5, 2e-6)),
        surface=surface, algebra=ALGEBRA.get(fn, Algebra())))


# ------------------------------------------------------------------------------------------ comparison
def _compare_rule(types, attrs, loc):
    rules.promote(types[0].dtype, types[1].dtype, loc)
    return (rules.elementwise(types, DType.bool_, loc),)


def _compare_interp(f):
    return lambda op, vals, cta: f(as_tensor(vals[0]), as_tensor(vals[1]))


for fn, sym in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="), ("eq", "=="), ("ne", "!=")):
    f = torch_fn(fn)
    register(OpDef(
        OpKind.COMPARE, fn, f"elementwise comparison `{sym}`", frozenset({ELEMENTWISE, CUDA_CORE, PREDICATE}),
        FMA_COST, type_rule=_compare_rule, interpret=_compare_interp(f),
        cute=(Emit(template=f"({{a}} {sym} {{b}})"),),
        hints=Hints(dtypes=FLOATS + (DType.int32,), roles=ROLES3, random=True,
                    cases=(Case(fn, (lambda fn: lambda x, y: getattr(x, f"__{fn}__")(y))(fn), f),)), surface=sym))


# ------------------------------------------------------------------------------------- logical and / or
def _logical_rule(sym: str):
    def rule(types, attrs, loc):
        if any(t.dtype is not DType.bool_ for t in types):
            got = ", ".join(t.dtype.name for t in types)
            raise ArefTypeError(f"`{sym}` combines boolean tiles (masks from comparisons), got {got}", loc,
                                hint="compare first, e.g. `(rows >= cols) & (cols < n)`; integer bit math is "
                                     "not in the language")
        return (rules.elementwise(types, DType.bool_, loc),)
    return rule


for fn, sym, f in (("and", "&", "logical_and"), ("or", "|", "logical_or")):
    register(OpDef(
        OpKind.COMPARE, fn, f"elementwise logical `{sym}` of masks", frozenset({ELEMENTWISE, CUDA_CORE, PREDICATE}),
        FMA_COST, type_rule=_logical_rule(sym), interpret=_compare_interp(torch_fn(f)),
        cute=(Emit(template=f"({{a}} {sym} {{b}})"),),
        # masks from comparisons of any dtype are alike (the comparisons' own cases try every dtype)
        hints=Hints(dtypes=(DType.float32, DType.int32), roles=ROLES3, random=True,
                    cases=(Case(fn, (lambda sym: lambda x, y: lang().where(
                        (x > 0) & (y < 1) if sym == "&" else (x > 0) | (y < 1), x, y))(sym),
                        (lambda f: lambda x, y: torch.where(getattr(torch, f)(x > 0, y < 1), x, y))(f)),)),
        surface=sym))

# ----------------------------------------------------------------------------------------------- where
def _where_rule(types, attrs, loc):
    c, a, b = types
    if c.dtype is not DType.bool_:
        raise ArefTypeError("aref.where needs a boolean condition tile (from a comparison)", loc,
                            hint="compare to get one, e.g. `aref.where(x > 0, x, 0.0)`")
    return (rules.elementwise(types, rules.promote(a.dtype, b.dtype, loc), loc),)


def _where_interp(op, vals, cta):
    c, a, b = (as_tensor(v) for v in vals)
    if _is_float_result(op):
        a, b = a.float(), b.float()
    return torch.where(c, a, b)


register(OpDef(
    OpKind.WHERE, None, "per-element select `aref.where(cond, a, b)`", frozenset({ELEMENTWISE, CUDA_CORE}),
    FMA_COST, type_rule=_where_rule, interpret=_where_interp,
    cute=(Emit(template="aref.where({a}, {b}, {c})", operands="float", helpers=("where",)),
          Emit(template="{T}(cutlass.select_({a}, {T}({b}), {T}({c})))")),
    hints=Hints(dtypes=FLOATS + (DType.int32,), roles=ROLES3, random=True,
                cases=(Case("where", lambda x, y: lang().where(x > y, x, y), lambda x, y: torch.where(x > y, x, y)),
                       Case("where-const", lambda x, y: lang().where(x < 0, 0, y),
                            lambda x, y: torch.where(x < 0, torch.zeros_like(y), y)))),
    surface="aref.where"))


# ------------------------------------------------------------------------------------------------ cast
def _cast_rule(types, attrs, loc):
    if attrs.dtype is DType.bool_:
        raise ArefTypeError("casting to a boolean type", loc, hint="compare instead, e.g. `x != 0`")
    return (rules.elementwise(types, attrs.dtype, loc),)


def _cast_template(op) -> str:
    from aref.ops.registry import compute_class
    same = compute_class(op.operands[0].type.dtype) == compute_class(op.result.type.dtype)
    return "{a}" if same else "{T}({a})"


def _cast_interp(op, vals, cta):
    x = as_tensor(vals[0])
    return x.float() if _is_float_result(op) or x.is_floating_point() else x


register(OpDef(
    OpKind.CAST, None, "`.to(dtype)`: round to nearest even; to int32 truncate and saturate",
    frozenset({ELEMENTWISE, CUDA_CORE}), FMA_COST, type_rule=_cast_rule, interpret=_cast_interp,
    # the computed value in the result's compute type; rounding to a narrower float is the renderer's
    # uniform rounding step (as `round_to` is the interpreter's)
    cute=(Emit(template=_cast_template),),
    hints=Hints(dtypes=FLOATS + (DType.int32,), roles=ROLES3, random=True, domain=(-60.0, 60.0),
                cases=tuple(Case(f"to-{d.value}", (lambda d: lambda x, y: x.to(d))(d),
                                 (lambda d: lambda x, y: x.trunc() if d is DType.int32 else x)(d))
                            for d in (DType.float32, DType.float16, DType.bfloat16, DType.float8_e4m3,
                                      DType.float8_e5m2, DType.int32))
                + (Case("round-trip-f16", lambda x, y: x.to(DType.float16).to(DType.float32),
                        lambda x, y: x.half().double() if x.is_floating_point() else x.half().long()),)),
    surface=".to(dtype)"))
