"""`aref.passes.acc_init`: on Blackwell an accumulator that starts from a computed tile (β·C) starts from zeros, and
that tile is added after the loop — computed there, by the ops that made it before the loop. Before this, both
partitioners' programs were a compiler bug on sm_100a ("group mma uses %acc, which it neither computes nor
receives")."""
import pytest
import torch

import aref
from aref import aref_kernel
from aref.passes.acc_init import hoist_accumulator_init
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.interp.tile import run_kernel
from aref.ir import OpKind
from aref.ir.printer import print_kernel
from aref.sim import simulate


def _beta_gemm(in_place: bool):
    @aref_kernel(grid=lambda A, B, BM, BN, **_: (-(-A.shape[0] // BM), -(-B.shape[0] // BN)))
    def beta_gemm(A, B, C, D, *, BM: int = 128, BN: int = 64, BK: int = 64, beta: float = 2.0):
        pm, pn = aref.program_id(0), aref.program_id(1)
        acc = aref.load(C, (pm, pn), (BM, BN)).to(aref.float32) * beta
        ch = aref.channel(depth=3)
        for k in aref.range(aref.cdiv(A.shape[1], BK)):
            ch.put(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (pn, k), (BN, BK)))
            a, b = ch.get()
            if in_place:
                acc = aref.mma(a, b.T, acc)
            else:
                acc = acc + aref.mma(a, b.T)
            ch.consumed()
        aref.store(D, (pm, pn), aref.minimum(acc, 3.0).to(D.dtype))
    return beta_gemm


def _inputs():
    g = torch.Generator().manual_seed(0)
    return {"A": (torch.randn(192, 160, generator=g) / 6).half(), "B": (torch.randn(136, 160, generator=g) / 6).half(),
            "C": torch.randn(192, 136, generator=g).half(), "D": torch.zeros(192, 136, dtype=torch.float16)}


def _reference(A, B, C, D, beta=2.0, **_):
    return torch.clamp(A.float() @ B.float().T + beta * C.float(), max=3.0).half()


def test_the_rewrite_starts_from_zeros_and_adds_after_the_loop():
    args = _inputs()
    kernel = _beta_gemm(True).specialize(**args)
    out = hoist_accumulator_init(kernel)
    assert out is not kernel and kernel.pre.ops[-1].kind is not OpKind.FULL       # pure: a new kernel
    init = next(op for op in out.pre.ops if any(r is out.loop.inits[0] for r in op.results))
    assert init.kind is OpKind.FULL and init.attrs.value == 0.0
    kinds = [op.kind for op in out.post.ops if op.kind is not OpKind.CONST]
    # the load of C, its cast and scale moved after the loop, then the add, then the user's epilogue
    assert kinds[:4] == [OpKind.LOAD, OpKind.CAST, OpKind.BINARY, OpKind.BINARY]
    assert not any(op.kind is OpKind.LOAD for op in out.pre.ops)
    assert "add" in print_kernel(out).split("for ")[-1]
    got = dict(args)
    run_kernel(out, got)
    assert (got["D"].float() - _reference(**args).float()).abs().max() < 2e-2


def test_zero_starts_and_other_carried_values_are_left_alone():
    @aref_kernel
    def rescaled(A, B, C, *, BM: int = 64, BN: int = 64, BK: int = 64):
        pm, pn = aref.program_id(0), aref.program_id(1)
        acc = aref.zeros((BM, BN), aref.float32)
        run = aref.full((BM, BN), 1.0, aref.float32)
        ch = aref.channel(depth=2)
        for k in aref.range(A.shape[1] // BK):
            ch.put(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (pn, k), (BN, BK)))
            a, b = ch.get()
            acc = aref.mma(a, b.T, acc)
            run = run * 0.5 + aref.mma(a, b.T)        # not a sum of products: the start decays
            ch.consumed()
        aref.store(C, (pm, pn), (acc + run).to(C.dtype))
    args = {"A": torch.zeros(64, 128).half(), "B": torch.zeros(64, 128).half(), "C": torch.zeros(64, 64).half()}
    kernel = rescaled.specialize(**args)
    assert hoist_accumulator_init(kernel) is kernel


@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
@pytest.mark.parametrize("in_place", [True, False], ids=["mma_acc", "acc_plus_mma"])
def test_beta_gemm_runs_on_sm100a(in_place, partition):
    args = _inputs()
    ws = lower_to(_beta_gemm(in_place).specialize(**args), "barrier",
                  CompileOptions(arch="sm_100a", partition=partition))
    got = {k: v.clone() for k, v in args.items()}
    result = simulate(ws, got, seed=1)
    assert not result.violations, [str(v) for v in result.violations]
    assert (got["D"].float() - _reference(**args).float()).abs().max() < 2e-2
