"""The general programs (`tests/backend/general_programs.py`) on Blackwell, with both partitioners: each runs in
the simulator as the torch reference says, with no violation, and compiles for sm_100a with no spills — or is
refused by the one rule listed in REFUSED, whose message is checked. Plus a program whose optimal partition
keeps the MMAs and a transpose of their result in one warp group: an fp8 e5m2 product stored transposed."""
import pytest
import torch

import aref
from aref import aref_kernel
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.errors import ArefError
from aref.sim import simulate
from tests.backend.general_programs import PROGRAMS, inputs

# (program, partition) -> (error class, what its message says): Blackwell's row layout holds a 128-row tile's
# whole row in one thread, and its epilogue stores with TMA only
REFUSED = {
    **{("gemm_epilogue_mix", p): ("ResourceError", "registers per thread") for p in ("heuristic", "optimal")},
    **{("rowwise_softmax", p): ("ResourceError", "registers per thread") for p in ("heuristic", "optimal")},
    **{("sliced_halves", p): ("ResourceError", "registers per thread") for p in ("heuristic", "optimal")},
    ("row_stats_columns", "heuristic"): ("BackendError", "cannot be written by a TMA store"),
    # no loop to schedule: the optimal partitioner keeps the heuristic's program, refused by the same rule
    ("row_stats_columns", "optimal"): ("BackendError", "cannot be written by a TMA store"),
}
TOLERANCE = {"rowwise_softmax": 2e-2, "gemm_epilogue_mix": 2e-2, "blockscale_gemm": 5e-3, "colscale_gemm": 5e-3}


@aref_kernel(grid=lambda A, B, BM, BN, **_: (-(-A.shape[0] // BM), -(-B.shape[0] // BN)))
def transposed_fp8(A, B, CT, SQ, *, BM: int = 128, BN: int = 64, BK: int = 128):
    """Cᵀ = (A·Bᵀ)ᵀ in fp16 from fp8 e5m2 operands on two rings of different depth, and each A row's sum of
    squares added into SQ per N block (a reduce-add vector store)."""
    pm, pn = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    sq = aref.zeros((BM,), aref.float32)
    ac = aref.channel(depth=3)
    bc = aref.channel(depth=2)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        ac.put(aref.load(A, (pm, k), (BM, BK)))
        bc.put(aref.load(B, (pn, k), (BN, BK)))
        a = ac.get()
        b = bc.get()
        acc = aref.mma(a, b.T, acc)
        af = a.to(aref.float32)
        sq = sq + (af * af).sum(1)
        ac.consumed()
        bc.consumed()
    aref.store(CT, (pn, pm), acc.T.to(CT.dtype))
    aref.store(SQ, (pm,), sq, reduce="add")


def _transposed_fp8_inputs():
    g = torch.Generator().manual_seed(1)
    A = (torch.randn(256, 384, generator=g) / 4).to(torch.float8_e5m2)
    B = (torch.randn(192, 384, generator=g) / 4).to(torch.float8_e5m2)
    return {"A": A, "B": B, "CT": torch.zeros(192, 256, dtype=torch.float16), "SQ": torch.zeros(256)}


def _transposed_fp8_reference(A, B, CT, SQ, **_):
    c = A.float() @ B.float().T
    return {"CT": c.T.half(), "SQ": SQ + 3 * (A.float() ** 2).sum(1)}     # three N blocks add into SQ


CASES = {**PROGRAMS, "transposed_fp8": (transposed_fp8, _transposed_fp8_reference)}


def _inputs(name):
    return _transposed_fp8_inputs() if name == "transposed_fp8" else inputs(name)


def _copy(args: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}


@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_general_program_on_sm100a(backend_cache, name, partition):
    from aref.backend.cute import compile_barrier
    kernel, reference = CASES[name]
    args = _inputs(name)
    refused = REFUSED.get((name, partition))
    try:
        ws = lower_to(kernel.specialize(**args), "barrier",
                      CompileOptions(arch="sm_100a", partition=partition, solver_time_limit=60.0))
        sim = _copy(args)
        result = simulate(ws, sim, seed=3)
        assert not result.violations, [str(v) for v in result.violations]
        for key, want in reference(**args).items():
            err = (sim[key].float() - want.float()).abs().max().item()
            assert err <= TOLERANCE.get(name, 1e-2) * max(1.0, want.float().abs().max().item()), (key, err)
        compiled = compile_barrier(ws, cache_dir=backend_cache)
    except ArefError as err:
        assert refused is not None, f"{name} ({partition}) refused: {err}"
        assert type(err).__name__ == refused[0] and refused[1] in str(err), str(err)
        assert "bug in aref" not in str(err)
        return
    assert refused is None, f"{name} ({partition}) compiles now: remove it from REFUSED"
    assert compiled.spill_bytes == 0, compiled.ptxas_log
    if name in ("transposed_fp8", "transposed_output"):      # the transpose goes through the exchange tile
        src = compiled.source_path.read_text()
        assert "through the exchange tile" in src and "sm100.tmem_load" in src
