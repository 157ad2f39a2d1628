"""Blackwell register holding: one register model for the sm_100a lowering, the optimal partitioner's retry and
the backend, and vectors along the columns read from shared memory instead of being copied into every thread.

In tcgen05's 32x32b row layout a thread holds a whole row, so a vector broadcast over the rows (a bias
`b[None, :]`) would take a register per column in every thread: 128 beside a 128-column accumulator's 128.
It stays in the slot it arrived in, which the partition holds until the vector's last reader, and the role
reads it there element by element (all threads read one address: a broadcast)."""
import pytest
import torch

import aref
from aref.compiler import CompileOptions, lower_to
from aref.ir import OpKind
from aref.resources import REGISTERS_PER_SM, ResourceError, register_demand
from aref.sim import check
from aref.harness import load_example
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
