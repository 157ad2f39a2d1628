"""The op registry: one entry per (OpKind, fn) holding everything the compiler knows about that op.

Each `OpDef` keeps an op's rules side by side (see ../shared/OPS_REGISTRY.md):

  traits      what kind of op it is (elementwise, reduction, view, MUFU, side effect, ...); the passes ask
              these questions and never compare fn strings;
  type_rule   operand types and attributes in, result types out, including the dtype gate. The language
              calls it while tracing and the verifier calls it again on every op, so the two cannot drift;
  interpret   float32 torch math of the op (the rounding to the result dtype is `round_to`, one policy for
              all ops); the interpreter and the simulator both evaluate ops through it;
  cost        the machine unit the op occupies and a cycles formula (`aref.target.machine.op_cost` asks here);
  cute        how the CuTe DSL backend emits it, per (role, layout), looked up by `cute_emission` in the
              order exact → default → decomposition → one uniform error;
  hints       what a test needs to exercise it: input domain, dtypes, a torch oracle, the roles it claims
              and the backend gaps it expects.

Entries live in one module per family (`elementwise`, `reduce`, `tiles`, `memory`); importing the package
(`aref.ops`) registers them all and checks that every OpKind and every fn has exactly one entry.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

from aref.ir import DType, Op, OpKind, TileType

# ------------------------------------------------------------------------------------------------- traits
ELEMENTWISE = "elementwise"      # per-element function of its operands (numpy broadcasting)
REDUCTION = "reduction"          # combines the elements along one axis
VIEW = "view"                    # renames or re-indexes data, computes nothing
TILE_SOURCE = "tile_source"      # makes a register tile from attributes alone (full, arange)
SCALAR = "scalar"                # CTA-uniform integer index math
CUDA_CORE = "cuda_core"          # runs on the CUDA cores of a consumer / compute group (partitioning)
MUFU = "mufu"                    # a special-function-unit instruction (ex2, lg2, sqrt, rsqrt)
EXPONENTIAL = "exponential"      # exp / exp2: the softmax signature the partitioners name groups after
RUNNING_MAX = "running_max"      # a max reduction: with EXPONENTIAL, the online-softmax signature
MEMORY = "memory"                # moves tiles between memories
MMA = "mma"                      # tensor-core matrix multiply
CHANNEL = "channel"              # aref channel protocol
SYNC = "sync"                    # Barrier IR synchronisation
PIPELINE = "pipeline"            # introduced by pipelining (select between pipeline states)
SIDE_EFFECT = "side_effect"      # effect not captured by results (never dead-code eliminated)
PREDICATE = "predicate"          # its result is a boolean (comparisons)
CROSS_GROUP = "cross_group"      # acts on state other warp groups observe (mbarriers, ring slots, the tensor
                                 # core's queue, the register pool): a scheduling point of the simulator
TRAITS = frozenset({ELEMENTWISE, REDUCTION, VIEW, TILE_SOURCE, SCALAR, CUDA_CORE, MUFU, EXPONENTIAL,
                    RUNNING_MAX, MEMORY, MMA, CHANNEL, SYNC, PIPELINE, SIDE_EFFECT, PREDICATE, CROSS_GROUP})

# ---------------------------------------------------------------------------------------- backend keys
# Roles a computing op can be emitted in, and the register layouts it can be emitted on (CuTe backend):
#   mma_consumer  a warp group that issues wgmma (register math on accumulator fragments)
#   compute       a CUDA-core warp group (no wgmma): tiles held in the same accumulator layout
#   epilogue      the code after the loop of either
#   acc           a 2-D tile in the wgmma accumulator layout (rows over a quad of threads)
#   row / col     a vector with one value per accumulator row / column this thread holds
#   scalar        one value, the same in every thread (index math, rank-0 tiles)
ROLES = ("mma_consumer", "compute", "epilogue")
LAYOUTS = ("acc", "row", "col", "scalar")

# expression forms of a CuTe emission
EXPR = "expr"            # an element expression, fused into the loop over the value's elements
VIEWING = "view"         # an index remapping of its operand (no code of its own)
REDUCING = "reduce"      # a loop over the reduced axis plus cross-thread combination
STRUCTURAL = "structural"  # emitted by the role skeleton (barriers, TMA, wgmma, slots, stores)


@dataclass(frozen=True)
class ReduceSpec:
    """How the CuTe backend reduces with this function: identity element and pairwise combination, as
    templates over the compute type `{T}` and operands `{a}`, `{b}`."""

    identity: str
    combine: str


@dataclass(frozen=True)
class Emit:
    """One CuTe emission rule. `template` formats operand expressions `{a}`, `{b}`, `{c}` (float32, Int32
    or Boolean compute values) into the result's expression, or is a callable `(op) -> template`.

    `roles` / `layouts` (None: any) say where the rule applies; `operands` restricts it to float or integer
    compute types of the result ("float", "int"); `helpers` names the `aref.backend.cute.support` functions
    it calls (so tests can check they exist)."""

    form: str = EXPR
    template: str | Callable | None = None
    roles: frozenset | None = None
    layouts: frozenset | None = None
    operands: str | None = None
    reduce: ReduceSpec | None = None
    helpers: tuple[str, ...] = ()

    def applies(self, role: str, layout: str, cls: str, exact: bool) -> bool:
        if self.operands is not None and self.operands != cls:
            return False
        if exact:
            return self.roles is not None and role in self.roles and self.layouts is not None \
                and layout in self.layouts
        return (self.roles is None or role in self.roles) and (self.layouts is None or layout in self.layouts)


@dataclass(frozen=True)
class Algebra:
    """Identities of a binary op that code generators may apply (none changes a result the interpreter
    computes, except that `absorbing` assumes finite operands, as fast-math code does):

    identity     x ∘ e = x (and e ∘ x = x unless `right_only`): `x + 0`, `x * 1`, `max(x, -inf)`
    absorbing    x ∘ z = z: `x * 0` (a zero-initialised state scaled stays zero)
    reciprocal   x / d = x · (1/d): a divisor that varies less than x is inverted once
    affine       how an index expression composes with a constant: "sum", "difference" or "product"
    """

    identity: float | None = None
    right_only: bool = False
    absorbing: float | None = None
    reciprocal: bool = False
    affine: str | None = None


@dataclass(frozen=True)
class Cost:
    """The unit an op occupies (names of `aref.target.machine`) and its cycles: `cycles(op, machine, rng)`.
    `unit` may be a callable of the op when it depends on operand types."""

    unit: str | Callable
    cycles: Callable

    @property
    def declared_unit(self) -> str:
        """The unit on tiles (a callable unit names it as `tile_unit`; scalars take the issue slot)."""
        return self.unit if isinstance(self.unit, str) else getattr(self.unit, "tile_unit", "?")


@dataclass(frozen=True)
class Case:
    """One way a test exercises an entry: `build(x, y)` applies the op to two tiles of the tile language
    (and whatever it needs around it), `oracle(x, y)` computes the same on float64 torch tensors."""

    label: str
    build: Callable
    oracle: Callable
    square: bool = False        # needs square tiles (a transpose keeps the shape)


@dataclass(frozen=True)
class Hints:
    """What a test needs to exercise an entry (tests/test_ops_registry.py enumerates them).

    dtypes:  input dtypes to try;  domain: (low, high) of random inputs;  cases: how to build and check it;
    roles: backend roles the entry claims;  gaps: {(role or None, layout or None): reason} refusals
    expected for hardware reasons;  random: random programs may draw it;  tol: (atol, rtol) of the GPU
    against the interpreter (fast-math intrinsics, summation order);  carrier: for structural ops, the
    example program in which the op appears;  ptx: instructions its CuTe emission must compile to (e.g.
    "tanh.approx.f32": the cost's unit is the hardware's)."""

    dtypes: tuple[DType, ...] = (DType.float32,)
    domain: tuple[float, float] = (-4.0, 4.0)
    cases: tuple[Case, ...] = ()
    roles: tuple[str, ...] = ()
    gaps: dict = field(default_factory=dict)
    random: bool = False
    tol: tuple[float, float] = (1e-5, 1e-5)
    carrier: str | None = None
    ptx: tuple[str, ...] = ()


class _Torch:
    """torch, imported when an op is first evaluated: importing the language (and `aref --help`) needs none."""

    def __getattr__(self, name: str):
        import torch
        return getattr(torch, name)


TORCH = _Torch()


def torch_fn(name: str) -> Callable:
    """`torch.<name>`, resolved when called (tables of torch functions without importing torch)."""
    def call(*args, **kwargs):
        return getattr(TORCH, name)(*args, **kwargs)
    call.__name__ = name
    return call


_LANGUAGE: list = []          # the surface language module, once it has registered itself (`use_language`)


def use_language(module) -> None:
    """Called by `aref.lang` when it is imported: the registry's test cases (`Case.build`) are written in the
    surface language, which sits above the registry, so the language registers itself here instead of the
    registry importing it."""
    _LANGUAGE[:] = [module]


def lang():
    """The tile language module (`aref.lang`; a test builds its cases while tracing a kernel, so it is loaded)."""
    if not _LANGUAGE:
        raise RuntimeError("aref.lang has not been imported: the registry's cases are written in it")
    return _LANGUAGE[0]


@dataclass(frozen=True)
class OpDef:
    """Everything about one op: see the module docstring. `fn` is None for kinds without a function."""

    kind: OpKind
    fn: str | None
    doc: str
    traits: frozenset
    cost: Cost
    type_rule: Callable | None = None          # (types, attrs, loc) -> tuple of result types
    interpret: Callable | None = None          # (op, vals, cta) -> value before rounding
    cute: tuple[Emit, ...] = ()
    decompose: Callable | None = None          # (emit, op, args) -> expression, from other entries
    hints: Hints = field(default_factory=Hints)
    surface: str | None = None                 # the public spelling (`aref.exp`, `+`, `.max(axis)`)
    algebra: Algebra = field(default_factory=Algebra)

    @property
    def key(self) -> tuple[OpKind, str | None]:
        return (self.kind, self.fn)

    @property
    def name(self) -> str:
        return self.kind.value + (f".{self.fn}" if self.fn else "")

    def has(self, trait: str) -> bool:
        return trait in self.traits


_REGISTRY: dict[tuple[OpKind, str | None], OpDef] = {}


def register(*defs: OpDef) -> None:
    for d in defs:
        if d.key in _REGISTRY:
            raise AssertionError(f"op {d.name} registered twice")
        unknown = set(d.traits) - TRAITS
        if unknown:
            raise AssertionError(f"op {d.name} has unknown traits {sorted(unknown)}")
        _REGISTRY[d.key] = d


def lookup(kind: OpKind, fn: str | None = None) -> OpDef:
    """The entry of (kind, fn); KeyError for an unregistered pair (the verifier reports it)."""
    return _REGISTRY[(kind, fn)]


def entry(op: Op) -> OpDef:
    """The entry of an op (its kind and, for function-carrying kinds, `attrs.fn`)."""
    return _REGISTRY[(op.kind, getattr(op.attrs, "fn", None))]


def entries() -> list[OpDef]:
    """Every entry, in registration order."""
    return list(_REGISTRY.values())


def fns(kind: OpKind) -> tuple[str, ...]:
    """The functions registered for a function-carrying kind (UNARY_FNS and friends derive from it)."""
    return tuple(fn for (k, fn) in _REGISTRY if k is kind and fn is not None)


def kinds_with(*traits: str) -> frozenset[OpKind]:
    """Kinds all of whose entries have every trait in `traits`."""
    out = set()
    for kind in OpKind:
        defs = [d for (k, _), d in _REGISTRY.items() if k is kind]
        if defs and all(set(traits) <= d.traits for d in defs):
            out.add(kind)
    return frozenset(out)


def has_trait(op: Op, trait: str) -> bool:
    """Whether `op`'s entry has `trait` (the passes' question instead of comparing fn strings)."""
    return trait in entry(op).traits


# ----------------------------------------------------------------------------------------- type rules
def result_types(kind: OpKind, fn: str | None, types: list, attrs, loc) -> tuple:
    """Result types of an op built from operand `types` and `attrs` (raises ArefTypeError at `loc`)."""
    d = lookup(kind, fn)
    if d.type_rule is None:
        raise AssertionError(f"op {d.name} has no type rule")
    return d.type_rule(types, attrs, loc)


# ------------------------------------------------------------------------------------------- rounding
_FP8_MAX = {DType.float8_e4m3: 448.0, DType.float8_e5m2: 57344.0}
_I32 = (-2 ** 31, 2 ** 31 - 1)


def round_to(x, t):
    """Round a computed value to IR type `t` as the GPU's conversions do.

    Tiles become tensors of their dtype (broadcast to their shape): floats round to nearest even, fp8
    saturates to the largest finite value (cvt.rn.satfinite), float → int32 truncates toward zero and
    saturates, NaN → 0 (cvt.rzi.s32.f32). Scalars become Python numbers.
    """
    import torch

    from aref.ir.dtypes import to_torch
    if not isinstance(t, TileType):
        return x.item() if isinstance(x, torch.Tensor) else x
    if t.dtype in _FP8_MAX and x.is_floating_point() and x.dtype != to_torch(t.dtype):
        m = _FP8_MAX[t.dtype]
        x = x.float().clamp(-m, m)
    elif t.dtype is DType.int32 and x.is_floating_point():
        x = torch.nan_to_num(x.double(), nan=0.0).clamp(*_I32).trunc()
    x = x.to(to_torch(t.dtype))
    if tuple(x.shape) != t.shape:
        x = x.expand(t.shape).clone()
    return x


def interpret(op: Op, vals: list, cta: tuple[int, ...]):
    """The value of `op` (before rounding) from its operand values, by its entry's rule."""
    rule = entry(op).interpret
    if rule is None:
        raise NotImplementedError(f"no value semantics for {op.kind.value}")
    return rule(op, vals, cta)


# ---------------------------------------------------------------------------------------------- cost
def cost(op: Op, machine, rng: random.Random | None = None) -> tuple[str, int]:
    """`(unit, cycles)` of `op` on `machine`, by its entry's cost rule."""
    c = entry(op).cost
    unit = c.unit(op) if callable(c.unit) else c.unit
    return unit, c.cycles(op, machine, rng)


# ------------------------------------------------------------------------------------------ emission
def compute_class(dtype: DType) -> str:
    """The compute type register math uses for `dtype`: "float" (float32), "int" (Int32) or "bool"."""
    if dtype.is_float:
        return "float"
    return "bool" if dtype is DType.bool_ else "int"


class NoEmission(Exception):
    """No CuTe rule for an op in a role and layout (the backend turns it into its own error)."""

    def __init__(self, d: OpDef, role: str, layout: str, cls: str):
        self.entry, self.role, self.layout = d, role, layout
        reason = d.hints.gaps.get((role, layout)) or d.hints.gaps.get((None, layout)) \
            or d.hints.gaps.get((role, None))
        text = f"the Hopper templates cannot emit {d.name} ({cls} operands) in a {role} role on the {layout} layout"
        super().__init__(text + (f": {reason}" if reason else ""))


def cute_emission(d: OpDef, role: str, layout: str, cls: str) -> Emit | None:
    """The CuTe rule of entry `d` in (role, layout) for compute class `cls`: the exact rule, else the
    default; None when neither applies and the entry has a decomposition (the caller decomposes);
    NoEmission otherwise (one error naming op, role and layout)."""
    for exact in (True, False):
        for e in d.cute:
            if e.applies(role, layout, cls, exact):
                return e
    if d.decompose is not None:
        return None
    raise NoEmission(d, role, layout, cls)
