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
from dataclasses import dataclass, replace
from pathlib import Path

from aref.errors import ArefError
from aref.tune.cache import DEFAULT_TUNE_CACHE, TuneCache
from aref.tune.result import Candidate, TuneResult
from aref.tune.space import SHAPE_DEVICES, Config, Space, UnsupportedFeature


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


def _prepare(kfn, tensors: dict, consts: dict, cfg: Config, arch: str, machine) -> Candidate:
    """Steps 1-4 of the module docstring for one candidate."""
    from aref.search import lower_to
    from aref.tune.perf import kernel_flops, predict
    from aref.tune.resources import candidate_problems
    cand = Candidate(cfg)
    try:
        cfg.check_supported()
    except UnsupportedFeature as err:
        return replace(cand, status="pruned", stage="unsupported", reason=err.message)
    try:
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
    default: by dtype as `aref.outputs.compare`); `progress(done, total, label)` is told
    of every candidate."""
    from aref.target import DEFAULT_ARCH
    from aref.target.machine import machine_for
    from aref.tune.gpu import device_name, gpu_arch
    options = options or TuneOptions()
    t0 = time.perf_counter()
    present = gpu_arch()
    arch = options.arch or present or DEFAULT_ARCH
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
