"""Time to the first launch-ready kernel in a cold and in a warm process (no GPU needed).

    python bench/warm_start.py [--cache DIR]

Runs tests/warm_start_check.py twice in fresh processes with one cache directory (a new temporary one unless
--cache is given): the first generates, compiles (the CuTe DSL compiler) and exports gemm's specialization
for sm_90a; the second finds the exported object and loads it. Printed: seconds from the kernel call's start to
a launch-ready compiled function (tracing, lowering, compile or load), the CuTe DSL compiles each process ran,
and the import time of the process (torch, the CuTe DSL, aref) for scale. On a GPU, bench/gpu_check.py's
warm_start part times the first actual launch the same way.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cache: str) -> dict:
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "warm_start_check.py"), cache],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=None, help="cache directory (default: a new temporary one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache or tmp
        rows = [("cold", run(cache)), ("warm", run(cache))]
    print(f"{'process':<9}{'launch-ready (s)':>18}{'cute.compile calls':>20}{'loads':>7}{'imports (s)':>13}")
    for name, r in rows:
        print(f"{name:<9}{r['launch_ready_s']:>18}{r['cute_compile_calls']:>20}{r['loads']:>7}{r['import_s']:>13}")


if __name__ == "__main__":
    main()
