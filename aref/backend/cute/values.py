"""What an IR value is in generated code: a scalar expression, a shared-memory slot tile, or a register tile.

The role emitter keeps one of these per Barrier IR value. Scalars are folded at generation time whenever
they are constants of the specialization (tile counts, prologue item numbers, predicates), so the generated
code carries the schedule's numbers rather than their arithmetic; scalars that depend on a loop index stay
expressions and remember their affine form in that index, which is how a loop-carried slot view of the
previous iteration is named.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from aref.ir import DType, TileType


@dataclass(frozen=True)
class Scalar:
    """`expr` is Python source; `value` is set when the scalar is a generation-time constant."""

    expr: str
    value: int | float | bool | None = None
    affine: tuple[str, int, int] | None = None      # (loop index, coefficient, constant) when known

    @staticmethod
    def const(v) -> "Scalar":
        return Scalar(literal(v), v, None)

    @property
    def static(self) -> bool:
        return self.value is not None


def literal(v) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        if math.isinf(v):
            return "-cutlass.Float32.inf" if v < 0 else "cutlass.Float32.inf"
        return repr(v)
    return str(v)


def affine_expr(index: str, coef: int, const: int, keep_zero: bool = False) -> str:
    """`coef * index + const`; `keep_zero` writes `+ 0` so that groups differing in it share code."""
    if coef == 0:
        return str(const)
    base = index if coef == 1 else f"{coef} * {index}"
    if const == 0 and not keep_zero:
        return base
    return f"{base} + {const}" if const >= 0 else f"{base} - {-const}"


def coordinate(s: "Scalar") -> str:
    """A tile coordinate: affine ones always show their offset (`2 * pid_m + 0`)."""
    if s.affine is not None and not s.static and s.affine[1:] != (1, 0):
        return affine_expr(*s.affine, keep_zero=True)
    return strip_parens(s.expr)


def scalar_binary(fn: str, a: Scalar, b: Scalar) -> Scalar:
    """Fold or render a SCALAR_BINARY op by its registry entry (the interpreter's rule folds constants)."""
    from aref import ops
    from aref.ir import OpKind
    d = ops.lookup(OpKind.SCALAR_BINARY, fn)
    if a.static and b.static:
        return Scalar.const(d.interpret(None, [a.value, b.value], ()))
    aff, kind = None, d.algebra.affine
    if kind in ("sum", "difference") and a.affine and b.static:
        i, c, k = a.affine
        aff = (i, c, k + (b.value if kind == "sum" else -b.value))
    elif kind == "sum" and b.affine and a.static:
        i, c, k = b.affine
        aff = (i, c, k + a.value)
    elif kind == "product" and a.affine and b.static:
        i, c, k = a.affine
        aff = (i, c * b.value, k * b.value)
    if aff is not None:
        return Scalar(affine_expr(*aff), None, aff)
    # `x + 0` is kept: groups that differ only in such constants then share one role function
    template = d.cute[0].template
    if template.startswith("("):
        return Scalar(template.format(a=paren(a.expr), b=paren(b.expr)))
    return Scalar(template.format(a=a.expr, b=b.expr))


def paren(expr: str) -> str:
    """`expr` safe to use as an operand."""
    return f"({expr})" if " " in strip_parens(expr) and strip_parens(expr) == expr else expr


def strip_parens(expr: str) -> str:
    """`(a + b)` → `a + b` when the outer parentheses enclose everything."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return expr
    depth = 0
    for i, c in enumerate(expr):
        depth += c == "("
        depth -= c == ")"
        if depth == 0 and i < len(expr) - 1:
            return expr
    return expr[1:-1]


@dataclass(frozen=True)
class SmemTile:
    """A channel slot's tile (or a row block / transpose of it, or on Blackwell a column block of a row or
    vector along the columns, from `col0`), as read after its `full` wait."""

    channel: str
    index: int
    slot: Scalar
    item: Scalar
    tile: TileType
    transposed: bool = False
    row0: int = 0
    col0: int = 0


@dataclass
class Buffer:
    """A register tensor of the generated code holding one tile in a layout of `aref.resources.layout`."""

    name: str
    shape: tuple[int, ...]       # the IR tile's shape
    dtype: DType
    layout_mma: str              # the wgmma whose C layout holds it (acc tiles)
    rc: str = ""                 # (rows, cols) view name of an acc tile
    layout: str = "acc"          # acc | row | col | scalar

    @property
    def elements(self) -> int:
        """Elements per thread."""
        if self.layout == "acc":
            return self.shape[0] * self.shape[1] // 128
        if self.layout == "row":
            return self.rows
        if self.layout == "col":
            return self.cols
        return 1

    @property
    def registers(self) -> int:
        """32-bit registers per thread (a boolean takes a whole register)."""
        bits = 32 if self.dtype is DType.bool_ else self.dtype.bits
        return max(1, self.elements * bits // 32)

    @property
    def is_tile(self) -> bool:
        return self.layout == "acc"

    @property
    def rows(self) -> int:
        """Rows this thread holds: 2 per 64-row wgmma atom."""
        return self.shape[0] // 32

    @property
    def cols(self) -> int:
        """Columns this thread holds of each of its rows: 2 of every 8."""
        return self.shape[-1] // 4

    @property
    def extents(self) -> tuple[int, ...]:
        """Loop extents over this thread's elements, in (r, c) order of its layout."""
        if self.layout == "acc":
            return (self.rows, self.cols)
        return (self.rows,) if self.layout == "row" else (self.cols,) if self.layout == "col" else ()

    def at(self, r: str | None, c: str | None) -> str:
        """The element at register indices (r, c) (the ones the layout has)."""
        if self.layout == "acc":
            return f"{self.rc}[{r}, {c}]"
        if self.layout == "row":
            return f"{self.name}[{r}]"
        if self.layout == "col":
            return f"{self.name}[{c}]"
        return f"{self.name}[0]"


@dataclass
class Reg:
    """An IR value held in (part of) a register buffer."""

    buf: Buffer


@dataclass(frozen=True)
class Zero:
    """A zero-filled tile not materialized yet (an MMA that accumulates into it starts from zero)."""

    tile: TileType
    fill: float = 0.0
