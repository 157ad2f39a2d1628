"""Mutation testing of the simulator: plant one synchronization bug at a time into each example's Barrier IR and
see whether `aref.sim.check`, with its default settings, catches it (figures, not assertions; the CI test
`tests/sim/test_mutation.py` runs a small slice).

    python bench/mutation.py [--examples gemm,attention_fwd] [--archs sm_90a,sm_100a]
                             [--partitions heuristic,optimal] [--kinds delete-wait,flip-parity]
                             [--max-states 200000] [--json out.json] [--verbose]

The mutations (`aref.sim.mutants`): delete an mbarrier_wait or flip its parity, delete an mbarrier_arrive /
arrive_expect_tx / mma_commit, delete an mma_wait or raise its `pending`, delete a fence. Each example runs at a
size that exercises its protocol: one CTA (causal attention: a row of them) whose loop runs 8 steps or more
(K = 512, Sk = 512, ...), so its rings wrap.

Each mutant is one of:

  caught        `aref.sim.check(kernel, inputs, reference)` reports it (a violation or a wrong output);
  equivalent    check reports nothing, and the mutant is shown to behave like the kernel, by a rule
                (`by_rule`: a deleted wait the unmutated kernel's happens-before order implies, in every
                launch and size the check simulates; an mma_wait that never has anything to retire) or by a
                complete exhaustive exploration (`aref.sim.equivalent`: every schedule of every CTA, with
                partial-order reduction, for one tile per CTA and for a persistent CTA walking three tiles);
  not caught    check reports nothing and either the exploration finds a violation (a bug check missed)
                or it stops at `--max-states` before proving the mutant harmless.

The optimal partition is run where its Barrier IR differs from the heuristic's.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from aref import sim  # noqa: E402
from aref.compiler import CompileOptions  # noqa: E402
from aref.search import lower_to  # noqa: E402
from aref.runtime.harness import load_example  # noqa: E402
from aref.sim.implied import covered_without, implied_ops  # noqa: E402
from aref.sim.mutants import KINDS, mutants, op_of, planted  # noqa: E402
from aref.ir.ws import print_ws  # noqa: E402

# one CTA (a row of CTAs for causal attention, whose trip count grows with the query block) whose loop runs
# 8 steps or more, with the examples' own ring depths
SIZES = {
    "gemm": dict(M=128, N=128, K=512),
    "dual_gemm": dict(M=128, N=128, K=512),
    "gemm_reduce": dict(M=128, N=128, K=512),
    "attention_fwd": dict(BH=1, Sq=128, Sk=512),
    "attention_bwd": dict(BH=1, Sq=512, Sk=64, BN=64),
    "mlp": dict(M=128, N=128, H=512),
    "attention_causal": dict(BH=1, Sq=512),
    "linear_attention": dict(BH=1, S=512),
    "gemm_epilogue": dict(M=128, N=128, K=512),
    "splitk_gemm": dict(M=128, N=128, K=512, SPLIT=1),
    "rowwise": dict(M=512, ROWS=1024),
    "batched_gemm": dict(Bt=1, M=128, N=128, K=512),
}
ARCHS = ("sm_90a", "sm_100a")
PARTITIONS = ("heuristic", "optimal")


@dataclass
class Outcome:
    mutant: str
    status: str            # caught / equivalent / not caught / error
    detail: str = ""
    seconds: float = 0.0


@dataclass
class Row:
    example: str
    arch: str
    partition: str
    outcomes: list = field(default_factory=list)
    note: str = ""
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


def compile_example(name: str, arch: str, partition: str, sizes: dict | None = None):
    """(example, inputs, barrier kernel) at the bench size."""
    ex = load_example(os.path.join(ROOT, "examples", f"{name}.py"))
    inputs = ex.inputs(arch=arch, **(SIZES[name] if sizes is None else sizes))
    options = CompileOptions(arch=arch, partition=partition, timing_guard=False)
    ws = lower_to(ex.kernel.specialize(**inputs), "barrier", options)
    return ex, inputs, ws


def by_rule(ws, mutant, op, implied) -> str | None:
    """Why `mutant` is equivalent by the stated rules (`aref.sim.implied`, over the unmutated kernel), or None:
    a deleted mbarrier_wait whose phase always completed before its group could get there (its arrivals
    happen-before the group's previous op through other waits); a deleted mma_wait, or one whose `pending`
    is raised, that never had an MMA left to retire (retired ≥ issued − pending whenever it ran), or whose
    knowledge nothing needs (`aref.sim.implied.covered_without`)."""
    if implied is None:
        return None
    if mutant.kind == "delete-wait" and implied.implied(op):
        return "implied wait: its phase completes before the group reaches it, in every launch the check runs"
    if mutant.kind in ("delete-mma-wait", "raise-pending") and implied.idle(op):
        return "idle mma_wait: whenever it runs, every MMA it would retire is retired already"
    if mutant.kind in ("delete-mma-wait", "raise-pending") and \
            covered_without(ws, op, mutant.kind == "raise-pending"):
        return ("covered mma_wait: nothing after it uses an MMA result, mma_commits cover the group's MMAs and "
                "every MMA completion the contract needs is known without it")
    return None


def classify(ws, ex, inputs, mutant, max_states: int, implied=None) -> Outcome:
    """Plant `mutant`, run the default check, and where it passes, try to show the mutant equivalent (a rule
    of `by_rule`, else a complete exploration)."""
    t0 = time.perf_counter()
    desc = mutant.describe(ws)
    op = op_of(ws, mutant)                 # (the op the mutation deletes: looked up before it is planted)
    with planted(ws, mutant):
        try:
            report = sim.check(ws, inputs, ex.reference_fn, tolerance=ex.tolerance(inputs))
        except Exception as exc:          # a mutant the simulator cannot execute (reported, never hidden)
            return Outcome(desc, "error", f"{type(exc).__name__}: {exc}", time.perf_counter() - t0)
        if not report.ok:
            first = report.violations[0].kind if report.violations else "wrong output"
            return Outcome(desc, "caught", first, time.perf_counter() - t0)
    rule = by_rule(ws, mutant, op, implied)          # (the rules read the unmutated kernel)
    if rule is not None:
        return Outcome(desc, "equivalent", rule, time.perf_counter() - t0)
    with planted(ws, mutant):
        verdict = sim.equivalent(ws, inputs, max_states=max_states)
    status = "equivalent" if verdict.proved else "not caught"
    return Outcome(desc, status, verdict.reason, time.perf_counter() - t0)


def run_config(name: str, arch: str, partition: str, kinds, max_states: int, verbose: bool,
               heuristic_text: dict, sizes: dict | None = None) -> Row | None:
    t0 = time.perf_counter()
    row = Row(name, arch, partition)
    try:
        ex, inputs, ws = compile_example(name, arch, partition, sizes)
    except Exception as exc:
        row.note = f"does not compile: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        return row
    text = print_ws(ws)
    if partition == "heuristic":
        heuristic_text[(name, arch)] = text
    elif heuristic_text.get((name, arch)) == text:
        return None                       # the optimal partition is the heuristic's program
    clean = sim.check(ws, inputs, ex.reference_fn, tolerance=ex.tolerance(inputs))
    if not clean.ok:
        row.note = "the unmutated kernel fails: " + "; ".join(str(v).splitlines()[0] for v in clean.violations[:2])
        return row
    implied = implied_ops(ws, inputs)
    for m in mutants(ws, kinds):
        o = classify(ws, ex, inputs, m, max_states, implied)
        row.outcomes.append(o)
        if verbose or o.status not in ("caught", "equivalent"):
            print(f"    {o.status:<11} {o.mutant}: {o.detail[:160]} ({o.seconds:.1f} s)", flush=True)
    row.seconds = time.perf_counter() - t0
    return row


def print_table(rows: list[Row]) -> None:
    print(f"\n{'kernel':<18}{'arch':<9}{'partition':<11}{'mutants':>8}{'caught':>8}{'equiv':>7}{'missed':>8}"
          f"{'error':>7}{'caught %':>10}{'seconds':>9}")
    for r in rows:
        if r.note:
            print(f"{r.example:<18}{r.arch:<9}{r.partition:<11}  {r.note}")
            continue
        n, c, e = len(r.outcomes), r.count("caught"), r.count("equivalent")
        missed, err = r.count("not caught"), r.count("error")
        pct = f"{100 * c / (n - e):.0f}%" if n > e else "-"
        print(f"{r.example:<18}{r.arch:<9}{r.partition:<11}{n:>8}{c:>8}{e:>7}{missed:>8}{err:>7}{pct:>10}"
              f"{r.seconds:>9.0f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", default=",".join(SIZES))
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--partitions", default=",".join(PARTITIONS))
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--max-states", type=int, default=200_000, help="exploration budget per CTA (equivalence)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--verbose", action="store_true", help="print every mutant, caught ones included")
    args = ap.parse_args(argv)
    kinds = tuple(args.kinds.split(","))
    rows, heuristic_text = [], {}
    t0 = time.perf_counter()
    for name in args.examples.split(","):
        for arch in args.archs.split(","):
            for partition in args.partitions.split(","):
                print(f"{name} {arch} {partition}", flush=True)
                row = run_config(name, arch, partition, kinds, args.max_states, args.verbose, heuristic_text)
                if row is not None:
                    rows.append(row)
    print_table(rows)
    missed = sum(r.count("not caught") + r.count("error") for r in rows)
    print(f"\n{sum(len(r.outcomes) for r in rows)} mutants, {missed} not caught or failing, "
          f"{time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"example": r.example, "arch": r.arch, "partition": r.partition, "note": r.note,
                        "outcomes": [vars(o) for o in r.outcomes]} for r in rows], f, indent=1)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
