"""FP8 accumulator promotion (`CompileOptions.promote_every`, `aref.passes.promote`): the rewritten Tile IR (golden
text, and the same ops a user writes by hand), the interpreter and simulator against the torch reference at
trip counts that are and are not multiples of N, the error it removes under an emulated wgmma accumulator,
the refusals at the user's line, sm_100a leaving the program alone, and the tuner ranking the option."""
import inspect

import pytest
import torch
from example_paths import example_path

import aref
from aref import aref_kernel
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.errors import ArefError
from aref.runtime.harness import compare, load_example
from aref.interp.tile import run_kernel
from aref.ir import OpKind
from aref.ir.printer import print_kernel

GEMM = load_example(example_path("gemm"))


def fp8_gemm(K=448, BK=64, **kw):
    ins = GEMM.inputs("small", K=K, dtype="float8_e4m3", BK=BK, **kw)
    return ins, GEMM.kernel.specialize(**ins)


def promoted(kernel, every, arch="sm_90a"):
    return lower_to(kernel, "promoted", CompileOptions(arch=arch, promote_every=every))


def interpreted(kernel, ins):
    out = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in ins.items()}
    run_kernel(kernel, out)
    return out


@aref_kernel
def hand_promoted(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64, N: int = 3):
    """What `promote_every=N` makes of examples/gemm.py, written by hand in the DSL."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=5)
    part = aref.zeros((BM, BN), aref.float32)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        part = aref.mma(a, b.T, part)
        ab.consumed()
        last = k % N == N - 1
        acc = aref.where(last, acc + part, acc)
        part = aref.where(last, 0.0, part)
    aref.store(C, (pid_m, pid_n), (acc + part).to(C.dtype))


def test_promoted_tile_ir_golden_and_structure(golden):
    ins, kernel = fp8_gemm()
    before = print_kernel(kernel)
    out = promoted(kernel, 3)
    golden("promoted/gemm_fp8_every3.txt", print_kernel(out))
    assert print_kernel(kernel) == before                       # a pure pass: the input is left as it was
    lp = out.loop
    assert len(lp.carried) == len(kernel.loop.carried) + 1      # the partial sum is carried beside acc
    (mma,) = [op for op in lp.body.ops if op.kind is OpKind.MMA]
    part_in = lp.carried[-1]
    assert mma.operands[2] is part_in and lp.inits[-1] in [op.result for op in out.pre.ops if op.kind is OpKind.FULL]
    by_result = {r: op for op in lp.body.ops for r in op.results}
    acc_next = by_result[lp.yields[0]]                          # acc = where(k % 3 == 2, acc + part, acc)
    assert acc_next.kind is OpKind.WHERE and acc_next.operands[2] is lp.carried[0]
    add = by_result[acc_next.operands[1]]
    assert add.kind is OpKind.BINARY and add.attrs.fn == "add" and add.operands == (lp.carried[0], mma.result)
    cond = by_result[acc_next.operands[0]]
    mod = by_result[cond.operands[0]]
    assert cond.attrs.fn == "eq" and mod.attrs.fn == "mod" and mod.operands[0] is lp.iv
    assert [by_result[v].attrs.value for v in (mod.operands[1], cond.operands[1])] == [3, 2]
    part_next = by_result[lp.yields[-1]]                        # part = where(k % 3 == 2, 0.0, part)
    assert part_next.kind is OpKind.WHERE and part_next.operands[0] is cond.result
    assert part_next.operands[2] is mma.result and by_result[part_next.operands[1]].attrs.value == 0.0
    tail = out.post.ops[0]                                      # the ragged tail: acc + part after the loop
    assert tail.kind is OpKind.BINARY and tail.operands == (lp.results[0], lp.results[-1])
    assert out.post.ops[1].operands[0] is tail.result
    assert promoted(kernel, 0) is kernel


def test_the_pass_writes_what_a_user_would():
    ins, kernel = fp8_gemm()
    hand = hand_promoted.specialize(**ins)

    def kinds(k):
        return [sorted(op.kind.value for op in block) for _, block in k.blocks()]
    assert kinds(promoted(kernel, 3)) == kinds(hand)
    assert torch.equal(interpreted(promoted(kernel, 3), ins)["C"], interpreted(hand, ins)["C"])


@pytest.mark.parametrize("K", [0, 64, 256, 320, 200, 576])
def test_interpreter_matches_the_reference_at_ragged_trip_counts(K):
    """Trip counts 0, 1, 4 (= N), 5, 4 over a ragged K (200 = 3·64 + 8) and 9 with N = 4."""
    ins, kernel = fp8_gemm(K=K)
    out = interpreted(promoted(kernel, 4), ins)
    expected = GEMM.reference_fn(**ins)
    assert compare(out, expected, GEMM.tolerance(ins)).ok
    assert torch.equal(out["C"], interpreted(kernel, ins)["C"])   # fp32 MMAs: the same sums, the same order


def _wgmma_fp8(a, b, acc):
    """acc + a·b as Hopper's fp8 wgmma sums (`aref.precision`): each 32-wide k-step's products exactly, then
    added to an accumulator that keeps 14 significant bits, truncating."""
    a, b, acc = a.double(), b.double(), acc.double()
    for k in range(0, a.shape[1], 32):
        acc = acc + a[:, k:k + 32] @ b[k:k + 32]
        m, e = torch.frexp(acc)
        acc = torch.ldexp(torch.trunc(m * 2 ** 14) / 2 ** 14, e)
    return acc.float()


def test_promotion_removes_the_emulated_accumulator_error(monkeypatch):
    """With the interpreter's MMA summing as wgmma does for fp8, K = 4096 loses ~1e-3 of the output's
    magnitude; promoting every 4 k-tiles (512 products) into fp32 keeps a small fraction of that error."""
    import aref.ops
    exact = aref.ops.interpret

    def hopper(op, vals, cta):
        if op.kind is OpKind.MMA and vals[0].dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            return _wgmma_fp8(vals[0].float(), vals[1].float(), vals[2])
        return exact(op, vals, cta)

    monkeypatch.setattr(aref.ops, "interpret", hopper)
    ins, kernel = fp8_gemm(K=4096, BK=128, M=128, N=128)
    ref = GEMM.reference_fn(**ins)["C"].float()

    def rel(k):
        return float((interpreted(k, ins)["C"].float() - ref).abs().max() / ref.abs().max())
    plain, every4 = rel(kernel), rel(promoted(kernel, 4))
    assert 5e-4 < plain and every4 < plain / 4, (plain, every4)


@pytest.mark.parametrize("consumers,BN", [("auto", 128), ("plain", 64)])   # plain: acc and part in one group
def test_simulator_agrees_with_the_reference(consumers, BN):
    from aref.sim.run import check
    ins, kernel = fp8_gemm(K=448, BN=BN)                        # 7 k-tiles: two promotions and a tail of 1
    ws = lower_to(kernel, "barrier", CompileOptions(promote_every=3, consumers=consumers))
    assert ws.resource_error is None
    kinds = [op.kind for gp in ws.groups for op in gp.all_ops()]
    assert kinds.count(OpKind.WHERE) == 2 * sum(OpKind.MMA_ASYNC in [o.kind for o in gp.all_ops()]
                                                for gp in ws.groups)
    report = check(ws, ins, GEMM.reference_fn, seeds=3, tolerance=GEMM.tolerance(ins))
    assert report.ok, report.violations



def test_the_optimal_partition_of_a_promoted_gemm_agrees_with_the_reference():
    from aref.sim.run import check
    ins, kernel = fp8_gemm(K=448)
    ws = lower_to(kernel, "barrier", CompileOptions(promote_every=3, partition="optimal", solver_time_limit=30))
    assert ws.resource_error is None and any(op.kind is OpKind.WHERE for gp in ws.groups for op in gp.all_ops())
    report = check(ws, ins, GEMM.reference_fn, seeds=2, tolerance=GEMM.tolerance(ins))
    assert report.ok, report.violations


DUAL = load_example(example_path("dual_gemm"))


def fp8_dual_gemm():
    g = torch.Generator().manual_seed(0)
    A, B0, B1 = ((torch.randn(128, 320, generator=g) * 0.5).to(torch.float8_e4m3fn) for _ in range(3))
    ins = dict(A=A, B0=B0, B1=B1, C=torch.zeros(128, 128, dtype=torch.float16), BN=64)
    return ins, DUAL.kernel.specialize(**ins)


def dual_reference(A, B0, B1, C, **_):
    gate, up = A.float() @ B0.float().T, A.float() @ B1.float().T
    return {"C": (gate / (1 + torch.exp(-gate)) * up).to(C.dtype)}


def test_two_fp8_accumulators_share_one_promotion_step():
    """dual_gemm's gate and up accumulators (5 k-tiles, N = 2: two promotions and a tail of one k-tile)."""
    from aref.sim.run import check
    ins, kernel = fp8_dual_gemm()
    out = promoted(kernel, 2)
    body = [op.kind for op in out.loop.body.ops]
    assert body.count(OpKind.COMPARE) == 1 and body.count(OpKind.WHERE) == 4 and len(out.loop.carried) == 4
    assert [op.kind for op in out.post.ops[:2]] == [OpKind.BINARY, OpKind.BINARY]
    tol = {"C": (1e-2, 1e-2)}
    assert compare(interpreted(out, ins), dual_reference(**ins), tol).ok
    ws = lower_to(kernel, "barrier", CompileOptions(promote_every=2))
    report = check(ws, ins, dual_reference, seeds=2, tolerance=tol)
    assert report.ok, report.violations

def test_sm100a_leaves_the_program_as_written():
    ins, kernel = fp8_gemm()
    assert promoted(kernel, 4, "sm_100a") is kernel
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a", promote_every=4))
    assert any("accumulates fp8 products in fp32 already" in n for n in ws.notes)
    assert not any(op.kind is OpKind.WHERE for gp in ws.groups for op in gp.all_ops())


# ------------------------------------------------------------------------------------------------ refusals
def _line(fn, marker="# <-"):
    lines, first = inspect.getsourcelines(getattr(fn, "fn", fn))
    (hit,) = [first + i for i, text in enumerate(lines) if marker in text]
    return hit


@aref_kernel
def reads_acc_in_loop(A, B, C, *, BK: int = 64):
    acc = aref.zeros((128, 128), aref.float32)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        acc = aref.mma(aref.load(A, (0, k), (128, BK)), aref.load(B, (0, k), (128, BK)).T, acc)  # <-
        aref.store(C, (0, 0), acc.to(C.dtype))
    aref.store(C, (0, 0), acc.to(C.dtype))


@aref_kernel
def no_loop(A, B, C):
    acc = aref.mma(aref.load(A, (0, 0), (128, 64)), aref.load(B, (0, 0), (128, 64)).T)  # <-
    aref.store(C, (0, 0), acc.to(C.dtype))


def _refusal(kernel, every, *words, arch="sm_90a"):
    with pytest.raises(ArefError) as info:
        lower_to(kernel, "barrier", CompileOptions(arch=arch, promote_every=every))
    text = info.value.render()
    for w in words:
        assert w in text, text
    return info.value


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_a_16_bit_gemm_is_refused_at_its_mma(arch):
    ins = GEMM.inputs("small", dtype="float16")
    err = _refusal(GEMM.kernel.specialize(**ins), 4, "promote_every=4", "not fp8", "f16", arch=arch)
    from example_paths import source_line
    assert err.loc.file.endswith("gemm.py")
    assert err.loc.line == source_line(example_path("gemm"), "acc = aref.mma(a, b.T, acc)")


def test_an_accumulator_read_inside_the_loop_is_refused():
    A8 = torch.zeros(128, 256, dtype=torch.float8_e4m3fn)
    C = torch.zeros(128, 128, dtype=torch.float16)
    err = _refusal(reads_acc_in_loop.specialize(A8, A8, C), 2, "the loop reads it at line",
                   f"line {_line(reads_acc_in_loop) + 1}")
    assert err.loc.line == _line(reads_acc_in_loop) and err.loc.file == __file__


def test_a_kernel_without_a_loop_is_refused():
    A8 = torch.zeros(128, 64, dtype=torch.float8_e4m3fn)
    err = _refusal(no_loop.specialize(A8, A8, torch.zeros(128, 128, dtype=torch.float16)), 2, "without a loop",
                   "this aref.mma runs once")
    assert err.loc.line == _line(no_loop)


@pytest.mark.parametrize("bad", [-1, 2.5, True])
def test_promote_every_must_be_a_count(bad):
    with pytest.raises(ArefError, match="promote_every must be an integer"):
        CompileOptions(promote_every=bad)


# ------------------------------------------------------------------------------------------------ the tuner
def test_the_tuner_ranks_promoted_candidates(tmp_path):
    from aref.tune import TuneOptions, tune
    from aref.tune.space import Config
    with torch.device("meta"):
        fp8 = {k: v for k, v in GEMM.inputs("large", dtype="float8_e4m3").items() if isinstance(v, torch.Tensor)}
        f16 = {k: v for k, v in GEMM.inputs("large").items() if isinstance(v, torch.Tensor)}
    cfg = Config.of({"BN": 128, "BK": 128, "STAGES": 4}, promote_every=4)
    assert cfg.unsupported() == [] and cfg.compile_options("sm_90a").promote_every == 4
    r = tune(GEMM.kernel, fp8, {}, [cfg, Config.of({"BN": 128, "BK": 128, "STAGES": 4})],
             TuneOptions(arch="sm_90a", cache_dir=tmp_path))
    assert all(c.status == "ok" and c.rank is not None for c in r.candidates), [c.reason for c in r.candidates]
    (cand,) = [c for c in r.candidates if c.config == cfg]
    assert sum(op.kind is OpKind.WHERE for gp in cand.ws.groups for op in gp.all_ops()) > 0
    r16 = tune(GEMM.kernel, f16, {}, [cfg], TuneOptions(arch="sm_90a", cache_dir=tmp_path))
    (c16,) = r16.candidates
    assert c16.status == "pruned" and c16.stage == "compiler" and "not fp8" in c16.reason


def test_the_command_line_prints_the_promoted_stage():
    import subprocess
    import sys

    from example_paths import ROOT
    cmd = [sys.executable, "-m", "aref", "ir", "examples/gemm.py", "--set", "dtype=float8_e4m3", "--stage",
           "promoted", "--promote-every", "4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "%promote = compare" in proc.stdout and proc.stdout.count("= where %promote") == 2
    proc = subprocess.run(cmd[:5] + cmd[7:], capture_output=True, text=True, cwd=ROOT)      # float16
    assert proc.returncode != 0 and "not fp8" in proc.stdout + proc.stderr
