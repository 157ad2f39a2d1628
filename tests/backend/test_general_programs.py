"""Programs outside the examples (tests/backend/general_programs.py) run right and compile for sm_90a.

Each matches its torch reference in the interpreter, the simulator computes exactly what the interpreter
does, and the Hopper backend compiles it with no spills — where it used to refuse "a arange op in a MMA
consumer", "the B operand of a wgmma must come from shared memory", "a row min reduction", "a reduction over
rows (axis 0)", "a cast to i32 in registers", "a 16-bit tile used in register math", "a constant tile" and
"a slice of a register tile". A Barrier IR whose pipeline-state selects depend on a run-time value compiles
too ("a run-time select between pipeline states").
"""
import copy
import re

import pytest
import torch

from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.interp.tile import run_kernel
from aref.ir import ConstAttrs, DType, FnAttrs, Op, OpKind, ScalarType, Value
from aref.sim import simulate
from tests.backend.conftest import barrier_ir
from tests.backend.general_programs import PROGRAMS, inputs

NAMES = sorted(PROGRAMS)
# fp8 products summed in fp32 then rounded to bf16 (half an ulp of the largest outputs ≈ 0.4%)
TOLERANCE = {"rowwise_softmax": 2e-2, "gemm_epilogue_mix": 2e-2, "blockscale_gemm": 5e-3, "colscale_gemm": 5e-3}
_LOWERED = {}


def _lowered(name):
    if name not in _LOWERED:
        kernel, _ = PROGRAMS[name]
        args = inputs(name)
        _LOWERED[name] = (args, kernel.specialize(**args),
                          lower_to(kernel.specialize(**args), "barrier", CompileOptions(arch="sm_90a",
                                                                                        consumers="plain")))
    return _LOWERED[name]


def _copy(args: dict) -> dict:
    """Fresh tensors for one run (compile-time constants among the inputs, such as BN, pass as they are)."""
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}


@pytest.mark.parametrize("name", NAMES)
def test_interpreter_and_simulator_match_the_reference(name):
    args, tile_ir, ws = _lowered(name)
    _, reference = PROGRAMS[name]
    interp = _copy(args)
    run_kernel(tile_ir, interp)
    want = reference(**args)
    for key, expected in want.items():
        tol = TOLERANCE.get(name, 1e-2)
        err = (interp[key].float() - expected.float()).abs().max().item()
        assert err <= tol * max(1.0, expected.float().abs().max().item()), f"{key}: {err}"
    sim = _copy(args)
    result = simulate(ws, sim, seed=3)
    assert not result.violations, [str(v) for v in result.violations]
    for key in want:
        assert torch.equal(sim[key], interp[key])


@pytest.mark.parametrize("name", NAMES)
def test_compiles_for_sm90a_without_spills(backend_cache, name):
    from aref.backend.cute import compile_barrier
    _, _, ws = _lowered(name)
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.spill_bytes == 0, result.ptxas_log
    src, ptx = result.source_path.read_text(), result.ptx_path.read_text()
    assert result.instructions["wgmma.mma_async"] > 0 or name in ("rowwise_softmax", "streamed_logsumexp",
                                                                  "row_stats_columns")
    if name == "causal_attention":              # the mask: this thread's rows and columns of the tile
        assert "aref.row_index(group_tidx" in src and "aref.col_index(group_tidx" in src
    if name == "linear_attention":              # the state is staged as a wgmma B operand, read MN-major
        assert "aref.stage_tile(" in src and "make_fragment_B" in src and "fence.proxy.async" in ptx
    if name == "gemm_epilogue_mix":             # column reductions meet across warps; int32 conversions
        assert "shuffle_sync_bfly(x, offset=16)" in src and "cvt.rzi.s32.f32" in ptx
    if name == "operand_placements":            # RS A, staged A (MN-major), staged B both ways, fp8 staged
        assert "as_operand_a" in src and src.count("aref.stage_tile(") >= 4 and "Float8E4M3FN" in src
    if name == "sliced_halves":                 # a slice of a register tile is an index shift
        assert "acc_rc[r + 2, c]" in src and "_rc[r, c + 16]" in src and "col_max[c + 2]" in src
    if name in ("blockscale_gemm", "colscale_gemm"):
        _check_plain_scales(name, src, ptx)
        _check_storage_is_the_model(ws, result.source_path)
    if name == "row_stats_columns":             # the (64, 1) column leaves by masked stores of one value per row
        assert "aref.store_column(" in src


def _check_storage_is_the_model(ws, source_path) -> None:
    """The generated storage struct ends where the resource model's layout ends (rounded to the swizzle period
    the struct is aligned to): the struct takes each field's alignment from the model, so this checks that the
    fields' order and sizes (the plain scale rings' padding to 128 bytes among them) agree."""
    import importlib.util
    from aref.resources.memory import SWIZZLE_ALIGN, smem_plan
    spec = importlib.util.spec_from_file_location("generated_kernel", source_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    end = smem_plan(ws).total - SWIZZLE_ALIGN          # the model's total holds the allocator's alignment slack
    assert module.SharedStorage.size_in_bytes() == -(-end // SWIZZLE_ALIGN) * SWIZZLE_ALIGN


def _check_plain_scales(name: str, src: str, ptx: str) -> None:
    """The scale tiles are plain row-major shared rings (no swizzle), A's (BM, 1) column filled with ordinary
    loads and read once per row of the accumulator, B's (1, BN) row (colscale) by TMA into the plain layout;
    A and B keep the swizzled operand layouts."""
    depth = 3 if name == "blockscale_gemm" else 2
    assert f"s_ch_SA_layout = cute.make_layout((128, 1, {depth}), stride=(1, 1, 128))" in src
    assert "s_ch_SA = storage.s_ch_SA.get_tensor(s_ch_SA_layout)" in src
    assert "aref.load_box(SA, s_ch_SA[None, None, ch_slot], (128, 1)" in src
    assert "s_ch_A = storage.s_ch_A.get_tensor(s_ch_A_layout.outer, swizzle=s_ch_A_layout.inner)" in src
    assert re.search(r"s_ch_SA\[[^\]]*, 0, ch_slot\]", src)       # one shared read per accumulator row
    if name == "blockscale_gemm":
        assert "s_ch_SB_layout = cute.make_layout((1, 1, 3), stride=(1, 1, 1))" in src
        assert "aref.load_box(SB, s_ch_SB[None, None, ch_slot], (1, 1)" in src
    else:
        assert "s_ch_SBc_layout = cute.make_layout((1, 64, 2), stride=(64, 1, 64))" in src
        assert "make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), SBc, cute.slice_(s_ch_SBc_layout" in src
    assert "cp.async.bulk.tensor" in ptx


def test_runtime_selects_between_pipeline_states_compile(backend_cache):
    """gemm_reduce's pipeline chooses between loop states (acc, sumsq) with a predicate the specialization fixes;
    with a run-time predicate instead (as a run-time trip count gives), the select is per element."""
    from aref.backend.cute import compile_barrier, generate_source
    ws = copy.deepcopy(barrier_ir("gemm_reduce", "heuristic", "plain", BN=64))
    changed = 0
    for gp in ws.groups:
        pid = next((op.result for op in gp.pre.ops if op.kind is OpKind.PROGRAM_ID), None)
        selects = [op for op in gp.all_ops() if op.kind is OpKind.SELECT]
        if pid is None or not selects:
            continue
        zero = Value(ScalarType(DType.int32))
        cond = Value(ScalarType(DType.bool_))
        gp.pre.ops += [Op(OpKind.CONST, (), (zero,), ConstAttrs(0)),
                       Op(OpKind.SCALAR_BINARY, (pid, zero), (cond,), FnAttrs("ge"))]
        for op in selects:
            op.operands = (cond,) + op.operands[1:]
            changed += 1
    assert changed >= 2
    src = generate_source(ws)
    assert re.search(r"acc\w*_rc\[r, c\] = aref\.where\(pid_m >= 0, ", src)     # per element of the tile
    assert re.search(r"sumsq\w*\[r\] = aref\.where\(pid_m >= 0, ", src)           # per row of the vector
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.spill_bytes == 0, result.ptxas_log


@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
@pytest.mark.parametrize("name", ["alibi_attention", "streamed_logsumexp", "triangular_product", "gemm_layernorm",
                                  "blockscale_gemm", "colscale_gemm", "column_state_attention", "window_attention",
                                  "gemm_dropout_colsum"])
def test_compiles_for_sm100a(backend_cache, name, partition):
    """On Blackwell, with the solver's own partition (timing guard off): ALiBi's one-element slope tile (2 bytes:
    below a TMA box) is loaded by the load warp with ordinary loads, and P and the rescaled O reach the MMA warp
    in two tensor-memory channels (one buffer each); the logsumexp's row vectors leave by TMA stores of rank-1
    slots; the triangular product's A, masked in registers, reaches an MMA warp of its own (tcgen05 reads A from
    shared or tensor memory only); the block-scaled GEMMs' (BM, 1), (1, 1) and (1, BN) scale tiles live in plain
    shared rings, and the (64, 1) softmax state columns pass between the heuristic's warp groups through plain
    rings; the dropout GEMM's epilogue (128 fp32 registers of y beside the mask) runs over column chunks, each summing its columns
    across the group's rows (shuffles, then the 4 warps meet in shared memory) and storing its box of C and of
    the column sums. The simulator agrees with the interpreter bit for bit."""
    from aref.backend.cute import compile_barrier
    kernel, _ = PROGRAMS[name]
    args = inputs(name)
    tile_ir = kernel.specialize(**args)
    ws = lower_to(tile_ir, "barrier", CompileOptions(arch="sm_100a", partition=partition, solver_time_limit=20))
    expected = _copy(args)
    run_kernel(tile_ir, expected)
    sim = _copy(args)
    assert not simulate(ws, sim, seed=1).violations
    for key in (k for k, v in expected.items() if isinstance(v, torch.Tensor)):
        assert torch.equal(sim[key], expected[key]), key
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.spill_bytes == 0, result.ptxas_log
    if name == "alibi_attention":
        assert result.instructions["tcgen05.mma"] > 0 and "aref.load_box(slopes" in result.source_path.read_text()
    elif name == "window_attention":       # S in tensor memory, the mask's `&` in the softmax group's registers
        assert result.instructions["tcgen05.mma"] > 0
    elif name == "gemm_layernorm":         # gamma / beta (256 B rank-1 boxes) and R by TMA; rstd by a rank-1 store
        assert result.instructions["tcgen05.mma"] > 0 and result.instructions["cp.async.bulk.tensor"] > 0
    elif name in ("blockscale_gemm", "colscale_gemm"):    # per-block scales in plain rings beside A and B
        assert result.instructions["tcgen05.mma"] > 0
        _check_plain_scales(name, result.source_path.read_text(), result.ptx_path.read_text())
    elif name == "column_state_attention":         # alpha handed between warp groups in plain (64, 1) rings
        src = result.source_path.read_text()
        assert result.instructions["tcgen05.mma"] > 0
        if partition == "optimal":                 # the solver rescales O on the softmax groups: no hand-off
            assert not any("alpha" in ch.name for ch in ws.channels)
            return
        assert re.search(r"s_alpha\w*_layout = cute\.make_layout\(\(64, 1, \d\), stride=\(1, 1, 64\)\)", src)
        assert re.search(r"s_alpha\w*\[row64, 0, \w+\] = ", src) and re.search(r"= s_alpha\w*\[row64, 0, \w+\]", src)
    elif name == "gemm_dropout_colsum":
        epi = next(gp for gp in ws.groups if any(op.kind is OpKind.REDUCE for op in gp.all_ops()))
        boxes = sorted(tuple(op.attrs.tile_shape) for op in epi.all_ops() if op.kind is OpKind.STORE)
        width = boxes[0][0]
        assert width < 128 and boxes == [(width,)] * (128 // width) + [(128, width)] * (128 // width)
        src = result.source_path.read_text()
        assert src.count("sm100.cols_to_smem(") == 128 // width and "shuffle_sync_bfly(x, offset=16)" in src
    elif name == "triangular_product":
        assert result.instructions["tcgen05.mma"] > 0
        assert [g.group.warps for g in ws.groups if g.group.role == "mma"] == [1]
    else:
        assert result.instructions["tcgen05.mma"] == 0 and result.instructions["cp.async.bulk.tensor"] > 0


def test_blockscale_at_bn128(backend_cache):
    """The user's tile (BN = 128): on sm_90a the heuristic splits the rows over two cooperative consumers and it
    compiles with no spills; on sm_100a one compute warp group would hold acc and part (2 × 128 fp32 registers
    per thread) beyond setmaxnreg's 256, which the resource model refuses naming both tiles."""
    from aref.backend.cute import compile_barrier, generate_source
    from aref.resources.registers import ResourceError
    kernel, _ = PROGRAMS["blockscale_gemm"]
    args = dict(inputs("blockscale_gemm"), BN=128)
    ws = lower_to(kernel.specialize(**args), "barrier", CompileOptions(arch="sm_90a"))
    assert [g.group.role for g in ws.groups].count("consumer") == 2
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.spill_bytes == 0, result.ptxas_log
    _check_plain_scales("blockscale_gemm", result.source_path.read_text(), result.ptx_path.read_text())
    ws = lower_to(kernel.specialize(**args), "barrier", CompileOptions(arch="sm_100a"))
    with pytest.raises(ResourceError, match=r"acc 128, part 128"):
        generate_source(ws)
