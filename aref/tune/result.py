"""What a tuning run returns: each configuration's fate (`Candidate`) and the run (`TuneResult`), both
written to and read back from the tuning cache."""
from __future__ import annotations

from dataclasses import dataclass, field

from aref.tune.space import Config


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
