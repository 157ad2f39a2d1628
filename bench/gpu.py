"""GPU benchmarks: aref's kernels, autotuned, against torch's kernels and FlashAttention-3/4, as ratios.

    python bench/gpu.py [--only GROUP,...] [--quick] [--json OUT.json] [--plot OUT.png] [--fa4-python PY]
                        [--dry-run] [--top-k N]

Groups (issue 10): `gemm` (fp16 / bf16 / fp8 at 4096³ and 8192³ against torch.matmul (cuBLAS) and
torch._scaled_mm), `ksweep` (M = N = 8192, K = 256 … 16384), `persistent` (the persistent GEMM), `attn_fwd` and
`attn_bwd` (head dim 64 and 128, causal and not, sequence 1k … 16k with batch × heads = 16k tokens × 16 (128)
or 32 (64) heads, against SDPA's cuDNN and flash backends, FlashAttention-3 when `flash_attn_interface`
imports, and FlashAttention-4's CuTe kernels run by `bench/fa4_worker.py` in their own environment, given
with `--fa4-python`), `dual_gemm`, `gemm_reduce`. Every output — aref's and each baseline's — is checked
against an fp32 reference before it is timed (`aref.tune.bench`); times are medians over CUDA-event-timed
repetitions with the L2 flushed between them (`aref.tune.gpu.time_cuda`). The table reports ratios
(baseline time / aref time: above 1, aref is faster) and the issue's targets; `--json` and `--plot` write the
rows and a PNG of the ratios. Without a GPU the script prints what it would run and exits 0.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SEQS = (1024, 2048, 4096, 8192, 16384)
K_SWEEP = (256, 512, 1024, 2048, 4096, 8192, 16384)


@dataclass
class Workload:
    """One benchmarked problem: the aref example (None: no aref kernel for it yet, baselines only), its
    input overrides, the baselines by name, and the issue's target (baseline name, minimum ratio)."""

    name: str
    group: str
    example: str | None
    overrides: dict = field(default_factory=dict)
    baselines: tuple = ()
    target: tuple | None = None
    attention: dict | None = None        # bh, seq, d, causal, backward, dtype
    persistent_only: bool = False
    note: str = ""


def workloads(quick: bool = False) -> list[Workload]:
    out = []
    sizes = (4096,) if quick else (4096, 8192)
    for dtype in ("float16", "bfloat16", "float8_e4m3"):
        base = "torch._scaled_mm" if dtype == "float8_e4m3" else "cuBLAS"
        for n in sizes:
            out.append(Workload(f"gemm {dtype} {n}³", "gemm", "gemm.py", {"M": n, "N": n, "K": n, "dtype": dtype},
                                (base,), (base, 0.95 if dtype == "float8_e4m3" else 1.0)))
    for k in (K_SWEEP[::3] if quick else K_SWEEP):
        out.append(Workload(f"gemm fp16 8192²×{k}", "ksweep", "gemm.py", {"M": 8192, "N": 8192, "K": k}, ("cuBLAS",)))
    out.append(Workload("persistent gemm 4096³", "persistent", "gemm.py", {"M": 4096, "N": 4096, "K": 4096},
                        ("cuBLAS",), ("cuBLAS", 1.0), persistent_only=True,
                        note="target: persistent ≥ non-persistent (compare with the gemm fp16 4096³ row)"))
    for backward in (False, True):
        group = "attn_bwd" if backward else "attn_fwd"
        for d in (64, 128):
            heads = 32 if d == 64 else 16
            for causal in (False, True):
                for seq in (SEQS[:3] if quick else SEQS):
                    bh = max(1, 16384 // seq) * heads
                    ex = None if causal else ("attention_bwd.py" if backward else "attention_fwd.py")
                    target = None
                    if not backward:
                        target = ("SDPA cuDNN", 1.05 if d == 128 and not causal else 1.0)
                    elif d == 128 and not causal:
                        target = ("SDPA cuDNN", 0.9)
                    out.append(Workload(
                        f"attn {'bwd' if backward else 'fwd'} hd{d}{' causal' if causal else ''} {seq // 1024}k",
                        group, ex, {}, ("SDPA cuDNN", "SDPA flash", "FA3", "FA4"), target,
                        {"bh": bh, "seq": seq, "d": d, "causal": causal, "backward": backward},
                        note="no causal kernel in examples/ yet: baselines only" if causal else ""))
    out.append(Workload("dual gemm 4096³", "dual_gemm", "dual_gemm.py", {"M": 4096, "N": 4096, "K": 4096},
                        ("torch",), ("torch", 1.2)))
    out.append(Workload("gemm + rmsnorm 4096³", "gemm_reduce", "gemm_reduce.py", {"M": 4096, "N": 4096, "K": 4096},
                        ("torch",)))
    return out


# --------------------------------------------------------------------------------------------- baselines
def available_baselines(fa4_python: str | None) -> dict[str, str]:
    """Each optional baseline: "yes" or why it is not available."""
    out = {"cuBLAS": "yes", "torch._scaled_mm": "yes", "SDPA cuDNN": "yes", "SDPA flash": "yes", "torch": "yes"}
    out["FA3"] = "yes" if importlib.util.find_spec("flash_attn_interface") else "flash_attn_interface not importable"
    if fa4_python:
        out["FA4"] = "yes" if os.path.exists(fa4_python) else f"{fa4_python} does not exist"
    else:
        out["FA4"] = "needs --fa4-python (FA4 4.0.0b3 runs on an older CuTe DSL, in its own environment)"
    return out


def _sdpa(backend_name: str, causal: bool, backward: bool):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"SDPA cuDNN": SDPBackend.CUDNN_ATTENTION, "SDPA flash": SDPBackend.FLASH_ATTENTION}[backend_name]

    def prepare(t):
        # SDPA's 4-D layout (batch, heads, seq, d): one batch of all heads, the same memory as (bh, seq, d)
        q, k, v = (t[n][None] for n in ("Q", "K", "V"))
        if not backward:
            def run():
                with sdpa_kernel(backend):
                    return {"O": torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)[0]}
            return run
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        with sdpa_kernel(backend):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        do = t["dO"][None]

        def run_bwd():
            gq, gk, gv = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
            return {"dQ": gq[0].float(), "dK": gk[0], "dV": gv[0]}
        return run_bwd
    return prepare


def _fa3(causal: bool, backward: bool):
    import flash_attn_interface as fa3
    import torch

    def first(x):
        return x[0] if isinstance(x, tuple) else x

    def prepare(t):
        # FA3's layout is (batch, seq, heads, d): heads become a dimension of one batch
        q, k, v = (t[n].transpose(0, 1)[None].contiguous() for n in ("Q", "K", "V"))
        if not backward:
            return lambda: {"O": first(fa3.flash_attn_func(q, k, v, causal=causal))[0].transpose(0, 1)}
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        o = first(fa3.flash_attn_func(q, k, v, causal=causal))
        do = t["dO"].transpose(0, 1)[None].contiguous()

        def run():
            gq, gk, gv = torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
            return {"dQ": gq[0].transpose(0, 1).float(), "dK": gk[0].transpose(0, 1), "dV": gv[0].transpose(0, 1)}
        return run
    return prepare


def fa4_in_own_env(fa4_python: str, attention: dict, dtype: str) -> dict:
    """Run `bench/fa4_worker.py` under `fa4_python` for one attention problem: {"ms", "check"} or {"error"}."""
    req = json.dumps({**attention, "dtype": dtype})
    try:
        proc = subprocess.run([fa4_python, os.path.join(ROOT, "bench", "fa4_worker.py")], input=req, text=True,
                              capture_output=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (proc.stderr or proc.stdout)[-300:]}


# ------------------------------------------------------------------------------------------------ running
def run_attention(w: Workload, avail: dict, fa4_python: str | None, options):
    """An attention row: aref's example (non-causal) and the SDPA / FA3 / FA4 baselines, all checked
    against `attn_ref`'s blockwise fp32 reference."""
    import torch

    import attn_ref
    from aref.runtime.harness import load_example
    from aref.tune.bench import BenchRow, bench_example, time_baseline
    a = w.attention
    dtype = torch.float16
    t = attn_ref.inputs(a["bh"], a["seq"], a["d"], dtype, grad=a["backward"])
    if a["backward"]:
        ref = attn_ref.backward(t["Q"], t["K"], t["V"], t["dO"], a["causal"])
        expected = {k: ref[k] for k in ("dQ", "dK", "dV")}
    else:
        expected = {"O": attn_ref.forward(t["Q"], t["K"], t["V"], a["causal"])[0]}
    baselines = {}
    for b in w.baselines:
        if avail.get(b) != "yes":
            baselines[b] = None
        elif b.startswith("SDPA"):
            baselines[b] = _sdpa(b, a["causal"], a["backward"])
        elif b == "FA3":
            baselines[b] = _fa3(a["causal"], a["backward"])
    if w.example is not None:
        ex = load_example(os.path.join(ROOT, "examples", w.example))
        inputs = _aref_attention_inputs(t, ref if a["backward"] else None)
        row = bench_example(ex, inputs, {k: v for k, v in baselines.items() if k != "FA4"}, options=options,
                            name=w.name, expected=expected)
        if a["backward"]:
            row.notes.append("aref's time excludes the Δ = rowsum(dO⊙O) preprocessing the baselines include")
    else:
        from aref.tune.bench import describe
        row = BenchRow(w.name, describe(t))
        for b, prep in baselines.items():
            if prep is not None and b != "FA4":
                row.baselines[b], row.checks[b] = time_baseline(prep, t, expected)
            else:
                row.baselines[b] = None
    if "FA4" in w.baselines:
        if avail.get("FA4") == "yes":
            res = fa4_in_own_env(fa4_python, a, "float16")
            row.baselines["FA4"] = res.get("ms")
            if "check" in res:
                row.checks["FA4"] = res["check"]
            if "error" in res:
                row.notes.append(f"FA4: {res['error'][:200]}")
        else:
            row.baselines["FA4"] = None
    row.flops = int(attn_ref.flops(a["bh"], a["seq"], a["d"], a["causal"], a["backward"]))
    return row


def _aref_attention_inputs(t: dict, ref: dict | None) -> dict:
    import math

    import torch
    if ref is None:
        return {**t, "O": torch.zeros_like(t["Q"])}
    q = t["Q"]
    delta = (t["dO"].float() * ref["O"].float()).sum(-1)
    return {**t, "LSE2": (ref["LSE"] * math.log2(math.e)).contiguous(), "Delta": delta.contiguous(),
            "dQ": torch.zeros(q.shape, device=q.device, dtype=torch.float32),
            "dK": torch.zeros_like(t["K"]), "dV": torch.zeros_like(t["V"])}


def run_example(w: Workload, avail: dict, options):
    import torch

    from aref.runtime.harness import load_example
    from aref.tune.bench import bench_example, example_baseline
    ex = load_example(os.path.join(ROOT, "examples", w.example))
    inputs = {k: (v.cuda() if isinstance(v, torch.Tensor) else v)
              for k, v in ex.inputs("large", **w.overrides).items()}
    base = example_baseline(ex)
    baselines = {b: (base if avail.get(b) == "yes" else None) for b in w.baselines}
    space = [c for c in ex.kernel.search_space() if c.persistent] if w.persistent_only else None
    return bench_example(ex, inputs, baselines, options=options, name=w.name, space=space)


def table(rows: list[dict], console) -> None:
    from rich.table import Table
    names = []
    for r in rows:
        for b in r["ratios"]:
            if b not in names:
                names.append(b)
    t = Table(title="aref vs torch / FlashAttention (ratio = baseline time / aref time; > 1: aref faster)")
    for col in ("workload", "aref config", "aref TFLOP/s", *names, "target"):
        t.add_column(col, overflow="fold")
    for r in rows:
        tgt = r.get("target")
        met = ""
        if tgt:
            got = r["ratios"].get(tgt[0])
            verdict = "-" if got is None else ("[green]met" if got >= tgt[1] else "[red]missed")
            met = f"{tgt[0]} ≥ {tgt[1]}: {verdict}"
        t.add_row(r["name"], r.get("config") or "-",
                  f"{r['aref_tflops']:.0f}" if r.get("aref_tflops") else "-",
                  *[(f"{r['ratios'][b]:.3f}" if r["ratios"].get(b) else "-") for b in names], met)
    console.print(t)


def plot(rows: list[dict], path: str) -> str:
    """Ratios per workload and baseline as grouped bars with the parity line; returns what was written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    names = sorted({b for r in rows for b, v in r["ratios"].items() if v})
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(rows)), 5))
    width = 0.8 / max(1, len(names))
    for j, b in enumerate(names):
        xs = [i + j * width for i, r in enumerate(rows) if r["ratios"].get(b)]
        ys = [r["ratios"][b] for r in rows if r["ratios"].get(b)]
        ax.bar(xs, ys, width, label=f"vs {b}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], [r["name"] for r in rows], rotation=75,
                  fontsize=7)
    ax.set_ylabel("baseline time / aref time")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return f"wrote {path}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated groups: gemm, ksweep, persistent, attn_fwd, "
                                               "attn_bwd, dual_gemm, gemm_reduce")
    ap.add_argument("--quick", action="store_true", help="fewer sizes (a smoke run)")
    ap.add_argument("--json", default=None, help="write the rows as JSON to this file")
    ap.add_argument("--plot", default=None, help="write a PNG of the ratios to this file")
    ap.add_argument("--fa4-python", default=None, help="python of an environment with FlashAttention-4 (fa4)")
    ap.add_argument("--top-k", type=int, default=4, help="autotuning: candidates timed per kernel")
    ap.add_argument("--dry-run", action="store_true", help="print what would run, even with a GPU")
    args = ap.parse_args(argv)
    from rich.console import Console
    console = Console()
    from aref.tune.gpu import device_name, gpu_arch
    groups = {g for g in args.only.split(",") if g}
    todo = [w for w in workloads(args.quick) if not groups or w.group in groups]
    avail = available_baselines(args.fa4_python)
    arch = gpu_arch()
    if arch is None or args.dry_run:
        console.print(("No CUDA GPU here: " if arch is None else "Dry run: ") + f"would benchmark {len(todo)} "
                      "workloads (each output checked against an fp32 reference, then timed):", highlight=False)
        for w in todo:
            what = f"aref examples/{w.example}" if w.example else "no aref kernel"
            shape = w.attention or w.overrides
            console.print(f"  [{w.group}] {w.name}: {what} {shape} vs {', '.join(w.baselines)}"
                          + (f" (target {w.target[0]} ≥ {w.target[1]}×)" if w.target else "")
                          + (f" — {w.note}" if w.note else ""), highlight=False)
        console.print("baselines: " + "; ".join(f"{k}: {v}" for k, v in avail.items()), highlight=False)
        return 0
    from aref.tune import TuneOptions
    options = TuneOptions(arch=arch, top_k=args.top_k)
    rows = []
    t0 = time.perf_counter()
    for w in todo:
        console.print(f"[bold]{w.name}[/bold] …", highlight=False)
        try:
            row = run_attention(w, avail, args.fa4_python, options) if w.attention else run_example(w, avail, options)
            data = row.to_json()
        except Exception as exc:      # one workload's failure is reported in its row; the others still run
            data = {"name": w.name, "error": f"{type(exc).__name__}: {exc}"[:500], "ratios": {}, "checks": {}}
        data.update({"group": w.group, "target": list(w.target) if w.target else None, "note": w.note})
        rows.append(data)
        if args.json:                 # written as it goes: a run cut short keeps what it measured
            with open(args.json, "w") as f:
                json.dump({"device": device_name(), "arch": arch, "rows": rows}, f, indent=1)
    table(rows, console)
    for r in rows:
        for n in r.get("notes", []) + ([r["error"]] if r.get("error") else []):
            console.print(f"{r['name']}: {n}", highlight=False)
    if args.plot:
        console.print(plot(rows, args.plot))
    console.print(f"{len(rows)} workloads on {device_name()} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
