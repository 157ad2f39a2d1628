"""One GPU check (an H100 / H200, about 8 minutes): everything aref can only verify on a GPU, in one JSON file.

    python bench/gpu_check.py [--out FILE] [--budget SECONDS] [--dry-run]

Parts (each in its own process, time-boxed; a failure or timeout is recorded and the next part runs):

  examples      every kernel of every example file launched at its small size and at a ragged one (extents
                that are not multiples of the tiles), compared with the example's reference (one process per
                example file, several at once: the compiles are CPU-bound)
  nn            aref.nn.attention (head dims 64 / 128, causal or not, fp16 / bf16, an even and a ragged
                sequence) and aref.nn.linear, forward and backward against torch in float32, plus
                torch.compile(fullgraph=True) of attention forward and backward (Inductor)
  streams       a kernel on a side stream ordered by events, and aref.nn.attention and a kernel call
                captured in a CUDA graph and replayed on new inputs
  warm_start    a process launches gemm with an empty cache directory, a second one with the cache filled:
                the second must not run the CuTe DSL compiler (counted) and both must be right; times to
                the first launch
  sanitize      compute-sanitizer racecheck and synccheck on three kernels (bench/sanitize.py's child)
  overhead      host time per call of a launch after the first (the direct path), against torch's matmul
  gpu_quick     bench/gpu.py --quick with what is left of the budget (its JSON is written as it goes)

The JSON (`--out`, default `$OUT/gpu_check.json` when OUT is set, else ./gpu_check.json) is rewritten after
every part, so a run cut short keeps what finished. Without a GPU the script prints the plan and exits 0.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
EXAMPLES = os.path.join(ROOT, "examples")

# a size per example whose extents are not multiples of the tiles (example_inputs arguments)
RAGGED = {
    "gemm": {"M": 200, "N": 136, "K": 72}, "dual_gemm": {"M": 200, "N": 136, "K": 72},
    "gemm_reduce": {"M": 200, "N": 136, "K": 72}, "gemm_epilogue": {"M": 200, "N": 136, "K": 72},
    "batched_gemm": {"M": 200, "N": 136, "K": 72}, "splitk_gemm": {"M": 200, "N": 136},
    "linear_layer": {"M": 200, "N": 136, "K": 72}, "mlp": {"M": 200}, "rowwise": {"M": 200},
    "attention_fwd": {"Sq": 200}, "attention_bwd": {"Sq": 200, "Sk": 200}, "attention_causal": {"Sq": 200},
    "attention_train": {"Sq": 200}, "linear_attention": {"S": 200},
}
SANITIZE = ["examples/gemm.py:gemm", "examples/attention_fwd.py:attention_fwd",
            "examples/attention_train.py:attention_bwd_lse"]
# seconds: (timeout of the part, share of the budget it may take at most)
PLAN = {"examples": 240, "nn": 200, "streams": 120, "warm_start": 150, "sanitize": 150, "overhead": 90}


# ------------------------------------------------------------------------------------------- the parts
def _cuda(inputs: dict) -> dict:
    import torch
    return {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _cpu_outputs(cuda: dict) -> dict:
    import torch
    return {k: v.cpu() for k, v in cuda.items() if isinstance(v, torch.Tensor)}


def part_example(path: str) -> list:
    """Launch every kernel of one example file at its small and its ragged size."""
    import torch

    from aref.runtime.harness import compare, kernels_of, load_example, load_module
    from aref.tune import TuneOptions
    name = os.path.splitext(os.path.basename(path))[0]
    rows = []
    for kname in kernels_of(load_module(path)):
        for label, overrides in (("small", {}), ("ragged", RAGGED.get(name))):
            row = {"example": name, "kernel": kname, "size": label, "overrides": overrides}
            if overrides is None:
                rows.append({**row, "skipped": "no ragged size listed"})
                continue
            try:
                ex = load_example(f"{path}:{kname}")
                ex.kernel.tune_options = TuneOptions(use_gpu=False)     # the model's pick: no timing runs
                inputs = ex.inputs("small", **overrides)
                cuda = _cuda(inputs)
                start = time.perf_counter()
                ex.kernel(**cuda)
                torch.cuda.synchronize()
                row["first_call_s"] = round(time.perf_counter() - start, 3)
                report = compare(_cpu_outputs(cuda), ex.reference_fn(**inputs), ex.tolerance(inputs))
                row.update(ok=report.ok, max_abs_err=report.max_abs_err)
            except Exception as exc:  # noqa: BLE001 - recorded, the next kernel runs
                row["error"] = f"{type(exc).__name__}: {exc}"[:600]
            rows.append(row)
    return rows


def _attention_case(torch, aref_nn, B, H, S, D, causal, dtype) -> dict:
    g = torch.Generator(device="cuda").manual_seed(S + D)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dtype, generator=g).requires_grad_() for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=dtype, generator=g)
    out = aref_nn.attention(q, k, v, causal=causal)
    out.backward(do)
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
    ref.backward(do.float())
    errs = {"out": out.float() - ref, "dq": q.grad.float() - qf.grad, "dk": k.grad.float() - kf.grad,
            "dv": v.grad.float() - vf.grad}
    scale = {"out": ref, "dq": qf.grad, "dk": kf.grad, "dv": vf.grad}
    rel = {n: float(e.abs().max() / scale[n].abs().max().clamp_min(1e-6)) for n, e in errs.items()}
    bound = 2e-2 if dtype == torch.bfloat16 else 5e-3
    return {"shape": [B, H, S, D], "causal": causal, "dtype": str(dtype), "rel_err": rel,
            "ok": all(r <= bound for r in rel.values()), "bound": bound}


def part_nn() -> list:
    import torch

    import aref.nn as aref_nn
    rows = []
    for D in (64, 128):
        for causal in (False, True):
            for dtype, S in ((torch.float16, 512), (torch.bfloat16, 333)):
                try:
                    rows.append({"op": "attention", **_attention_case(torch, aref_nn, 2, 4, S, D, causal, dtype)})
                except Exception as exc:  # noqa: BLE001
                    rows.append({"op": "attention", "D": D, "causal": causal,
                                 "error": f"{type(exc).__name__}: {exc}"[:600]})
    try:
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(3, 100, 256, device="cuda", generator=g).half().requires_grad_()
        w = (torch.randn(200, 256, device="cuda", generator=g) * 0.1).half().requires_grad_()
        b = torch.randn(200, device="cuda", generator=g).half().requires_grad_()
        y = aref_nn.linear(x, w, b)
        dy = torch.randn_like(y)
        y.backward(dy)
        xf, wf, bf = (t.detach().float().requires_grad_() for t in (x, w, b))
        yf = torch.nn.functional.linear(xf, wf, bf)
        yf.backward(dy.float())
        rel = {n: float((a.float() - r).abs().max() / r.abs().max()) for n, a, r in
               (("y", y, yf), ("dx", x.grad, xf.grad), ("dw", w.grad, wf.grad), ("db", b.grad, bf.grad))}
        rows.append({"op": "linear", "rel_err": rel, "ok": all(r < 5e-3 for r in rel.values())})
    except Exception as exc:  # noqa: BLE001
        rows.append({"op": "linear", "error": f"{type(exc).__name__}: {exc}"[:600]})
    try:
        q, k, v = (torch.randn(1, 2, 256, 64, device="cuda").half() for _ in range(3))

        def f(q, k, v):
            return (aref_nn.attention(q, k, v, causal=True).float() ** 2).sum()

        def run(fn):
            xs = [t.clone().requires_grad_() for t in (q, k, v)]
            loss = fn(*xs)
            loss.backward()
            return loss, [t.grad for t in xs]
        start = time.perf_counter()
        lc, gc = run(torch.compile(f, fullgraph=True))
        le, ge = run(f)
        rows.append({"op": "attention under torch.compile(fullgraph=True)", "compile_s": round(time.perf_counter()
                     - start, 2), "ok": bool(torch.allclose(lc, le, rtol=1e-3)) and all(
                         bool(torch.allclose(a, b, atol=1e-3, rtol=1e-3)) for a, b in zip(gc, ge))})
    except Exception as exc:  # noqa: BLE001
        rows.append({"op": "torch.compile", "error": f"{type(exc).__name__}: {exc}"[:600]})
    return rows


def part_streams() -> list:
    import torch

    import aref.nn as aref_nn
    from aref.runtime.harness import load_example
    rows = []
    gemm = load_example(os.path.join(EXAMPLES, "gemm.py"))
    gemm.kernel.configs = None
    try:                                    # a side stream, ordered after the producer by an event
        inputs = gemm.inputs("small")
        cuda = _cuda(inputs)
        side = torch.cuda.Stream()
        a = cuda["A"] * 0
        done = torch.cuda.Event()
        a.copy_(cuda["A"])                  # on the default stream
        done.record()
        with torch.cuda.stream(side):
            side.wait_event(done)
            gemm.kernel(a, cuda["B"], cuda["C"])
        torch.cuda.current_stream().wait_stream(side)
        ok = torch.allclose(cuda["C"].float().cpu(), gemm.reference_fn(**inputs)["C"].float(), atol=2e-2, rtol=1e-2)
        rows.append({"case": "kernel on a side stream", "ok": bool(ok)})
    except Exception as exc:  # noqa: BLE001
        rows.append({"case": "kernel on a side stream", "error": f"{type(exc).__name__}: {exc}"[:600]})
    try:                                    # CUDA graph: capture a kernel call and attention, replay on new data
        inputs = gemm.inputs("small")
        cuda = _cuda(inputs)
        q, k, v = (torch.randn(2, 2, 256, 64, device="cuda").half() for _ in range(3))
        gemm.kernel(cuda["A"], cuda["B"], cuda["C"])                 # compile outside the capture
        aref_nn.attention(q, k, v, causal=True)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            gemm.kernel(cuda["A"], cuda["B"], cuda["C"])
            out = aref_nn.attention(q, k, v, causal=True)
        new = gemm.inputs("small", seed=7)
        cuda["A"].copy_(new["A"].cuda())
        q.copy_(torch.randn_like(q))
        graph.replay()
        torch.cuda.synchronize()
        ok_gemm = torch.allclose(cuda["C"].float().cpu(), (new["A"].float() @ inputs["B"].float().T).half().float(),
                                 atol=2e-2, rtol=1e-2)
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
        ok_attn = float((out.float() - ref).abs().max()) < 5e-3
        rows.append({"case": "CUDA graph replay (kernel call + aref.nn.attention)", "ok": bool(ok_gemm and ok_attn),
                     "kernel_ok": bool(ok_gemm), "attention_ok": bool(ok_attn)})
    except Exception as exc:  # noqa: BLE001
        rows.append({"case": "CUDA graph", "error": f"{type(exc).__name__}: {exc}"[:600]})
    return rows


def part_warm_start_child(cache: str) -> list:
    """One process of the warm-start part: count cute.compile calls around the first gemm launch."""
    start = time.perf_counter()
    import cutlass.cute as cute
    import torch
    calls = []
    real = cute.compile

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)
    cute.compile = counting
    import aref
    from aref.runtime.harness import compare, load_example
    from aref.backend.cute import binary_cache
    aref.config.cache_dir = cache
    ex = load_example(os.path.join(EXAMPLES, "gemm.py"))
    ex.kernel.configs = None
    inputs = ex.inputs("small")
    cuda = _cuda(inputs)
    imported = time.perf_counter() - start
    t = time.perf_counter()
    ex.kernel(**cuda)
    torch.cuda.synchronize()
    first = time.perf_counter() - t
    ok = compare(_cpu_outputs(cuda), ex.reference_fn(**inputs), ex.tolerance(inputs)).ok
    return [{"cute_compile_calls": len(calls), "loads": binary_cache.loads(), "first_launch_s": round(first, 3),
             "import_s": round(imported, 3), "ok": ok}]


def part_warm_start() -> list:
    with tempfile.TemporaryDirectory() as cache:
        cold = _child("warm_start_child", [cache], 120)
        warm = _child("warm_start_child", [cache], 120)
    rows = [{"run": "cold", **(cold[0] if cold else {})}, {"run": "warm", **(warm[0] if warm else {})}]
    ok = bool(cold and warm and warm[0].get("cute_compile_calls") == 0 and warm[0].get("ok") and cold[0].get("ok"))
    return rows + [{"ok": ok}]


def part_sanitize() -> list:
    import shutil
    if shutil.which("compute-sanitizer") is None:
        return [{"skipped": "compute-sanitizer is not on PATH"}]
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import sanitize
    jobs = [(t, tool) for t in SANITIZE for tool in ("racecheck", "synccheck")]
    with ThreadPoolExecutor(max_workers=3) as pool:
        rows = list(pool.map(lambda j: {"kernel": j[0], **sanitize.sanitize(os.path.join(ROOT, j[0]), j[1], 130)},
                             jobs))
    return rows


def part_overhead() -> list:
    """Host time per call after the first (launches are asynchronous: this is the enqueue cost)."""
    import torch

    from aref.runtime.harness import load_example
    rows = []
    for name in ("gemm", "attention_fwd", "attention_bwd"):
        try:
            ex = load_example(os.path.join(EXAMPLES, f"{name}.py"))
            ex.kernel.configs = None
            cuda = _cuda(ex.inputs("small"))
            ex.kernel(**cuda)
            torch.cuda.synchronize()
            n = 2000
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(n):
                    ex.kernel(**cuda)
                best = min(best, (time.perf_counter() - start) / n)
                torch.cuda.synchronize()
            rows.append({"kernel": name, "tensors": sum(isinstance(v, torch.Tensor) for v in cuda.values()),
                         "host_us_per_call": round(best * 1e6, 2)})
        except Exception as exc:  # noqa: BLE001
            rows.append({"kernel": name, "error": f"{type(exc).__name__}: {exc}"[:600]})
    a = torch.randn(256, 256, device="cuda").half()
    start = time.perf_counter()
    for _ in range(2000):
        torch.matmul(a, a)
    rows.append({"kernel": "torch.matmul (for scale)",
                 "host_us_per_call": round((time.perf_counter() - start) / 2000 * 1e6, 2)})
    torch.cuda.synchronize()
    return rows


CHILDREN = {"example": part_example, "nn": part_nn, "streams": part_streams, "warm_start_child": part_warm_start_child,
            "warm_start": part_warm_start, "sanitize": part_sanitize, "overhead": part_overhead}


# --------------------------------------------------------------------------------------------- running
def _child(part: str, args: list, timeout: float) -> list:
    """Run one part in a fresh process; its last stdout line is the JSON list of rows."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", part, *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout, 1), cwd=ROOT)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-1500:]
        return [{"error": f"timed out after {timeout:.0f} s", "stderr": tail.decode(errors="replace")
                 if isinstance(tail, bytes) else tail}]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[")]
    if proc.returncode != 0 or not lines:
        return [{"error": f"exit {proc.returncode}", "stderr": proc.stderr[-1500:]}]
    return json.loads(lines[-1])


def _ok(rows: list) -> bool:
    return bool(rows) and not any("error" in r or r.get("ok") is False for r in rows)


def run(out: str, budget: float) -> dict:
    import torch
    start = time.perf_counter()
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "budget_s": budget,
              "parts": {}}

    def left() -> float:
        return budget - (time.perf_counter() - start)

    def save(name, rows, seconds):
        result["parts"][name] = {"ok": _ok(rows), "seconds": round(seconds, 1), "rows": rows}
        result["elapsed_s"] = round(time.perf_counter() - start, 1)
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"{name:<12} {'ok' if _ok(rows) else 'FAILED':<7} {seconds:6.1f} s", flush=True)

    # phase 1, in parallel (correctness; the compiles are CPU-bound and the machine has cores to spare)
    files = sorted(glob.glob(os.path.join(EXAMPLES, "*.py")))
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(files) + 4) as pool:      # all at once: each has its own timeout
        others = {name: (pool.submit(_child, name, [], min(PLAN[name], left())), time.perf_counter())
                  for name in ("nn", "streams", "warm_start", "sanitize")}
        ex_futures = [pool.submit(_child, "example", [f], min(PLAN["examples"], left())) for f in files]
        rows = [r for fut in ex_futures for r in fut.result()]
        save("examples", rows, time.perf_counter() - t0)
        for name, (fut, t) in others.items():
            save(name, fut.result(), time.perf_counter() - t)
    # phase 2, alone on the GPU (timings)
    t = time.perf_counter()
    save("overhead", _child("overhead", [], min(PLAN["overhead"], left())), time.perf_counter() - t)
    t = time.perf_counter()
    remaining = left() - 5
    if remaining > 30:
        quick_json = os.path.join(os.path.dirname(os.path.abspath(out)), "gpu_quick.json")
        try:
            proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu.py"), "--quick", "--json",
                                   quick_json], capture_output=True, text=True, timeout=remaining, cwd=ROOT)
            rows = [{"returncode": proc.returncode, "stdout_tail": proc.stdout[-3000:]}]
        except subprocess.TimeoutExpired:
            rows = [{"timed_out_after_s": round(remaining), "note": "rows measured so far are in the JSON below"}]
        try:
            with open(quick_json) as f:
                rows.append({"gpu_py": json.load(f)})
        except (OSError, ValueError) as exc:
            rows.append({"error": f"no JSON from bench/gpu.py: {exc}"})
        save("gpu_quick", rows, time.perf_counter() - t)
    else:
        save("gpu_quick", [{"skipped": f"{remaining:.0f} s of budget left"}], 0.0)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="the JSON file (default: $OUT/gpu_check.json or ./gpu_check.json)")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole check")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, even with a GPU")
    ap.add_argument("--child", nargs="+", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        part, *rest = args.child
        print(json.dumps(CHILDREN[part](*rest)), flush=True)
        return 0
    out = args.out or os.path.join(os.environ.get("OUT", "."), "gpu_check.json")
    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    if not gpu or args.dry_run:
        print(("No CUDA GPU here: " if not gpu else "Dry run: ")
              + f"would run, within {args.budget:.0f} s, writing {out}:")
        files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(EXAMPLES, "*.py")))
        print(f"  examples    launch every kernel of {len(files)} example files ({', '.join(files)}) at small and "
              f"ragged sizes vs their references (timeout {PLAN['examples']} s)")
        print(f"  nn          aref.nn.attention D 64/128 x causal x fp16/bf16 fwd+bwd, aref.nn.linear, torch.compile "
              f"(timeout {PLAN['nn']} s)")
        print(f"  streams     side stream + CUDA graph capture/replay (timeout {PLAN['streams']} s)")
        print(f"  warm_start  two processes, the second must not run cute.compile (timeout {PLAN['warm_start']} s)")
        print(f"  sanitize    racecheck + synccheck on {', '.join(SANITIZE)} (timeout {PLAN['sanitize']} s)")
        print(f"  overhead    host µs per call of gemm / attention_fwd / attention_bwd (timeout {PLAN['overhead']} s)")
        print("  gpu_quick   bench/gpu.py --quick with the rest of the budget")
        return 0
    result = run(out, args.budget)
    failed = [n for n, p in result["parts"].items() if not p["ok"]]
    print(f"wrote {out}; " + (f"failed: {', '.join(failed)}" if failed else "all parts ok"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
