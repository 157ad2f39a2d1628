"""The GPU path of `kernel(*tensors)`: argument checks (testable anywhere) and a real launch (needs a GPU)."""
import ast
import re

import pytest
import torch

import aref
from aref.backend.cute import compile_barrier
from aref.backend.cute.launch import check_arguments
from aref.compiler import CompileOptions, lower_to
from aref.errors import ArefError, ArefTypeError
from aref.harness import load_example
from tests.backend.conftest import barrier_ir

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _args(**changes):
    ex = load_example("examples/gemm.py")
    inputs = ex.inputs()
    inputs.update(changes)
    return {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}


def test_matching_arguments_pass():
    check_arguments(barrier_ir("gemm", "heuristic", "cooperative"), _args(), require_cuda=False)


@pytest.mark.parametrize("change, error, message", [
    (lambda a: {"A": a["A"].float()}, ArefTypeError, r"argument 'A' has dtype float32; this specialization takes float16"),
    (lambda a: {"B": a["B"][:128]}, ArefTypeError, r"argument 'B' has shape \(128, 256\)"),
    (lambda a: {"A": a["A"].t().contiguous().t()}, ArefTypeError, r"argument 'A' is not contiguous"),
    (lambda a: {"C": torch.zeros(256 * 256 + 1, dtype=torch.float16)[1:].view(256, 256)}, ArefTypeError,
     r"argument 'C' starts at an address that is not 16-byte aligned"),
    (lambda a: {"A": a["A"]}, None, None),
])
def test_bad_arguments_are_named(change, error, message):
    args = _args()
    args.update(change(args))
    ws = barrier_ir("gemm", "heuristic", "cooperative")
    if error is None:
        check_arguments(ws, args, require_cuda=False)
        return
    with pytest.raises(error, match=message):
        check_arguments(ws, args, require_cuda=False)


def test_cpu_arguments_for_a_gpu_launch_are_refused():
    with pytest.raises(ArefError, match=r"argument 'A' is on cpu, the others on a GPU"):
        check_arguments(barrier_ir("gemm", "heuristic", "cooperative"), _args(), require_cuda=True)


@needs_gpu
@pytest.mark.parametrize("example, size", [(e, s) for e in ("gemm", "dual_gemm", "gemm_reduce", "attention_fwd")
                                           for s in ("small", "large")])
def test_launch_matches_the_reference(example, size):
    from aref.harness import compare
    from aref.tune import TuneOptions
    ex = load_example(f"examples/{example}.py")
    ex.kernel.tune_options = TuneOptions(use_gpu=False)   # the model's pick, compiled once (tests/test_tune.py
    inputs = ex.inputs(size)                              # covers tuning by GPU timing)
    cuda = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    ex.kernel(**cuda)                                  # compiles once per specialization, then launches
    ex.kernel(**cuda)                                  # the second call reuses the compiled kernel
    torch.cuda.synchronize()
    expected = ex.reference_fn(**inputs)
    report = compare({k: v.cpu() for k, v in cuda.items() if isinstance(v, torch.Tensor)}, expected,
                     ex.tolerance(inputs))
    assert report.ok, report.to_json()


# ------------------------------------------------------------------------------------------------ streams
def _host_function(source: str) -> ast.FunctionDef:
    return next(f for f in ast.parse(source).body if isinstance(f, ast.FunctionDef) and f.name == "host")


def _launch_keywords(host: ast.FunctionDef) -> dict:
    call = next(c for c in ast.walk(host)
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "launch")
    return {kw.arg: ast.unparse(kw.value) for kw in call.keywords}


def test_generated_host_takes_a_stream_and_launches_on_it(compiled):
    """Source level: `host(*tensors, stream: CUstream)` passes `stream` to `.launch`, and the fake arguments end
    with a fake stream. Compile level: the compiled host stores its last argument into the stream field of the
    CUDA launch configuration (cudaLaunchConfig_t: grid, block, dynamic smem, stream, attrs, attr count)."""
    ws, result = compiled("gemm", "heuristic", "plain")
    source = result.source_path.read_text()
    host = _host_function(source)
    params = [(a.arg, ast.unparse(a.annotation)) for a in host.args.args]
    assert params == [("A", "cute.Tensor"), ("B", "cute.Tensor"), ("C", "cute.Tensor"), ("stream", "CUstream")]
    assert _launch_keywords(host)["stream"] == "stream"
    assert re.search(r"make_fake_stream\(\),\s+# stream\n\s+\]", source)

    mlir = str(result.compiled.ir_module)
    signature = re.search(r"llvm\.func @cutlass_host_\w+\((.*)\) -> i32", mlir).group(1)
    stream_arg = re.findall(r"(%arg\d+): !llvm\.ptr", signature)[-1]
    stored_into = re.findall(rf"llvm\.store {stream_arg}, (%\d+) : !llvm\.ptr, !llvm\.ptr", mlir)
    config_fields = {m.group(1): int(m.group(2)) for m in re.finditer(
        r"(%\d+) = llvm\.getelementptr %\d+\[0, (\d)\] : \(!llvm\.ptr\) -> !llvm\.ptr, "
        r"!llvm\.struct<\(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32\)>", mlir)}
    assert [config_fields.get(p) for p in stored_into] == [3], (stream_arg, stored_into)


def test_stream_parameter_avoids_a_tensor_named_stream(tmp_path):
    @aref.aref_kernel
    def copy_tile(X, stream, *, BM: int = 128, BN: int = 128):
        pid_m, pid_n = aref.program_id(0), aref.program_id(1)
        aref.store(stream, (pid_m, pid_n), aref.load(X, (pid_m, pid_n), (BM, BN)))

    x = torch.zeros(256, 256, dtype=torch.float16)
    ws = lower_to(copy_tile.specialize(x, x.clone()), "barrier", CompileOptions(arch="sm_90a"))
    result = compile_barrier(ws, cache_dir=tmp_path)
    host = _host_function(result.source_path.read_text())
    assert [a.arg for a in host.args.args] == ["X", "stream", "stream_"]
    assert _launch_keywords(host)["stream"] == "stream_"
    assert result.registers > 0


@needs_gpu
def test_inputs_made_on_a_side_stream():
    """The kernel runs on torch's current stream, after the work that fills its inputs there (launched on
    another stream it would read the inputs before they are written)."""
    ex = load_example("examples/gemm.py")
    host = ex.inputs(M=1024, N=1024, K=2048)
    A, B = host["A"].cuda(), host["B"].cuda()
    ex.kernel(A, B, host["C"].cuda())                    # compile first: a compile would outlast the spin below
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        A_late, B_late = torch.zeros_like(A), torch.zeros_like(B)
        C = torch.full((1024, 1024), 7.0, dtype=torch.float16, device="cuda")
        torch.cuda._sleep(200_000_000)                    # ~0.1 s of spinning before the inputs are written
        A_late.copy_(A)
        B_late.copy_(B)
        ex.kernel(A_late, B_late, C)
        expected = (A_late.float() @ B_late.float().T).half()
    torch.cuda.synchronize()
    assert torch.allclose(C.float(), expected.float(), atol=0.05, rtol=0.01)


@needs_gpu
def test_cuda_graph_capture_records_the_kernel_and_replay_runs_it():
    ex = load_example("examples/gemm.py")
    host = ex.inputs()
    A, B, C = host["A"].cuda(), host["B"].cuda(), host["C"].cuda()
    ex.kernel(A, B, C)                                   # compile and load before capture, as torch asks
    torch.cuda.synchronize()
    C.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ex.kernel(A, B, C)
    torch.cuda.synchronize()
    assert torch.count_nonzero(C) == 0, "the kernel ran during capture instead of being recorded"
    fresh = ex.inputs(seed=1)
    A.copy_(fresh["A"].cuda())
    B.copy_(fresh["B"].cuda())
    graph.replay()
    torch.cuda.synchronize()
    expected = ex.reference_fn(**fresh)["C"]
    assert torch.allclose(C.cpu().float(), expected.float(), atol=0.05, rtol=0.01)
