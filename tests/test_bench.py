"""GPU benchmark tooling on the CPU: what `bench/gpu.py` and `aref bench` would run, the references and
baselines they check against, the plots, and the examples' hardware-derived tolerances; `bench/solver.py` on a
short case."""
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch
from example_paths import EXAMPLE_NAMES, EXAMPLES, ROOT

from aref.runtime.harness import compare, load_example
from aref.precision import matmul_tolerance, unit_roundoff
from aref.tune.bench import example_baseline

sys.path.insert(0, os.path.join(ROOT, "bench"))
import attn_ref  # noqa: E402
import gpu  # noqa: E402
import solver as solver_bench  # noqa: E402


def test_gpu_bench_without_a_gpu_prints_the_plan(capsys):
    assert gpu.main(["--only", "gemm,attn_fwd,dual_gemm"]) == 0
    out = capsys.readouterr().out
    assert "would benchmark" in out and "gemm float8_e4m3 8192³" in out and "torch._scaled_mm" in out
    assert "attn fwd hd64 causal 16k" in out and "SDPA cuDNN" in out and "FA4" in out
    assert "dual gemm 4096³" in out and "attn bwd" not in out


def test_workloads_cover_the_issue():
    ws = gpu.workloads()
    names = {w.name for w in ws}
    for dtype in ("float16", "bfloat16", "float8_e4m3"):
        assert {f"gemm {dtype} 4096³", f"gemm {dtype} 8192³"} <= names
    assert {w.overrides["K"] for w in ws if w.group == "ksweep"} == set(gpu.K_SWEEP)
    attn = [w.attention for w in ws if w.attention]
    assert {(a["d"], a["causal"], a["backward"], a["seq"]) for a in attn} == {
        (d, c, b, s) for d in (64, 128) for c in (False, True) for b in (False, True) for s in gpu.SEQS}
    assert all(a["bh"] * a["seq"] >= 16384 * 16 for a in attn)        # batch × heads fill the GPU
    assert any(w.persistent_only for w in ws) and {"dual_gemm", "gemm_reduce"} <= {w.group for w in ws}


def test_aref_bench_without_a_gpu_says_what_would_run():
    proc = subprocess.run([sys.executable, "-m", "aref", "bench", "examples/gemm.py", "--size", "small", "--json"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["dry_run"] and data["name"] == "gemm" and data["baselines"] == ["torch"]
    assert data["config"] and data["predicted_ms"] > 0 and "A=256x256:float16" in data["problem"]


@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_attention_references_match_autograd(causal, monkeypatch):
    monkeypatch.setattr(attn_ref, "CHUNK", 48)                  # several blocks, the last one partial
    t = attn_ref.inputs(2, 100, 32, torch.float32, device="cpu", grad=True)
    q, k, v = (t[n].clone().requires_grad_() for n in ("Q", "K", "V"))
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    o.backward(t["dO"])
    ref = attn_ref.backward(t["Q"], t["K"], t["V"], t["dO"], causal)
    torch.testing.assert_close(ref["O"], o.detach(), atol=1e-5, rtol=1e-5)
    for name, grad in (("dQ", q.grad), ("dK", k.grad), ("dV", v.grad)):
        torch.testing.assert_close(ref[name], grad, atol=1e-4, rtol=1e-4)
    assert attn_ref.flops(2, 100, 32, True) == attn_ref.flops(2, 100, 32, False) / 2


@pytest.mark.parametrize("name", EXAMPLE_NAMES + ["rowwise:softmax"])
def test_example_baselines_compute_the_reference(name):
    """Each example kernel's torch baseline (what `aref bench` times: `baseline_<kernel>` or `baseline`)
    computes the same outputs, on the CPU."""
    path, _, kernel = name.partition(":")
    ex = load_example(f"{EXAMPLES}/{path}.py" + (f":{kernel}" if kernel else ""))
    prepare = example_baseline(ex)
    assert prepare is not None, f"{name} defines no baseline(**inputs)"
    inputs = ex.inputs("small")
    run = prepare(inputs)
    got = run()
    expected = ex.reference_fn(**inputs)
    assert set(got) == set(expected)
    report = compare({k: v.to(expected[k].dtype) for k, v in got.items()}, expected)
    assert report.ok, report.to_json()


def test_plot_writes_a_png_or_says_why_not(tmp_path):
    rows = [{"name": "gemm", "ratios": {"cuBLAS": 0.98}}, {"name": "attn", "ratios": {"SDPA cuDNN": 1.02,
                                                                                      "FA3": None}}]
    path = tmp_path / "ratios.png"
    msg = gpu.plot(rows, str(path))
    if importlib.util.find_spec("matplotlib") is None:
        assert msg.startswith("matplotlib is not installed") and not path.exists()
    else:
        assert msg == f"wrote {path}" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _wgmma_fp8(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A·Bᵀ accumulated as Hopper's fp8 wgmma does per `aref.precision`: products of a 32-wide k-step
    summed exactly, then added to an accumulator that keeps 14 significant bits, truncating."""
    af, bf = a.float(), b.float()
    acc = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float64)
    for k in range(0, a.shape[1], 32):
        acc = acc + (af[:, k:k + 32].double() @ bf[:, k:k + 32].double().T)
        m, e = torch.frexp(acc)
        acc = torch.ldexp(torch.trunc(m * 2 ** 14) / 2 ** 14, e)
    return acc.float()


def test_fp8_tolerance_covers_the_accumulator_the_old_one_did_not():
    """The FP8 GEMM's tolerance states the wgmma accumulator's precision: an emulated truncating 14-bit
    accumulation passes it, while the fp16 tolerance the example had before fails it (as on the H100)."""
    ex = load_example(f"{EXAMPLES}/gemm.py")
    inputs = ex.inputs("small", K=4096, dtype="float8_e4m3", M=128, N=128)
    expected = ex.reference_fn(**inputs)["C"]
    hw = {"C": _wgmma_fp8(inputs["A"], inputs["B"]).to(torch.float16)}
    rel = float((hw["C"].float() - expected.float()).abs().max() / expected.float().abs().max())
    assert 5e-4 < rel < 4e-3                                      # the H100 measured 1.4e-3
    assert compare(hw, {"C": expected}, ex.tolerance(inputs)).ok
    assert not compare(hw, {"C": expected}, {"C": (1e-2, 1e-2)}).ok
    tol = ex.tolerance(inputs)["C"]
    assert tol == matmul_tolerance(torch.float8_e4m3fn, torch.float16, 4096)
    assert tol[2] == pytest.approx(4096 / 32 * 2 ** -14) and tol[1] == 2 * unit_roundoff(torch.float16)
    wrong = {"C": (expected.float() * (1 + 0.05)).half()}          # a real bug is still caught
    assert not compare(wrong, {"C": expected}, ex.tolerance(inputs)).ok


def test_attention_tolerance_is_the_rounding_bound_of_p():
    ex = load_example(f"{EXAMPLES}/attention_fwd.py")
    inputs = ex.inputs("small")
    atol, rtol, scaled = ex.tolerance(inputs)["O"]
    assert atol == pytest.approx(2 ** -11 * float(inputs["V"].float().abs().max())) and scaled == 0.0
    assert rtol == 2 ** -10
    assert math.isclose(ex.tolerance(ex.inputs("small", dtype="bfloat16"))["O"][1], 2 ** -7)


def test_solver_bench_times_the_command_line_path_beside_the_bare_solve(tmp_path, capsys):
    out = tmp_path / "solver.json"
    rows = solver_bench.main(["--only", "rowwise/sm_100a/small", "--json", str(out)])
    (row,) = rows
    assert row["proven"] and row["ii"] == row["proven_bound"] >= row["lower_bound"]
    assert row["cli_s"] >= 0 and row["bare_s"] >= 0 and row["bare_ii"] == row["ii"]
    # `aref solve`'s step (its proofs explained) reaches the same proven II
    assert row["solve_s"] >= 0 and row["solve_ii"] == row["ii"] and row["solve_proven"] and row["solve_calls"] > 0
    assert row["calls"] == len(row["profile"]) > 0 and {c["label"] for c in row["profile"]} == {"unsplit"}
    assert json.loads(out.read_text()) == rows
    assert "rowwise/sm_100a/small" in capsys.readouterr().out


def test_solver_bench_reports_a_refused_case_as_a_row():
    """Twill's backward shape (head dim 128) does not fit a B200 block with the example's 3-deep rings: a row
    that says what the loop's budget is, not a traceback."""
    (row,) = [solver_bench.run_case(c, 10) for c in solver_bench.cases() if c[0] == "twill: fa-bwd-blackwell"]
    assert row["error"].startswith("refused: no warp-specialized schedule of @attention_bwd fits B200")
    assert "but the loop has 132096 left: the block's 232448 less 98304 for the tiles kept resident" in row["error"]
