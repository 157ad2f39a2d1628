"""The calibrated H100 model against the measurements it was fitted to (bench/data/), and the fitting tools."""
import json
import math
import os

import pytest
from example_paths import ROOT

from aref.target.machine import (CALIBRATED_FIELDS, CALIBRATION_DIR, H100, H100_DATASHEET, calibrated, machine_for,
                          with_parameters)
from aref.runtime.harness import measured_samples
from aref.tune.calibrate import Evaluation, evaluate, fit, load_measurements, ranks, spearman

CALIBRATION = CALIBRATION_DIR / "H100.json"
# What issue 10 asks of the calibrated model, checked on the data it was fitted to: every configuration's
# time within 15%, and the configurations of each problem in the GPU's order wherever the GPU's own times
# differ by more than their noise (Spearman's coefficient also counts the order of near-ties: attention at
# head dim 128 has two pairs 0.4% apart, so it is reported, not required).
MAX_ERROR = 0.15
MIN_CONCORDANCE = 0.95


@pytest.fixture(scope="module")
def calibration():
    data = json.loads(CALIBRATION.read_text())
    records = [r for src in data["source"].split(", ") for r in load_measurements(os.path.join(ROOT, src))]
    samples, skipped = measured_samples(records)
    return data, samples, skipped


def test_the_h100_model_loads_its_calibration(calibration):
    data, _, _ = calibration
    assert machine_for("sm_90a") is H100 and H100.calibration.startswith("H100.json")
    assert set(data["parameters"]) <= set(CALIBRATED_FIELDS)
    assert H100 == with_parameters(H100_DATASHEET, data["parameters"], H100.calibration)
    assert H100.tensor_flop_per_clk == H100_DATASHEET.tensor_flop_per_clk       # datasheet figures stay


def test_calibrated_model_predicts_the_measured_times(calibration):
    """Every measured configuration within 15%, and the configurations of each problem in the GPU's order."""
    data, samples, skipped = calibration
    assert len(samples) >= 30 and all("not measured" in s for s in skipped)
    ev = evaluate(samples, H100)
    worst = max(ev.rows, key=lambda r: abs(r["error"]))
    assert ev.max_abs_error <= MAX_ERROR, worst
    assert all(c is not None and c >= MIN_CONCORDANCE for c in ev.concordance.values()), ev.concordance
    # the file states how well it fits; the model as loaded reproduces that
    assert ev.to_json() == data["fit"]["after"]
    before = evaluate(samples, H100_DATASHEET)
    assert before.median_abs_error > 2 * ev.median_abs_error     # the calibration is what makes it fit


def test_the_model_ranks_the_measured_winner_first(calibration):
    """Per problem, the configuration the model predicts fastest is within 5% of the fastest measured."""
    _, samples, _ = calibration
    ev = evaluate(samples, H100)
    for prob in ev.spearman:
        rows = [r for r in ev.rows if r["problem"] == prob]
        picked = min(rows, key=lambda r: r["predicted_ms"])
        assert picked["measured_ms"] <= 1.05 * min(r["measured_ms"] for r in rows), (prob, picked["label"])


def test_concordance_ignores_pairs_within_noise():
    from aref.tune.calibrate import concordance
    assert concordance([1, 2, 3], [1.0, 1.01, 2.0]) == 1.0            # the 1% pair has no order
    assert concordance([2, 1, 3], [1.0, 1.01, 2.0]) == 1.0
    assert concordance([3, 2, 1], [1.0, 1.5, 2.0]) == 0.0
    assert concordance([1, 2], [1.0, 1.001]) is None


def test_ranks_and_spearman():
    assert ranks([3.0, 1.0, 2.0, 1.0]) == [4.0, 1.5, 3.0, 1.5]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None


def test_with_parameters_checks_names_and_values(tmp_path):
    m = with_parameters(H100_DATASHEET, {"tma_bytes_per_clk": 35.6, "tma_latency": [500.2, 700, 1500]}, "x")
    assert m.tma_bytes_per_clk == 36 and m.tma_latency == (500, 700, 1500) and m.calibration == "x"
    with pytest.raises(ValueError, match="not a calibrated machine figure"):
        with_parameters(H100_DATASHEET, {"sms": 100})
    with pytest.raises(ValueError, match="tma_latency"):
        with_parameters(H100_DATASHEET, {"tma_latency": [900, 700, 1500]})
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"machine": "B200", "parameters": {}}))
    with pytest.raises(ValueError, match="calibrates B200"):
        calibrated(H100_DATASHEET, path)
    assert calibrated(H100_DATASHEET, tmp_path / "missing.json") is H100_DATASHEET


def test_fit_recovers_a_planted_bandwidth():
    """Times produced by a model with a known TMA bandwidth: the fit finds a model that reproduces them."""
    from aref.runtime.harness import rebuild
    truth = with_parameters(H100_DATASHEET, {"tma_bytes_per_clk": 40})
    samples = []
    for bk in (32, 64):
        s = rebuild({"example": "gemm", "size": "small", "overrides": {"K": 1024, "BN": 128, "BK": bk},
                     "options": {}, "ok": True, "ms": 1.0})
        samples.append(s)
    for s, row in zip(samples, evaluate(samples, truth).rows):
        s.record["ms"] = row["predicted_ms"]
    start = evaluate(samples, H100_DATASHEET)
    params, after = fit(samples, H100_DATASHEET, evaluations=40)
    assert after.loss < 0.25 * start.loss and after.max_abs_error < 0.05
    assert math.isfinite(params["tma_bytes_per_clk"])


def test_evaluation_summary():
    ev = Evaluation([{"error": e, "predicted_ms": 1 + e, "measured_ms": 1.0} for e in (0.1, -0.2, 0.05)])
    assert ev.median_abs_error == pytest.approx(0.1) and ev.max_abs_error == pytest.approx(0.2)
    assert ev.loss > 0
