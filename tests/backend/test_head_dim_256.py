"""Attention forward at head dim 256 (FA3's fastest configuration), non-causal and causal, fp16 and bf16,
with a ragged last key block, on both archs and both partitions: interpreter == torch reference, simulator ==
interpreter, and the CuTe DSL compile has no spills. What makes it fit: on sm_90a a store after the loop
stages O in Q's slot, dead by then (`aref.lower.reuse`), and the drain steps of the pipelined loop no longer
hold O beside O·α (`pipeline.expand`); on sm_100a the correction group rescales O in tensor memory column
chunk by chunk (`aref.lower.chunk_sm100`). The optimal partition may keep the heuristic's program, and then
says why (`WSKernel.fallback`)."""
import pytest
import torch

from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.interp.tile import run_kernel
from aref.runtime.harness import load_example
from aref.sim import simulate

# keys not a multiple of the 64-key block: the last block is masked (causal: keys = queries)
CASES = {"attention_fwd": {"Sq": 128, "Sk": 200}, "attention_causal": {"Sq": 200}}


def _copy(args):
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}


@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("example", sorted(CASES))
def test_head_dim_256_runs_and_compiles_without_spills(backend_cache, example, dtype, arch, partition):
    from aref.backend.cute import compile_barrier
    ex = load_example(f"examples/{example}.py")
    extra = {"arch": arch} if example == "attention_fwd" else {}
    args = ex.inputs("small", BH=1, D=256, dtype=dtype, **CASES[example], **extra)
    tile_ir = ex.kernel.specialize(**args)
    interp = _copy(args)
    run_kernel(tile_ir, interp)
    for key, want in ex.reference(**args).items():
        err = (interp[key].float() - want.float()).abs().max().item()
        assert err <= 2e-2 * max(1.0, want.float().abs().max().item()), (key, err)
    ws = lower_to(tile_ir, "barrier", CompileOptions(arch=arch, partition=partition, solver_time_limit=20,
                                                     timing_guard=True))
    assert ws.resource_error is None, ws.resource_error.render()
    if partition == "optimal" and ws.fallback is not None:
        # the heuristic's program kept, with the solver's reason (a refusal or a slower schedule)
        assert "heuristic's program" in ws.fallback, ws.fallback
    result = simulate(ws, (sim := _copy(args)), seed=1)
    assert not result.violations, [str(v) for v in result.violations]
    for key in ex.reference(**args):
        assert torch.equal(sim[key], interp[key]), key
    compiled = compile_barrier(ws, cache_dir=backend_cache)
    assert compiled.spill_bytes == 0, compiled.ptxas_log
    mma = "wgmma.mma_async" if arch == "sm_90a" else "tcgen05.mma"
    assert compiled.instructions[mma] > 0
