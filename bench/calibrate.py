"""Calibrate the machine model (`aref.target.machine`) against kernel times measured on a GPU: one command.

    python bench/calibrate.py                      # fit on bench/data/calibration-*.jsonl of the arch (CPU)
    python bench/calibrate.py DATA.jsonl ...       # fit on these measurement files
    python bench/calibrate.py --measure            # on a GPU: measure the configuration grid, then fit
    options: --device H100|H200|B200 (or --arch: its default device)  --out PATH  --dry-run (do not write)
             --evaluations N

The measurement grid (`GRID`) covers each example's tuning space at its large sizes: GEMM (M = N = K 4096 and
8192, BN 64/128/256, BK 32/64/128, consumers auto/plain, fp8, persistent), attention forward (head dim 64
and 128, BN 64/128, SUBTILE 1/2), attention backward, dual GEMM and GEMM + RMSNorm. Each configuration is
compiled, checked against the example's reference, timed (CUDA events, L2 flushed) beside torch's kernel,
and written as a JSON line with the model's prediction at measurement time (`aref.tune.calibrate` describes
the format); a refused configuration is recorded with its error.

A record names every constant that differs from the example's current defaults: the ring depths the examples
had on 2026-11-22 (3 for GEMM, 2 for attention) are written into that file's records as `STAGES`, since the
examples have chosen their depth by themselves since then.

The fit (`aref.tune.calibrate.fit`) searches the machine's calibrated figures — sustained tensor-core
efficiency, TMA bandwidth and latency, barrier cost, per-CTA overhead — for the smallest squared log error
between predicted and measured times, prints the prediction error and the Spearman rank correlation per
problem before and after, and writes `aref/target/calibration/<device>.json`, which `aref.target.machine` loads
(each device its own: an H200 is not an H100's fit).
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DATA = os.path.join(ROOT, "bench", "data")


def grid() -> list[dict]:
    """The configurations `--measure` runs: {example, size, overrides, options}."""
    out = []
    for n in (4096, 8192):
        for bn in (64, 128, 256):
            for bk in (32, 64, 128):
                for consumers in ("auto", "plain"):
                    out.append({"example": "gemm", "overrides": {"M": n, "N": n, "K": n, "BN": bn, "BK": bk},
                                "options": {"consumers": consumers}})
    for bn, bk, stages in ((128, 64, 3), (256, 64, 3), (256, 64, 4), (128, 128, 3)):
        out.append({"example": "gemm", "overrides": {"BN": bn, "BK": bk, "STAGES": stages, "dtype": "float8_e4m3"},
                    "options": {}})
        out.append({"example": "gemm", "overrides": {"BN": bn, "BK": bk, "STAGES": stages},
                    "options": {"persistent": True}})
    for d, bh in ((64, 32), (128, 16)):
        for bn in (64, 128):
            for sub in (1, 2):
                out.append({"example": "attention_fwd", "overrides": {"D": d, "BN": bn, "SUBTILE": sub, "BH": bh},
                            "options": {}})
    for d in (64, 128):
        for bm in (64, 128):
            out.append({"example": "attention_bwd", "overrides": {"D": d, "BM": bm}, "options": {}})
    for name in ("dual_gemm", "gemm_reduce"):
        for bn in (64, 128, 256):
            for bk in (32, 64):
                out.append({"example": name, "overrides": {"BN": bn, "BK": bk}, "options": {}})
    for r in out:
        r["size"] = "large"
    return out


def measure(out_path: str, arch: str, device: str | None = None) -> list[dict]:
    """Run `grid()` on the GPU (model prediction, check, aref time, torch time) and write JSON lines."""
    import torch

    from aref.errors import ArefError
    from aref.runtime.harness import load_example
    from aref.target.machine import machine_for
    from aref.tune.perf import predict
    from aref.tune.bench import example_baseline, fresh_inputs, time_baseline, time_config
    from aref.runtime.harness import rebuild
    from aref.tune.gpu import device_name
    from aref.tune.space import Config
    records = []
    with open(out_path, "w") as f:
        for rec in grid():
            rec = {**rec, "arch": arch, "device": device_name()}
            ex = load_example(os.path.join(ROOT, "examples", f"{rec['example']}.py"))
            try:
                sample = rebuild(rec)
                p = predict(sample.ws, machine_for(arch, device), flops=sample.flops, persistent=sample.persistent,
                            ctas=sample.ctas)
                rec.update(model_cycles_per_iter=p.cycles_per_iter, model_tc_utilization=round(p.tc_utilization, 4),
                           model_total_cycles=p.cta_cycles, model_ms=p.seconds * 1e3)
                inputs = {k: (v.cuda() if isinstance(v, torch.Tensor) else v)
                          for k, v in ex.inputs("large", **rec["overrides"]).items()}
                expected = ex.reference_fn(**fresh_inputs(inputs))
                consts = {k: v for k, v in rec["overrides"].items() if k in ex.kernel.parsed.constexpr_params}
                cfg = Config.of(consts, **rec["options"])
                ms, check, flops = time_config(ex, inputs, cfg, expected, ex.tolerance(inputs))
                rec.update(ok=bool(check["ok"] and ms), ms=ms, check=check)
                base = example_baseline(ex)
                if base is not None:
                    base_ms, _ = time_baseline(base, inputs, expected)
                    rec.update(base_ms=base_ms, ratio=(base_ms / ms if base_ms and ms else None))
                if ms and flops:
                    rec["tflops"] = round(flops / (ms * 1e-3) / 1e12, 1)
            except (ArefError, RuntimeError) as err:
                rec.update(ok=False, error=f"{type(err).__name__}: {err}"[:1000])
            records.append(rec)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(f"{rec['example']} {rec['overrides']} {rec['options']}: "
                  + (f"{rec['ms']:.4f} ms" if rec.get("ok") else rec.get("error", "failed")[:100]), flush=True)
    return records


def report(console, title: str, ev) -> None:
    console.print(f"[bold]{title}[/bold]: median |error| {ev.median_abs_error:.1%}, max |error| "
                  f"{ev.max_abs_error:.1%} over {len(ev.rows)} configurations", highlight=False)
    for prob, rho in ev.spearman.items():
        conc = ev.concordance.get(prob)
        console.print(f"  {prob}: Spearman rank correlation " + ("-" if rho is None else f"{rho:.3f}")
                      + ", pairs ordered as measured (beyond 2% noise) " + ("-" if conc is None else f"{conc:.0%}"),
                      highlight=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="*", help="measurement files (default: bench/data/calibration-<gpu>-*.jsonl)")
    from aref.target import ARCHS, DEFAULT_ARCH, target_of
    from aref.target.machine import CALIBRATION_DIR, DATASHEETS, DEVICES
    ap.add_argument("--device", default=None, choices=sorted(DEVICES), help="the device model to fit (default: the "
                                                                            "arch's default device)")
    ap.add_argument("--arch", default=None, choices=ARCHS, help="fit the default device of this arch")
    ap.add_argument("--measure", action="store_true", help="measure the grid on this machine's GPU first")
    ap.add_argument("--out", default=None,
                    help="calibration file to write (default: aref/target/calibration/<device>.json)")
    ap.add_argument("--dry-run", action="store_true", help="fit and report, but write nothing")
    ap.add_argument("--evaluations", type=int, default=200, help="timing-model evaluations the fit may spend")
    args = ap.parse_args(argv)
    device = args.device or target_of(args.arch or DEFAULT_ARCH).default_device
    if args.arch is not None and DEVICES[device].arch != args.arch:
        ap.error(f"--device {device} is an {DEVICES[device].arch}, not {args.arch}")
    args.arch = DEVICES[device].arch
    from rich.console import Console
    from rich.table import Table

    from aref.runtime.harness import measured_samples
    from aref.tune.calibrate import evaluate, fit, load_measurements, start_point, write_calibration
    console = Console()
    files = list(args.data)
    if args.measure:
        from aref.tune.gpu import gpu_arch
        if gpu_arch() != args.arch:
            console.print(f"--measure needs a {args.arch} GPU (found: {gpu_arch() or 'none'})")
            return 1
        path = os.path.join(DATA, f"calibration-{device.lower()}-{datetime.date.today()}.jsonl")
        measure(path, args.arch, device)
        files = [path]
    if not files:
        files = sorted(glob.glob(os.path.join(DATA, f"calibration-{device.lower()}-*.jsonl")))
    if not files:
        console.print(f"no measurements of an {device} in {DATA}; run with --measure on one")
        return 1
    records = [r for path in files for r in load_measurements(path) if r.get("arch", args.arch) == args.arch]
    samples, skipped = measured_samples(records)
    for s in skipped:
        console.print(f"left out: {s}", highlight=False)
    base = DATASHEETS[device]               # the fit replaces figures of the datasheet model
    before = evaluate(samples, base)
    report(console, "datasheet model", before)
    current = DEVICES[device]
    if current.calibration:
        report(console, f"current calibration ({current.calibration})", evaluate(samples, current))
    params, after = fit(samples, base, start=start_point(current), evaluations=args.evaluations,
                        progress=lambda i, loss: console.print(f"  fit step {i}: loss {loss:.5f}", end="\r"))
    console.print()
    report(console, "calibrated model", after)
    t = Table(title="predicted vs measured (calibrated)")
    for col in ("configuration", "problem", "measured ms", "predicted ms", "error"):
        t.add_column(col)
    for r in after.rows:
        t.add_row(r["label"], r["problem"], f"{r['measured_ms']:.4f}", f"{r['predicted_ms']:.4f}", f"{r['error']:+.1%}")
    console.print(t)
    console.print("figures: " + ", ".join(f"{k}={v if not isinstance(v, float) else round(v, 4)}"
                                          for k, v in params.items()), highlight=False)
    if not args.dry_run:
        out = args.out or os.path.join(CALIBRATION_DIR, f"{device}.json")
        source = ", ".join(os.path.relpath(f, ROOT) for f in files)
        write_calibration(out, base, params, source, before, after)
        console.print(f"wrote {os.path.relpath(out, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
