"""Every @aref_kernel is a PyTorch operator: torch.library.opcheck on each kernel of every example (through the
interpreter, on one CTA's worth of data), on aref.nn's operators, meta tensors, and the operator's refusals."""
import glob
import os

import pytest
import torch

from aref.errors import ArefError
from aref.runtime.harness import kernels_of, load_example, load_module
from aref.runtime.torch_library import operator_call, stored_params
from example_paths import EXAMPLES, ONE_CTA

# one CTA's worth of data for the examples without an ONE_CTA entry (the kernels of aref.nn)
SMALL = {"attention_train": dict(BH=1, Sq=128), "linear_layer": dict(M=128, N=64, K=64)}


def _all_kernels():
    out = []
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        for kernel in kernels_of(load_module(path)):
            out.append((name, kernel))
    return out


KERNELS = _all_kernels()


@pytest.fixture(autouse=True)
def _one_thread():
    """The interpreter's small matmuls: one thread (two contending threads are 100x slower on shared cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _small_inputs(example: str, kernel: str) -> dict:
    ex = load_example(os.path.join(EXAMPLES, f"{example}.py:{kernel}"))
    overrides = {**SMALL.get(example, ONE_CTA.get(example, {}))}
    return ex, ex.inputs("small", **overrides)


def test_every_example_kernel_is_checked():
    assert len(KERNELS) >= 20 and {"gemm", "attention_train", "linear_layer"} <= {e for e, _ in KERNELS}


@pytest.mark.parametrize("example, kernel", KERNELS, ids=[f"{e}:{k}" for e, k in KERNELS])
def test_opcheck_example_kernel(example, kernel):
    ex, inputs = _small_inputs(example, kernel)
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    consts = {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)}
    overload, args = operator_call(ex.kernel, **tensors, **consts)
    schema = overload._schema
    assert schema.name.startswith(f"aref::{kernel}_")
    written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    assert written == set(stored_params(ex.kernel.specialize(**inputs))) and written
    result = torch.library.opcheck(overload, args)
    assert set(result.values()) == {"SUCCESS"}, result


def test_calling_the_kernel_runs_the_operator_and_matches_the_reference():
    ex, inputs = _small_inputs("gemm", "gemm")
    ex.kernel(**inputs)
    expected = ex.reference_fn(**inputs)["C"]
    assert torch.allclose(inputs["C"].float(), expected.float(), atol=2e-2, rtol=1e-2)
    overload, args = operator_call(ex.kernel, **inputs)
    out = torch.zeros_like(inputs["C"])
    overload(*[out if a is inputs["C"] else a for a in args])        # the operator itself, as torch calls it
    assert torch.equal(out, inputs["C"])


def test_meta_and_fake_tensors_propagate_shapes():
    ex, inputs = _small_inputs("attention_fwd", "attention_fwd")
    meta = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    ex.kernel(**meta)                                              # no data: the fake implementation checks only
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    fake = {k: (mode.from_tensor(v) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    with mode:
        ex.kernel(**fake)
    bad = dict(meta, O=torch.empty(128, 64, device="meta", dtype=torch.float16))     # rank 2, not 3
    with pytest.raises(ArefError):                                 # a shape the kernel cannot take still fails
        ex.kernel(**bad)


def test_a_kernel_that_stores_elsewhere_for_other_constants_is_refused():
    import aref

    @aref.aref_kernel(grid=(1,))
    def either(X, Y, Z, *, TO_Z: bool = False):
        x = aref.load(X, (0,), (16,))
        aref.store(Z if TO_Z else Y, (0,), x)

    x, y, z = torch.ones(16), torch.zeros(16), torch.zeros(16)
    either(x, y, z)
    either(x, y, z, TO_Z=True)          # a second operator: its schema declares Z written
    assert torch.equal(y, x) and torch.equal(z, x)
    overload, args = operator_call(either, x, y, z)
    with pytest.raises(ArefError, match="stores to Z"):
        overload(*args[:-1], '[["TO_Z",true]]')                   # the Y-writing operator asked to write Z


def test_nn_operators_pass_opcheck():
    import aref.nn  # noqa: F401 - registers the operators
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 64, generator=g).half().requires_grad_() for _ in range(3))
    for args in ((q, k, v, False, 0.125), (q, k, v, True, 0.125)):
        result = torch.library.opcheck(torch.ops.aref.attention.default, args)
        assert set(result.values()) == {"SUCCESS"}, result
    x = torch.randn(2, 24, 64, generator=g).half().requires_grad_()
    w, b = torch.randn(32, 64, generator=g).half().requires_grad_(), torch.randn(32, generator=g).half()
    for args in ((x, w, b), (x, w, None)):
        result = torch.library.opcheck(torch.ops.aref.linear.default, args)
        assert set(result.values()) == {"SUCCESS"}, result
