"""A compiler pass that crashes, or whose output the verifier rejects, is reported as the compiler's bug:
a `CompilerBugError` naming the pass, the user's line shown only as context, and a request to report it —
never "your line is wrong". Refusals a user can act on still come through as ordinary errors."""
import json

import pytest
import torch

import aref
import partition.rowsplit as rowsplit
from aref import aref_kernel
from aref.lang import tiles
from aref.cli import main as cli_main
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.errors import ArefError, ChannelError, CompilerBugError, VerifyError
from aref.ir import Op, OpKind
from example_paths import example_path


@aref_kernel(grid=lambda A, BM, **_: (A.shape[0] // BM,))
def masked_gemm(A, B, C, *, BM: int = 128, BK: int = 64):
    pid = aref.program_id(0)
    acc = aref.zeros((BM, 64), aref.float32)
    rows = aref.arange(BM) + pid * BM
    for k in aref.range(A.shape[1] // BK):
        acc = aref.mma(aref.load(A, (pid, k), (BM, BK)), aref.load(B, (0, k), (64, BK)).T, acc)
    aref.store(C, (pid, 0), aref.where(rows[:, None] >= 3, acc, 0.0))


def inputs():
    return {"A": torch.randn(256, 128).half(), "B": torch.randn(64, 128).half(), "C": torch.zeros(256, 64)}


def arange_line() -> int:
    import inspect
    src, first = inspect.getsourcelines(masked_gemm.fn)
    return first + next(i for i, line in enumerate(src) if "aref.arange" in line)


def test_a_pass_whose_output_fails_verification_is_named(monkeypatch):
    # plant the old row-split bug: replicas keep arange's full length
    real = rowsplit._replica_ops
    monkeypatch.setattr(rowsplit, "_replica_ops", lambda op, operands, results, *rest: (
        [Op(op.kind, operands, results, op.attrs, op.loc)] if op.kind is OpKind.ARANGE
        else real(op, operands, results, *rest)))
    with pytest.raises(CompilerBugError) as info:
        lower_to(masked_gemm.specialize(**inputs()), "partitioned", CompileOptions(consumers="cooperative"))
    err = info.value
    assert err.pass_name == "the cooperative row split" and err.kind == "compiler bug"
    assert "verifier rejects" in err.message and "arange should produce" in err.message
    assert err.loc.line == arange_line()                      # context: the line being compiled
    text = err.render()
    assert "bug in aref, not in your program" in text and "(your code, for context)" in text


def test_a_crash_inside_a_pass_is_named(monkeypatch):
    import pipeline
    monkeypatch.setattr(pipeline, "pipeline_kernel", None)     # aref's own call of the pass fails
    with pytest.raises(CompilerBugError, match="TypeError") as info:
        lower_to(masked_gemm.specialize(**inputs()), "pipelined", CompileOptions(consumers="plain"))
    assert info.value.pass_name == "pipelining" and "aref/compiler.py" in info.value.where


def test_invalid_barrier_ir_is_the_lowering_pass_bug(monkeypatch):
    import aref.lower as lower_mod
    real = lower_mod.lower

    def broken(ws):
        out = real(ws)
        gp = out.groups[1]
        gp.post.ops = [op for op in gp.post.ops if op.kind is not OpKind.CONST]   # uses left undefined
        return out
    monkeypatch.setattr(lower_mod, "lower", broken)
    with pytest.raises(CompilerBugError) as info:
        lower_to(masked_gemm.specialize(**inputs()), "barrier", CompileOptions(consumers="plain"))
    assert info.value.pass_name == "aref lowering" and "not in scope" in info.value.message


def test_frontend_inconsistency_is_not_the_users_error(monkeypatch):
    """Tracing that emits IR its own verifier rejects (the `scalar has unknown function 'maximum'` bug)."""
    real = tiles._emit1

    def old_frontend(kind, operands, result_type, attrs, loc):       # scalar `maximum` kept its tile name
        if kind is OpKind.SCALAR_BINARY and attrs.fn == "max":
            attrs = type(attrs)("maximum")
        return real(kind, operands, result_type, attrs, loc)
    monkeypatch.setattr(tiles, "_emit1", old_frontend)

    @aref_kernel(grid=(1,))
    def k(A, C):
        s = aref.maximum(aref.program_id(0) * 64 - 64, 0)
        aref.store(C, (s, 0), aref.load(A, (0, 0), (64, 64)))
    A = torch.zeros(64, 64).half()
    with pytest.raises(CompilerBugError) as info:
        k.specialize(A, A.clone())
    assert info.value.pass_name == "the frontend (tracing)" and "unknown function 'maximum'" in info.value.message
    assert not isinstance(info.value, VerifyError)


def test_user_errors_still_name_the_users_line():
    with pytest.raises(ChannelError) as info:
        from aref.runtime.harness import load_example
        ex = load_example(example_path("gemm"))
        lower_to(ex.kernel.specialize(**ex.inputs()), "pipelined", CompileOptions(consumers="plain", mma_depth=5))
    assert not isinstance(info.value, CompilerBugError) and isinstance(info.value, ArefError)


def test_cli_reports_a_verifier_rejection_as_the_pass_bug(monkeypatch, capsys):
    real = rowsplit._replica_ops
    monkeypatch.setattr(rowsplit, "_replica_ops", lambda op, operands, results, *rest: (
        [Op(op.kind, operands, results, op.attrs, op.loc)] if op.kind is OpKind.ARANGE
        else real(op, operands, results, *rest)))
    code = cli_main(["run", example_path("attention_causal"), "--backend", "sim", "--seeds", "1", "--consumers",
                     "cooperative", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and out["ok"] is False and out["kind"] == "compiler bug"
    assert out["pass"] == "the cooperative row split" and "arange should produce" in out["error"]
