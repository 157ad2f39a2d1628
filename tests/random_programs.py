"""Random small tile programs for property tests, rendered twice from one expression tree: as an
`@aref_kernel` source file and as the same computation written directly in torch.

The loop body streams an A tile (BM×BK) and a B tile (BN×BK) through an aref and updates two carried
values, `acc` (BM×BN) and `r` (BM,), with random chains of elementwise ops, reductions, broadcasts and MMAs.
"""
from __future__ import annotations

import os
import tempfile

from hypothesis import strategies as st

TORCH_NS = '''
import torch


class tt:
    """torch spellings of the tile functions the random programs use."""
    @staticmethod
    def mma(x, y, acc=None):
        out = x.float() @ y.float()
        return out if acc is None else out + acc
    exp2 = staticmethod(torch.exp2)
    abs = staticmethod(torch.abs)
    maximum = staticmethod(lambda x, y: torch.maximum(torch.as_tensor(x), torch.as_tensor(y)))
    minimum = staticmethod(lambda x, y: torch.minimum(torch.as_tensor(x), torch.as_tensor(y)))
    where = staticmethod(lambda c, x, y: torch.where(c, torch.as_tensor(x), torch.as_tensor(y)))
    rowsum = staticmethod(lambda x: x.float().sum(-1))
    rowmax = staticmethod(lambda x: x.float().amax(-1))
'''


@st.composite
def expr(draw, cls: str, depth: int) -> str:
    """An expression template of shape class MN (BM×BN), MK (BM×BK) or M (BM,), with {ns}/{f16}/{f32}."""
    leaves = {"MN": ["s", "acc"], "MK": ["xa"], "M": ["r"]}[cls]
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(leaves))
    sub = lambda c=cls: draw(expr(c, depth - 1))  # noqa: E731
    choices = ["binary", "unary", "cast", "where"]
    if cls == "M":
        choices += ["reduce"]
    else:
        choices += ["bcast"]
    if cls == "MN":
        choices += ["mma"]
    kind = draw(st.sampled_from(choices))
    if kind == "binary":
        op = draw(st.sampled_from(["+", "-", "*", "max", "min"]))
        x, y = sub(), sub()
        if op in ("max", "min"):
            return f"{{ns}}.{op}imum({x}, {y})"
        return f"({x} {op} {y})"
    if kind == "unary":
        x = sub()
        return draw(st.sampled_from([f"{{ns}}.exp2({{ns}}.minimum({x}, 2.0))", f"{{ns}}.abs({x})", f"(-{x})",
                                     f"({x} * 0.5)"]))
    if kind == "cast":
        return f"({sub()}).to({{f16}}).to({{f32}})"
    if kind == "where":
        x, y = sub(), sub()
        return f"{{ns}}.where({x} > {y}, {x}, {y} * 0.25)"
    if kind == "reduce":
        src = sub(draw(st.sampled_from(["MN", "MK"])))
        return draw(st.sampled_from([f"({{ns}}.rowsum({src}) * 0.125)", f"{{ns}}.rowmax({src})"]))
    if kind == "bcast":
        return f"({sub()} + {sub('M')}[:, None])"
    return f"{{ns}}.mma(({sub('MK')}).to({{f16}}), b.T)"


@st.composite
def programs(draw) -> dict:
    BM, BN, BK = draw(st.sampled_from([(16, 16, 16), (32, 16, 16), (16, 32, 32)]))
    return {
        "BM": BM, "BN": BN, "BK": BK,
        "depth": draw(st.integers(1, 3)),
        "trips": draw(st.integers(0, 4)),
        "e_mn": draw(expr("MN", 3)),
        "e_m": draw(expr("M", 3)),
    }


def clamp(e: str) -> str:
    return f"{{ns}}.minimum({{ns}}.maximum({e}, -4.0), 4.0)"


def render(p: dict) -> str:
    """One module defining `prog` (the kernel) and `ref(A, B)` (the torch computation)."""
    k = dict(ns="aref", f16="aref.float16", f32="aref.float32")
    t = dict(ns="tt", f16="torch.float16", f32="torch.float32")
    e_mn, e_m = clamp(p["e_mn"]), clamp(p["e_m"])
    return f'''import aref
from aref import aref_kernel
{TORCH_NS}

@aref_kernel(grid=(1,))
def prog(A, B, C, R, *, BM: int = {p["BM"]}, BN: int = {p["BN"]}, BK: int = {p["BK"]}):
    acc = aref.zeros((BM, BN), aref.float32)
    r = aref.zeros((BM,), aref.float32)
    ch = aref.channel(depth={p["depth"]})
    for k in aref.range(A.shape[1] // BK):
        ch.put(aref.load(A, (0, k), (BM, BK)), aref.load(B, (0, k), (BN, BK)))
        a, b = ch.get()
        xa = a.to(aref.float32)
        s = aref.mma(a, b.T)
        new_acc = {e_mn.format(**k)}
        new_r = {e_m.format(**k)}
        ch.consumed()
        acc = acc * 0.5 + new_acc
        r = r * 0.5 + new_r
    aref.store(C, (0, 0), acc)
    aref.store(R, (0,), r)


def ref(A, B, BM={p["BM"]}, BN={p["BN"]}, BK={p["BK"]}):
    acc = torch.zeros(BM, BN)
    r = torch.zeros(BM)
    for k in range(A.shape[1] // BK):
        a, b = A[:, k * BK:(k + 1) * BK], B[:, k * BK:(k + 1) * BK]
        xa = a.to(torch.float32)
        s = tt.mma(a, b.T)
        new_acc = {e_mn.format(**t)}
        new_r = {e_m.format(**t)}
        acc = acc * 0.5 + new_acc
        r = r * 0.5 + new_r
    return acc, r
'''


def write_module(p: dict, directory: str | None = None) -> str:
    fd, path = tempfile.mkstemp(suffix=".py", prefix="randprog_", dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write(render(p))
    return path


def make_inputs(p: dict, seed: int = 0):
    import torch
    g = torch.Generator().manual_seed(seed)
    K = p["trips"] * p["BK"]
    A = (torch.randn(p["BM"], K, generator=g) * 0.5).half()
    B = (torch.randn(p["BN"], K, generator=g) * 0.5).half()
    C = torch.zeros(p["BM"], p["BN"])
    R = torch.zeros(p["BM"])
    return A, B, C, R
