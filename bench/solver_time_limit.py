"""How closely the solver keeps its time limit: wall seconds of `solve(graph, time_limit=T)` on a graph it cannot
finish in T (FA4 forward on Blackwell without cross-group transfers), for a few T (printed, not asserted).

    python bench/solver_time_limit.py [--limits 0.5 1 2 5]
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from solve import solve  # noqa: E402
from solve.attention import fa_forward_blackwell  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--limits", type=float, nargs="+", default=[0.5, 1.0, 2.0, 5.0])
    args = ap.parse_args()
    print(f"{'time limit s':>13}{'wall s':>9}{'overshoot':>11}  status")
    for limit in args.limits:
        graph = fa_forward_blackwell(allow_transfers=False)
        t0 = time.perf_counter()
        r = solve(graph, time_limit=limit)
        wall = time.perf_counter() - t0
        print(f"{limit:>13.2f}{wall:>9.2f}{wall / limit:>10.2f}x  {r.status}"
              + (f" (II {r.ii}, gap {r.gap})" if r.ii is not None else ""))


if __name__ == "__main__":
    main()
