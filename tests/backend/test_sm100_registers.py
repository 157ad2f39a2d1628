"""Blackwell register holding: one register model for the sm_100a lowering, the optimal partitioner's retry and
the backend, and vectors along the columns read from shared memory instead of being copied into every thread.

In tcgen05's 32x32b row layout a thread holds a whole row, so a vector broadcast over the rows (a bias
`b[None, :]`) would take a register per column in every thread: 128 beside a 128-column accumulator's 128.
It stays in the slot it arrived in, which the partition holds until the vector's last reader, and the role
reads it there element by element (all threads read one address: a broadcast)."""
import re

import pytest
import torch

import aref
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.ir import OpKind
from aref.resources import REGISTERS_PER_SM, ResourceError, register_demand
from aref.sim import check
from aref.runtime.harness import load_example
from example_paths import example_path
from tests.backend.sm100_helpers import sm100_compiled, sm100_ir


def _release_index(ops, channel):
    return next(i for i, op in enumerate(ops) if op.kind is OpKind.MBAR_ARRIVE and op.attrs.which == "empty"
                and op.attrs.channel == channel)


@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
def test_bias_is_read_from_its_slot_not_held_in_registers(backend_cache, partition):
    ws, result = sm100_compiled(backend_cache, "gemm_epilogue", partition)
    epi = next(gp for gp in ws.groups if any(op.kind is OpKind.STORE for op in gp.all_ops())
               and gp.group.warps == 4)
    ops = list(epi.all_ops())
    bias = next(op for op in ops if op.kind is OpKind.SLOT_READ and len(op.result.type.shape) == 1)
    add = next(i for i, op in enumerate(ops) if op.kind is OpKind.BINARY and len(op.result.type.shape) == 2)
    # the bias slot is released after the accumulator + bias that reads it, not right after its cast
    assert _release_index(ops, bias.attrs.channel) > add
    # accumulator (128) and its 16-bit copy for the store (64): the bias takes no registers
    demand = register_demand(epi, "sm_100a")
    assert demand.peak == 192 and epi.group.regs >= demand.need
    src = result.source_path.read_text()
    assert "s_bn_x_bias[sm100.col_index(128, 128, tidx, c), 0]" in src
    assert "cute.make_rmem_tensor(128, cutlass.Float32)" not in src
    assert result.spill_bytes == 0, result.ptxas_log


def test_wide_layer_norm_keeps_weight_and_bias_in_shared_memory(backend_cache):
    """N = 256: weight and bias in registers would be 2 x 128 per thread beside the 64-row block (the lowering
    refused it at 736 registers); read from their slots, held through the loop, it compiles without spills."""
    ws, result = sm100_compiled(backend_cache, "rowwise", "heuristic", N=256)
    assert result.spill_bytes == 0, result.ptxas_log
    compute = next(gp for gp in ws.groups if gp.group.warps == 4)
    assert register_demand(compute, "sm_100a").need <= compute.group.regs
    # both vector slots are released after the loop that reads them
    assert sum(op.kind is OpKind.MBAR_ARRIVE and op.attrs.which == "empty" for op in compute.post.ops) == 2


@pytest.mark.parametrize("example", ["gemm_epilogue", "attention_causal", "attention_fwd", "dual_gemm",
                                     "rowwise"])
@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
def test_budgets_come_from_the_resource_model(example, partition):
    """The sm_100a lowering gives every four-warp group at least the resource model's need (the figure the
    backend checks its code against), within the register file."""
    ws = sm100_ir(example, partition)
    assert ws.resource_error is None
    for gp in ws.groups:
        if gp.group.warps == 4:
            assert gp.group.regs >= register_demand(gp, "sm_100a").need, gp.group.name
    one_warp = sum(gp.group.warps == 1 for gp in ws.groups)
    wide = sum(gp.group.regs * gp.group.threads for gp in ws.groups if gp.group.warps == 4)
    assert wide + -(-one_warp // 4) * 128 * 48 <= REGISTERS_PER_SM


@aref.aref_kernel(grid=lambda X, **_: (X.shape[0] // 128,))
def _three_live_tiles(X, Y):
    pid = aref.program_id(0)
    x = aref.load(X, (pid, 0), (128, 128)).to(aref.float32)
    a = aref.exp2(x)
    b = aref.exp2(a * x)
    aref.store(Y, (pid, 0), (a * b + x * b + a).to(Y.dtype))      # x, a and b live at once: 3 x 128


def test_register_refusal_is_recorded_by_the_lowering():
    """Needs beyond what a warp group can be given are the resource model's refusal, recorded at the lowering
    (so the optimal partitioner can solve again under a tighter cap) and raised by the backend, naming the
    kernel's line — not a backend failure."""
    from aref.backend.cute import generate_source
    args = dict(X=torch.zeros(256, 128, dtype=torch.float16), Y=torch.zeros(256, 128, dtype=torch.float16))
    ws = lower_to(_three_live_tiles.specialize(**args), "barrier", CompileOptions(arch="sm_100a"))
    assert isinstance(ws.resource_error, ResourceError) and ws.resource_error.excess > 0
    with pytest.raises(ResourceError) as err:
        generate_source(ws)
    assert "registers" in str(err.value) and err.value.loc is not None and err.value.loc.line > 0


@pytest.mark.parametrize("example, partition", [("gemm_epilogue", "heuristic"), ("gemm_epilogue", "optimal"),
                                                ("attention_causal", "optimal")])
def test_barrier_ir_simulates_equal_to_the_reference(example, partition):
    ex = load_example(example_path(example))
    inputs = ex.inputs()
    ws = sm100_ir(example, partition)
    report = check(ws, inputs, ex.reference_fn, seeds=4, tolerance=ex.tolerance(inputs))
    out = report.to_json()
    assert out["ok"], [str(v) for v in report.violations] or out
    assert out["deadlocks"] == 0


@aref.aref_kernel(grid=lambda X, BM, **_: (X.shape[0] // BM,))
def _column_vector_stores(X, W, Y, Z, V, *, BM: int = 128, BN: int = 64):
    pid = aref.program_id(0)
    x = aref.load(X, (pid, 0), (BM, BN)).to(aref.float32)
    w = aref.load(W, (0,), (BN,)).to(aref.float32)
    w2 = aref.exp2(w) * 0.5
    aref.store(Y, (pid, 0), x * w2[None, :])
    aref.store(Z, (pid, 0), (w * 2.0)[None, :])           # a (1, C) register tile into a 2-D box
    aref.store(V, (pid, 0), w2)                           # a vector along the columns into a rank-1 box


def _column_vector_inputs(BM: int) -> dict:
    g = torch.Generator().manual_seed(0)
    return dict(X=torch.randn(256, 64, generator=g).half(), W=torch.randn(64, generator=g).half(),
                Y=torch.zeros(256, 64), Z=torch.zeros(256 // BM, 64), V=torch.zeros(256 // BM, 64), BM=BM)


@pytest.mark.parametrize("BM", [128, 64])
def test_column_vectors_are_stored_by_the_threads_of_row_zero(backend_cache, BM):
    """A (1, C) tile and a vector along the columns are held as the columns of each thread's row (C per thread
    at 128 rows, C/2 at 64), the same in every row: the threads of row 0 write the staging tile the TMA store
    reads. (They were written as if they were row tiles: a (1, C) tile's buffer held one element and its store
    copied rows, a rank-1 one wrote its first element at the thread's row.) The resource model counts C
    registers for both, the Barrier IR simulates as the interpreter and the torch reference compute, and the
    kernel compiles for sm_100a without spills."""
    from aref.backend.cute import compile_barrier
    from aref.interp.tile import run_kernel
    from aref.resources import tile_registers
    from aref.ir import DType, Space, TileType
    for shape in ((64,), (1, 64)):
        assert tile_registers(TileType(shape, DType.float32, Space.RMEM), "sm_100a", layout="col") == 64
    args = _column_vector_inputs(BM)
    kernel = _column_vector_stores.specialize(**args)
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a"))
    want = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    run_kernel(kernel, want)
    w = args["W"].float()
    assert torch.allclose(want["Z"], (w * 2).expand(256 // BM, 64))
    assert torch.allclose(want["V"], (torch.exp2(w) * 0.5).expand(256 // BM, 64))
    report = check(ws, args, lambda **_: {k: want[k] for k in "YZV"}, seeds=2)
    assert report.to_json()["ok"], [str(v) for v in report.violations]
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.arch == "sm_100a" and result.spill_bytes == 0, result.ptxas_log
    src = result.source_path.read_text()
    per_thread = 64 if BM == 128 else 32
    assert src.count(f"cute.make_rmem_tensor({per_thread}, cutlass.Float32)") >= 2
    assert f"sm100.cols_to_smem(col, s_Z_softmax0, {BM}, 64, 2, tidx" in src
    assert f"sm100.cols_to_smem(w2, s_V_softmax0, {BM}, 64, 1, tidx" in src


@aref.aref_kernel(grid=lambda A, B, BM, BN, **_: (A.shape[0] // BM, B.shape[0] // BN))
def _carried_column(A, B, CV, C, CS, *, BM: int = 128, BN: int = 64, BK: int = 64):
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    cv = aref.load(CV, (pid_n,), (BN,)).to(aref.float32)
    acc = aref.zeros((BM, BN), aref.float32)
    c = aref.zeros((BN,), aref.float32)
    for k in aref.range(A.shape[1] // BK):
        acc = aref.mma(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)).T, acc)
        c = c * 0.5 + aref.maximum(cv, c)
    aref.store(C, (pid_m, pid_n), (acc * c[None, :]).to(aref.float16))
    aref.store(CS, (pid_n,), c * cv, reduce="add")


@pytest.mark.parametrize("BM", [128, 64])
def test_column_vector_is_handed_to_the_storing_warp(backend_cache, BM):
    """A vector along the columns carried through the loop in the compute group and stored by the epilogue
    warp goes through a plain shared ring: the threads of row 0 write their columns (used to be refused: the
    Blackwell templates handed over row vectors only), and as the epilogue TMA-stores the slot itself, the
    writes are fenced for the async proxy before the arrive. Simulates as the interpreter and torch compute;
    compiles for sm_100a without spills."""
    from aref.backend.cute import compile_barrier
    from aref.interp.tile import run_kernel
    g = torch.Generator().manual_seed(0)
    r = lambda *s: (torch.randn(*s, generator=g) * 0.3).half()        # noqa: E731
    args = dict(A=r(256, 256), B=r(128, 256), CV=r(128), C=torch.zeros(256, 128, dtype=torch.float16),
                CS=torch.zeros(128), BM=BM)
    kernel = _carried_column.specialize(**args)
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a"))
    handed = [ch for ch in ws.channels if ch.payload[0].shape == (64,) and ch.payload[0].dtype.value == "f32"]
    assert handed, [ch.payload for ch in ws.channels]
    want = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    run_kernel(kernel, want)
    cv, c = args["CV"].float(), torch.zeros(128)
    for _ in range(4):
        c = c * 0.5 + torch.maximum(cv, c)
    assert torch.allclose(want["CS"], c * cv * (256 // BM), atol=1e-5)
    report = check(ws, args, lambda **_: {k: want[k] for k in ("C", "CS")}, seeds=2)
    assert report.to_json()["ok"], [str(v) for v in report.violations]
    result = compile_barrier(ws, cache_dir=backend_cache)
    assert result.arch == "sm_100a" and result.spill_bytes == 0, result.ptxas_log
    src = result.source_path.read_text()
    ring = f"s_{handed[0].name.replace('.', '_')}_v0"
    write = re.search(rf"if crd{BM}\[0\]\[0\] == 0:  # row 0's threads write the vector\n"
                      rf"\s+for c in cutlass.range_constexpr\({64 if BM == 128 else 32}\):\n"
                      rf"\s+{ring}\[crd{BM}\[c\]\[1\], \w+\] = \w+\[c\]\n"
                      rf"\s+cute.arch.fence_proxy\(\"async.shared\", space=\"cta\"\)", src)
    assert write, src
