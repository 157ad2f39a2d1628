"""Solver speed through the command-line path, beside the bare solve (printed figures and a JSON file; not a test).

For every example x arch x size (the default "small" and "large"), two timings of the same loop:

  cli s   the optimal partitioner's whole step, what `aref solve`, `aref compare`, `aref compile --partition
          optimal` and the tuner's optimal candidates wait on (`partition.solving.solve_partition`: extraction,
          the kernel's graph, the row-split candidate or the graph without hand-off memory where it has no
          partition, the chosen answer); its CP-SAT seconds and calls are in the JSON's profile;
  cpu s   the CPU seconds of that step (all threads: the search races two formulations of some probes);
  solve s the same step as `aref solve` runs it: with the reasons of every proven range explained (what it
          prints below the schedule: why the II is not lower), which the compiler's own step skips;
  bare s  `solve.solve` on the graph `extract_graph` gives with its defaults, its proofs unexplained as the
          partitioner's are (`aref solve` explains the proven ranges after its search; not timed here).

Each from a cold start (`solve.memo.forget`). The II, its static lower bound (ResMII / RecMII / the groups'
streams), the proven bound (every smaller II proven infeasible) and whether the II is proven optimal. A case
that cannot be solved is a row with its reason; the bench never stops on one. Twill's published solve times
(Table 3 of the paper, its own shapes) stand beside the attention rows, and the `twill:` rows solve those shapes
(head dim 128; Blackwell forward with 256-row tiles), with the paper's ablations.

    python bench/solver.py [--limit 60] [--only TEXT] [--sizes small,large] [--archs sm_90a,sm_100a] [--profile]
                           [--ti-limit 0] [--json bench/solver.json]

`--only` keeps the cases whose name (`example/arch/size`, or `twill: ...`) contains TEXT. `--ti-limit S` also
solves each bare graph with the paper-literal time-indexed model (S seconds; 0 skips it).
"""
import argparse
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import solve as S  # noqa: E402
from solve.memo import forget  # noqa: E402
from aref.compiler import CompileOptions  # noqa: E402
from aref.errors import ArefError  # noqa: E402
from aref.runtime.harness import load_example  # noqa: E402
from partition.optimal import extract_graph  # noqa: E402
from partition.solving import solve_partition  # noqa: E402

ARCHS = ("sm_90a", "sm_100a")
SIZES = ("small", "large")
# Twill's reported solve times (its Table 3) for the attention kernels it schedules
TWILL = {("attention_fwd", "sm_90a"): "28 s", ("attention_fwd", "sm_100a"): "19 s",
         ("attention_bwd", "sm_90a"): "88 s", ("attention_bwd", "sm_100a"): "64–269 s"}
# (name, example, arch, example_inputs overrides, extract_graph options, Twill's time): the paper's shapes
TWILL_CASES = [
    ("twill: fa-fwd-hopper", "attention_fwd", "sm_90a", {"D": 128}, {}, "28 s"),
    ("twill: fa-fwd-blackwell", "attention_fwd", "sm_100a", {"D": 128, "BM": 256, "Sq": 512}, {}, "19 s"),
    ("twill: fa-bwd-hopper", "attention_bwd", "sm_90a", {"D": 128}, {}, "88 s"),
    ("twill: fa-bwd-blackwell", "attention_bwd", "sm_100a", {"D": 128, "BM": 128}, {}, "64–269 s"),
    ("twill: ablation, no sub-tiling", "attention_fwd", "sm_100a", {"D": 128, "BM": 128, "Sq": 512, "SUBTILE": 1},
     {}, None),
    ("twill: ablation, 2 groups", "attention_fwd", "sm_100a", {"D": 128, "BM": 256, "Sq": 512}, {"max_groups": 2},
     None),
    ("twill: ablation, no transfers", "attention_fwd", "sm_100a", {"D": 128, "BM": 256, "Sq": 512},
     {"allow_transfers": False}, None),
]


def examples() -> list[str]:
    folder = os.path.join(ROOT, "examples")
    return sorted(f[:-3] for f in os.listdir(folder) if f.endswith(".py") and not f.startswith("_"))


def cases(sizes=SIZES, archs=ARCHS) -> list[tuple]:
    """(name, example, arch, size, overrides, extract_graph options, Twill's time) of every case."""
    out = [(f"{name}/{arch}/{size}", name, arch, size, {}, {}, TWILL.get((name, arch)) if size == "small" else None)
           for name in examples() for arch in archs for size in sizes]
    out += [(name, ex, arch, "small", dims, opts, twill) for name, ex, arch, dims, opts, twill in TWILL_CASES
            if arch in archs]
    return out


def _why(err: BaseException) -> str:
    if isinstance(err, ArefError):
        return f"refused: {err.message}"
    frame = traceback.extract_tb(err.__traceback__)[-1]
    return f"{type(err).__name__} at {os.path.relpath(frame.filename, ROOT)}:{frame.lineno}: {err}"


def run_case(case, limit: float, ti_limit: float = 0.0) -> dict:
    name, example, arch, size, dims, extract_opts, twill = case
    row = {"case": name, "example": example, "arch": arch, "size": size, "twill": twill}
    try:
        ex = load_example(os.path.join(ROOT, "examples", f"{example}.py"))
        kernel = ex.kernel.specialize(**ex.inputs(size, arch, **dims))
    except Exception as err:                      # noqa: BLE001 (a row, never a stop)
        row["error"] = _why(err)
        return row
    if not extract_opts:
        forget()
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            _, _, result, _, why = solve_partition(kernel, CompileOptions(arch=arch, solver_time_limit=limit))
        except Exception as err:                  # noqa: BLE001
            row["error"] = _why(err)
        else:
            row.update(cli_s=round(time.perf_counter() - t0, 3), cpu_s=round(time.process_time() - c0, 3),
                       ii=result.ii, lower_bound=result.lower_bound, proven_bound=result.proven_bound,
                       proven=result.proven_optimal, status=result.status, rows_split=bool(why),
                       cpsat_s=round(sum(c.seconds for c in result.profile), 3), calls=len(result.profile),
                       profile=[c.to_json() for c in result.profile])
            forget()
            t0 = time.perf_counter()
            _, _, explained, _, _ = solve_partition(kernel, CompileOptions(arch=arch, solver_time_limit=limit),
                                                    explain_found=True)
            row.update(solve_s=round(time.perf_counter() - t0, 3), solve_calls=len(explained.profile),
                       solve_ii=explained.ii, solve_proven=explained.proven_optimal)
    forget()
    try:
        graph = extract_graph(kernel, arch, **extract_opts).graph
        t0 = time.perf_counter()
        bare = S.solve(graph, S.SolveOptions(time_limit=limit, explain_found=False))
    except Exception as err:                      # noqa: BLE001
        row.setdefault("error", _why(err))
        return row
    row.update(ops=len(graph.ops), bare_s=round(time.perf_counter() - t0, 3), bare_ii=bare.ii,
               bare_proven=bare.proven_optimal)
    for key, value in (("ii", bare.ii), ("lower_bound", bare.lower_bound), ("proven", bare.proven_optimal),
                       ("status", bare.status), ("proven_bound", bare.proven_bound)):
        row.setdefault(key, value)
    if ti_limit > 0:
        t0 = time.perf_counter()
        ti = S.solve(graph, S.SolveOptions(encoding=S.TIME_INDEXED, time_limit=ti_limit))
        row.update(time_indexed_s=round(time.perf_counter() - t0, 3), time_indexed_ii=ti.ii,
                   time_indexed_status=ti.status)
    return row


def _cell(value, fmt="{}") -> str:
    return "-" if value is None else fmt.format(value)


def print_row(r: dict, ti: bool) -> None:
    line = (f"{r['case']:<34}{_cell(r.get('ops')):>4}{_cell(r.get('cli_s'), '{:.2f}'):>8}"
            f"{_cell(r.get('cpu_s'), '{:.2f}'):>7}{_cell(r.get('solve_s'), '{:.2f}'):>8}"
            f"{_cell(r.get('bare_s'), '{:.2f}'):>8}{_cell(r.get('ii')):>7}{_cell(r.get('lower_bound')):>7}"
            f"{_cell(r.get('proven_bound')):>8}{_cell(r.get('proven')):>8}{(r.get('twill') or '-'):>10}")
    if ti:
        line += f"{_cell(r.get('time_indexed_s'), '{:.2f}'):>10}"
    print(line, flush=True)
    if r.get("error"):
        print(f"{'':<4}{r['error']}", flush=True)
    elif r.get("rows_split"):
        print(f"{'':<4}(the partitioner solved the row-split tile: no partition of the unsplit one)", flush=True)


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=float, default=60.0, help="solver time limit per solve (s), as the CLI's")
    ap.add_argument("--ti-limit", type=float, default=0.0, help="time-indexed model time limit (s); 0 skips it")
    ap.add_argument("--only", default=None, help="run the cases whose name contains this")
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--profile", action="store_true", help="print each case's CP-SAT calls")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "solver.json"))
    args = ap.parse_args(argv)
    todo = [c for c in cases(tuple(args.sizes.split(",")), tuple(args.archs.split(",")))
            if not args.only or args.only in c[0]]
    ti = args.ti_limit > 0
    print(f"{'case':<34}{'ops':>4}{'cli s':>8}{'cpu s':>7}{'solve s':>8}{'bare s':>8}{'II':>7}{'bound':>7}{'proven≥':>8}"
          f"{'proven':>8}{'Twill':>10}" + (f"{'time-idx s':>10}" if ti else ""))
    rows = []
    for case in todo:
        r = run_case(case, args.limit, args.ti_limit)
        rows.append(r)
        print_row(r, ti)
        if args.profile:
            for c in r.get("profile", []):
                print(f"{'':<6}{c.get('label', ''):<20}{c['step']:<12}II {c['ii']:<7}{c['status']:<11}"
                      f"{c['seconds']:.3f} s")
    done = [r for r in rows if "cli_s" in r]
    if done:
        slow = [r["case"] for r in done if r["cli_s"] > 2.0 or not r["proven"]]
        print(f"{len(done)} cases on the command-line path: {sum(r['proven'] for r in done)} proven, "
              f"{len(done) - len(slow)} proven in <= 2 s" + (f"; over 2 s or unproven: {', '.join(slow)}"
                                                              if slow else ""))
        explained = [r for r in done if "solve_s" in r]
        print(f"as `aref solve` runs it (proofs explained): "
              f"{sum(r['solve_s'] <= 2.0 and r['solve_proven'] for r in explained)} of {len(explained)} "
              f"proven in <= 2 s")
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)
    print(f"wrote {args.json}")
    return rows


if __name__ == "__main__":
    main()
