"""The solver's optimality claims against brute force, over many tiny random loops (printed counts).

For each seed, a random loop of ``--ops`` ops (tests/solve/randgraphs.py, warp groups capped at
``--groups``) is solved by the interval model; brute-force enumeration over every start vector and
warp assignment within the solver's stage bound then finds the true smallest II from the lower
bound up to the solver's answer (or the two smallest IIs when the solver says infeasible).  Every
candidate schedule the enumeration meets is judged by both the folding checker (``solve.check``)
and the unrolling one (tests/solve/brute.py), which must agree.  With ``--time-indexed`` the
paper-literal encoding must return the same II.  Seeds that disagree are listed at the end:
add them to the regression examples of tests/solve/test_small.py.

    PYTHONPATH=. python bench/solver_brute.py --seeds 0:2000 [--ops 3] [--groups 2] [--occupancy] [--time-indexed]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
import sys
import time

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "solve")]

from brute import brute_force_ii  # noqa: E402
from randgraphs import random_graph  # noqa: E402
from solve import check, solve  # noqa: E402


def compare(seed: int, ops: int, groups: int, time_indexed: bool, occupancy: bool = False) -> tuple[str, str]:
    """(outcome, detail) of one seed; outcome is one of the keys counted in ``main``."""
    g = random_graph(seed, n_ops=ops, occupancy=occupancy)
    g.machine.max_groups = min(g.machine.max_groups, groups)
    r = solve(g, time_limit=20, explain=False)
    try:
        if r.status == "infeasible":
            if not (r.infeasible and r.infeasible[0].ii == r.lower_bound):
                return "bad-proof", f"infeasible without a proof from the bound: {r.infeasible}"
            upper = min(r.lower_bound + 1, max(e.ii_max for e in r.infeasible))
            found = brute_force_ii(g, r.stage_bound, r.lower_bound, upper)
            return ("infeasible-agrees", "") if found is None else \
                ("solver-missed", f"solver infeasible, brute force finds II {found}")
        if r.status != "optimal":
            return "timeout", r.status
        if not check(g, r.ii, r.schedule, r.assignment).ok:
            return "invalid", f"solver schedule fails the checker at II {r.ii}"
        found = brute_force_ii(g, r.stage_bound, r.lower_bound, r.ii)
        if found != r.ii:
            return "solver-missed", f"solver II {r.ii}, brute force II {found}"
        if time_indexed:
            t = solve(g, encoding="time-indexed", time_limit=60, explain=False)
            if t.ii != r.ii:
                return "encodings-differ", f"interval II {r.ii}, time-indexed {t.ii} ({t.status})"
        return "optimal-agrees", ""
    except AssertionError as err:  # the two checkers disagree on a candidate
        return "checkers-differ", str(err)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0:500", help="range a:b of seeds")
    ap.add_argument("--ops", type=int, default=3, help="ops per loop (the enumeration grows fast with it)")
    ap.add_argument("--groups", type=int, default=2, help="cap on the machine's warp groups")
    ap.add_argument("--time-indexed", action="store_true", help="also require the time-indexed encoding's II")
    ap.add_argument("--occupancy", action="store_true", help="give the loops group-occupancy costs")
    args = ap.parse_args(argv)
    a, b = (int(x) for x in args.seeds.split(":"))
    counts: Counter = Counter()
    failures = []
    t0 = time.perf_counter()
    for seed in range(a, b):
        outcome, detail = compare(seed, args.ops, args.groups, args.time_indexed, args.occupancy)
        counts[outcome] += 1
        if not outcome.endswith("agrees"):
            failures.append((seed, outcome, detail))
            print(f"seed {seed}: {outcome}: {detail}", flush=True)
    print(f"{b - a} loops of {args.ops} ops (≤ {args.groups} groups{', occupancy costs' if args.occupancy else ''}) "
          f"in {time.perf_counter() - t0:.0f} s")
    for outcome in ("optimal-agrees", "infeasible-agrees", "solver-missed", "invalid", "bad-proof",
                    "checkers-differ", "encodings-differ", "timeout"):
        print(f"  {outcome:18s} {counts[outcome]}")
    if failures:
        print("failing seeds:", " ".join(str(s) for s, _, _ in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
