"""Random tile programs for property tests and coverage benchmarks.

`random_program(seed)` (or the hypothesis strategy `programs()` + `build(spec)`) writes one module that
follows the example convention — an `@aref_kernel` `prog`, `example_inputs(size, **overrides)` and
`reference(**inputs)` — so a failing program is reproduced with `aref run FILE --backend sim`. The kernel
and the reference are rendered from one drawn structure twice: for `aref` and, with the loop a plain Python
loop and every CTA enumerated, for eager torch (`tt`, defined in the module itself: an independent oracle).

Language features the generator draws (`RandomProgram.features` lists those of one program):

* tiles at sizes wgmma and TMA accept (`size="wgmma"`, the default): rows 64 or 128 per (sub-)tile, columns
  32/64/128 halves, K steps 32/64 halves (16-byte TMA boxes), from a table of shapes whose tiles fit a
  consumer's registers (`WGMMA_SHAPES`; `WIDE_SHAPES`, twice the registers, with shallower expressions);
  `size="small"`: 16/32-wide tiles, quicker;
* extents that do not divide the tiles (`ragged`, about three programs in ten: M, N, K short of whole tiles by
  multiples of 8 elements) with `cdiv` grids and trip counts: loads zero-fill, stores clip;
* a grid of 1–2 × 1–2 CTAs (`program_id` on two axes), one or two row sub-tiles per CTA carried in lists
  (`acc[i] = ...`: independent sub-tiles make ping-pong consumers apply);
* operands through a user channel (depth 1–3) or loaded directly in the loop (compiler TMA channels);
* trip counts: static, run-time from `program_id` (`aref.minimum` / `aref.maximum` on scalars, causal-style
  block skipping), and 0;
* loads before the loop (a bias tile kept in shared memory or cast to registers, row and column vectors),
  after the loop (bias tile, column vector) and in the loop (a second B-like tile for a chained MMA);
* index tiles and masks: `arange` + `program_id` row / column indices, comparisons, `aref.where` on
  them and on run-time scalars (`k >= pid_n`), index tiles cast to float;
* math: + − × maximum minimum, exp2, abs, neg, scaling, casts to f16 / bf16 and back, `where` on
  comparisons, broadcasts along both axes (`x[:, None]`, `x[None, :]`), reductions along both axes
  (rowsum / rowmax / rowmin, `.sum(0)` / `.max(0)`), MMAs with operands from registers, chained MMAs (one
  MMA beyond the loop's own per program: every MMA result is live from its issue);
* loop-carried values: the accumulators (lists), a row vector per sub-tile, a column vector shared by all;
* stores: in the loop every iteration (a tile, and a row vector with `reduce="add"`), after the loop (the
  output tile as f16 or f32, a rank-1 row vector, a column vector with `reduce="add"` across CTAs).
"""
from __future__ import annotations

import os
import random
import tempfile
from dataclasses import dataclass, field, replace

from hypothesis import strategies as st

ARCHS = ("sm_90a", "sm_100a")
SIZES = {"wgmma": {"SUB": (64, 128), "BN": (32, 64, 128), "BK": (32, 64)},
         "small": {"SUB": (16, 32), "BN": (16, 32), "BK": (16, 32)}}


# --------------------------------------------------------------------------------------------- drawing
class _SeedDraw:
    """Choices from a seeded `random.Random` (the plain API)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, xs):
        return xs[self.rng.randrange(len(xs))]

    def flag(self, p: float = 0.5) -> bool:
        return self.rng.random() < p


class _HypothesisDraw:
    """The same choices through hypothesis (so failures shrink)."""

    def __init__(self, draw):
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def choice(self, xs):
        return self.draw(st.sampled_from(list(xs)))

    def flag(self, p: float = 0.5) -> bool:
        return self.draw(st.booleans())


@dataclass(frozen=True)
class Spec:
    """The drawn structure of one program (everything `render` needs)."""

    size: str
    SUB: int
    S: int                    # row sub-tiles per CTA (BM = S·SUB)
    BN: int
    BK: int
    GM: int
    GN: int
    trips: int                # K // BK
    trip_kind: str            # "static" | "shrink" (max(NK − pid_m, 0)) | "causal" (min(NK, (pid_m+1)·CT))
    depth: int                # user channel depth; 0: tiles loaded directly in the loop
    split_puts: bool          # (two sub-tiles, depth ≥ 2) one put per A sub-tile: two items per iteration
    reg_depth: int            # a second user channel carrying computed f16 tiles (0: none)
    out_f16: bool
    pre_bias: str             # "" | "smem" | "rmem"
    pre_rowvec: bool
    pre_colvec: bool
    post_bias: bool
    post_colvec: bool
    chain: bool               # a second MMA per iteration with an in-loop loaded W tile
    masks: bool               # arange / program_id index tiles
    carry_col: bool           # a carried column vector (reductions over rows), stored with reduce="add"
    inloop_store: bool
    inloop_reduce: bool
    e_acc: tuple
    e_r: tuple
    e_c: tuple | None
    e_store: tuple | None     # in-loop tile store
    e_radd: tuple | None      # in-loop reduce-add row store
    o_mn: tuple
    o_m: tuple
    o_n: tuple | None
    ragged: tuple = ()        # (dM, dN, dK): extents this much short of whole tiles (multiples of 8: TMA's
                              # 16-byte global strides); () for extents that divide the tiles

    @property
    def BM(self) -> int:
        return self.S * self.SUB


# wgmma shapes (S, SUB, BN, BK) whose consumer tiles fit the registers (at most 256 per thread): one BM × BN
# (and BM × BK, A as f32) tile takes ≤ 32 registers per thread (4096 f32 over a warp group's 128 threads), or
# each of two independent 64-row sub-tiles does (consumers take one each); the wide shapes take twice that and
# are drawn with shallower expressions (fewer tiles live at once)
WGMMA_SHAPES = [(1, 64, 32, 32), (1, 64, 64, 32), (1, 64, 64, 64), (1, 128, 32, 32), (2, 64, 32, 32)]
WIDE_SHAPES = [(1, 64, 128, 32), (1, 128, 64, 32), (2, 64, 64, 32)]


def draw_spec(d, size: str = "wgmma") -> Spec:
    sizes = SIZES[size]
    wide = size == "wgmma" and d.flag(0.1)
    if size == "wgmma":
        S, SUB, bn, bk = d.choice(WIDE_SHAPES if wide else WGMMA_SHAPES)
    else:
        S, SUB, bn, bk = d.integer(1, 2), d.choice(sizes["SUB"]), d.choice(sizes["BN"]), d.choice(sizes["BK"])
    deep = 1 if wide else 3
    flags = dict(pre_bias=d.choice(["", "smem", "rmem"]), pre_rowvec=d.flag(), pre_colvec=d.flag(),
                 post_bias=d.flag(), post_colvec=d.flag(), chain=d.flag(0.35), masks=d.flag(),
                 carry_col=d.flag(0.4), inloop_store=d.flag(0.35), inloop_reduce=d.flag(0.35))
    depth = d.choice([0, 1, 2, 3])
    flags["split_puts"] = S == 2 and depth >= 2 and d.flag()
    flags["reg_depth"] = d.choice([0, 0, 1, 2])
    if wide:                                  # no second B-like tile, register bias or handed-over tiles
        flags.update(chain=False, reg_depth=0, pre_bias=flags["pre_bias"].replace("rmem", "smem"))
    ctx = _Leaves(**{k: flags[k] for k in ("pre_bias", "pre_rowvec", "pre_colvec", "chain", "masks",
                                           "carry_col", "post_bias", "post_colvec", "reg_depth")})
    loop, post = ctx.loop(), ctx.post()
    return Spec(
        size=size, SUB=SUB, S=S, BN=bn, BK=bk,
        GM=d.integer(1, 2), GN=d.integer(1, 2), trips=d.integer(0, 4),
        trip_kind=d.choice(["static", "static", "shrink", "causal"]), depth=depth,
        out_f16=d.flag(), **flags,
        e_acc=_expr(d, "MN", deep, loop), e_r=_expr(d, "M", deep, loop),
        e_c=_expr(d, "N", 2, loop) if flags["carry_col"] else None,
        e_store=_expr(d, "MN", 2, loop) if flags["inloop_store"] else None,
        e_radd=_expr(d, "M", 2, loop) if flags["inloop_reduce"] else None,
        o_mn=_expr(d, "MN", 2, post), o_m=_expr(d, "M", 2, post),
        o_n=_expr(d, "N", 2, post) if (flags["carry_col"] or flags["post_colvec"]) else None,
        ragged=_ragged(d, S * SUB, bn, bk) if d.flag(0.3) else ())


def _ragged(d, BM: int, BN: int, BK: int) -> tuple:
    """How far M, N and K fall short of whole tiles (in 8-element steps, so every tensor's rows stay 16-byte
    aligned as TMA requires; less than a tile, so the grid keeps its CTAs)."""
    return tuple(8 * d.integer(0, n // 8 - 1) for n in (BM, BN, BK))


@dataclass
class _Leaves:
    """Which named values an expression may read, per shape class, in the loop or after it."""

    pre_bias: str
    pre_rowvec: bool
    pre_colvec: bool
    chain: bool
    masks: bool
    carry_col: bool
    post_bias: bool
    post_colvec: bool
    reg_depth: int
    where: str = "loop"
    table: dict = field(default_factory=dict)
    mmas: list = field(default_factory=lambda: [1])   # MMAs the loop's expressions may still add (shared)

    def _common(self) -> dict:
        mn = ["acc"] + (["bias"] if self.pre_bias else [])
        m = ["r"] + (["rv"] if self.pre_rowvec else []) + (["rowsf"] if self.masks else [])
        n = (["c"] if self.carry_col else []) + (["cv"] if self.pre_colvec else []) + (
            ["colsf"] if self.masks else [])
        return {"MN": mn, "M": m, "N": n}

    def loop(self) -> "_Leaves":
        t = self._common()
        t["MN"] = ["s", "s"] + t["MN"] + (["t"] if self.chain else []) + (["u"] if self.reg_depth else [])
        t["MK"] = ["xa"]
        return replace(self, where="loop", table=t)

    def post(self) -> "_Leaves":
        t = self._common()
        t["MN"] += ["pb"] if self.post_bias else []
        t["N"] += ["pc"] if self.post_colvec else []
        t["MK"] = []
        return replace(self, where="post", table=t)


def _expr(d, cls: str, depth: int, ctx: _Leaves) -> tuple:
    """An expression tree of shape class MN (rows × BN), MK (rows × BK), M (rows,) or N (BN,)."""
    leaves = ctx.table[cls]
    if depth <= 0 or (leaves and d.integer(0, 3) == 0):
        if leaves:
            return ("leaf", d.choice(leaves))
        return ("colred", d.choice(["sum", "max"]), ("leaf", d.choice(ctx.table["MN"])))   # N without leaves
    sub = lambda c=cls: _expr(d, c, depth - 1, ctx)  # noqa: E731
    kinds = ["bin", "bin", "un", "cast", "where"]
    if cls in ("MN", "MK"):
        kinds += ["bcast_m"]
    if cls == "MN":
        kinds += ["bcast_n"] + (["mask"] if ctx.masks else []) + (["psel"] if ctx.where == "loop" else [])
        if ctx.where == "loop" and ctx.mmas[0] > 0:     # each MMA's result is live from its issue on
            kinds += ["mma", "mma"] + (["mma2"] if ctx.chain else [])
    if cls == "M":
        kinds += ["rowred", "rowred"]
    if cls == "N":
        kinds += ["colred", "colred"]
    kind = d.choice(kinds)
    if kind == "bin":
        return ("bin", d.choice(["+", "-", "*", "maximum", "minimum"]), sub(), sub())
    if kind == "un":
        return ("un", d.choice(["exp2", "abs", "neg", "half"]), sub())
    if kind == "cast":
        return ("cast", d.choice(["float16", "bfloat16"]), sub())
    if kind == "where":
        return ("where", sub(), sub())
    if kind == "bcast_m":
        return ("bcast_m", d.choice(["+", "*"]), sub(), sub("M"))
    if kind == "bcast_n":
        return ("bcast_n", d.choice(["+", "*"]), sub(), sub("N"))
    if kind == "mask":
        return ("mask", d.integer(0, 3) * 8 if ctx.where == "loop" else 0, sub())
    if kind == "psel":
        return ("psel", sub(), sub())
    if kind in ("mma", "mma2"):
        ctx.mmas[0] -= 1
        return (kind, sub("MK") if kind == "mma" else sub())
    if kind == "rowred":
        src = "MK" if ctx.where == "loop" and d.flag(0.3) else "MN"
        return ("rowred", d.choice(["sum", "max", "min"]), sub(src))
    return ("colred", d.choice(["sum", "max"]), sub("MN"))


# ------------------------------------------------------------------------------------------- rendering
_PER_SUBTILE = {"s", "acc", "xa", "r", "rv", "bias", "pb", "t", "rowsf", "u"}


class _Render:
    """One expression tree as source text, for the aref kernel (`ns="aref"`) or the torch oracle."""

    def __init__(self, ns: str, spec: Spec):
        self.ns, self.spec = ns, spec

    def leaf(self, name: str) -> str:
        if name == "bias" and self.spec.pre_bias == "smem":
            return f"bias[i].to({self.ns}.float32)"
        if name == "u":
            return f"u[i].to({self.ns}.float32)"
        if name == "rowsf":
            return f"(rows[i].to({self.ns}.float32) * 0.001)"
        if name == "colsf":
            return f"(cols.to({self.ns}.float32) * 0.001)"
        return f"{name}[i]" if name in _PER_SUBTILE else name

    def __call__(self, e: tuple) -> str:
        ns, k = self.ns, e[0]
        if k == "leaf":
            return self.leaf(e[1])
        if k == "bin":
            x, y = self(e[2]), self(e[3])
            return f"{ns}.{e[1]}({x}, {y})" if e[1] in ("maximum", "minimum") else f"({x} {e[1]} {y})"
        if k == "un":
            x = self(e[2])
            return {"exp2": f"{ns}.exp2({ns}.minimum({x}, 2.0))", "abs": f"{ns}.abs({x})", "neg": f"(-{x})",
                    "half": f"({x} * 0.5)"}[e[1]]
        if k == "cast":
            return f"({self(e[2])}).to({ns}.{e[1]}).to({ns}.float32)"
        if k == "where":
            x, y = self(e[1]), self(e[2])
            return f"{ns}.where({x} > {y}, {x}, {y} * 0.25)"
        if k == "bcast_m":
            return f"({self(e[2])} {e[1]} {self(e[3])}[:, None])"
        if k == "bcast_n":
            return f"({self(e[2])} {e[1]} {self(e[3])}[None, :])"
        if k == "mask":
            shift = f" + k * {e[1]}" if e[1] else ""
            return f"{ns}.where(rows[i][:, None] >= cols[None, :]{shift}, {self(e[2])}, -0.5)"
        if k == "psel":
            return f"{ns}.where(k >= pid_n, {self(e[1])}, {self(e[2])})"
        if k == "mma":
            return f"{ns}.mma(({self(e[1])}).to({ns}.float16), b.T)"
        if k == "mma2":
            return f"({ns}.mma(({self(e[1])}).to({ns}.float16), w) * 0.125)"
        if k == "rowred":
            return f"({ns}.row{e[1]}({self(e[2])}) * {0.0625 if e[1] == 'sum' else 1.0})"
        if k == "colred":
            x = self(e[2])
            if ns == "aref":
                return f"(({x}).{e[1]}(0) * {0.0625 if e[1] == 'sum' else 1.0})"
            return f"(tt.col{e[1]}({x}) * {0.0625 if e[1] == 'sum' else 1.0})"
        raise AssertionError(k)


def clamp(ns: str, x: str) -> str:
    return f"{ns}.minimum({ns}.maximum({x}, -4.0), 4.0)"


def _body(spec: Spec, ns: str) -> list[str]:
    """The kernel body's lines for namespace `ns` (the same program text for aref and for the oracle)."""
    r = _Render(ns, spec)
    f32, f16 = f"{ns}.float32", f"{ns}.float16"
    L = [f"    rows = [{ns}.arange(SUB) + (pid_m * S + i) * SUB for i in range(S)]" if spec.masks else None,
         f"    cols = {ns}.arange(BN) + pid_n * BN" if spec.masks else None]
    if spec.pre_bias:
        cast = f".to({f32})" if spec.pre_bias == "rmem" else ""
        L.append(f"    bias = [{ns}.load(Bias, (pid_m * S + i, pid_n), (SUB, BN)){cast} for i in range(S)]")
    if spec.pre_rowvec:
        L.append(f"    rv = [{ns}.load(RV, (pid_m * S + i,), (SUB,)).to({f32}) for i in range(S)]")
    if spec.pre_colvec:
        L.append(f"    cv = {ns}.load(CV, (pid_n,), (BN,)).to({f32})")
    L += [f"    acc = [{ns}.zeros((SUB, BN), {f32}) for _ in range(S)]",
          f"    r = [{ns}.zeros((SUB,), {f32}) for _ in range(S)]"]
    if spec.carry_col:
        L.append(f"    c = {ns}.zeros((BN,), {f32})")
    if spec.depth:
        L.append(f"    ch = {ns}.channel(depth={spec.depth})")
    if spec.reg_depth:
        L.append(f"    rc = {ns}.channel(depth={spec.reg_depth})")
    trip = {"static": f"{ns}.cdiv(A.shape[1], BK)",
            "shrink": f"{ns}.maximum({ns}.cdiv(A.shape[1], BK) - pid_m, 0)",
            "causal": f"{ns}.minimum({ns}.cdiv(A.shape[1], BK), (pid_m + 1) * CT)"}[spec.trip_kind]
    L.append(f"    for k in {'aref.range' if ns == 'aref' else 'range'}({trip}):")
    loads = [f"{ns}.load(A, (pid_m * S + i, k), (SUB, BK))", f"{ns}.load(B, (pid_n, k), (BN, BK))"]
    if spec.split_puts:                       # one item per A sub-tile; B loaded directly
        L += [f"        ch.put({loads[0].replace('i,', '0,')})", f"        ch.put({loads[0].replace('i,', '1,')})",
              "        a = [ch.get(), ch.get()]", f"        b = {loads[1]}"]
    elif spec.depth:
        L += [f"        ch.put(*[{loads[0]} for i in range(S)], {loads[1]})",
              "        got = ch.get()",
              "        a, b = list(got[:S]), got[S]"]
    else:
        L += [f"        a = [{loads[0]} for i in range(S)]", f"        b = {loads[1]}"]
    if spec.chain:
        L.append(f"        w = {ns}.load(W, (k, pid_n), (BN, BN))")
    L += ["        xa = [x.to(%s) for x in a]" % f32,
          f"        s = [{ns}.mma(x, b.T) for x in a]"]
    if spec.chain:
        L.append(f"        t = [{ns}.mma(x.to({f16}), w) * 0.125 for x in s]")
    if spec.reg_depth:                        # computed tiles handed over through a user channel
        L += [f"        rc.put(*[{clamp(ns, 'x * 0.5')}.to({f16}) for x in s])",
              "        u = rc.get()",
              "        u = list(u) if S > 1 else [u]"]
    if spec.carry_col:
        L.append("        dc = []")
    L.append("        for i in range(S):")
    if spec.inloop_store:
        L.append(f"            {ns}.store(P, (pid_m * S + i, pid_n * NK + k), "
                 f"{clamp(ns, r(spec.e_store))}.to({f16}))")
    if spec.inloop_reduce:
        L.append(f"            {ns}.store(RA, (pid_n, pid_m * S + i), {clamp(ns, r(spec.e_radd))}, reduce=\"add\")")
    L += [f"            new_acc = {clamp(ns, r(spec.e_acc))}",
          f"            new_r = {clamp(ns, r(spec.e_r))}"]
    if spec.carry_col:
        L.append(f"            dc.append({clamp(ns, r(spec.e_c))})")
    L += ["            acc[i] = acc[i] * 0.5 + new_acc", "            r[i] = r[i] * 0.5 + new_r"]
    if spec.carry_col:
        L.append("        c = c * 0.5 + (dc[0] if S == 1 else dc[0] + dc[1])")
    if spec.reg_depth:
        L.append("        rc.consumed()")
    if spec.depth:
        L += ["        ch.consumed()"] * (2 if spec.split_puts else 1)
    if spec.post_bias:
        L.append(f"    pb = [{ns}.load(PB, (pid_m * S + i, pid_n), (SUB, BN)).to({f32}) for i in range(S)]")
    if spec.post_colvec:
        L.append(f"    pc = {ns}.load(PC, (pid_n,), (BN,)).to({f32})")
    out = f16 if spec.out_f16 else f32
    L += ["    for i in range(S):",
          f"        {ns}.store(C, (pid_m * S + i, pid_n), {clamp(ns, r(spec.o_mn))}.to({out}))",
          f"        {ns}.store(R, (pid_n, pid_m * S + i), {clamp(ns, r(spec.o_m))})"]
    if spec.o_n is not None:
        L.append(f"        {ns}.store(CS, (pid_n,), {clamp(ns, r(spec.o_n))}, reduce=\"add\")")
    return [x for x in L if x is not None]


def tensor_params(spec: Spec) -> list[str]:
    """Positional parameters of `prog`, inputs first, outputs last."""
    ins = ["A", "B"] + (["W"] if spec.chain else []) + (["Bias"] if spec.pre_bias else []) + (
        ["RV"] if spec.pre_rowvec else []) + (["CV"] if spec.pre_colvec else []) + (
        ["PB"] if spec.post_bias else []) + (["PC"] if spec.post_colvec else [])
    outs = ["C", "R"] + (["CS"] if spec.o_n is not None else []) + (["P"] if spec.inloop_store else []) + (
        ["RA"] if spec.inloop_reduce else [])
    return ins + outs


OUTPUTS = ("C", "R", "CS", "P", "RA")

TORCH_NS = '''
class tt:
    """The tile functions in eager torch, one CTA at a time: an independent oracle for the kernel."""
    float16, bfloat16, float32 = torch.float16, torch.bfloat16, torch.float32

    @staticmethod
    def _t(x):
        return x if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=torch.float32)

    @staticmethod
    def load(T, coords, shape):
        lead = T.dim() - len(shape)
        src = T[tuple(coords[:lead])]
        out = torch.zeros(shape, dtype=T.dtype)
        box = tuple(slice(c * n, c * n + n) for c, n in zip(coords[lead:], shape))
        part = src[box]
        out[tuple(slice(0, m) for m in part.shape)] = part
        return out

    @staticmethod
    def store(T, coords, tile, reduce=None):
        shape = tile.shape
        lead = T.dim() - len(shape)
        dst = T[tuple(coords[:lead])][tuple(slice(c * n, c * n + n) for c, n in zip(coords[lead:], shape))]
        part = tile[tuple(slice(0, m) for m in dst.shape)].to(T.dtype)
        if reduce == "add":
            dst.copy_((dst.float() + part.float()).to(T.dtype))
        else:
            dst.copy_(part)

    @staticmethod
    def mma(x, y):
        return x.float() @ y.float()

    exp2 = staticmethod(lambda x: torch.exp2(x.float()))
    cdiv = staticmethod(lambda a, b: -(-a // b))
    abs = staticmethod(torch.abs)
    arange = staticmethod(lambda n: torch.arange(n, dtype=torch.int32))
    zeros = staticmethod(lambda shape, dtype: torch.zeros(shape, dtype=dtype))
    maximum = staticmethod(lambda x, y: (max(x, y) if not isinstance(x, torch.Tensor) and
                                         not isinstance(y, torch.Tensor) else torch.maximum(tt._t(x), tt._t(y))))
    minimum = staticmethod(lambda x, y: (min(x, y) if not isinstance(x, torch.Tensor) and
                                         not isinstance(y, torch.Tensor) else torch.minimum(tt._t(x), tt._t(y))))
    where = staticmethod(lambda c, x, y: torch.where(torch.as_tensor(c), tt._t(x), tt._t(y)))
    rowsum = staticmethod(lambda x: x.float().sum(-1))
    rowmax = staticmethod(lambda x: x.float().amax(-1))
    rowmin = staticmethod(lambda x: x.float().amin(-1))
    colsum = staticmethod(lambda x: x.float().sum(0))
    colmax = staticmethod(lambda x: x.float().amax(0))

    class channel:
        def __init__(self, depth):
            self.q, self.taken = [], 0

        def put(self, *tiles):
            self.q.append(tiles)

        def get(self):
            tiles = self.q[self.taken]
            self.taken += 1
            return tiles[0] if len(tiles) == 1 else tiles

        def consumed(self):
            self.q.pop(0)
            self.taken -= 1
'''


def render(spec: Spec) -> str:
    """The module text: the kernel, `example_inputs`, `reference` (and the torch oracle it uses)."""
    params = tensor_params(spec)
    consts = f"SUB: int = {spec.SUB}, S: int = {spec.S}, BN: int = {spec.BN}, BK: int = {spec.BK}, " \
             f"NK: int = {spec.trips}, CT: int = 1"
    sig = ", ".join(params)
    kernel = "\n".join(_body(spec, "aref"))
    oracle = "\n".join("        " + line for line in _body(spec, "tt"))
    outs = [p for p in params if p in OUTPUTS]
    return f'''"""A random tile program (tests/random_programs.py), spec:
{spec!r}
"""
import torch

import aref
from aref import aref_kernel
{TORCH_NS}

@aref_kernel(grid=lambda A, B, SUB, S, BN, **_: (-(-A.shape[0] // (SUB * S)), -(-B.shape[0] // BN)))
def prog({sig}, *, {consts}):
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
{kernel}


SPEC = {_spec_dict(spec)!r}


def example_inputs(size="small", trips=None, GM=None, GN=None, seed=0, **constexprs):
    """`size` is accepted for the example convention; `trips`, `GM`, `GN` override the drawn shape."""
    return make_inputs(SPEC, trips=trips, GM=GM, GN=GN, seed=seed, **constexprs)


def reference({sig}, *, SUB={spec.SUB}, S={spec.S}, BN={spec.BN}, BK={spec.BK}, NK={spec.trips}, CT=1):
    {", ".join(outs)} = {", ".join(f"{o}.clone()" for o in outs)}
    for pid_m in range(tt.cdiv(A.shape[0], SUB * S)):
        for pid_n in range(tt.cdiv(B.shape[0], BN)):
{oracle}
    return {{{", ".join(f'"{o}": {o}' for o in outs)}}}


{_MAKE_INPUTS}
'''


_MAKE_INPUTS = '''def make_inputs(spec, trips=None, GM=None, GN=None, seed=0, **constexprs):
    g = torch.Generator().manual_seed(seed)
    trips = spec['trips'] if trips is None else trips
    GM, GN = GM or spec['GM'], GN or spec['GN']
    M, N, K, NK = GM * spec['S'] * spec['SUB'], GN * spec['BN'], trips * spec['BK'], trips
    if spec['ragged']:                      # extents that do not divide the tiles (loads zero-fill, stores clip)
        dm, dn, dk = spec['ragged']
        M, N, K = M - dm, N - dn, max(K - dk, 0) if K else 0
    rnd = lambda *shape: (torch.randn(*shape, generator=g) * 0.5)  # noqa: E731
    t = {"A": rnd(M, K).half(), "B": rnd(N, K).half()}
    if spec['chain']:
        t["W"] = rnd(max(NK, 1) * spec['BN'], N).half()
    if spec['pre_bias']:
        t["Bias"] = rnd(M, N).half()
    if spec['pre_rowvec']:
        t["RV"] = rnd(M).half()
    if spec['pre_colvec']:
        t["CV"] = rnd(N)
    if spec['post_bias']:
        t["PB"] = rnd(M, N).half()
    if spec['post_colvec']:
        t["PC"] = rnd(N).half()
    t["C"] = torch.zeros(M, N, dtype=torch.float16 if spec['out_f16'] else torch.float32)
    t["R"] = torch.zeros(GN, M)
    if spec['o_n'] is not None:
        t["CS"] = torch.zeros(N)
    if spec['inloop_store']:
        t["P"] = torch.zeros(M, GN * max(NK, 1) * spec['BN'], dtype=torch.float16)
    if spec['inloop_reduce']:
        t["RA"] = torch.zeros(GN, M)
    t["NK"] = NK
    t.update(constexprs)
    return t
'''



def _spec_dict(spec: Spec) -> dict:
    return {k: getattr(spec, k) for k in Spec.__dataclass_fields__}


def features(spec: Spec) -> list[str]:
    """The language features one program uses (for coverage tables)."""
    out = {f"trips:{spec.trip_kind}", "channel" if spec.depth else "direct-loads", f"subtiles:{spec.S}",
           f"grid:{spec.GM}x{spec.GN}"}
    if any(spec.ragged):
        out.add("ragged")
    for name in ("chain", "masks", "carry_col", "inloop_store", "inloop_reduce", "post_bias", "post_colvec",
                 "pre_rowvec", "pre_colvec", "split_puts", "reg_depth"):
        if getattr(spec, name):
            out.add(name)
    if spec.pre_bias:
        out.add(f"pre_bias:{spec.pre_bias}")
    seen: set[str] = set()

    def walk(e):
        if e is None:
            return
        seen.add(e[0] if e[0] not in ("bin", "un", "rowred", "colred", "cast") else f"{e[0]}:{e[1]}")
        for x in e[1:]:
            if isinstance(x, tuple):
                walk(x)
    for e in (spec.e_acc, spec.e_r, spec.e_c, spec.e_store, spec.e_radd, spec.o_mn, spec.o_m, spec.o_n):
        walk(e)
    return sorted(out | {f"op:{x}" for x in seen})


# --------------------------------------------------------------------------------------------- public API
@dataclass
class RandomProgram:
    """A generated program: unpacks as `(kernel_fn, inputs, reference)`."""

    spec: Spec
    path: str
    module: object
    kernel: object
    inputs: dict
    reference: object
    features: list[str]

    def __iter__(self):
        return iter((self.kernel, self.inputs, self.reference))

    def with_shape(self, trips: int | None = None, one_cta: bool = False) -> dict:
        """Inputs for another trip count (and one CTA): exhaustive exploration at critical trip counts."""
        over = dict(GM=1, GN=1) if one_cta else {}
        if trips is not None and self.spec.trip_kind == "causal":
            over["CT"] = max(trips, 1)
        return self.module.example_inputs(trips=trips, **over)


def build(spec: Spec, directory: str | None = None) -> RandomProgram:
    """Write `spec`'s module (into `directory`, else a temporary one) and load it."""
    from aref.runtime.harness import load_module
    fd, path = tempfile.mkstemp(suffix=".py", prefix="randprog_", dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write(render(spec))
    mod = load_module(path)
    return RandomProgram(spec, path, mod, mod.prog, mod.example_inputs(), mod.reference, features(spec))


def random_program(seed: int, *, size: str = "wgmma", directory: str | None = None) -> RandomProgram:
    """The program of `seed`: deterministic, so a failing seed is a reproducer."""
    return build(draw_spec(_SeedDraw(seed), size), directory)


@st.composite
def programs(draw, size: str = "wgmma") -> Spec:
    """Hypothesis strategy over program specs (`build(spec)` makes the program)."""
    return draw_spec(_HypothesisDraw(draw), size)
