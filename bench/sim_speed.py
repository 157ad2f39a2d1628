"""Simulator speed: seconds for N random interleavings of each example's Barrier IR (printed, not asserted).

    python bench/sim_speed.py [--seeds 50] [--json out.json]
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from aref import sim  # noqa: E402
from aref.compiler import CompileOptions  # noqa: E402
from aref.search import lower_to  # noqa: E402
from aref.runtime.harness import load_example  # noqa: E402

EXAMPLES = ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    print(f"{'example':<16}{'arch':<10}{'interleavings':>14}{'seconds':>10}{'ok':>6}")
    for name in EXAMPLES:
        ex = load_example(os.path.join(ROOT, "examples", f"{name}.py"))
        inputs = ex.inputs()
        kernel = ex.kernel.specialize(**inputs)
        for arch in ("sm_90a", "sm_100a"):
            ws = lower_to(kernel, "barrier", CompileOptions(arch=arch))
            t0 = time.perf_counter()
            report = sim.check(ws, inputs, ex.reference_fn, seeds=args.seeds)
            dt = time.perf_counter() - t0
            rows.append({"example": name, "arch": arch, "interleavings": report.interleavings,
                         "seconds": round(dt, 3), "ok": report.ok})
            print(f"{name:<16}{arch:<10}{report.interleavings:>14}{dt:>10.2f}{str(report.ok):>6}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
