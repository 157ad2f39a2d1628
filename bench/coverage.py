"""Coverage of the CuTe DSL backends over random tile programs (tests/random_programs.py): each program is
partitioned (heuristic, and the optimal solver's with a short time limit), pipelined and lowered, run in the
simulator over a few seeded interleavings against the interpreter on both archs, and compiled for sm_90a
and sm_100a (the partitions --partitions and --sm100-partitions name) with
`aref.backend.cute.compile_barrier` (CuTe DSL → PTX; no GPU needed). Prints the share of programs
that compile, the refusals grouped by rule (error class + message with its numbers and names blanked),
simulator violations and compiler bugs (figures, not assertions: the property test
tests/backend/test_random_compile.py checks a few programs in CI).

    python bench/coverage.py [--n 500] [--first 0] [--jobs 2] [--partitions heuristic,optimal]
                             [--sm100-partitions heuristic,optimal]
                             [--solver-time 5] [--seeds 2] [--emit ptx|cute] [--cache DIR] [--json out.json]
                             [--records out.jsonl] [--summarize out.jsonl]

Compiles are cached on disk (`--cache`, default aref's cache) under a hash of the Barrier IR, so a re-run
only compiles what changed; `--jobs` runs programs in worker processes (one compile each at a time).
`--records` appends each program's record as it completes (a JSON line), so an interrupted run keeps its
figures: `--summarize FILE` prints the summary of such a file.
"""
import argparse
import collections
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import program_matrix as pm  # noqa: E402
import random_programs as rp  # noqa: E402

_TMP = None


def check_program(seed: int, args) -> dict:
    """One program through every stage; a JSON-able record."""
    global _TMP
    from aref.compiler import CompileOptions
    _TMP = _TMP or tempfile.mkdtemp(prefix="aref_coverage_")
    t0 = time.perf_counter()
    prog = rp.random_program(seed, size=args.size, directory=_TMP)
    rec = {"seed": seed, "features": prog.features, "ragged": any(prog.spec.ragged), "stages": {}}
    runs = [(part, "sm_90a") for part in args.partitions.split(",")] + \
        [(part, "sm_100a") for part in args.sm100_partitions.split(",")]
    for part, arch in runs:
        how = {"options": CompileOptions(arch=arch, partition=part, solver_time_limit=args.solver_time)}
        o = pm.check_config(prog, part, how, seeds=args.seeds, exhaustive=False)
        st = {"groups": o.groups, "sim_seconds": round(o.seconds, 2)}
        if o.status == "failed":                 # lowered but simulated wrong: a violation; else a crash
            st["status"] = "violation" if o.ir is not None else "bug"
            st["rule"] = pm.normalize_message(o.detail) if o.ir is None else "simulator"
            st["detail"] = o.detail[:600]
        elif o.status != "ok":
            st["status"], st["rule"], st["detail"] = "refused", "lowering: " + pm.normalize_message(o.detail), \
                o.detail[:600]
        else:       # CuTe DSL → PTX for the program's arch (compile_sm90 compiles what the Barrier IR targets)
            c = pm.compile_sm90(o.ir, emit=args.emit, cache_dir=args.cache)
            st.update(status=c.status, rule=c.rule, detail=c.detail[:600], compile_seconds=round(c.seconds, 2),
                      registers=c.registers, spill_bytes=c.spill_bytes, cached=c.cached)
        rec["stages"][f"{part}-{arch}"] = st
    rec["seconds"] = round(time.perf_counter() - t0, 1)
    if any(s["status"] in ("violation", "bug") for s in rec["stages"].values()):
        with open(prog.path) as f:
            rec["source"] = f.read()
    return rec


def _line(rec: dict) -> str:
    parts = []
    for name, st in rec["stages"].items():
        word = st["status"] + ("" if st["status"] in ("compiled", "simulated") else f" [{st.get('rule', '')[:70]}]")
        parts.append(f"{name}: {word}")
    return f"seed {rec['seed']} ({rec['seconds']}s): " + "; ".join(parts)


def summarize(records: list[dict], keys: list[str]) -> dict:
    n = len(records)
    out = {"programs": n, "ragged": sum(r["ragged"] for r in records), "compile_share": {}, "refusals": {},
           "violations": [], "bugs": [], "spills": []}
    for key in keys:
        ok = sum(r["stages"][key]["status"] == "compiled" for r in records)
        out["compile_share"][key] = {"compiled": ok, "of": n, "share": round(ok / max(n, 1), 4)}
        rules = collections.Counter(r["stages"][key]["rule"] for r in records
                                    if r["stages"][key]["status"] == "refused")
        out["refusals"][key] = dict(rules.most_common())
    for r in records:
        for name, st in r["stages"].items():
            if st["status"] == "violation":
                out["violations"].append({"seed": r["seed"], "stage": name, "detail": st["detail"][:300]})
            elif st["status"] == "bug":
                out["bugs"].append({"seed": r["seed"], "stage": name, "rule": st["rule"]})
            elif st.get("spill_bytes"):
                out["spills"].append({"seed": r["seed"], "stage": name, "bytes": st["spill_bytes"]})
    return out


def report(summary: dict, seconds: float) -> None:
    print(f"\n{summary['programs']} random programs ({summary['ragged']} with ragged extents), {seconds:.0f} s")
    for part, c in summary["compile_share"].items():
        part, arch = part.rsplit("-", 1)
        print(f"{arch} compile, {part} partition: {c['compiled']}/{c['of']} = {100 * c['share']:.1f}%")
    for part, rules in summary["refusals"].items():
        if rules:
            print(f"refusals by rule ({part}):")
            for rule, k in rules.items():
                print(f"  {k:>5}  {rule}")
    print(f"simulator violations: {len(summary['violations'])}")
    for v in summary["violations"]:
        print(f"  seed {v['seed']} {v['stage']}: {v['detail'][:200]}")
    print(f"compiler bugs: {len(summary['bugs'])}")
    for b in collections.Counter(f"{b['stage']}: {b['rule']}" for b in summary["bugs"]).most_common():
        print(f"  {b[1]:>5}  {b[0]}")
    print(f"compiled with spills: {len(summary['spills'])}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=500, help="programs (seeds first .. first+n-1)")
    ap.add_argument("--first", type=int, default=0, help="first seed")
    ap.add_argument("--size", default="wgmma", choices=sorted(rp.SIZES))
    ap.add_argument("--partitions", default="heuristic,optimal", help="sm_90a partitions to compile")
    ap.add_argument("--sm100-partitions", default="heuristic", help="sm_100a partitions to compile")
    ap.add_argument("--solver-time", type=float, default=5.0, help="optimal solver time limit (s)")
    ap.add_argument("--seeds", type=int, default=2, help="simulator interleavings per configuration")
    ap.add_argument("--emit", default="ptx", choices=("cute", "ptx"), help="cute: generate source only")
    ap.add_argument("--cache", default=None, help="compile cache directory (default: aref's)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--json", default=None, help="write the summary and per-program records here")
    ap.add_argument("--records", default=None, help="append each program's record here as it completes")
    ap.add_argument("--summarize", default=None, help="only summarize the records of an earlier run")
    args = ap.parse_args()
    keys = [f"{part}-sm_90a" for part in args.partitions.split(",")] + \
        [f"{part}-sm_100a" for part in args.sm100_partitions.split(",")]
    if args.summarize:
        with open(args.summarize) as f:
            records = sorted((json.loads(line) for line in f if line.strip()), key=lambda r: r["seed"])
        report(summarize(records, keys), 0.0)
        return 0
    t0 = time.perf_counter()
    records = []
    seeds = range(args.first, args.first + args.n)
    if args.jobs <= 1:
        results = (check_program(s, args) for s in seeds)
    else:
        pool = ProcessPoolExecutor(max_workers=args.jobs)
        results = (f.result() for f in as_completed([pool.submit(check_program, s, args) for s in seeds]))
    for rec in results:
        records.append(rec)
        if args.records:
            with open(args.records, "a") as f:
                f.write(json.dumps(rec) + "\n")
        print(f"[{len(records)}/{args.n} {time.perf_counter() - t0:.0f}s] {_line(rec)}", flush=True)
    records.sort(key=lambda r: r["seed"])
    summary = summarize(records, keys)
    report(summary, time.perf_counter() - t0)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "programs": records}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
