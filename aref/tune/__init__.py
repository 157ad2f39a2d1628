"""The autotuner: pick a kernel's tile sizes, depths and compiler / launch options for given shapes.

    result = tune(kernel_fn, tensors, fixed_constexprs, space, TuneOptions(arch="sm_90a"))
    result.best        # the winning Config; result.candidates: every candidate with its fate

Every candidate of the space (`aref.tune.space`) goes through the same steps:
  1. feature options the backend cannot generate yet are refused (`UnsupportedFeature`) → pruned;
  2. the kernel is specialized and lowered to Barrier IR with the candidate's options → pruned on an error;
  3. the resource model (`aref.tune.resources.candidate_problems`) → pruned when it does not fit;
  4. the timing model predicts its time on the whole GPU (`aref.tune.perf.predict`, calibrated machine) → ranked.
With a GPU of the target arch (and real CUDA tensors), the best `top_k` by the model are then compiled,
checked against a reference (or against each other), and timed (`aref.tune.gpu.time_cuda`: warm-up, CUDA
events, L2 flushed); the measured order decides. The winner is cached on disk per kernel source, shapes,
dtypes, search space and device (`aref.tune.cache`), so later calls pay nothing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from aref.errors import ArefError
from aref.tune.cache import DEFAULT_TUNE_CACHE, TuneCache
from aref.tune.space import Config, Space, UnsupportedFeature


@dataclass(frozen=True)
class TuneOptions:
    """How a tuning run goes. `arch`: the target (None: the GPU's, else sm_90a); `use_gpu`: time candidates
    on the GPU (None: when one of the arch is present and the tensors are on it); `top_k`: how many of the
    model's best are timed; `cache_dir` / `use_cache`: the on-disk winner cache; `warmup` / `reps` /
    `flush_l2`: GPU timing (see `time_cuda`)."""

    arch: str | None = None
    use_gpu: bool | None = None
    top_k: int = 4
    cache_dir: Path | str | None = DEFAULT_TUNE_CACHE
    use_cache: bool = True
    warmup: int = 10
    reps: int = 50
    flush_l2: bool = True
    seed: int = 0


@dataclass
class Candidate:
    """One configuration's fate: `status` is "ok" (ranked), "pruned" (with the `stage` that refused it:
    "unsupported", "compiler", "resources") or "failed" (the timing model or the GPU run found it wrong)."""

    config: Config
    status: str = "ok"
    stage: str = ""
    reason: str = ""
    prediction: object = None            # aref.tune.perf.Prediction
    measured: object = None              # aref.tune.gpu.Timing
    rank: int | None = None
    ws: object = field(default=None, repr=False)
    kernel: object = field(default=None, repr=False)
    stored: dict | None = field(default=None, repr=False)     # the JSON a cached run recorded
    outputs: dict | None = field(default=None, repr=False)    # GPU outputs of the timed launch


    @property
    def predicted_ms(self) -> float | None:
        if self.prediction is None:
            return (self.stored or {}).get("predicted_ms")
        return self.prediction.seconds * 1e3

    def to_json(self) -> dict:
        if self.stored is not None:
            return dict(self.stored)
        p = self.prediction
        return {"config": self.config.to_json(), "label": self.config.label(), "status": self.status,
                "stage": self.stage, "reason": self.reason, "rank": self.rank,
                "predicted_ms": self.predicted_ms,
                "predicted_tflops": p.tflops if p is not None else None,
                "cycles_per_iter": p.cycles_per_iter if p is not None else None,
                "tc_utilization": p.tc_utilization if p is not None else None,
                "waves": p.waves if p is not None else None,
                "measured_ms": self.measured.median_ms if self.measured is not None else None}


@dataclass
class TuneResult:
    """A tuning run: the winner (`best`, None when every candidate was pruned) and every candidate, best
    first. `method` is "gpu" (measured order) or "model" (the timing model's order)."""

    kernel: str
    arch: str
    device: str
    method: str
    candidates: list[Candidate]
    best: Config | None
    key: str = ""
    cached: bool = False
    seconds: float = 0.0

    def ranked(self) -> list[Candidate]:
        return [c for c in self.candidates if c.rank is not None]

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "arch": self.arch, "device": self.device, "method": self.method,
                "best": self.best.to_json() if self.best is not None else None,
                "best_label": self.best.label() if self.best is not None else None, "cached": self.cached,
                "key": self.key, "seconds": round(self.seconds, 2),
                "candidates": [c.to_json() for c in self.candidates],
                "pruned": sum(c.status == "pruned" for c in self.candidates)}


def _prepare(kfn, tensors: dict, consts: dict, cfg: Config, arch: str, machine) -> Candidate:
    """Steps 1-4 of the module docstring for one candidate."""
    from aref.compiler import lower_to
    from aref.tune.perf import kernel_flops, predict
    from aref.tune.resources import candidate_problems
    cand = Candidate(cfg)
    try:
        cfg.check_supported()
    except UnsupportedFeature as err:
        return replace(cand, status="pruned", stage="unsupported", reason=err.message)
    try:
        from aref.runtime.kernel import SHAPE_DEVICES
        _, bound = kfn.bind((), {**tensors, **consts, **cfg.consts}, SHAPE_DEVICES)
        kernel = kfn._specialize(tensors, bound)
        ws = lower_to(kernel, "barrier", cfg.compile_options(arch))
    except ArefError as err:
        return replace(cand, status="pruned", stage="compiler", reason=f"{err.kind}: {err.message}")
    problems = candidate_problems(ws, machine, cfg.persistent, cfg.ctas, cfg.raster, cfg.epilogue_overlap,
                                  cfg.cluster)
    if problems:
        return replace(cand, status="pruned", stage="resources", reason="; ".join(problems))
    pred = predict(ws, machine, flops=kernel_flops(kernel), persistent=cfg.persistent, ctas=cfg.ctas,
                   raster=cfg.raster, epilogue_overlap=cfg.epilogue_overlap)
    if not pred.ok:
        return replace(cand, status="failed", stage="timing", reason=pred.problem, prediction=pred)
    return replace(cand, prediction=pred, ws=ws, kernel=kernel)


def tune(kfn, tensors: dict, fixed: dict, space: list[Config], options: TuneOptions | None = None, *,
         reference=None, tolerance: dict | None = None, progress=None) -> TuneResult:
    """Tune kernel function `kfn` for `tensors` (name -> torch tensor; meta tensors do for the model) with
    the constants in `fixed` held, over `space`. `reference(tensors) -> {name: expected}` checks GPU outputs
    (without it candidates are checked against the first one timed) within `tolerance` ({name: (atol, rtol)},
    default: by dtype as `aref.runtime.harness.compare`); `progress(done, total, label)` is told
    of every candidate."""
    from aref.target.machine import machine_for
    from aref.tune.gpu import device_name, gpu_arch
    options = options or TuneOptions()
    t0 = time.perf_counter()
    present = gpu_arch()
    arch = options.arch or present or "sm_90a"
    on_gpu = all(getattr(t, "is_cuda", False) for t in tensors.values())
    use_gpu = options.use_gpu if options.use_gpu is not None else (present == arch and on_gpu)
    if use_gpu and present != arch:
        raise ArefError(f"GPU timing needs a {arch} GPU (found: {present or 'none'})",
                        hint="tune by the model (use_gpu=False)")
    machine = machine_for(arch)
    device = device_name() if use_gpu else f"model:{machine.name}:{machine.calibration or 'datasheet'}"
    candidates = Space.build(space, fixed).candidates
    cache = TuneCache(options.cache_dir) if options.use_cache and options.cache_dir is not None else None
    key = TuneCache.key(kfn, tensors, fixed, candidates, arch, device, getattr(kfn, "key", None))
    if cache is not None:
        hit = cache.load(key)
        if hit is not None:
            return hit
    out = []
    for i, cfg in enumerate(candidates):
        out.append(_prepare(kfn, tensors, fixed, cfg, arch, machine))
        if progress is not None:
            progress(i + 1, len(candidates), cfg.label())
    ok = sorted((c for c in out if c.status == "ok"), key=lambda c: c.prediction.seconds)
    failed: list[Candidate] = []
    method = "model"
    if use_gpu and ok:
        from aref.tune.measure import measure_candidates
        timed = measure_candidates(ok[:options.top_k], tensors, arch, options, reference, tolerance, progress)
        failed = [c for c in timed if c.status != "ok"]
        # the measured order decides among the timed; the rest follow in the model's order
        ok = sorted((c for c in timed if c.status == "ok"), key=lambda c: c.measured.median_ms) + ok[options.top_k:]
        method = "gpu"
    for r, c in enumerate(ok, 1):
        c.rank = r
    ranked = ok + failed + [c for c in out if c.status != "ok"]
    best = ranked[0].config if ranked and ranked[0].status == "ok" else None
    result = TuneResult(kfn.__name__, arch, device, method, ranked, best, key, False,
                        time.perf_counter() - t0)
    if cache is not None and best is not None:
        cache.store(key, result)
    return result
