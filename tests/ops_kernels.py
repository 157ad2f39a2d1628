"""Kernels built from the op registry's test hints (`aref.ops.Hints.cases`), for the enumeration tests.

* `one_op(case, dtype)` — one case on two loaded tiles of `dtype` (a CUDA-core kernel, one CTA), so the
  interpreter can be checked against the case's torch oracle;
* `all_ops(role, variant)` — every case of every entry that claims `role`, on inputs of each dtype mapped
  into the entry's domain (or the elementwise ones on row vectors, column vectors and single values), summed
  into one float32 tile: in a wgmma consumer on accumulator fragments
  ("mma_consumer"), in a CUDA-core group on loaded tiles ("compute") or after the loop ("epilogue"). One
  kernel per role exercises every op there at once, so the backend compiles three kernels, not hundreds.
"""
from __future__ import annotations

import torch

import aref
from aref import aref_kernel, ops
from aref.ir.dtypes import to_torch
from aref.ir import DType, OpKind

T = 64                                     # tile extent of one-op kernels (rows and columns)
ROWS, COLS = 64, 16                        # all-ops kernels: one 64-row wgmma atom, 4 elements per thread
ROLES = ("mma_consumer", "compute", "epilogue")


def entry_cases(role: str | None = None, square: bool | None = None, only=None):
    """(entry, case) pairs of every registry entry with test cases (that claims `role`; whose case needs
    square tiles or not; whose entry name, e.g. "unary.tanh", is in `only`)."""
    return [(d, c) for d in ops.entries() for c in d.hints.cases if (role is None or role in d.hints.roles)
            and (square is None or c.square == square) and (only is None or d.name in only)]


def case_id(d, c) -> str:
    return f"{d.name}:{c.label}"


# ------------------------------------------------------------------------------------------ one op
def one_op(case):
    @aref_kernel(grid=lambda X, **_: (1,))
    def one_op_kernel(X, Y, Z, *, BM: int = T, BN: int = T):
        ch = aref.channel(depth=1)
        for j in aref.range(1):
            ch.put(aref.load(X, (0, j), (BM, BN)), aref.load(Y, (0, j), (BM, BN)))
            x, y = ch.get()
            z = case.build(x, y)
            aref.store(Z, (0, j), z.to(aref.int32) if z.dtype is DType.bool_ else z)   # no boolean tensors
            ch.consumed()
    return one_op_kernel


def inputs(d: ops.OpDef, dtype: DType, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two T×T inputs of `dtype` in the entry's domain."""
    g = torch.Generator().manual_seed(seed)
    lo, hi = d.hints.domain
    if dtype is DType.int32:
        return tuple(torch.randint(int(lo), int(hi) + 1, (T, T), generator=g, dtype=torch.int32) for _ in range(2))
    return tuple((lo + (hi - lo) * torch.rand(T, T, generator=g)).to(to_torch(dtype)) for _ in range(2))


# ------------------------------------------------------------------------------------------ all ops
def _domain(x, d: ops.OpDef, dtype: DType):
    """`x` (uniform in [0, 1) as float32, or an int in [0, 1000)) mapped into the entry's input domain."""
    lo, hi = d.hints.domain
    if dtype is DType.int32:
        return (x.to(DType.int32) % max(1, int(hi - lo) + 1)) + int(lo)
    return (x * (hi - lo) + lo).to(dtype)


def _apply_all(role: str, x, y, dtypes, variant: str, part: tuple[int, int] = (0, 1),
               only=None) -> "aref.lang.Tile":
    """The sum (float32) of every case of `role` on x, y mapped into each entry's domain, per dtype:
    on tiles ("tile"), on square tiles for the cases that need them ("square"), or the elementwise cases
    on a row vector, a column vector and a single value, broadcast back ("vectors"). `part` (i, n): only the
    i-th of every n cases."""
    total = None
    shapes = {"rows": (x.max(1), y.max(1)), "cols": (x.min(0), y.min(0)), "one": (x.max(1).max(0), y.max(1).max(0))}
    for i, (d, c) in enumerate(entry_cases(role, variant == "square", only)):
        if i % part[1] != part[0]:
            continue
        if variant == "vectors" and not (d.has(ops.ELEMENTWISE) and d.kind is not OpKind.SELECT):
            continue
        for dt in d.hints.dtypes:
            if dt not in dtypes:
                continue
            scale = 1000.0 if dt is DType.int32 else 1.0

            def apply(a, b):
                return c.build(_domain(a * scale, d, dt), _domain(b * scale, d, dt)).to(DType.float32)
            if variant == "vectors":
                z = apply(*shapes["rows"])[:, None] + apply(*shapes["cols"])[None, :] + apply(*shapes["one"])
            else:
                z = apply(x, y)
            total = z if total is None else total + z
    return total


VARIANTS = ("tile", "square", "vectors")


def all_ops(role: str, variant: str = "tile", dtypes=None, part: tuple[int, int] = (0, 1), only=None):
    """One kernel exercising every case that claims `role` (see `_apply_all` for the variants); its inputs
    are uniform in [0, 1). Square (64×64) tiles hold 32 registers each: in a wgmma consumer, next to its
    accumulators, only float32 inputs fit the register budget. `part` (i, n): the kernel of the i-th of every n
    cases (one kernel of every case keeps ~60 results live at once where ptxas schedules for ILP); `only`: the
    cases of the entries so named (`entry_cases`)."""
    if dtypes is None:
        dtypes = (DType.float32,) if variant == "square" and role != "compute" else (DType.float32, DType.int32)
    if role == "compute":
        @aref_kernel(grid=lambda X, **_: (1,))
        def all_ops_compute(X, Y, Z, *, BM: int = ROWS, BN: int = COLS):
            ch = aref.channel(depth=2)
            for j in aref.range(X.shape[1] // BN):
                ch.put(aref.load(X, (0, j), (BM, BN)), aref.load(Y, (0, j), (BM, BN)))
                x, y = ch.get()
                z = _apply_all(role, x.to(aref.float32), y.to(aref.float32), dtypes, variant, part, only)
                aref.store(Z, (0, j), z.to(Z.dtype))
                ch.consumed()
        return all_ops_compute

    if role == "mma_consumer":
        @aref_kernel(grid=lambda A, **_: (1,))
        def all_ops_consumer(A, B, Z, *, BM: int = ROWS, BN: int = COLS, BK: int = ROWS):
            o = aref.zeros((BM, BN), aref.float32)
            ab = aref.channel(depth=2)
            for k in aref.range(A.shape[1] // BK):
                ab.put(aref.load(A, (0, k), (BM, BK)), aref.load(B, (0, k), (BN, BK)))
                a, b = ab.get()
                s = aref.mma(a, b.T)                       # accumulator fragments in [0, 1)
                o = o + _apply_all(role, s, s * 0.5 + 0.25, dtypes, variant, part, only)
                ab.consumed()
            aref.store(Z, (0, 0), o.to(Z.dtype))
        return all_ops_consumer

    @aref_kernel(grid=lambda A, **_: (1,))
    def all_ops_epilogue(A, B, Z, *, BM: int = ROWS, BN: int = COLS, BK: int = ROWS):
        acc = aref.zeros((BM, BN), aref.float32)
        ab = aref.channel(depth=2)
        for k in aref.range(A.shape[1] // BK):
            ab.put(aref.load(A, (0, k), (BM, BK)), aref.load(B, (0, k), (BN, BK)))
            a, b = ab.get()
            acc = aref.mma(a, b.T, acc)
            ab.consumed()
        s = acc * (1.0 / A.shape[1])
        aref.store(Z, (0, 0), _apply_all(role, s, s * 0.5 + 0.25, dtypes, variant, part, only).to(Z.dtype))
    return all_ops_epilogue


def all_ops_inputs(role: str, variant: str = "tile", seed: int = 0, k_tiles: int = 1) -> dict:
    """Inputs in [0, 1) (MMA operands scaled so one k-tile's dot products stay in [0, 1))."""
    g = torch.Generator().manual_seed(seed)
    n = ROWS if variant == "square" else COLS
    if role == "compute":
        return {"X": torch.rand(ROWS, k_tiles * n, generator=g), "Y": torch.rand(ROWS, k_tiles * n, generator=g),
                "Z": torch.zeros(ROWS, k_tiles * n), "BN": n}
    scale = (1.0 / ROWS) ** 0.5
    return {"A": (torch.rand(ROWS, k_tiles * ROWS, generator=g) * scale).half(),
            "B": (torch.rand(n, k_tiles * ROWS, generator=g) * scale).half(), "Z": torch.zeros(ROWS, n), "BN": n}
