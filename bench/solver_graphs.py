"""Benchmark the optimal scheduler on the hand-built attention graphs of solve.attention.

For each case: the interval model's full search (II, lower bound, proof, seconds; median of
``--repeat`` runs), the paper-literal time-indexed model on the same graph (its II must match), the
speed ratio, and the solve time Twill reports for the same kernel.  Prints a table and writes JSON.

    python bench/solver_graphs.py                 # everything (the literal Hopper backward is slow)
    python bench/solver_graphs.py --ti-limit 60   # cap each time-indexed search
    python bench/solver_graphs.py --cases fa-fwd-hopper fa-fwd-blackwell
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import platform
import statistics
import sys
import time

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from solve import check, solve  # noqa: E402
from solve.attention import (fa_backward_blackwell, fa_backward_hopper, fa_forward_blackwell,  # noqa: E402
                             fa_forward_hopper)

CASES = {
    "fa-fwd-hopper": (fa_forward_hopper, "28 s"),
    "fa-fwd-blackwell": (fa_forward_blackwell, "19 s"),
    "fa-bwd-hopper": (fa_backward_hopper, "88 s"),
    "fa-bwd-blackwell": (fa_backward_blackwell, "64-269 s"),
}
TARGET = {"fa-fwd-hopper": 1.0, "fa-fwd-blackwell": 1.0, "fa-bwd-hopper": 3.0, "fa-bwd-blackwell": 3.0}


def run_case(name: str, repeat: int, ti_limit: float, time_limit: float) -> dict:
    build, published = CASES[name]
    graph = build()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = solve(graph, time_limit=time_limit)
        runs.append((time.perf_counter() - start, result))
    seconds = statistics.median(t for t, _ in runs)
    result = runs[-1][1]
    valid = result.ii is not None and check(graph, result.ii, result.schedule, result.assignment).ok
    start = time.perf_counter()
    literal = solve(graph, encoding="time-indexed", time_limit=ti_limit)
    ti_seconds = time.perf_counter() - start
    return {
        "case": name, "ops": len(graph.ops), "ii": result.ii, "lower_bound": result.lower_bound,
        "proven": result.proven_optimal, "status": result.status, "valid": valid,
        "interval_seconds": round(seconds, 4), "interval_runs": [round(t, 4) for t, _ in runs],
        "target_seconds": TARGET[name], "groups": result.groups, "objectives": result.objectives,
        "time_indexed_ii": literal.ii, "time_indexed_status": literal.status,
        "time_indexed_seconds": round(ti_seconds, 3),
        "same_ii": literal.ii == result.ii,
        "ratio": round(ti_seconds / seconds, 1) if seconds > 0 else None,
        "ratio_is_lower_bound": literal.status == "timeout",
        "normalization": literal.normalization, "published_twill": published,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--repeat", type=int, default=3, help="interval-model runs per case (median)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="interval search limit, s")
    parser.add_argument("--ti-limit", type=float, default=900.0, help="time-indexed search limit, s")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "solver_graphs.json"))
    args = parser.parse_args()

    rows = []
    head = (f"{'case':18} {'II':>6} {'bound':>6} {'proven':>6} {'interval s':>10} {'target':>6} "
            f"{'time-idx s':>11} {'same II':>7} {'ratio':>8} {'Twill':>9}")
    print(head)
    print("-" * len(head))
    for name in args.cases:
        row = run_case(name, args.repeat, args.ti_limit, args.time_limit)
        rows.append(row)
        ti = f"{row['time_indexed_seconds']:.1f}" + ("+" if row["ratio_is_lower_bound"] else "")
        ratio = f"{row['ratio']:.0f}x" + ("+" if row["ratio_is_lower_bound"] else "")
        print(f"{name:18} {row['ii']!s:>6} {row['lower_bound']:>6} {row['proven']!s:>6} "
              f"{row['interval_seconds']:>10.3f} {row['target_seconds']:>6.1f} {ti:>11} "
              f"{row['same_ii']!s:>7} {ratio:>8} {row['published_twill']:>9}", flush=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(),
            "processor": platform.processor(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2, default=str))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
