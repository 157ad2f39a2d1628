"""The GPU path of `kernel(*tensors)`: argument checks (testable anywhere) and a real launch (needs a GPU)."""
import ast
import re

import pytest
import torch

import aref
from aref.backend.cute import compile_barrier
from aref.backend.cute.launch import check_arguments
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.errors import ArefError, ArefTypeError
from aref.runtime.harness import load_example
from tests.backend.conftest import barrier_ir
from tests.backend.shape_kernels import KERNELS
from tests.backend.test_shapes import RAGGED

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


def test_alignment_is_asked_only_of_tensors_tma_touches():
    """K = 100 fp16 rows are 200 bytes: no TMA descriptor can describe A or B, which the producer loads with
    ordinary loads, so they need only element alignment; C stays a TMA store target (16 bytes)."""
    ws = barrier_ir("gemm", "heuristic", "cooperative", K=100)
    inputs = load_example("examples/gemm.py").inputs(K=100)
    args = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    args["A"] = torch.zeros(256 * 100 + 1, dtype=torch.float16)[1:].view(256, 100)        # 2-byte aligned
    check_arguments(ws, args, require_cuda=False)
    args["C"] = torch.zeros(256 * 256 + 1, dtype=torch.float16)[1:].view(256, 256)
    with pytest.raises(ArefTypeError, match="argument 'C' starts at an address that is not 16-byte aligned"):
        check_arguments(ws, args, require_cuda=False)


def _launch_and_compare(kernel, inputs: dict, reference, tolerance=None):
    from aref.outputs import compare
    from aref.ir import OpKind
    cuda = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    tile_ir = kernel.specialize(**inputs)
    added = {p.name for op in tile_ir.all_ops() if op.kind is OpKind.STORE and op.attrs.reduce
             for p in tile_ir.params if p.value is op.operands[0]}
    kernel(**cuda)                                     # compiles once per specialization, then launches
    for name in added:                                 # reduce-add outputs accumulate: start them again
        cuda[name].copy_(inputs[name])
    kernel(**cuda)                                     # the second call reuses the compiled kernel
    torch.cuda.synchronize()
    expected = reference(**inputs)
    report = compare({k: v.cpu() for k, v in cuda.items() if isinstance(v, torch.Tensor)}, expected, tolerance)
    assert report.ok, report.to_json()


EXAMPLES = ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd"]
SIZES = [(e, s, {}) for e in EXAMPLES for s in ("small", "large")]
SIZES += [(e, "small", RAGGED[e]) for e in EXAMPLES]
SIZES += [("gemm", "small", {"K": 0}), ("gemm", "small", {"M": 200, "N": 100, "K": 100}),
          ("attention_bwd", "small", {"D": 128}), ("attention_bwd", "small", {"D": 128, "BN": 128}),
          ("attention_bwd", "large", {"BN": 128}), ("attention_bwd", "small", {"Sq": 37, "Sk": 128})]
# (attention_fwd with a ragged key count masks the last block with arange/where in the MMA consumer, which the
# backend's op registry does not emit yet; its ragged case here is the query count)


@needs_gpu
@pytest.mark.parametrize("example, size, overrides", SIZES,
                         ids=[f"{e}-{s}" + "".join(f"-{k}={v}" for k, v in o.items()) for e, s, o in SIZES])
def test_launch_matches_the_reference(example, size, overrides):
    from aref.tune import TuneOptions
    ex = load_example(f"examples/{example}.py")
    ex.kernel.tune_options = TuneOptions(use_gpu=False)   # the model's pick, compiled once (tests/test_tune.py
    inputs = ex.inputs(size, **overrides)                 # covers tuning by GPU timing)
    _launch_and_compare(ex.kernel, inputs, ex.reference_fn, ex.tolerance(inputs))


@needs_gpu
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_launch_shape_kernels(name):
    """Loads before and after the loop, stores every iteration, rank-1 reduce-add and float32 outputs, a
    4-byte ordinary load and a trip count of pid_m + 1, on the GPU."""
    kernel, inputs_fn, reference = KERNELS[name]
    _launch_and_compare(kernel, inputs_fn(), reference)


@needs_gpu
def test_launch_ragged_shape_kernels():
    kernel, inputs_fn, reference = KERNELS["gemm_bias_rowsum"]
    _launch_and_compare(kernel, inputs_fn(M=200, N=136, K=72), reference)
    kernel, inputs_fn, reference = KERNELS["causal_gemm"]
    _launch_and_compare(kernel, inputs_fn(M=200, N=136), reference)


@needs_gpu
@pytest.mark.parametrize("persistent", [False, True])
def test_launch_rasterized_gemm(persistent):
    """The rasterized tile order (aref.backend.tile_order) on a grid whose axis 0 is not a multiple of the group."""
    import torch

    from aref.backend.cute.launch import launch
    ex = load_example("examples/gemm.py")
    inputs = ex.inputs("small", M=768, N=512, K=128)      # 6 row blocks: groups of 3
    cuda = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    tensors = {k: v for k, v in cuda.items() if isinstance(v, torch.Tensor)}
    launch(ex.kernel.specialize(**inputs), tensors, persistent=persistent, ctas=3, raster=4)
    torch.cuda.synchronize()
    from aref.outputs import compare
    report = compare({k: v.cpu() for k, v in cuda.items() if isinstance(v, torch.Tensor)},
                     ex.reference_fn(**inputs), ex.tolerance(inputs))
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
