"""The `aref` command: JSON contracts, readable IR, errors without tracebacks."""
import json
import os
import re
import subprocess
import sys

import pytest

from example_paths import EXAMPLE_NAMES, ROOT, example_path, source_line


def aref(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "aref", *args], capture_output=True, text=True, cwd=ROOT)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_run_interpret_json(name):
    out = json.loads(aref("run", example_path(name), "--backend", "interpret", "--json").stdout)
    assert out["ok"] is True and out["max_abs_err"] < 0.05 and out["kernel"]


def test_run_with_overrides_and_kernel_selector():
    out = json.loads(aref("run", example_path("gemm") + ":gemm", "--set", "K=0", "--json").stdout)
    assert out["ok"] is True and out["max_abs_err"] == 0.0


def test_ir_prints_tile_ir():
    text = aref("ir", example_path("attention_fwd")).stdout
    assert text.startswith("kernel @attention_fwd(")
    assert "for %j in range(" in text and "mma" in text and "# attention_fwd.py:" in text


def test_demo_runs():
    out = " ".join(aref("demo").stdout.split())              # rich wraps lines at the terminal's width
    assert "Tile IR" in out and "kernel @gemm(" in out
    assert "gemm on the reference interpreter: ok" in out
    for arch in ("sm_90a", "sm_100a"):
        assert f"Warp-specialized for {arch}:" in out
    sims = re.findall(r"simulator: (\d+) interleavings, (\d+) deadlocks, max \|err\| \S+ -> (\w+)", out)
    assert len(sims) == 2 and all(int(n) > 0 and d == "0" and ok == "ok" for n, d, ok in sims), sims
    assert re.search(r"II = \d+ cycles, lower bound \d+, proven optimal", out)
    assert re.search(r"CuTe DSL kernel \(aref compile\): sm_90a, \d+ registers, 0 spill bytes", out)
    assert "FAILED" not in out


def test_user_error_is_reported_without_traceback(tmp_path):
    bad = tmp_path / "bad.py"
    source = (
        "import aref\n"
        "@aref.aref_kernel(grid=(1,))\n"
        "def k(A, C):\n"
        "    a = aref.load(A, (0, 0), (64, 32))\n"
        "    aref.store(C, (0, 0), aref.mma(a, a))\n"
        "def example_inputs(size='small'):\n"
        "    import torch\n"
        "    return {'A': torch.zeros(64, 32).half(), 'C': torch.zeros(64, 64)}\n"
        "def reference(A, C):\n"
        "    return {'C': C}\n")
    bad.write_text(source)
    line = source.splitlines().index("    aref.store(C, (0, 0), aref.mma(a, a))") + 1
    proc = aref("run", str(bad), "--json", check=False)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert f"{bad}:{line}" in proc.stderr and "mma shape mismatch" in proc.stderr
    assert json.loads(proc.stdout)["line"] == line


def test_unknown_kernel_name():
    proc = aref("run", example_path("gemm") + ":nope", check=False)
    assert proc.returncode == 1 and "has no kernel 'nope'" in proc.stderr


def test_console_script_installed():
    exe = os.path.join(os.path.dirname(sys.executable), "aref")
    assert os.path.exists(exe)
    assert subprocess.run([exe, "--help"], capture_output=True, text=True).returncode == 0


def test_run_sim_json_contract():
    out = json.loads(aref("run", example_path("attention_fwd"), "--backend", "sim", "--partition", "heuristic",
                          "--seeds", "50", "--json").stdout)
    assert out["ok"] is True and out["deadlocks"] == 0 and out["interleavings"] == 50
    assert {"ok", "max_abs_err", "deadlocks", "interleavings"} <= set(out)


def test_run_sim_exhaustive_and_blackwell():
    out = json.loads(aref("run", example_path("gemm"), "--backend", "sim", "--arch", "sm_100a", "--seeds", "5",
                          "--exhaustive", "--set", "M=128", "--set", "N=128", "--set", "K=128", "--json").stdout)
    assert out["ok"] is True and out["interleavings"] > 5


@pytest.mark.parametrize("stage", ["partitioned", "pipelined", "barrier"])
def test_ir_stages(stage):
    text = aref("ir", example_path("gemm"), "--stage", stage, "--arch", "sm_100a").stdout
    assert text.startswith("ws_kernel @gemm(") and f"level={stage}" in text
    if stage == "barrier":
        assert "mbarrier_wait" in text and "tma_load" in text and "parity" in text


def test_compare_json_contract():
    out = json.loads(aref("compare", example_path("gemm"), "--size", "small", "--json").stdout)
    for mode in ("heuristic", "optimal"):
        assert {"ii", "cycles_per_iter", "tc_utilization", "warp_groups"} <= set(out[mode])
    assert out["optimal"]["ii"] == out["lower_bound"] and out["optimal"]["proven_optimal"] is True


def test_compile_json_contract(tmp_path):
    out = json.loads(aref("compile", example_path("gemm"), "--arch", "sm_90a", "--out", str(tmp_path),
                          "--json").stdout)
    assert {"arch", "ptx_path", "registers", "spill_bytes", "instructions"} <= set(out)
    assert out["arch"] == "sm_90a" and out["spill_bytes"] == 0 and os.path.exists(out["ptx_path"])
    for op in ("wgmma.mma_async", "cp.async.bulk.tensor", "mbarrier.try_wait.parity", "setmaxnreg"):
        assert out["instructions"][op] > 0


def test_solve_reports_infeasible_ranges_with_reasons():
    # mlp on Hopper: II 1264 above the resource bound 1019, each II between proven infeasible (~3 s)
    out = json.loads(aref("solve", example_path("mlp"), "--arch", "sm_90a", "--time-limit", "30", "--json").stdout)
    assert out["ii"] > out["lower_bound"] and out["infeasible"]
    assert all(entry["reasons"] for entry in out["infeasible"])


NEW_EXAMPLES = ["mlp", "attention_causal", "linear_attention", "gemm_epilogue", "splitk_gemm", "rowwise",
                "rowwise.py:softmax", "batched_gemm"]


@pytest.mark.parametrize("i,name", list(enumerate(NEW_EXAMPLES)))
def test_run_sim_json_on_the_new_examples(i, name):
    target = os.path.join(ROOT, "examples", name if ":" in name else f"{name}.py")
    arch = ("sm_90a", "sm_100a")[i % 2]
    out = json.loads(aref("run", target, "--backend", "sim", "--arch", arch, "--seeds", "2", "--json").stdout)
    assert out["ok"] is True and out["deadlocks"] == 0 and out["interleavings"] == 2 and out["arch"] == arch


def test_version_names_aref_the_cute_dsl_and_torch_without_importing_them():
    from importlib.metadata import version

    import aref as pkg
    out = aref("--version").stdout
    assert out.splitlines() == [f"aref {pkg.__version__}", f"CuTe DSL (nvidia-cutlass-dsl) {version('nvidia-cutlass-dsl')}",
                                f"torch {version('torch')}"]
    probe = ("import sys\nfrom aref.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit as e:\n"
             "    assert e.code in (0, None)\nassert 'torch' not in sys.modules and 'cutlass' not in sys.modules, "
             "sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'cutlass'))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_the_examples_ship_inside_the_package(tmp_path):
    """`aref run NAME` finds a built-in example from any directory (as from an installed wheel); the clone's
    `examples/` is a link to the package's folder (one copy of each example); packaging includes it."""
    from setuptools import find_packages

    from aref import examples
    assert set(EXAMPLE_NAMES) <= set(examples.names()) and "attention_train" in examples.names()
    assert os.path.realpath(os.path.join(ROOT, "examples")) == os.path.realpath(examples.DIR)
    assert "aref.examples" in find_packages(ROOT, include=["aref*"])
    proc = subprocess.run([sys.executable, "-m", "aref", "run", "gemm", "--set", "K=64", "--json"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["ok"] is True, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "aref", "run", "gemmm"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1 and "no such file" in proc.stderr and "attention_fwd" in proc.stderr


def test_an_error_in_a_built_in_example_is_the_users_not_the_compilers():
    """The examples live inside the package directory, but their lines are user code: an error names them."""
    from aref import examples
    from aref.guard import _kind
    assert _kind(examples.path("gemm")) == "user" and _kind(os.path.join(ROOT, "aref", "lang", "tiles.py")) == "aref"
    gemm = examples.path("gemm")
    for setting, kind, code in (("BM=0", "type error", "aref.zeros((BM, BN)"),        # the tracer's user line
                                ("BK=0", "error", "ab = aref.channel(")):             # an exception in user code
        out = json.loads(aref("run", "gemm", "--set", setting, "--json", check=False).stdout)
        assert (out["ok"], out["kind"], out["file"]) == (False, kind, gemm), out
        assert out["line"] == source_line(gemm, code)
