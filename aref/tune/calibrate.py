"""Calibrating the machine model against measured kernel times (`bench/calibrate.py` is the command).

A measurement file is JSON lines, one configuration each: `example` (a file of `examples/`), `size`,
`overrides` (passed to its `example_inputs`: shapes and compile-time constants), `options` (`CompileOptions`
fields, plus `persistent` / `ctas`), and when it ran, `ok: true` with `ms` (the generated kernel's time) and
`base_ms` (torch's kernel in the same run); a configuration the compiler refused carries `error` instead.

`aref.runtime.harness.rebuild` turns a record back into its Barrier IR (shapes only: tensors live on torch's meta device),
`evaluate` compares `aref.tune.perf.predict` with the measured times (relative error, Spearman rank correlation
within each problem), and `fit` searches the machine's calibrated figures (`aref.target.machine.CALIBRATED_FIELDS`)
for the smallest log error with a derivative-free pattern search (each evaluation re-runs the timing model on
every record).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from aref.target.machine import Machine, with_parameters



@dataclass
class Sample:
    """One measured configuration, rebuilt: its Barrier IR and what the launch looked like."""

    record: dict
    ws: object
    flops: int | None
    persistent: bool = False
    ctas: int | None = None
    problem: str = ""        # the example and its shapes: configurations are ranked within one problem
    raster: int = 0
    epilogue_overlap: bool = False

    @property
    def measured_ms(self) -> float:
        return float(self.record["ms"])

    def label(self) -> str:
        opts = {k: v for k, v in self.record.get("options", {}).items()}
        return " ".join(f"{k}={v}" for k, v in {**self.record.get("overrides", {}), **opts}.items())


def load_measurements(path: str | os.PathLike) -> list[dict]:
    """The records of a JSON-lines measurement file (blank lines skipped)."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: not a JSON record ({exc})") from None
    return out


def ranks(xs: list[float]) -> list[float]:
    """Ranks from 1, ties sharing their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (Pearson's on the ranks); None for fewer than 3 points or no spread."""
    if len(xs) != len(ys) or len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx and syy else None


RANK_WEIGHT = 0.02


def concordance(predicted: list[float], measured: list[float], noise: float = 0.02) -> float | None:
    """Share of configuration pairs the model orders as the GPU did, counting only pairs whose measured times
    differ by more than `noise` (relative; closer pairs are within run-to-run noise and have no order). None
    when no pair differs that much."""
    agree = total = 0
    for i in range(len(measured)):
        for j in range(i + 1, len(measured)):
            a, b = measured[i], measured[j]
            if abs(a - b) <= noise * min(a, b):
                continue
            total += 1
            agree += (predicted[i] < predicted[j]) == (a < b)
    return agree / total if total else None


@dataclass
class Evaluation:
    """Predicted vs measured times: `rows` (label, problem, measured ms, predicted ms, relative error),
    the median and largest |relative error|, and per problem Spearman's rank correlation and the
    `concordance` of pairs beyond measurement noise."""

    rows: list = field(default_factory=list)
    spearman: dict = field(default_factory=dict)
    concordance: dict = field(default_factory=dict)

    @property
    def errors(self) -> list[float]:
        return [r["error"] for r in self.rows]

    @property
    def median_abs_error(self) -> float:
        a = sorted(abs(e) for e in self.errors)
        return (a[(len(a) - 1) // 2] + a[len(a) // 2]) / 2 if a else 0.0

    @property
    def max_abs_error(self) -> float:
        return max((abs(e) for e in self.errors), default=0.0)

    @property
    def loss(self) -> float:
        """What `fit` minimizes: the mean squared log ratio of predicted to measured time, plus the largest
        one (no configuration is left far off for a slightly better average), plus `RANK_WEIGHT` per unit of
        rank correlation lost in each problem (the tuner needs the GPU's order more than exact times)."""
        logs = [math.log(r["predicted_ms"] / r["measured_ms"]) ** 2 for r in self.rows]
        rank = sum(1.0 - rho for rho in self.spearman.values() if rho is not None)
        return sum(logs) / max(1, len(logs)) + max(logs, default=0.0) + RANK_WEIGHT * rank

    def to_json(self) -> dict:
        return {"median_abs_error": round(self.median_abs_error, 4), "max_abs_error": round(self.max_abs_error, 4),
                "spearman": {k: (round(v, 4) if v is not None else None) for k, v in self.spearman.items()},
                "concordance": {k: (round(v, 4) if v is not None else None) for k, v in self.concordance.items()},
                "samples": len(self.rows)}


def evaluate(samples: list[Sample], machine: Machine) -> Evaluation:
    """`aref.tune.perf.predict` on every sample against its measured time."""
    from aref.tune.perf import predict
    ev = Evaluation()
    by_problem: dict[str, list] = {}
    for s in samples:
        p = predict(s.ws, machine, flops=s.flops, persistent=s.persistent, ctas=s.ctas, raster=s.raster,
                    epilogue_overlap=s.epilogue_overlap)
        ms = p.seconds * 1e3
        ev.rows.append({"label": s.label(), "problem": s.problem, "measured_ms": s.measured_ms, "predicted_ms": ms,
                        "error": ms / s.measured_ms - 1, "cycles_per_iter": p.cycles_per_iter,
                        "tc_utilization": p.tc_utilization})
        by_problem.setdefault(s.problem, []).append((ms, s.measured_ms))
    for prob, pairs in by_problem.items():
        ev.spearman[prob] = spearman([a for a, _ in pairs], [b for _, b in pairs])
        ev.concordance[prob] = concordance([a for a, _ in pairs], [b for _, b in pairs])
    return ev


# --------------------------------------------------------------------------------------------- the fit
# Each fitted figure: (name, lower bound, upper bound). The latency triangle keeps the datasheet model's shape
# and is scaled by its mode. The tensor core's sustained rate (`tensor_efficiency`) is not fitted: every
# configuration measured so far is partly copy-bound, so the data cannot tell it from TMA bandwidth (fits that
# freed it ended at 0.96-1.0), and at the datasheet rate the solver's MMA costs stay whole 16-cycle quanta. The
# rate a whole loaded GPU sustains (`loaded_tensor_efficiency`, applied to the launch by `aref.tune.perf.predict`)
# is: the tensor-core-bound configurations (attention forward) were 4-13% faster in the model than measured at 1.0.
FIT_SPACE = (("loaded_tensor_efficiency", 0.5, 1.0), ("tma_bytes_per_clk", 8.0, 128.0),
             ("tma_copy_bytes_per_clk", 4.0, 128.0), ("tma_latency_mode", 100.0, 4000.0),
             ("sync_cycles", 4.0, 256.0), ("cta_overhead_cycles", 1.0, 40000.0), ("l2_miss_penalty", 0.01, 4.0))


def params_of(x: dict, base: Machine) -> dict:
    """Machine figures (`with_parameters` names) of a point of `FIT_SPACE`."""
    out = {k: v for k, v in x.items() if k != "tma_latency_mode"}
    if "tma_latency_mode" in x:
        lo, mode, hi = base.tma_latency
        s = x["tma_latency_mode"] / mode
        out["tma_latency"] = (lo * s, mode * s, hi * s)
    return out


def start_point(base: Machine) -> dict:
    return {"loaded_tensor_efficiency": base.loaded_tensor_efficiency,
            "tma_bytes_per_clk": float(base.tma_bytes_per_clk),
            "tma_copy_bytes_per_clk": float(base.tma_copy_rate),
            "tma_latency_mode": float(base.tma_latency[1]), "sync_cycles": float(base.sync_cycles),
            "cta_overhead_cycles": float(max(1, base.cta_overhead_cycles)),
            "l2_miss_penalty": max(0.01, base.l2_miss_penalty)}


def fit(samples: list[Sample], base: Machine, *, start: dict | None = None, evaluations: int = 200,
        progress=None) -> tuple[dict, Evaluation]:
    """Figures of `base` that minimize `Evaluation.loss` on `samples`; returns (machine parameters, their
    evaluation on all samples). A pattern search in log space within `FIT_SPACE`'s bounds: each figure in
    turn is scaled up and down by a step, an improvement is kept, and the step halves when none helps, until
    it is below 1% or `evaluations` are spent. The timing model is discrete (cycles, rounded rates), which
    defeats gradient and simplex methods; a pattern search only compares losses. Configurations that differ
    only in options the model hardly distinguishes (consumers auto / plain) are fitted once each.
    `progress(i, loss)` is told of every evaluation."""
    names = [n for n, _, _ in FIT_SPACE]
    bounds = {n: (math.log(lo), math.log(hi)) for n, lo, hi in FIT_SPACE}
    x0 = start or start_point(base)
    fit_on = _distinct(samples)
    calls = [0]

    def params(v):
        return params_of({n: math.exp(c) for n, c in zip(names, v)}, base)

    def loss(v):
        calls[0] += 1
        ev = evaluate(fit_on, with_parameters(base, params(v)))
        if progress is not None:
            progress(calls[0], ev.loss)
        return ev.loss

    x = [min(bounds[n][1], max(bounds[n][0], math.log(max(x0[n], 1e-9)))) for n in names]
    best = loss(x)
    step = 0.2
    while step >= 0.01 and calls[0] < evaluations:
        improved = False
        for i, n in enumerate(names):
            for sign in (1, -1):
                y = list(x)
                y[i] = min(bounds[n][1], max(bounds[n][0], x[i] + sign * step))
                if y[i] == x[i] or calls[0] >= evaluations:
                    continue
                f = loss(y)
                if f < best:
                    x, best, improved = y, f, True
                    break
        if not improved:
            step /= 2
    return params(x), evaluate(samples, with_parameters(base, params(x)))


def _distinct(samples: list[Sample]) -> list[Sample]:
    seen, out = set(), []
    for s in samples:
        opts = {k: v for k, v in s.record.get("options", {}).items() if k != "consumers"}
        key = (s.problem, json.dumps(s.record.get("overrides", {}), sort_keys=True), json.dumps(opts, sort_keys=True))
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def write_calibration(path: str | os.PathLike, machine: Machine, params: dict, source: str,
                      before: Evaluation, after: Evaluation) -> None:
    """The calibration file `aref.target.machine.calibrated` reads: the fitted figures and how well they fit."""
    fitted = with_parameters(machine, params)       # the figures as the machine model rounds them
    data = {"machine": machine.name, "arch": machine.arch, "source": source, "fitted_by": "bench/calibrate.py",
            "parameters": {k: (list(getattr(fitted, k)) if k == "tma_latency" else
                               round(getattr(fitted, k), 4)) for k in params},
            "fit": {"before": before.to_json(), "after": after.to_json()}}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=2) + "\n")
