"""compute-sanitizer on every example's kernel at small sizes: racecheck (shared-memory hazards), synccheck
(barrier misuse) and memcheck (out-of-bounds and misaligned accesses) — printed counts per tool, and an
optional JSON file. Needs a CUDA GPU and `compute-sanitizer` on PATH; without them it prints why and exits 0.

    python bench/sanitize.py [--only gemm] [--tools racecheck synccheck memcheck] [--json out.json]

Each (kernel, tool) runs in its own process under the sanitizer (`--child`): the kernel is compiled, launched
once on the example's small inputs and compared with the example's reference. memcheck runs with
`--report-api-errors no`: otherwise it counts the CUDA Python bindings' host-side `cuGetProcAddress` probes as
errors, none of them in a kernel.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

EXAMPLES = ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd"]
OVERRIDES = {"attention_bwd": {"BN": 64}}       # its default tiles exceed Hopper's register budget
TOOLS = {"racecheck": [], "synccheck": [], "memcheck": ["--report-api-errors", "no"]}
# the last lines compute-sanitizer prints: "ERROR SUMMARY: N errors", racecheck "RACECHECK SUMMARY: N hazards
# displayed (E errors, W warnings)"
_ERRORS = re.compile(r"ERROR SUMMARY: (\d+) error")
_HAZARDS = re.compile(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")


def targets(only: str | None) -> list[str]:
    """`examples/NAME.py:KERNEL` for every kernel of every example."""
    from aref.runtime.harness import kernels_of, load_module
    out = []
    for name in EXAMPLES:
        if only and only not in name:
            continue
        path = os.path.join(ROOT, "examples", f"{name}.py")
        out += [f"{path}:{k}" for k in kernels_of(load_module(path))]
    return out


def child(target: str) -> int:
    """Compile and launch one kernel on its small inputs; print one JSON line with the outcome."""
    import torch

    from aref.errors import ArefError
    from aref.runtime.harness import compare, load_example
    from aref.tune import TuneOptions
    ex = load_example(target)
    ex.kernel.tune_options = TuneOptions(use_gpu=False)    # one configuration (the model's pick), not a timing run
    example = os.path.splitext(os.path.basename(ex.path))[0]
    inputs = ex.inputs("small", **OVERRIDES.get(example, {}))
    cuda = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    try:
        ex.kernel(**cuda)
    except ArefError as err:
        print(json.dumps({"refused": err.message}))
        return 0
    torch.cuda.synchronize()
    report = compare({k: v.cpu() for k, v in cuda.items() if isinstance(v, torch.Tensor)},
                     ex.reference_fn(**inputs), ex.tolerance(inputs))
    print(json.dumps({"ok": report.ok, "max_abs_err": report.max_abs_err}))
    return 0


def sanitize(target: str, tool: str, timeout: float) -> dict:
    cmd = ["compute-sanitizer", "--tool", tool, *TOOLS[tool], sys.executable, os.path.abspath(__file__),
           "--child", target]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"tool": tool, "error": f"timed out after {timeout:.0f} s"}
    out = proc.stdout + proc.stderr
    row = {"tool": tool, "returncode": proc.returncode}
    outcome = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    row.update(outcome[-1] if outcome else {"error": out[-2000:]})
    errors, hazards = _ERRORS.search(out), _HAZARDS.search(out)
    row["errors"] = int(errors.group(1)) if errors else None
    if tool == "racecheck":
        row["hazards"] = int(hazards.group(1)) if hazards else None
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--only", default=None, help="examples whose name contains this")
    ap.add_argument("--tools", nargs="+", default=list(TOOLS), choices=list(TOOLS))
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per kernel and tool")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    import torch
    if not torch.cuda.is_available():
        print("skipped: needs a CUDA GPU (torch.cuda.is_available() is False)")
        return 0
    if shutil.which("compute-sanitizer") is None:
        print("skipped: compute-sanitizer is not on PATH")
        return 0
    rows = []
    print(f"{'kernel':<28}{'tool':<11}{'errors':>7}{'hazards':>9}  outcome")
    for target in targets(args.only):
        label = os.path.basename(target)
        for tool in args.tools:
            row = {"kernel": label, **sanitize(target, tool, args.timeout)}
            rows.append(row)
            outcome = ("refused: " + row["refused"][:50] if "refused" in row else
                       row.get("error", "")[:60] or ("ok" if row.get("ok") else f"WRONG (max |err| "
                                                                               f"{row.get('max_abs_err')})"))
            print(f"{label:<28}{tool:<11}{str(row['errors']) if 'errors' in row else '-':>7}"
                  f"{str(row.get('hazards', '-')):>9}  {outcome}", flush=True)
    def total(key, tool):
        counts = [r.get(key) for r in rows if r["tool"] == tool and "refused" not in r]
        return "unknown" if None in counts else str(sum(counts))

    summary = [f"{tool} {total('errors', tool)} errors" for tool in args.tools if tool != "racecheck"]
    if "racecheck" in args.tools:
        summary.append(f"racecheck {total('hazards', 'racecheck')} hazards")
    print("totals: " + ", ".join(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
