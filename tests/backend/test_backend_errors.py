"""What the Hopper templates cannot express is refused with an ArefError that names the construct and the
user's source line, never with wrong code or a DSL traceback."""
import inspect

import pytest
import torch

import aref
from aref import aref_kernel
from aref.backend.cute import BackendError, compile_barrier, generate_source
from aref.compiler import CompileOptions
from aref.search import lower_to
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


def test_hopper_barrier_ir_relabelled_for_blackwell_is_refused():
    """Blackwell kernels come from the sm_100a lowering (MMAs into planned tensor memory); Hopper Barrier IR
    with its arch changed is not one, and the Blackwell templates say so instead of failing inside."""
    ex = barrier_ir("gemm", "heuristic", "plain")
    import copy
    ws = copy.deepcopy(ex)
    ws.arch = "sm_100a"
    with pytest.raises(BackendError, match=r"no tensor-memory plan"):
        generate_source(ws)


def test_a_plain_consumer_over_the_register_file_is_refused_by_the_resource_model():
    """Plain dual GEMM: two 128×128 fp32 accumulators (256 registers per thread of tiles, plus the role's own)
    cannot fit the 256 setmaxnreg allows. The resource model refuses it where budgets are set (the lowering),
    naming the group and its tiles; the Barrier IR carries the refusal (the simulator still runs it) and the
    backend raises it rather than generate a kernel that would spill."""
    from aref.resources import ResourceError
    ws = barrier_ir("dual_gemm", "heuristic", "plain")
    assert isinstance(ws.resource_error, ResourceError)
    with pytest.raises(ResourceError, match=r"'consumer' holds up to 256 registers per thread of tiles at once "
                                            r"\(at line 23\) \(gate 128, up 128\).*more than the 256") as e:
        generate_source(ws)
    text = e.value.render()
    assert "split the work over more consumer groups" in text
    # it points at the user's line where the tiles peak and says which tiles to shrink, and by how much
    assert "dual_gemm.py:23" in text and "up = aref.mma" in text
    assert "the largest live tiles (gate, up: 128 registers each) must shrink by about 32 registers" in text


def test_a_budget_set_by_hand_below_the_need_is_refused_by_the_backend():
    from tests.backend.conftest import with_budgets
    ws = with_budgets(barrier_ir("gemm", "heuristic", "plain"), consumer_regs=160)
    with pytest.raises(BackendError, match=r"'consumer' holds up to 192 registers .* budget of 160") as e:
        generate_source(ws)
    assert "must be at least 224" in e.value.render()


def test_unknown_emit_kind(tmp_path):
    with pytest.raises(BackendError, match="unknown emit 'sass'"):
        compile_barrier(barrier_ir("gemm", "heuristic", "plain"), emit="sass", cache_dir=tmp_path)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_plain_tile_is_refused_as_an_mma_operand(arch):
    """A 2-D slot tile of partial swizzle atoms is stored plain (row-major, unswizzled: scale columns and rows);
    the tensor core reads shared operands through a swizzled layout only, so were such a tile ever an MMA operand
    (here the GEMM's A narrowed to 4 columns in its channel and TMA box), the backend names it at the MMA's line."""
    import copy
    import dataclasses
    from aref.runtime.harness import load_example
    from aref.ir import OpKind, TileType
    ex = load_example("examples/gemm.py")
    opts = CompileOptions(arch=arch, consumers="plain") if arch == "sm_90a" else CompileOptions(arch=arch)
    ws = copy.deepcopy(lower_to(ex.kernel.specialize(**ex.inputs("small")), "barrier", opts))
    ch = next(c for c in ws.channels if len(c.payload) == 2)
    t = ch.payload[0]
    narrow = TileType((t.shape[0], 4), t.dtype, t.space)
    ch.payload = (narrow,) + tuple(ch.payload[1:])
    for gp in ws.groups:
        for op in gp.all_ops():
            if op.kind is OpKind.TMA_LOAD and op.attrs.channel == ch.name and op.attrs.index == 0:
                op.attrs = dataclasses.replace(op.attrs, tile_shape=narrow.shape)
    unit = "wgmma" if arch == "sm_90a" else "tcgen05"
    with pytest.raises(BackendError, match=rf"{unit} operand A is the \({t.shape[0]}, 4\) f16 tile of channel "
                                           rf"'{ch.name}', stored plain") as err:
        generate_source(ws)
    assert "aref.mma(a, b.T, acc)" in err.value.render()


@aref_kernel(grid=lambda X, BM, **_: (X.shape[0] // BM,))
def column_sums_as_row(X, Y, *, BM: int = 64, BN: int = 64):
    pid = aref.program_id(0)
    x = aref.load(X, (pid, 0), (BM, BN)).to(aref.float32)
    aref.store(Y, (pid, 0), x.sum(0)[None, :])


def test_one_row_register_store_is_refused():
    """Registers hold a (1, C) tile as a column vector, which the Hopper epilogue does not write (its 2-D stores
    take accumulator-layout tiles and (R, 1) columns): refused at the store's line, not a DSL failure."""
    X, Y = torch.zeros(128, 64, dtype=torch.float16), torch.zeros(2, 64)
    ws = lower_to(column_sums_as_row.specialize(X, Y), "barrier", CompileOptions(arch="sm_90a"))
    with pytest.raises(BackendError, match=r"a store of the one-row tile \(1, 64\)") as err:
        generate_source(ws)
    assert "x.sum(0)[None, :]" in err.value.render()
