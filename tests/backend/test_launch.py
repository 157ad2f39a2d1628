"""The GPU path of `kernel(*tensors)`: argument checks (testable anywhere) and a real launch (needs a GPU)."""
import pytest
import torch

from aref.errors import ArefError, ArefTypeError
from aref.backend.cute.launch import check_arguments
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
    ex = load_example(f"examples/{example}.py")
    inputs = ex.inputs(size)
    cuda = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    ex.kernel(**cuda)                                  # compiles once per specialization, then launches
    ex.kernel(**cuda)                                  # the second call reuses the compiled kernel
    torch.cuda.synchronize()
    expected = ex.reference_fn(**inputs)
    report = compare({k: v.cpu() for k, v in cuda.items() if isinstance(v, torch.Tensor)}, expected,
                     ex.tolerance(inputs))
    assert report.ok, report.to_json()
