"""Compile speed: seconds to generate and compile each example's kernel for sm_90a without a GPU, on an empty
cache (printed figures and an optional JSON file; not a test — unit tests assert no wall-clock bounds).

    python bench/compile_speed.py [--json out.json]
"""
import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from aref.backend.cute import BackendError, compile_barrier  # noqa: E402
from aref.backend.cute.toolchain import compile_source_file  # noqa: E402
from aref.compiler import CompileOptions  # noqa: E402
from aref.search import lower_to  # noqa: E402
from aref.runtime.harness import load_example  # noqa: E402

# (example, example_inputs overrides) as tests/backend/test_compile.py compiles them
CASES = [("gemm", {}), ("gemm", {"size": "large"}), ("dual_gemm", {}), ("gemm_reduce", {}),
         ("attention_fwd", {}), ("attention_fwd", {"size": "large"}), ("attention_bwd", {"BN": 64})]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    print(f"{'kernel':<34}{'seconds':>9}{'registers':>11}{'spills':>8}{'figures from':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        tiny = compile_source_file(os.path.join(ROOT, "tests", "backend", "tiny_kernel.py"), "sm_90a",
                                   os.path.join(tmp, "tiny"))
        rows.append({"kernel": "tiny (tests/backend)", "seconds": round(time.perf_counter() - t0, 3),
                     "registers": tiny.registers, "spill_bytes": tiny.spill_bytes,
                     "resource_source": tiny.resource_source})
        for name, dims in CASES:
            dims = dict(dims)
            size = dims.pop("size", "small")
            ex = load_example(os.path.join(ROOT, "examples", f"{name}.py"))
            label = f"{name} ({size}{''.join(f', {k}={v}' for k, v in dims.items())})"
            t0 = time.perf_counter()
            try:
                ws = lower_to(ex.kernel.specialize(**ex.inputs(size, **dims)), "barrier",
                              CompileOptions(arch="sm_90a"))
                res = compile_barrier(ws, cache_dir=os.path.join(tmp, "cache"))
            except BackendError as err:
                rows.append({"kernel": label, "refused": err.message})
                print(f"{label:<34}  refused: {err.message[:60]}")
                continue
            rows.append({"kernel": label, "seconds": round(time.perf_counter() - t0, 3),
                         "compile_seconds": round(res.compile_seconds, 3), "registers": res.registers,
                         "spill_bytes": res.spill_bytes, "resource_source": res.resource_source})
        for r in rows:
            if "seconds" in r:
                print(f"{r['kernel']:<34}{r['seconds']:>9.2f}{str(r['registers']):>11}{str(r['spill_bytes']):>8}"
                      f"{r['resource_source']:>14}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
