"""Compile-and-inspect toolchain: no GPU, explicit arch, ptxas figures and PTX opcode counts."""
import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aref.backend.cute import toolchain
from aref.backend.cute.toolchain import ToolchainError, compile_source_file, count_opcodes

TINY = Path(__file__).with_name("tiny_kernel.py")
ROOT = Path(__file__).resolve().parents[2]


def test_tiny_kernel_compiles_for_sm90a_without_gpu(tmp_path):
    report = compile_source_file(TINY, "sm_90a", tmp_path)
    assert report.arch == "sm_90a"
    assert report.ptx_path.parent == tmp_path.resolve() and report.ptx_path.suffix == ".ptx"
    assert ".target sm_90a" in report.ptx_path.read_text()
    assert report.cubin_path is not None and report.cubin_path.stat().st_size > 0
    assert 0 < report.registers <= 32
    assert report.spill_bytes == 0
    assert report.kernel_name.startswith("kernel_")
    assert set(report.instructions) == set(toolchain.KEY_OPCODES)
    assert report.instructions["wgmma.mma_async"] == 0
    assert report.compile_seconds > 0            # its speed is a figure of bench/compile_speed.py


def test_cubin_register_count_agrees_with_ptxas(tmp_path):
    report = compile_source_file(TINY, "sm_90a", tmp_path)
    assert toolchain.cubin_register_count(report.cubin_path) == report.registers


def test_sm100a_target_comes_from_the_argument(tmp_path):
    report = compile_source_file(TINY, "sm_100a", tmp_path)
    assert ".target sm_100a" in report.ptx_path.read_text()


@contextlib.contextmanager
def _dsl_setting(name, value):
    """Set what a CUTE_DSL_* variable would have set at import time."""
    from cutlass.cutlass_dsl import CuTeDSL

    envar = CuTeDSL._get_dsl().envar
    saved = getattr(envar, name)
    setattr(envar, name, value)
    try:
        yield
    finally:
        setattr(envar, name, saved)


def test_environment_arch_and_dryrun_cannot_override(tmp_path):
    with _dsl_setting("arch", "sm_80"), _dsl_setting("dryrun", True):
        report = compile_source_file(TINY, "sm_90a", tmp_path)
    assert ".target sm_90a" in report.ptx_path.read_text()


def test_unsupported_arch_is_rejected(tmp_path):
    with pytest.raises(ToolchainError, match="unsupported arch 'sm_80'"):
        compile_source_file(TINY, "sm_80", tmp_path)


def test_module_without_entry_point_is_rejected(tmp_path):
    src = tmp_path / "empty_module.py"
    src.write_text("X = 1\n")
    with pytest.raises(ToolchainError, match="defines no `host`"):
        compile_source_file(src, "sm_90a", tmp_path)


def test_count_opcodes_handles_predicates_labels_and_prefixes():
    ptx = """
    .reg .pred %p<3>;
$L__BB0_1:
    @%p1 bra $L__BB0_2;
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], %r2;
    @!%p2 mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r1], %r2;
    wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%f1}, %rd1, %rd2, 1, 1, 1, 0, 0;
    setmaxnreg.inc.sync.aligned.u32 232;
    bar.sync 1, 256;
    tcgen05.fence::before_thread_sync;
    tcgen05.wait::ld.sync.aligned;
    // wgmma.mma_async in a comment does not count
    """
    counts = count_opcodes(ptx)
    assert counts["mbarrier.try_wait.parity"] == 2
    assert counts["wgmma.mma_async"] == 1
    assert counts["setmaxnreg.inc"] == 1 and counts["setmaxnreg.dec"] == 0 and counts["setmaxnreg"] == 1
    assert counts["bar.sync"] == 1 and counts["barrier.sync"] == 0
    assert counts["tcgen05.fence"] == 1 and counts["tcgen05.wait::ld"] == 1 and counts["tcgen05.wait::st"] == 0


# ------------------------------------------------------------------ a system ptxas older than the DSL's PTX
REJECTION = "ptxas fatal   : Unsupported .version 9.4; current version is '9.0'"


@pytest.fixture
def old_ptxas(tmp_path, monkeypatch):
    """A `ptxas` first on PATH that rejects every PTX as CUDA 13.0's ptxas rejects the DSL's `.version 9.4`,
    and leaves a mark when it runs. Yields (PATH for subprocesses, mark file)."""
    bin_dir, mark = tmp_path / "old_cuda_bin", tmp_path / "ptxas_ran"
    bin_dir.mkdir()
    fake = bin_dir / "ptxas"
    fake.write_text(f"#!/bin/sh\ntouch '{mark}'\necho \"{REJECTION}\" >&2\nexit 255\n")
    fake.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    monkeypatch.setenv("PATH", path)
    yield path, mark


def test_a_ptxas_that_rejects_the_ptx_leaves_the_figures_to_the_cubin(tmp_path, old_ptxas):
    report = compile_source_file(TINY, "sm_90a", tmp_path)
    assert old_ptxas[1].exists(), "the fake ptxas was not the one on PATH"
    assert report.compiled is not None                       # the kernel itself compiled
    assert report.resource_source == "cubin" and REJECTION in report.ptxas_log
    assert 0 < report.registers <= 32 and report.spill_bytes == 0 and report.stack_frame_bytes == 0


def test_cubin_figures_agree_with_ptxas_on_a_generated_kernel(compiled):
    """The same kernel inspected both ways: registers from EIATTR_REGCOUNT equal ptxas's, and no stack frame
    (so no spill)."""
    ws, by_ptxas = compiled("gemm", "heuristic", "cooperative")
    assert by_ptxas.resource_source == "ptxas"
    regs, frame = toolchain.cubin_resources(by_ptxas.cubin_path)
    assert regs == by_ptxas.registers and frame == 0


def test_cubin_frame_size_is_the_stack_frame_ptxas_reports(tmp_path, monkeypatch):
    """A kernel squeezed into 24 registers spills: EIATTR_FRAME_SIZE is ptxas's stack frame, so a cubin-only
    inspection does not claim 0 spill bytes for it."""
    n = 48
    body = [f"ld.global.f32 %f{i}, [%rd2+{4 * i}];" for i in range(n)] + ["mov.u32 %r1, 0;", "L1:"]
    body += [f"fma.rn.f32 %f{i}, %f{i}, %f{(i + 1) % n}, %f{(i + 7) % n};" for i in range(n)]
    body += ["add.u32 %r1, %r1, 1;", "setp.lt.u32 %p1, %r1, 100;", "@%p1 bra L1;"]
    body += [f"st.global.f32 [%rd2+{4 * i}], %f{i};" for i in range(n)] + ["ret;"]
    ptx = tmp_path / "spill.ptx"
    ptx.write_text(".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry spill(.param .u64 p) {\n"
                   f".reg .f32 %f<{n}>;\n.reg .u64 %rd<3>;\n.reg .u32 %r<2>;\n.reg .pred %p<2>;\n"
                   "ld.param.u64 %rd1, [p];\ncvta.to.global.u64 %rd2, %rd1;\n" + "\n".join(body) + "\n}\n")
    cubin = tmp_path / "spill.cubin"
    proc = subprocess.run(["ptxas", "-arch=sm_90a", "-v", "-maxrregcount=24", str(ptx), "-o", str(cubin)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    frame = int(re.search(r"(\d+) bytes stack frame", proc.stdout + proc.stderr).group(1))
    assert frame > 0
    assert toolchain.cubin_resources(cubin) == (24, frame)
    report = toolchain.inspect_ptx(ptx, "sm_90a", cubin, resources=False)
    assert report.resource_source == "none" and report.registers is None
    failing = tmp_path / "bin" / "ptxas"
    failing.parent.mkdir()
    failing.write_text("#!/bin/sh\nexit 1\n")
    failing.chmod(0o755)
    monkeypatch.setenv("PATH", f"{failing.parent}{os.pathsep}{os.environ['PATH']}")
    report = toolchain.inspect_ptx(ptx, "sm_90a", cubin)
    assert report.resource_source == "cubin" and report.registers == 24
    assert report.stack_frame_bytes == frame and report.spill_bytes is None       # unknown, not 0


def test_compile_command_with_an_old_ptxas_on_path(tmp_path, old_ptxas):
    """`aref compile` succeeds and says where its figures came from; HOME points at an empty kernel cache."""
    env = {**os.environ, "PATH": old_ptxas[0], "HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "aref", "compile", "examples/gemm.py", "--arch", "sm_90a", "--out",
                           str(tmp_path / "out"), "--json"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert old_ptxas[1].exists()
    out = json.loads(proc.stdout)
    assert out["resource_source"] == "cubin" and out["cached"] is False
    assert out["registers"] > 0 and out["spill_bytes"] == 0
    assert out["instructions"]["wgmma.mma_async"] > 0
    assert out["cute_dsl_version"] == toolchain.dsl_version()


def test_launch_compiles_without_any_ptxas(tmp_path, old_ptxas):
    """The launch path compiles with the real tensors (CPU ones here: only their types matter) and never runs
    a ptxas."""
    import torch

    from aref.backend.cute import compile_barrier
    from aref.backend.cute.analysis import plan_kernel
    from aref.backend.cute.launch import Launcher
    from aref.runtime.harness import load_example
    from tests.backend.conftest import barrier_ir

    ws = barrier_ir("gemm", "heuristic", "plain")
    launcher = Launcher(ws, compile_barrier(ws, emit="cute", cache_dir=tmp_path), plan_kernel(ws))
    inputs = load_example("examples/gemm.py").inputs()
    launcher.compile(launcher.arguments({k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}))
    assert launcher.compiled is not None
    assert not old_ptxas[1].exists()


# --------------------------------------------------------------------------------------- the DSL's version
def test_installed_dsl_is_the_pinned_minor_version():
    """pyproject pins the CuTe DSL to one minor version (the generated code uses its Python API); the tests run
    on a version inside the pin."""
    from packaging.specifiers import SpecifierSet
    pyproject = (ROOT / "pyproject.toml").read_text()
    spec = SpecifierSet(re.search(r'"nvidia-cutlass-dsl([^"]*)"', pyproject).group(1))
    assert any(s.operator == "<" for s in spec), f"no upper bound in {spec}"
    assert toolchain.dsl_version() in spec
    import cutlass
    assert toolchain.dsl_version() == cutlass.__version__


def test_cache_key_and_report_name_the_dsl_version(compiled, monkeypatch):
    import aref.backend.cute as backend
    ws, result = compiled("gemm", "heuristic", "plain")
    version = toolchain.dsl_version()
    assert result.cache_key.startswith(f"cute{version.replace('.', '_')}_")
    assert result.to_json()["cute_dsl_version"] == version
    # another DSL version gives another key (a cached kernel of one version is never used with another)
    monkeypatch.setattr(toolchain, "dsl_version", lambda: "4.9.0")
    monkeypatch.setattr(backend, "_FINGERPRINT", None)
    other = backend.cache_key(ws, "ptx")
    assert other.startswith("cute4_9_0_") and other.split("_")[-1] != result.cache_key.split("_")[-1]
