"""The GPU path of `kernel(*tensors)`: argument checks (testable anywhere) and a real launch (needs a GPU)."""
import pytest
import torch

from aref.errors import ArefError, ArefTypeError
from aref.backend.cute.launch import check_arguments
from aref.harness import load_example
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
    from aref.harness import compare
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
          ("attention_bwd", "small", {"D": 128}), ("attention_bwd", "small", {"Sq": 37, "Sk": 128})]
# (attention_fwd with a ragged key count masks the last block with arange/where in the MMA consumer, which the
# backend's op registry does not emit yet; its ragged case here is the query count)


@needs_gpu
@pytest.mark.parametrize("example, size, overrides", SIZES,
                         ids=[f"{e}-{s}" + "".join(f"-{k}={v}" for k, v in o.items()) for e, s, o in SIZES])
def test_launch_matches_the_reference(example, size, overrides):
    ex = load_example(f"examples/{example}.py")
    inputs = ex.inputs(size, **overrides)
    _launch_and_compare(ex.kernel, inputs, ex.reference_fn, getattr(ex.module, "TOLERANCE", None))


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
