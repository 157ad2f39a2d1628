"""Rung 1 of the verification ladder: the interpreter equals each example's torch reference, including the
trip counts where pipelines usually break (0, 1, D, D+1, 2D+1 for a channel of depth D)."""
import pytest
import torch

from aref.runtime.harness import load_example, run_interpreter
from example_paths import EXAMPLE_NAMES, TRIP_KNOB, example_path, max_trip_count, poison_outputs, trip_inputs

@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_default_inputs(name):
    ex = load_example(example_path(name))
    report = run_interpreter(ex, ex.inputs())
    assert report.ok, report.to_json()


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
@pytest.mark.parametrize("trips", ["0", "1", "D", "D+1", "2D+1"])
def test_trip_counts(name, trips):
    depth = TRIP_KNOB[name][2]
    n = {"0": 0, "1": 1, "D": depth, "D+1": depth + 1, "2D+1": 2 * depth + 1}[trips]
    ex = load_example(example_path(name))
    inputs = trip_inputs(ex, name, n)
    kernel = ex.kernel.specialize(**inputs)
    assert max_trip_count(kernel) == n
    poison_outputs(ex, kernel, inputs)            # so that skipped stores fail at trip count 0
    report = run_interpreter(ex, inputs)
    assert report.ok, report.to_json()


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3"])
def test_gemm_dtypes(dtype):
    ex = load_example(example_path("gemm"))
    report = run_interpreter(ex, ex.inputs(dtype=dtype))
    assert report.ok, report.to_json()


def test_attention_without_subtiling_matches():
    ex = load_example(example_path("attention_fwd"))
    report = run_interpreter(ex, ex.inputs(SUBTILE=1))
    assert report.ok, report.to_json()


def test_partial_tiles_use_tma_bounds():
    """Shapes that are not multiples of the tile: loads read zeros out of bounds, stores drop them."""
    ex = load_example(example_path("gemm"))
    inputs = ex.inputs(M=200, N=72, K=192)
    inputs["C"][:] = 7.0          # must be overwritten everywhere in bounds
    report = run_interpreter(ex, inputs)
    assert report.ok, report.to_json()


@pytest.mark.parametrize("name,target", [("gemm_epilogue", "rowsum"), ("splitk_gemm", "C")])
def test_reduce_add_outputs_accumulate_onto_their_contents(name, target):
    """A reduce-add store adds to what the output held: the interpreter and the reference agree when it
    starts non-zero (the examples' inputs start it at zero, which would hide a reference that ignores it)."""
    ex = load_example(example_path(name))
    inputs = ex.inputs()
    inputs[target].copy_(torch.linspace(-3.0, 5.0, inputs[target].numel()).view_as(inputs[target]))
    report = run_interpreter(ex, inputs)
    assert report.ok, report.to_json()


def test_interpreter_detects_a_wrong_kernel():
    """The comparison can fail: a kernel that drops the last K block disagrees with the reference."""
    import aref

    @aref.aref_kernel
    def short_gemm(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
        pid_m, pid_n = aref.program_id(0), aref.program_id(1)
        acc = aref.zeros((BM, BN), aref.float32)
        ab = aref.channel(depth=2)
        for k in aref.range(A.shape[1] // BK - 1):
            ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
            a, b = ab.get()
            acc = aref.mma(a, b.T, acc)
            ab.consumed()
        aref.store(C, (pid_m, pid_n), acc.to(C.dtype))

    ex = load_example(example_path("gemm"))
    ex.kernel = short_gemm
    assert not run_interpreter(ex, ex.inputs()).ok
