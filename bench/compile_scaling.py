"""Compile time against program size: a loop body of N elementwise ops (50 … 1000) through every stage.

    python bench/compile_scaling.py [--sizes 50,100,200,400,700,1000] [--no-cute] [--pure]

For each size the kernel is a CUDA-core group streaming 64×16 float32 tiles whose body applies N
elementwise ops (a chain mixing add, mul, max, exp2 and a reduction every 25 ops, so fusion, temporaries
and reductions all grow with N). Printed per size: seconds to trace, to lower to Barrier IR, to generate the
CuTe DSL source, and for `cute.compile` + ptxas (skipped with --no-cute), plus the source's line count and
its deepest parenthesis nesting (Python refuses 200). Issue 13 asks that this grows about linearly and that
no size fails; the figures are printed, never asserted (tests/backend/test_compile_scaling.py compiles one
size of a few hundred ops).
"""
from __future__ import annotations

import argparse
import tempfile
import time

import torch

import aref
from aref import aref_kernel

ROWS, COLS = 64, 16


def chain(x, n: int, pure: bool = False):
    """`n` elementwise ops on tile `x`: a reduction every 25 ops and reads of `x` (so fusion stops now and
    then), or with `pure` one single fused chain of adds and multiplies (issue 13's nested parentheses)."""
    y = x
    for i in range(n):
        if pure:
            y = y * 1.0009765625 if i % 2 else y + 0.125
            continue
        k = i % 5
        if i % 25 == 24:
            y = y - aref.rowmax(y)[:, None]
        elif k == 0:
            y = y * 1.0009765625
        elif k == 1:
            y = y + 0.125
        elif k == 2:
            y = aref.maximum(y, x)
        elif k == 3:
            y = aref.exp2(y * 0.0625)
        else:
            y = y - x
    return y


def make_kernel(n: int, pure: bool = False):
    @aref_kernel(grid=lambda X, **_: (1,))
    def long_body(X, Y, *, BM: int = ROWS, BN: int = COLS):
        ch = aref.channel(depth=2)
        for j in aref.range(X.shape[1] // BN):
            ch.put(aref.load(X, (0, j), (BM, BN)))
            x = ch.get()
            aref.store(Y, (0, j), chain(x, n, pure))
            ch.consumed()
    return long_body


def inputs():
    return {"X": torch.rand(ROWS, 2 * COLS), "Y": torch.zeros(ROWS, 2 * COLS)}


def nesting(source: str) -> int:
    depth = deepest = 0
    for ch in source:
        depth += ch in "([{"
        depth -= ch in ")]}"
        deepest = max(deepest, depth)
    return deepest


def measure(n: int, cute: bool, cache_dir: str, pure: bool = False) -> dict:
    from aref.backend.cute import compile_barrier, generate_source
    from aref.compiler import CompileOptions
    from aref.search import lower_to
    t0 = time.perf_counter()
    kernel = make_kernel(n, pure).specialize(**inputs())
    t1 = time.perf_counter()
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_90a"))
    t2 = time.perf_counter()
    source = generate_source(ws)
    t3 = time.perf_counter()
    out = {"ops": n, "trace_s": t1 - t0, "lower_s": t2 - t1, "generate_s": t3 - t2,
           "lines": source.count("\n"), "nesting": nesting(source)}
    if cute:
        result = compile_barrier(ws, cache_dir=cache_dir)
        out["cute_s"] = time.perf_counter() - t3
        out["spill_bytes"] = result.spill_bytes
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="50,100,200,400,700,1000")
    ap.add_argument("--no-cute", action="store_true", help="stop after generating the source")
    ap.add_argument("--pure", action="store_true", help="one fused chain of adds and multiplies")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'ops':>6} {'trace s':>8} {'lower s':>8} {'generate s':>10} {'cute s':>8} {'lines':>7} {'nesting':>7}"
          f" {'spills':>6}")
    with tempfile.TemporaryDirectory() as cache:
        for n in sizes:
            r = measure(n, not args.no_cute, cache, args.pure)
            cute = f"{r['cute_s']:8.2f}" if "cute_s" in r else f"{'-':>8}"
            spills = f"{r['spill_bytes']:6d}" if "spill_bytes" in r else f"{'-':>6}"
            print(f"{n:6d} {r['trace_s']:8.2f} {r['lower_s']:8.2f} {r['generate_s']:10.2f} {cute} {r['lines']:7d}"
                  f" {r['nesting']:7d} {spills}", flush=True)


if __name__ == "__main__":
    main()
