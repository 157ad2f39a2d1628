"""Compile-and-inspect toolchain: no GPU, explicit arch, ptxas figures and PTX opcode counts."""
import contextlib
from pathlib import Path

import pytest

from aref.backend.cute import toolchain
from aref.backend.cute.toolchain import ToolchainError, compile_source_file, count_opcodes

TINY = Path(__file__).with_name("tiny_kernel.py")


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
    assert 0 < report.compile_seconds < 60


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
    // wgmma.mma_async in a comment does not count
    """
    counts = count_opcodes(ptx)
    assert counts["mbarrier.try_wait.parity"] == 2
    assert counts["wgmma.mma_async"] == 1
    assert counts["setmaxnreg.inc"] == 1 and counts["setmaxnreg.dec"] == 0 and counts["setmaxnreg"] == 1
    assert counts["bar.sync"] == 1 and counts["barrier.sync"] == 0
