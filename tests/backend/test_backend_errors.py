"""What the Hopper templates cannot express is refused with an ArefError that names the construct and the
user's source line, never with wrong code or a DSL traceback."""
import inspect

import pytest
import torch

import aref
from aref import aref_kernel
from aref.backend.cute import BackendError, compile_barrier, generate_source
from aref.compiler import CompileOptions, lower_to
from aref.errors import ArefError
from tests.backend.conftest import barrier_ir


@aref_kernel
def gemm_kn(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """C = A·B with B stored K×N (N contiguous): the wgmma reads B MN-major."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (k, pid_n), (BK, BN)))
        a, b = ab.get()
        acc = aref.mma(a, b, acc)
        ab.consumed()
    aref.store(C, (pid_m, pid_n), acc.to(C.dtype))


def _ws(kernel, dtype, out=torch.float16, consumers="plain", **shape):
    m, n, k = shape.get("M", 256), shape.get("N", 256), shape.get("K", 256)
    A, B, C = torch.zeros(m, k, dtype=dtype), torch.zeros(k, n, dtype=dtype), torch.zeros(m, n, dtype=out)
    return lower_to(kernel.specialize(A, B, C), "barrier", CompileOptions(arch="sm_90a", consumers=consumers))


def test_mn_major_b_operand_compiles(tmp_path):
    result = compile_barrier(_ws(gemm_kn, torch.float16), cache_dir=tmp_path)
    assert result.spill_bytes == 0 and result.instructions["wgmma.mma_async"] > 0
    assert "aref.transposed(s_ab_B" in result.source_path.read_text()


def test_fp8_needs_k_major_operands():
    with pytest.raises(BackendError, match="fp8 wgmma needs both operands K-major") as err:
        generate_source(_ws(gemm_kn, torch.float8_e4m3fn))
    lines, first = inspect.getsourcelines(gemm_kn.fn)
    mma_line = first + next(i for i, text in enumerate(lines) if "acc = aref.mma(a, b, acc)" in text)
    assert f"test_backend_errors.py:{mma_line}" in str(err.value)          # points at the user's MMA line
    assert "acc = aref.mma(a, b, acc)" in err.value.render()


@pytest.mark.parametrize("dim, message", [
    ("M", r"tensor A dim 0 has extent 200, not a multiple of the tile 128"),
    ("K", r"tensor A dim 1 has extent 200, not a multiple of the tile 64"),
])
def test_shapes_not_divisible_by_the_tile(dim, message):
    with pytest.raises(BackendError, match=message) as err:
        generate_source(barrier_ir("gemm", "heuristic", "cooperative", **{dim: 200}))
    assert isinstance(err.value, ArefError) and "aref.load(A" in err.value.render()
    assert "pad A or choose a tile size" in err.value.render()


def test_hopper_barrier_ir_relabelled_for_blackwell_is_refused():
    """Blackwell kernels come from the sm_100a lowering (MMAs into planned tensor memory); Hopper Barrier IR
    with its arch changed is not one, and the Blackwell templates say so instead of failing inside."""
    ex = barrier_ir("gemm", "heuristic", "plain")
    import copy
    ws = copy.deepcopy(ex)
    ws.arch = "sm_100a"
    with pytest.raises(BackendError, match=r"no tensor-memory plan"):
        generate_source(ws)


def test_attention_backward_at_bn128_does_not_fit_one_consumer():
    """BN=128 keeps S, dP (64×128) and dK, dV (128×64) fp32 tiles live at once in the plain consumer: 352
    registers per thread. FA3 splits the key block over two consumer groups; the partitioner does not yet."""
    with pytest.raises(BackendError, match=r"'consumer' holds up to \d+ registers .* budget of 240") as e:
        generate_source(barrier_ir("attention_bwd", "heuristic", "plain", BN=128))
    assert "register model must give this group more registers" in e.value.render()


def test_accumulators_over_the_register_budget_are_refused():
    """Plain dual GEMM: two 128×128 fp32 accumulators in one warp group cannot fit 240 registers."""
    with pytest.raises(BackendError, match=r"'consumer' holds up to \d+ registers per thread of tiles"):
        generate_source(barrier_ir("dual_gemm", "heuristic", "plain"))


def test_unknown_emit_kind(tmp_path):
    with pytest.raises(BackendError, match="unknown emit 'sass'"):
        compile_barrier(barrier_ir("gemm", "heuristic", "plain"), emit="sass", cache_dir=tmp_path)
