"""Benchmarking one example kernel against torch on a GPU (`aref bench`, and the rows of `bench/gpu.py`).

`bench_example` tunes the kernel for the example's inputs (on the GPU: the model's best candidates timed),
checks the winner's outputs and every baseline's outputs against the example's `reference()` first, then
times each with `aref.tune.gpu.time_cuda` and reports ratios (baseline time / aref time: above 1 means aref
is faster). A baseline is a callable `prepare(inputs)` returning a function that runs torch's kernel once and
returns {name: output} (setup, such as the forward pass of a backward baseline, stays outside the timing); an
example may define its own as `baseline(**inputs)` (or `baseline_<kernel>`). `plan_example` says
what would run, for machines without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aref.errors import ArefError
from aref.target import DEFAULT_ARCH


@dataclass
class BenchRow:
    """One benchmarked problem: aref's time and configuration, each baseline's time, ratios, and checks."""

    name: str
    problem: str
    config: str = ""
    aref_ms: float | None = None
    baselines: dict = field(default_factory=dict)       # name -> ms (None: not available)
    checks: dict = field(default_factory=dict)          # name -> {"ok", "max_abs_err"} (aref included)
    notes: list = field(default_factory=list)
    flops: int | None = None

    @property
    def ratios(self) -> dict:
        return {n: (ms / self.aref_ms if ms and self.aref_ms else None) for n, ms in self.baselines.items()}

    def to_json(self) -> dict:
        tflops = (self.flops / (self.aref_ms * 1e-3) / 1e12) if self.flops and self.aref_ms else None
        return {"name": self.name, "problem": self.problem, "config": self.config, "aref_ms": self.aref_ms,
                "aref_tflops": tflops, "baselines_ms": dict(self.baselines), "ratios": self.ratios,
                "checks": dict(self.checks), "notes": list(self.notes)}


def example_baseline(example):
    """The example's own fast torch implementation (`baseline_<kernel>` or `baseline`), or None."""
    mod = example.module
    fn = getattr(mod, f"baseline_{example.name}", None) or getattr(mod, "baseline", None)
    return (lambda inputs: fn(**inputs)) if fn is not None else None


def describe(inputs: dict) -> str:
    """`A=4096x4096:float16 ...` for the tensors of an inputs dict, then the constants."""
    import torch
    parts = [f"{n}={'x'.join(map(str, t.shape))}:{str(t.dtype).replace('torch.', '')}"
             for n, t in inputs.items() if isinstance(t, torch.Tensor)]
    return " ".join(parts + [f"{n}={v}" for n, v in inputs.items() if not isinstance(v, torch.Tensor)])


def plan_example(example, inputs: dict, baselines: dict, arch: str = DEFAULT_ARCH) -> dict:
    """What `bench_example` would run (no GPU needed): the problem, the configuration the timing model picks,
    its predicted time, and the baselines."""
    import torch

    from aref.tune import TuneOptions
    meta = {n: (t.to("meta") if isinstance(t, torch.Tensor) else t) for n, t in inputs.items()}
    tensors, fixed = split_inputs(example, meta)
    result = example.kernel.tune(**tensors, **fixed, options=TuneOptions(arch=arch, use_gpu=False))
    best = result.ranked()[0] if result.ranked() else None
    return {"name": example.name, "problem": describe(meta), "config": best.config.label() if best else None,
            "predicted_ms": best.predicted_ms if best else None,
            "candidates": len(result.candidates), "pruned": sum(c.status == "pruned" for c in result.candidates),
            "baselines": sorted(baselines)}


def split_inputs(example, inputs: dict) -> tuple[dict, dict]:
    """(tensors, constants held fixed) of an inputs dict: constants the example passed are fixed."""
    import torch
    params = example.kernel.parsed
    tensors = {n: v for n, v in inputs.items() if isinstance(v, torch.Tensor) and n in params.tensor_params}
    fixed = {n: v for n, v in inputs.items() if n in params.constexpr_params}
    return tensors, fixed


def bench_example(example, inputs: dict, baselines: dict, *, options=None, name: str | None = None,
                  tolerance: dict | None = None, expected: dict | None = None, space: list | None = None
                  ) -> BenchRow:
    """Tune, check and time `example`'s kernel on CUDA `inputs` against `baselines` (see the module
    docstring). `expected`: the reference outputs when `reference()` would not fit (default: computed);
    `space`: the candidates (default: the kernel's). A baseline that fails its check is reported with its
    error and not timed."""
    from aref.tune import TuneOptions, tune
    from aref.tune.gpu import gpu_arch
    arch = gpu_arch()
    if arch is None:
        raise ArefError("bench_example needs a CUDA GPU", hint="use plan_example to see what would run")
    tol = tolerance if tolerance is not None else example.tolerance(inputs)
    row = BenchRow(name or example.name, describe(inputs))
    expected = expected if expected is not None else example.reference_fn(**fresh_inputs(inputs))
    tensors, fixed = split_inputs(example, inputs)
    opts = options or TuneOptions(arch=arch)
    result = tune(example.kernel, tensors, fixed, space if space is not None else example.kernel.search_space(),
                  opts, reference=lambda t: expected, tolerance=tol)
    if result.best is None:
        row.notes.append("no configuration compiles: " + "; ".join(sorted({c.reason for c in result.candidates}))[:300])
        return row
    cfg = result.best
    row.config = cfg.label()
    ms, check, row.flops = time_config(example, inputs, cfg, expected, tol)
    row.checks["aref"] = check
    row.aref_ms = ms
    if not check["ok"]:
        row.notes.append(f"aref's output differs from the reference (max |err| {check['max_abs_err']:.3g}): "
                         f"not timed")
    for bname, prepare in baselines.items():
        if prepare is None:
            row.baselines[bname] = None
            continue
        try:
            row.baselines[bname], row.checks[bname] = time_baseline(prepare, inputs, expected)
            if not row.checks[bname]["ok"]:
                row.notes.append(f"{bname}'s output differs from the reference "
                                 f"(max |err| {row.checks[bname]['max_abs_err']:.3g}): not timed")
        except Exception as exc:      # a baseline library's own failure is a row note, not a crash
            row.baselines[bname] = None
            row.notes.append(f"{bname}: {type(exc).__name__}: {str(exc)[:200]}")
    return row


def time_config(example, inputs: dict, cfg, expected: dict, tolerance) -> tuple[float | None, dict, int | None]:
    """Compile `example`'s kernel with configuration `cfg` for CUDA `inputs`, check one launch's outputs
    against `expected`, and time it when they match: (median ms or None, check, tensor-core FLOP)."""
    import torch

    from aref.backend.cute.launch import check_arguments, launcher_for
    from aref.outputs import compare
    from aref.tune.perf import kernel_flops
    from aref.tune.gpu import gpu_arch, time_cuda
    from aref.tune.measure import fresh, output_names
    arch = gpu_arch()
    tensors, fixed = split_inputs(example, inputs)
    kernel = example.kernel.specialize(**tensors, **{**fixed, **cfg.consts})
    launcher = launcher_for(kernel, arch, cfg.compile_options(arch), **cfg.launch_kwargs(arch))
    args = fresh(tensors)
    check_arguments(launcher.ws, args)
    launcher(args)
    torch.cuda.synchronize()
    names = output_names(launcher.ws)
    report = compare({n: args[n] for n in names}, {n: expected[n] for n in names}, tolerance)
    check = {"ok": report.ok, "max_abs_err": report.max_abs_err}
    if not report.ok:
        return None, check, kernel_flops(kernel)
    return time_cuda(launcher.bound(args)).median_ms, check, kernel_flops(kernel)


def time_baseline(prepare, inputs: dict, expected: dict) -> tuple[float | None, dict]:
    """Check and time a baseline (`prepare(inputs)` returns a function running it once and returning its
    outputs). Baselines are checked at the harness's per-dtype tolerance: their rounding is not ours to
    bound, only their correctness."""
    from aref.outputs import compare
    from aref.tune.gpu import time_cuda
    run = prepare(fresh_inputs(inputs))
    got = run()
    names = [n for n in got if n in expected]
    rep = compare({n: got[n] for n in names}, {n: expected[n] for n in names})
    check = {"ok": rep.ok, "max_abs_err": rep.max_abs_err}
    return (time_cuda(run).median_ms if rep.ok else None), check


def fresh_inputs(inputs: dict) -> dict:
    """A copy of an inputs dict whose tensors are cloned (constants kept)."""
    import torch
    return {n: (v.clone() if isinstance(v, torch.Tensor) else v) for n, v in inputs.items()}
