"""Elementwise entries: unary and binary math, comparisons, `where` and casts.

Numerics (the interpreter's, which the backend reproduces): a float result is computed in float32 and then
rounded to its dtype (`aref.ops.round_to`); integer results use int32 arithmetic (wrapping); booleans come
from comparisons. Tiles and runtime scalars mix with numpy broadcasting (`aref.ir.typing_rules.elementwise`).
"""
from __future__ import annotations

from dataclasses import dataclass

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


def _per_element(rate: str, instructions: int = 1):
    """Cycles of `instructions` per element at the machine's `rate` (elements per clock of the unit)."""
    def cycles(op, m, rng=None):
        t = op.results[0].type
        if not isinstance(t, TileType):
            return 1
        return max(1, -(-instructions * _numel(t) // getattr(m, rate)))
    return cycles


def _unit(unit: str):
    def of(op):
        return unit if isinstance(op.results[0].type, TileType) else ISSUE
    of.tile_unit = unit
    return of


FMA_COST = Cost(_unit("fma"), _per_element("fma_per_clk"))
MUFU_COST = Cost(_unit("mufu"), _per_element("mufu_per_clk"))


def fma_sequence(n: int) -> Cost:
    """An op the GPU computes as `n` FMA-pipe instructions per element (a polynomial, a rounding)."""
    return Cost(_unit("fma"), _per_element("fma_per_clk", n))


def mufu_ops(n: int) -> Cost:
    """An op that takes `n` MUFU instructions per element (its FMA-pipe work beside them is not the bottleneck)."""
    return Cost(_unit("mufu"), _per_element("mufu_per_clk", n))


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
MUFU_TOL = (1e-5, 1e-5)        # ex2 / lg2 / rsqrt .approx: ~2 ulp, plus the argument's own rounding
EXACT_TOL = (1e-5, 2e-6)


@dataclass(frozen=True)
class Unary:
    """One unary function: its torch semantics (the interpreter's, and the oracle's on float64), the CuTe
    element template, the cost of the instructions the GPU runs for it, the input domain tests draw from, and
    the GPU's error against the interpreter (`Hints.tol`)."""

    fn: str
    torch: object
    template: str
    cost: Cost
    float_only: bool = True
    domain: tuple = (-4.0, 4.0)
    tol: tuple = MUFU_TOL
    doc: str = ""
    ptx: tuple = ()


UNARIES = [
    Unary("exp", torch_fn("exp"), "cute.math.exp({a}, fastmath=True)", MUFU_COST, ptx=("ex2.approx",)),
    Unary("exp2", torch_fn("exp2"), "cute.math.exp2({a}, fastmath=True)", MUFU_COST, ptx=("ex2.approx",)),
    Unary("log", torch_fn("log"), "cute.math.log({a}, fastmath=True)", MUFU_COST, domain=_POSITIVE,
          ptx=("lg2.approx",)),
    Unary("log2", torch_fn("log2"), "cute.math.log2({a}, fastmath=True)", MUFU_COST, domain=_POSITIVE,
          ptx=("lg2.approx",)),
    Unary("sqrt", torch_fn("sqrt"), "cute.math.sqrt({a}, fastmath=True)", MUFU_COST, domain=_POSITIVE,
          ptx=("sqrt.approx",)),
    Unary("rsqrt", torch_fn("rsqrt"), "cute.math.rsqrt({a}, fastmath=True)", MUFU_COST, domain=_POSITIVE,
          ptx=("rsqrt.approx",)),
    # tanh.approx.f32 (a MUFU instruction since sm_75): relative error up to 2^-11, as FA4's soft-capping uses
    Unary("tanh", torch_fn("tanh"), "cute.math.tanh({a}, approx=True)", MUFU_COST, tol=(1e-3, 1e-3),
          ptx=("tanh.approx.f32",), doc="hyperbolic tangent (tanh.approx: relative error up to 2^-11)"),
    # σ(x) = ½·tanh(x/2) + ½: one MUFU instruction, where 1 / (1 + exp(-x)) takes two (ex2 and rcp)
    Unary("sigmoid", torch_fn("sigmoid"), "(cute.math.tanh({a} * 0.5, approx=True) * 0.5 + 0.5)", MUFU_COST,
          tol=(1e-3, 1e-3), ptx=("tanh.approx.f32",),
          doc="logistic sigmoid 1 / (1 + exp(-x)), as ½·tanh(x/2) + ½ on the MUFU"),
    # erf: the DSL's math.erf expands to ~13 FMA-pipe instructions and one ex2 per element (measured in the
    # PTX): the FMA pipe (128 / clock) is its bottleneck, not the MUFU (16 / clock)
    Unary("erf", torch_fn("erf"), "cute.math.erf({a}, fastmath=True)", fma_sequence(13), domain=(-3.0, 3.0),
          doc="the error function (exact GELU: x·½·(1 + erf(x/√2)))"),
    # sin.approx / cos.approx: MUFU; absolute error ~2^-20 on [-π, π], growing with |x| (reduce large angles)
    Unary("sin", torch_fn("sin"), "cute.math.sin({a}, approx=True)", MUFU_COST, ptx=("sin.approx.f32",),
          doc="sine (sin.approx: absolute error ~2^-20 on [-π, π], growing with |x|)"),
    Unary("cos", torch_fn("cos"), "cute.math.cos({a}, approx=True)", MUFU_COST, ptx=("cos.approx.f32",),
          doc="cosine (cos.approx: absolute error ~2^-20 on [-π, π], growing with |x|)"),
    Unary("floor", torch_fn("floor"), "cute.math.floor({a})", FMA_COST, domain=(-8.0, 8.0), tol=EXACT_TOL,
          ptx=("cvt.rmi.f32.f32",), doc="round down to an integral float"),
    Unary("ceil", torch_fn("ceil"), "cute.math.ceil({a})", FMA_COST, domain=(-8.0, 8.0), tol=EXACT_TOL,
          ptx=("cvt.rpi.f32.f32",), doc="round up to an integral float"),
    Unary("abs", torch_fn("abs"), "cute.math.absf({a})", FMA_COST, float_only=False, tol=EXACT_TOL),
    Unary("neg", torch_fn("neg"), "(-{a})", FMA_COST, float_only=False, tol=EXACT_TOL),
]
for u in UNARIES:
    mufu = u.cost.declared_unit == "mufu"
    traits = {ELEMENTWISE, CUDA_CORE} | ({MUFU} if mufu else set())
    if u.fn in ("exp", "exp2"):
        traits.add(EXPONENTIAL)
    emits = (Emit(template=u.template, operands="float"),)
    if u.fn == "neg":
        emits += (Emit(template=u.template, operands="int"),)
    register(OpDef(
        OpKind.UNARY, u.fn, u.doc or f"elementwise {u.fn}" + (" (float tiles)" if u.float_only else ""),
        frozenset(traits), u.cost, type_rule=_unary_rule(u.fn, float_only=u.float_only),
        interpret=_unary_interp(u.torch), cute=emits, decompose=_abs_int if u.fn == "abs" else None,
        hints=Hints(dtypes=FLOATS + (() if u.float_only else (DType.int32,)), domain=u.domain,
                    cases=(Case(u.fn, (lambda fn: lambda x, y: -x if fn == "neg" else getattr(lang(), fn)(x))(u.fn),
                                (lambda f: lambda x, y: f(x))(u.torch)),),
                    roles=ROLES3, random=True, tol=u.tol, ptx=u.ptx),
        surface=None if u.fn == "neg" else f"aref.{u.fn}"))


# --------------------------------------------------------------------------------------------- binary
def _binary_rule(fn: str):
    def rule(types, attrs, loc):
        a, b = types
        if fn == "mul" and a.dtype is DType.bool_ and b.dtype is DType.bool_:
            return (rules.elementwise(types, DType.bool_, loc),)      # two masks: logical and, as in torch
        if fn == "mul" and DType.bool_ in (a.dtype, b.dtype):
            raise ArefTypeError("`*` of a mask (a boolean tile) and a number tile", loc,
                                hint="select with `aref.where(mask, x, 0.0)`; two masks combine with `&` (or `*`)")
        _bool_gate(types, SPELLING.get(fn, f"aref.{fn}"), loc)
        dtype = rules.promote(a.dtype, b.dtype, loc)
        if fn == "div" and not dtype.is_float:
            raise ArefTypeError("`/` on integer tiles", loc, hint="cast to a float type first with `.to(...)`")
        if fn == "pow" and not dtype.is_float:
            raise ArefTypeError("`**` with an integer tile as both base and exponent", loc,
                                hint="a constant integer exponent multiplies (`i ** 2` is `i * i`); otherwise cast "
                                     "to a float type with `.to(aref.float32)`")
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


def _pow(emit, op, x, y):
    """`x ** y` (C's powf, as torch computes it) from registered entries: |x|^y = exp2(y·log2|x|) on the MUFU;
    a negative base keeps its sign for an odd integer exponent and gives NaN for a non-integer one; y = 0
    gives 1."""
    def f(name, *xs):
        return emit(OpKind.UNARY, name, list(xs))

    def b(name, a, c):
        return emit(OpKind.BINARY, name, [a, c])

    def cmp(name, a, c):
        return emit(OpKind.COMPARE, name, [a, c])

    negative = cmp("lt", x, "0.0")
    odd = cmp("eq", b("sub", y, b("mul", "2.0", f("floor", b("mul", y, "0.5")))), "1.0")
    sign = emit(OpKind.WHERE, None, [cmp("and", negative, odd), "-1.0", "1.0"])
    r = b("mul", sign, f("exp2", b("mul", y, f("log2", f("abs", x)))))
    r = emit(OpKind.WHERE, None, [cmp("and", negative, cmp("ne", f("floor", y), y)), "float('nan')", r])
    return emit(OpKind.WHERE, None, [cmp("eq", y, "0.0"), "1.0", r])


def _binary_builder(fn: str):
    ops_ = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
            "div": lambda x, y: x / y, "floordiv": lambda x, y: x // y, "mod": lambda x, y: x % y,
            "maximum": lambda x, y: lang().maximum(x, y), "minimum": lambda x, y: lang().minimum(x, y),
            "pow": lambda x, y: x ** y}
    return ops_[fn]


# more ways a test exercises an entry: masks multiplied (logical and), `aref.clamp` (maximum then minimum),
# a negative base to an integral power, and a constant integer exponent (multiplications)
EXTRA_CASES = {
    "mul": (Case("mul-masks", lambda x, y: lang().where((x > 0) * (y < 1), x, y),
                 lambda x, y: torch.where((x > 0) & (y < 1), x, y)),),
    "minimum": (Case("clamp", lambda x, y: lang().clamp(x, 1, y),
                     lambda x, y: torch.minimum(torch.clamp(x, min=1), y)),),
    "pow": (Case("pow-negative-base", lambda x, y: (x - 2.5) ** lang().floor(y),
                 lambda x, y: torch.pow(x - 2.5, torch.floor(y))),
            Case("pow-constant", lambda x, y: x ** 3 + y ** -2 + x ** 0.5, lambda x, y: x ** 3 + y ** -2 + x ** 0.5)),
}


SPELLING = {"add": "`+`", "sub": "`-`", "mul": "`*`", "div": "`/`", "floordiv": "`//`", "mod": "`%`",
            "pow": "`**`"}
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
    # decomposed into exp2 / log2 (two MUFU instructions per element) and the selects of `_pow`
    ("pow", torch_fn("pow"), None, (), "**"),
]
ALGEBRA = {"add": Algebra(identity=0.0, affine="sum"), "sub": Algebra(identity=0.0, right_only=True,
                                                                      affine="difference"),
           "mul": Algebra(identity=1.0, absorbing=0.0, affine="product"),
           "div": Algebra(identity=1.0, right_only=True, reciprocal=True),
           "maximum": Algebra(identity=-float("inf")), "minimum": Algebra(identity=float("inf"))}
DECOMPOSE = {"maximum": _minmax_int("gt"), "minimum": _minmax_int("lt"), "pow": _pow}
for fn, f, template, classes, surface in BINARIES:
    register(OpDef(
        OpKind.BINARY, fn, "elementwise power `x ** y` (exp2 and log2 on the MUFU)" if fn == "pow" else
        f"elementwise {fn}" + (" (of two masks: logical and)" if fn == "mul" else ""),
        frozenset({ELEMENTWISE, CUDA_CORE} | ({MUFU} if fn == "pow" else set())),
        mufu_ops(2) if fn == "pow" else FMA_COST,
        type_rule=_binary_rule(fn), interpret=_binary_interp(f, fn),
        cute=tuple(Emit(template=template, operands=cls) for cls in classes)
        + ((Emit(template="({a} & {b})", operands="bool"),) if fn == "mul" else ()),
        decompose=DECOMPOSE.get(fn),
        hints=Hints(dtypes=(() if fn in ("floordiv", "mod") else FLOATS)
                    + ((DType.int32,) if fn not in ("div", "pow") else ()),
                    domain=(0.25, 4.0) if fn in ("div", "pow") else (1.0, 9.0) if fn in ("floordiv", "mod")
                    else (-4.0, 4.0),
                    cases=(Case(fn, _binary_builder(fn), f),) + EXTRA_CASES.get(fn, ()), roles=ROLES3, random=True,
                    tol=MUFU_TOL if fn == "pow" else EXACT_TOL,
                    ptx=("ex2.approx", "lg2.approx") if fn == "pow" else ()),
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
