"""Stress run of the synchronization the compiler generates: random tile programs (tests/random_programs.py)
× every partition (heuristic consumer modes, optimal, random) × {sm_90a, sm_100a}, each run in the simulator
over seeded interleavings against the interpreter and explored exhaustively (up to a state budget) at the
trip counts 0, 1, D, D+1. Prints outcome counts per configuration, exploration completeness and time
(figures, not assertions; the property test in tests/ runs a small share of this in CI).

    python bench/random_sync.py [--programs 100] [--first 0] [--size wgmma|small] [--seeds 3]
                                [--max-states 20000] [--random-partitions 2] [--json out.json]
"""
import argparse
import collections
import json
import os
import random
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import program_matrix as pm  # noqa: E402
import random_programs as rp  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=100)
    ap.add_argument("--first", type=int, default=0, help="first seed")
    ap.add_argument("--size", default="wgmma", choices=sorted(rp.SIZES))
    ap.add_argument("--seeds", type=int, default=3, help="random interleavings per configuration")
    ap.add_argument("--max-states", type=int, default=20_000, help="exploration budget per trip count")
    ap.add_argument("--random-partitions", type=int, default=2)
    ap.add_argument("--archs", default=",".join(rp.ARCHS))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    counts = collections.Counter()
    explored = collections.Counter()
    warnings = collections.Counter()
    rows, failures = [], []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.first, args.first + args.programs):
            prog = rp.random_program(seed, size=args.size, directory=tmp)
            for arch in args.archs.split(","):
                res = pm.run_matrix(prog, arch, random.Random(seed), random_partitions=args.random_partitions,
                                    seeds=args.seeds, max_states=args.max_states)
                for o in res.outcomes:
                    kind = o.config.rstrip("0123456789")
                    counts[(arch, kind, o.status)] += 1
                    for trips, (states, done) in o.explored.items():
                        explored[(arch, "complete" if done else "bounded")] += 1
                    for w in o.warnings:
                        warnings[(arch, kind, w.split(":")[0][:60])] += 1
                    rows.append({"seed": seed, "arch": arch, "config": o.config, "status": o.status,
                                 "groups": o.groups, "seconds": round(o.seconds, 2), "detail": o.detail[:300],
                                 "explored": {str(k): v for k, v in o.explored.items()}})
                    if o.status == "failed":
                        failures.append((seed, arch, o.config, o.detail))
                        with open(prog.path) as f:
                            src = f.read()
                        print(f"FAILED seed={seed} {arch} {o.config}: {o.detail[:400]}\n{src}", flush=True)
            print(f"seed {seed} done ({time.perf_counter() - t0:.0f}s)", flush=True)
    print(f"\n{args.programs} programs ({args.size}), {time.perf_counter() - t0:.0f} s")
    print(f"{'arch':<9}{'configuration':<24}{'ok':>6}{'n/a':>6}{'refused':>9}{'failed':>8}")
    keys = sorted({(a, k) for a, k, _ in counts})
    for a, k in keys:
        c = [counts[(a, k, s)] for s in ("ok", "not-applicable", "refused", "failed")]
        print(f"{a:<9}{k:<24}{c[0]:>6}{c[1]:>6}{c[2]:>9}{c[3]:>8}")
    for a in args.archs.split(","):
        done, bounded = explored[(a, "complete")], explored[(a, "bounded")]
        print(f"{a}: exhaustive exploration complete at {done} of {done + bounded} (program, configuration, "
              f"trip count) cases within {args.max_states} states")
    for (a, k, w), n in sorted(warnings.items()):
        print(f"warning {a} {k}: {w} ({n}×)")
    print(f"failures: {len(failures)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
