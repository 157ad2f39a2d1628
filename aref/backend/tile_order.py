"""The order in which a launch walks its tile grid: which tile coordinates the n-th tile has.

Without rasterization (`raster` 0 or 1) tiles go x fastest, as the hardware launches a grid's CTAs. With
`raster = R` the tiles go in groups of G rows of grid axis 0 (G the largest divisor of that axis not above R,
so every group is whole and the mapping stays branch-free), walking axis 1 within a group column by column: the
CTAs that run at the same time then read G row panels of one operand and a few column panels of the other,
instead of every row panel, which keeps a wave's reads within the L2 cache (Triton's `GROUP_M` ordering,
CUTLASS's rasterization of its persistent tile scheduler).

`tile_coords` is the one definition. Applied to integers it gives coordinates (the performance model's wave
footprint, tests); applied to `Expr`, it builds the same arithmetic as source text for the generated kernel.
"""
from __future__ import annotations


def group_rows(extent: int, raster: int) -> int:
    """Rows of grid axis 0 per raster group: the largest divisor of `extent` that is at most `raster`."""
    if raster <= 1:
        return 1
    return max(d for d in range(1, min(raster, extent) + 1) if extent % d == 0)


def tile_coords(t, grid: tuple, raster: int = 0) -> tuple:
    """Coordinates (x, y, z) of tile number `t` of `grid` (up to 3 axes, missing ones are 1) in the walk
    `raster` asks for (see the module docstring). `t` is an int or an `Expr`."""
    gx, gy, gz = (tuple(grid) + (1, 1, 1))[:3]
    plane = gx * gy
    # z stays `t // plane` (0 for every tile of a 2-D grid) so that generated code keeps one integer type
    z, r = t // plane, (t % plane if gz > 1 else t)
    g = group_rows(gx, raster)
    if g == 1 or gy == 1:
        return (r % gx, r // gx, z)
    per_group = g * gy
    group, within = r // per_group, r % per_group
    return (group * g + within % g, within // g, z)


class Expr:
    """An integer expression as source text: the operators `tile_coords` uses, parenthesized."""

    def __init__(self, text: str):
        self.text = text

    def _op(self, sym: str, other) -> "Expr":
        return Expr(f"({self.text} {sym} {other.text if isinstance(other, Expr) else int(other)})")

    def __floordiv__(self, other):
        return self._op("//", other)

    def __mod__(self, other):
        return self._op("%", other)

    def __mul__(self, other):
        return Expr("0") if other == 0 else self if other == 1 else self._op("*", other)

    def __add__(self, other):
        return self if other == 0 else self._op("+", other)

    def __radd__(self, other):
        return self if other == 0 else Expr(f"({int(other)} + {self.text})")

    def __rmul__(self, other):
        return self.__mul__(other)

    def __str__(self) -> str:
        return self.text


def tile_coords_source(var: str, grid: tuple, raster: int = 0) -> str:
    """`(x, y, z)` of tile `var` as a Python/CuTe DSL tuple expression (see `tile_coords`)."""
    return "(" + ", ".join(str(c) for c in tile_coords(Expr(var), grid, raster)) + ")"
