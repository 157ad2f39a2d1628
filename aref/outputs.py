"""Whether a run's outputs match the reference: the allowed error by output dtype and the comparison every
runner uses (the example harness, the simulator's checks, the tuner's measurements)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

# Allowed error of a backend's output vs the fp32 torch reference, by output dtype: (atol, rtol).
TOLERANCE = {
    torch.float32: (2e-3, 2e-3),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (4e-2, 4e-2),
    torch.float8_e4m3fn: (1.25e-1, 1.25e-1),
    torch.float8_e5m2: (2.5e-1, 2.5e-1),
}
ALL_OUTPUTS = "*"      # the tolerance key that stands for every output without its own entry


@dataclass
class OutputCheck:
    name: str
    shape: tuple
    dtype: str
    max_abs_err: float
    atol: float
    rtol: float
    ok: bool


@dataclass
class RunReport:
    ok: bool
    max_abs_err: float
    outputs: list[OutputCheck] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"ok": self.ok, "max_abs_err": self.max_abs_err,
                "outputs": [vars(o) for o in self.outputs]}


def compare(actual: dict, expected: dict, tolerance: dict | None = None) -> RunReport:
    """Check each expected output: |actual − expected| ≤ atol + rtol·|expected| everywhere. A tolerance may
    be (atol, rtol) or (atol, rtol, scaled): `scaled`·max|expected| adds to atol, for errors that scale with
    the output's magnitude rather than each element's (accumulation in a tensor core)."""
    checks = []
    for name, ref in expected.items():
        out = actual[name]
        tol = ((tolerance or {}).get(name) or (tolerance or {}).get(ALL_OUTPUTS)
               or TOLERANCE.get(ref.dtype, (1e-2, 1e-2)))
        atol, rtol = tol[0], tol[1]
        a, r = out.float(), ref.float()
        if len(tol) > 2 and r.numel():
            atol = atol + tol[2] * float(r.abs().nan_to_num(0.0).max())
        err = (a - r).abs()
        bad = ~(err <= atol + rtol * r.abs())  # NaN counts as a failure
        max_err = float(err.nan_to_num(float("inf")).max()) if err.numel() else 0.0
        checks.append(OutputCheck(name, tuple(out.shape), str(out.dtype).replace("torch.", ""), max_err, atol,
                                  rtol, not bool(bad.any())))
    return RunReport(all(c.ok for c in checks), max((c.max_abs_err for c in checks), default=0.0), checks)
