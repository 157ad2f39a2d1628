"""Solver speed on graphs extracted from the examples' Tile IR (printed figures and a JSON file; not a test).

For each case: the II, its lower bound, whether it is proven optimal, the seconds of the interval model and of
the paper-literal time-indexed model (with a time limit), their ratio, and the time Twill reported.

    python bench/solver.py [--ti-limit 600] [--limit 120] [--only NAME] [--json bench/solver.json]
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import solve as S  # noqa: E402
from aref.runtime.harness import load_example  # noqa: E402
from partition.optimal import extract_graph  # noqa: E402

# (name, example, arch, example_inputs overrides, extract_graph options, Twill's reported time)
CASES = [
    ("gemm-hopper", "gemm", "sm_90a", {}, {}, None),
    ("fa-fwd-hopper", "attention_fwd", "sm_90a", {"D": 128}, {}, "28 s"),
    ("fa-fwd-blackwell", "attention_fwd", "sm_100a", {"D": 128, "BM": 256, "Sq": 512}, {}, "19 s"),
    ("fa-bwd-hopper", "attention_bwd", "sm_90a", {"D": 128}, {}, "88 s"),
    ("fa-bwd-blackwell", "attention_bwd", "sm_100a", {"D": 128, "BM": 128}, {}, "64–269 s"),
    ("ablation: no sub-tiling", "attention_fwd", "sm_100a", {"D": 128, "BM": 128, "Sq": 512, "SUBTILE": 1}, {},
     None),
    ("ablation: 2 groups", "attention_fwd", "sm_100a", {"D": 128, "BM": 256, "Sq": 512}, {"max_groups": 2}, None),
    ("ablation: no transfers", "attention_fwd", "sm_100a", {"D": 128, "BM": 256, "Sq": 512},
     {"allow_transfers": False}, None),
]


def run_case(case, limit: float, ti_limit: float) -> dict:
    name, example, arch, dims, extract_opts, twill = case
    ex = load_example(os.path.join(ROOT, "examples", f"{example}.py"))
    kernel = ex.kernel.specialize(**ex.inputs(**dims))
    graph = extract_graph(kernel, arch, **extract_opts).graph
    t0 = time.perf_counter()
    a = S.solve(graph, S.SolveOptions(time_limit=limit))
    ta = time.perf_counter() - t0
    row = {"case": name, "ops": len(graph.ops), "ii": a.ii, "lower_bound": a.lower_bound,
           "proven": a.proven_optimal, "status": a.status, "interval_s": round(ta, 3), "twill": twill,
           "reasons": [r for inf in a.infeasible for r in inf.reasons][:3]}
    if ti_limit > 0:
        t0 = time.perf_counter()
        b = S.solve(graph, S.SolveOptions(encoding=S.TIME_INDEXED, time_limit=ti_limit))
        tb = time.perf_counter() - t0
        row.update({"time_indexed_s": round(tb, 3), "time_indexed_ii": b.ii, "time_indexed_status": b.status,
                    "ratio": round(tb / max(ta, 1e-9), 1) if b.ii is not None else None})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--limit", type=float, default=120.0, help="interval model time limit (s)")
    ap.add_argument("--ti-limit", type=float, default=600.0, help="time-indexed model time limit (s); 0 skips it")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "solver.json"))
    args = ap.parse_args()
    rows = []
    head = f"{'case':<26}{'ops':>4}{'II':>7}{'bound':>7}{'proven':>8}{'interval s':>12}{'time-idx s':>12}" \
           f"{'ratio':>8}{'Twill':>10}"
    print(head)
    for case in CASES:
        if args.only and args.only not in case[0]:
            continue
        r = run_case(case, args.limit, args.ti_limit)
        rows.append(r)
        ti = r.get("time_indexed_s")
        print(f"{r['case']:<26}{r['ops']:>4}{str(r['ii']):>7}{r['lower_bound']:>7}{str(r['proven']):>8}"
              f"{r['interval_s']:>12.2f}{(f'{ti:.2f}' if ti is not None else '-'):>12}"
              f"{(str(r.get('ratio')) + 'x' if r.get('ratio') else '-'):>8}{(r['twill'] or '-'):>10}")
        if r["reasons"]:
            print(f"{'':<26}  smaller II ruled out by: {'; '.join(r['reasons'])}")
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
