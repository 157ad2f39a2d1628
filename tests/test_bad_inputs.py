"""The bad-input corpus (issue 13): every mistake ends in an aref error of the right kind, naming the
user's line, with the JSON error object on stdout under --json and exit status 1 — never a traceback, never
a false success. Files in tests/bad_inputs/ carry their expectation in their first lines (see its README);
command-line mistakes on the shipped examples are listed here."""
import json
import os
import re

import pytest

from aref.cli import main
from example_paths import ROOT, example_path

CORPUS = os.path.join(ROOT, "tests", "bad_inputs")
FILES = sorted(f[:-3] for f in os.listdir(CORPUS) if f.endswith(".py") and not f.startswith("_"))


def run_cli(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def expectation(path):
    text = open(path).read()
    kind = re.search(r"^# expect: (.+)$", text, re.M).group(1).strip()
    cmd = re.search(r"^# command: (.+)$", text, re.M)
    argv = cmd.group(1).split() if cmd else ["run", "FILE", "--json"]
    marked = [i + 1 for i, line in enumerate(text.splitlines()) if line.rstrip().endswith("# <-")]
    return kind, [a.replace("FILE", path, 1) if a.startswith("FILE") else a for a in argv], (marked or [None])[0]


def check_error(code, out, err, kind, line=None, file=None):
    assert code == 1, out + err
    assert "Traceback" not in err, err
    obj = json.loads(out.strip().splitlines()[-1])
    assert obj["ok"] is False and obj["kind"] == kind, obj
    assert obj["error"] and obj["hint"], obj            # every error says what to change
    if line is not None:
        assert obj["line"] == line and os.path.samefile(obj["file"], file), obj
        assert f":{line}:" in err                          # the excerpt on stderr names the line too
    assert obj["kind"] != "compiler bug", obj
    return obj


@pytest.mark.parametrize("name", FILES)
def test_corpus_file(capsys, name):
    path = os.path.join(CORPUS, f"{name}.py")
    kind, argv, line = expectation(path)
    code, out, err = run_cli(capsys, argv)
    check_error(code, out, err, kind, line, path)


GEMM = example_path("gemm")
# (argv, kind, file, text that names the line in that file or None)
COMMANDS = [
    (["run", GEMM, "--set", "BK=0", "--json"], "error", GEMM, "ab = aref.channel(depth=STAGES or"),
    (["run", GEMM, "--set", "BK=0", "--set", "STAGES=2", "--json"], "error", GEMM,
     "for k in aref.range(aref.cdiv(A.shape[1], BK)):"),
    (["run", GEMM, "--set", "K=abc", "--json"], "usage error", None, None),
    (["run", GEMM, "--set", "dtype=int4", "--json"], "error", GEMM, "in_dtype = _DTYPES[dtype]"),
    (["run", GEMM, "--set", "K=-64", "--json"], "error", GEMM, "A = (torch.randn(M, K, generator=g)"),
    (["run", GEMM, "--set", "BM=3.5", "--json"], "usage error", None, None),
    (["run", GEMM, "--set", "BK=32.5", "--json"], "usage error", None, None),
    (["run", GEMM, "--set", "NOPE=1", "--json"], "usage error", None, None),
    (["run", GEMM, "--set", "K", "--json"], "usage error", None, None),
    (["run", GEMM, "--backend", "sim", "--seeds", "0", "--json"], "usage error", None, None),
    (["run", GEMM, "--backend", "sim", "--seeds", "-3", "--json"], "usage error", None, None),
    (["solve", GEMM, "--time-limit", "0", "--json"], "usage error", None, None),
    (["solve", GEMM, "--time-limit", "-5", "--json"], "usage error", None, None),
    (["solve", GEMM, "--time-limit", "nan", "--json"], "usage error", None, None),
    (["compile", GEMM, "--persistent", "--ctas", "0", "--json"], "usage error", None, None),
    (["ir", GEMM, "--mma-depth", "-1", "--json"], "usage error", None, None),
    (["run", GEMM + ":nope", "--json"], "example error", None, None),
    (["run", "no/such/file.py", "--json"], "example error", None, None),
    (["run", GEMM, "--backend", "gpu", "--json"], "usage error", None, None),
    (["compare", GEMM, "--gantt", "picture.txt", "--json"], "usage error", None, None),
    (["frobnicate", "--json"], "usage error", None, None),
    (["run", GEMM, "--exhaustive", "--json"], "usage error", None, None),
    (["compile", GEMM, "--out", "/dev/null/out", "--json"], "usage error", None, None),
    (["compare", GEMM, "--graph", "no/such/dir/d.svg", "--json"], "usage error", None, None),
]


@pytest.mark.parametrize("argv,kind,file,text", COMMANDS, ids=[" ".join(c[0][:1] + c[0][2:]) for c in COMMANDS])
def test_command_line_mistake(capsys, argv, kind, file, text):
    code, out, err = run_cli(capsys, argv)
    line = None
    if text is not None:
        lines = open(file).read().splitlines()
        line = next(i + 1 for i, s in enumerate(lines) if text in s)
    check_error(code, out, err, kind, line, file)
    assert "ok\": true" not in out


def test_python_api_mistakes_name_the_callers_line():
    """Entry points other than the CLI follow the same rule (the caller's line, an ArefError)."""
    import torch

    from aref.errors import ArefError, ArefTypeError
    from aref.runtime.harness import load_example
    ex = load_example(GEMM)
    inputs = ex.inputs()
    meta = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    ex.kernel(**meta)                     # meta tensors only check the arguments (shape propagation)
    with pytest.raises(ArefTypeError) as info:
        ex.kernel(**{**meta, "A": inputs["A"].tolist()})
    assert "argument 'A' must be a torch tensor" in info.value.message and info.value.hint
    assert info.value.loc.file == __file__
    with pytest.raises(ArefTypeError) as info:
        ex.kernel.specialize(**{**inputs, "BK": 32.5})
    assert "declared `BK: int`" in info.value.message and "BK=32" in info.value.hint
    with pytest.raises(ArefError) as info:
        ex.kernel.specialize(**{**inputs, "BK": 0})
    assert "ZeroDivisionError" in info.value.message and "BK=0" in info.value.hint
    assert info.value.loc.file == GEMM


def test_simulator_refuses_to_run_nothing():
    from aref import sim
    from aref.search import lower_to
    from aref.errors import ArefError
    from aref.runtime.harness import load_example
    ex = load_example(GEMM)
    inputs = ex.inputs()
    ws = lower_to(ex.kernel.specialize(**inputs), "barrier")
    with pytest.raises(ArefError, match="at least one"):
        sim.check(ws, inputs, ex.reference, seeds=0)


def test_internal_failure_is_reported_as_a_compiler_bug(capsys, monkeypatch):
    """An exception inside aref names the pass and is not blamed on the user's line."""
    import pipeline
    monkeypatch.setattr(pipeline, "pipeline_kernel", None)      # aref's own call of it fails
    code, out, err = run_cli(capsys, ["ir", GEMM, "--stage", "pipelined", "--json"])
    obj = json.loads(out)
    assert code == 1 and obj["kind"] == "compiler bug" and obj["pass"] == "pipelining"
    assert "TypeError" in obj["error"] and "Traceback" not in err and "bug in aref" in obj["hint"]


def test_a_tolerance_may_be_one_number_for_atol_and_rtol():
    # torch.testing.assert_close's habit: one figure per output; tuples keep their meaning
    from aref.runtime.harness import _tolerances
    from aref.errors import UNKNOWN_LOC, ExampleError
    assert _tolerances(None, "tolerance()", UNKNOWN_LOC) is None       # defaults by dtype
    assert _tolerances({"C": 0.02, "D": (0.0, 1e-3, 2e-3)}, "tolerance()", UNKNOWN_LOC) == {
        "C": (0.02, 0.02), "D": (0.0, 1e-3, 2e-3)}
    with pytest.raises(ExampleError, match="not a tolerance"):
        _tolerances({"C": (1e-2,)}, "tolerance()", UNKNOWN_LOC)
    # a bare number or tuple is every output's tolerance
    from aref.runtime.harness import ALL_OUTPUTS, compare
    every = _tolerances(0.5, "tolerance()", UNKNOWN_LOC)
    assert every == {ALL_OUTPUTS: (0.5, 0.5)} and _tolerances((0.0, 0.1), "t", UNKNOWN_LOC) == {ALL_OUTPUTS: (0.0, 0.1)}
    import torch
    ref = {"C": torch.ones(4), "D": torch.zeros(4)}
    near = {"C": torch.ones(4) * 1.4, "D": torch.full((4,), 0.4)}
    assert compare(near, ref, every).ok and not compare(near, ref, {ALL_OUTPUTS: (0.1, 0.1)}).ok
    with pytest.raises(ExampleError, match="not a tolerance"):
        _tolerances((1e-2,), "tolerance()", UNKNOWN_LOC)
    with pytest.raises(ExampleError, match="not a dict"):
        _tolerances("1e-2", "tolerance()", UNKNOWN_LOC)
