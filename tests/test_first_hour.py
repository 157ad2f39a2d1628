"""A user's first hour: mistakes a Triton user makes and the hints that fix them. Each error names the user's
line (marked `# <-` in this file) and says what would fix the mistake, not what would only move it."""
import inspect

import pytest
import torch

import aref
from aref import aref_kernel
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.errors import ArefError, ArefSyntaxError, ArefTypeError
from aref.interp.tile import run_kernel

THIS_FILE = __file__
A = torch.randn(128, 512, generator=torch.Generator().manual_seed(0)).half()
B = torch.randn(128, 512, generator=torch.Generator().manual_seed(1)).half()
C = torch.zeros(128, 128, dtype=torch.float16)


def marked_line(fn, marker="# <-") -> int:
    lines, first = inspect.getsourcelines(getattr(fn, "fn", fn))
    hits = [first + i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, f"{fn} must mark exactly one line"
    return hits[0]


def expect_error(err: ArefError, kernel, words, absent=()):
    """`err` names the marked line of `kernel`, shows it, and its text has `words` and none of `absent`."""
    text = err.render()
    assert (err.loc.file, err.loc.line) == (THIS_FILE, marked_line(kernel)), text
    src = inspect.getsourcelines(kernel.fn)[0][err.loc.line - kernel.fn.__code__.co_firstlineno].strip()
    assert src in text and "^" in text
    for w in words:
        assert w in text, (w, text)
    for w in absent:
        assert w not in text, (w, text)
    return text


# ------------------------------------------------------------------------------------- Python loops
@aref_kernel(grid=(1,))
def triton_style_gemm(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    acc = aref.zeros((BM, BN), aref.float32)
    K = A.shape[1]
    for k in range(K // BK):  # <-
        a = aref.load(A, (0, k), (BM, BK))
        b = aref.load(B, (0, k), (BN, BK))
        acc = aref.mma(a, b.T, acc)
    aref.store(C, (0, 0), acc.to(C.dtype))


def test_a_python_loop_over_a_shape_that_loads_is_the_pipelined_loop():
    """The Triton habit: `for k in range(K // BK)` around loads unrolls one copy per trip (128 rings at
    K = 4096, refused by shared memory at the decorator line); refused at the loop, naming aref.range."""
    with pytest.raises(ArefSyntaxError) as info:
        triton_style_gemm.specialize(A, B, C)
    expect_error(info.value, triton_style_gemm,
                 ["this Python `for` loop loads a tile on every trip", "trip count comes from tensor shapes",
                  "(8 trips here)", "use aref.range(...) for the pipelined loop", "`for k in aref.range(K // BK):`"])


@aref_kernel(grid=(1,))
def python_loop_with_a_channel(A, B, C, *, BM: int = 128, BK: int = 64, NK: int = 4):
    acc = aref.zeros((BM, BM), aref.float32)
    ab = aref.channel(depth=2)
    a = aref.load(A, (0, 0), (BM, BK))
    for k in range(NK):  # <-
        ab.put(a)
        t = ab.get()
        acc = aref.mma(t, t.T, acc)
        ab.consumed()
    aref.store(C, (0, 0), acc.to(C.dtype))


def test_a_python_loop_that_puts_into_a_channel_names_the_loop():
    with pytest.raises(ArefSyntaxError) as info:
        python_loop_with_a_channel.specialize(A, B, C)
    expect_error(info.value, python_loop_with_a_channel,
                 ["uses channel 'ab' (ab.put on line", "(4 trips here)", "`for k in aref.range(NK):`"],
                 absent=["tensor shapes"])


@aref_kernel(grid=(1,))
def constant_trip_python_loop(A, B, C, *, BM: int = 128, BK: int = 64, NK: int = 8):
    acc = aref.zeros((BM, BM), aref.float32)
    for k in range(NK):  # <-
        a = aref.load(A, (0, k), (BM, BK))
        acc = aref.mma(a, a.T, acc)
    aref.store(C, (0, 0), acc.to(C.dtype))


def test_an_unrolled_loop_that_cannot_fit_is_refused_at_the_loop_not_the_decorator():
    """A constant trip count is a legitimate unroll while its tiles fit (8 here); 64 of them do not fit
    shared memory, and the refusal names the Python loop and aref.range instead of the decorator."""
    small = constant_trip_python_loop.specialize(A, B, C)
    out = {"A": A, "B": B, "C": C.clone()}
    run_kernel(small, out)
    want = (A[:, :512].float() @ A[:, :512].float().T).half()
    assert torch.allclose(out["C"].float(), want.float(), atol=0.5, rtol=1e-2)
    from aref.backend.cute import generate_source
    assert lower_to(small, "barrier", CompileOptions(arch="sm_90a")).resource_error is None
    big_a = torch.zeros(128, 4096, dtype=torch.float16)
    kernel = constant_trip_python_loop.specialize(big_a, B, C, NK=64)
    with pytest.raises(ArefError) as info:
        generate_source(lower_to(kernel, "barrier", CompileOptions(arch="sm_90a")))
    text = expect_error(info.value, constant_trip_python_loop,
                        ["exceeds the 232448 B per-CTA limit", "64 of the rings", "and 56 more",
                         "Python `for` loop on line", "use aref.range(...) for the pipelined loop"])
    assert text.count(".x: ") <= 8, text                 # the ring list stays readable


@aref_kernel(grid=(1,))
def loop_over_tensors(A, B, C, *, BM: int = 128):
    total = aref.zeros((BM, BM), aref.float32)
    for t in (A, B):                       # two trips whatever the sizes: a static unroll
        total = total + aref.load(t, (0, 0), (BM, BM)).to(aref.float32)
    aref.store(C, (0, 0), total.to(C.dtype))


def test_a_loop_over_tensors_or_constants_is_a_static_unroll():
    out = {"A": A, "B": B, "C": C.clone()}
    run_kernel(loop_over_tensors.specialize(A, B, C), out)
    assert torch.equal(out["C"], (A[:, :128].float() + B[:, :128].float()).half())


def test_static_unrolls_keep_working():
    """attention_fwd unrolls over its sub-tiles (a comprehension of loads before the loop, a Python loop
    inside it): both are loops over compile-time constants and stay as they are."""
    from aref.runtime.harness import load_example, run_interpreter
    ex = load_example("examples/attention_fwd.py")
    assert run_interpreter(ex, ex.inputs()).ok


# ------------------------------------------------------------------------------------------- hints
@aref_kernel(grid=(1,))
def mma_k_mismatch_with_transpose(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64, BKB: int = 32):
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ab.put(aref.load(A, (0, k), (BM, BK)), aref.load(B, (0, k), (BN, BKB)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)  # <-
        ab.consumed()
    aref.store(C, (0, 0), acc.to(C.dtype))


def test_mma_with_b_already_transposed_does_not_suggest_b_T():
    with pytest.raises(ArefTypeError) as info:
        mma_k_mismatch_with_transpose.specialize(A, B, C)
    err = info.value
    text = expect_error(err, mma_k_mismatch_with_transpose,
                        ["a is 128x64 and b is 32x128", "b is already a transposed view",
                         "a's columns (64) and b's rows (32)", "same K tile size"],
                        absent=["pass the transposed view"])
    # the notes point at the loads that set both shapes
    load_line = marked_line(mma_k_mismatch_with_transpose) - 2
    assert [(loc.line, "tile shape 128x64" in note or "tile shape 128x32" in note) for note, loc in err.notes] \
        == [(load_line, True), (load_line, True)], text


@aref_kernel(grid=(1,))
def loop_index_after_the_loop(A, B, C, *, BM: int = 128, BK: int = 64):
    acc = aref.zeros((BM, BM), aref.float32)
    k = 0
    for k in aref.range(A.shape[1] // BK):
        acc = acc + aref.load(A, (0, k), (BM, BK)).to(aref.float32).sum(1)[:, None]
    aref.store(C, (0, 0), (acc / (k + 1)).to(C.dtype))  # <-


def test_the_loop_index_after_the_loop_gives_the_rule_not_a_value_before_it():
    """Giving `k` a value before the loop (what the old hint said) does not help: the hint says the real
    rule, the trip count, with the loop's own bound."""
    with pytest.raises(ArefSyntaxError) as info:
        loop_index_after_the_loop.specialize(A, B, C)
    expect_error(info.value, loop_index_after_the_loop,
                 ["'k' is the index of the aref.range loop", "the last index is `(A.shape[1] // BK) - 1`",
                  "the loop replaces it"], absent=["give 'k' a value before the loop"])


@aref_kernel(grid=(1,))
def masks_multiplied(A, B, C, *, BM: int = 128):
    x = aref.load(A, (0, 0), (BM, BM)).to(aref.float32)
    y = aref.load(B, (0, 0), (BM, BM)).to(aref.float32)
    rows, cols = aref.arange(BM)[:, None], aref.arange(BM)[None, :]
    keep = (rows >= cols) * (x > 0)
    aref.store(C, (0, 0), aref.where(keep, y, 0.0).to(C.dtype))


@aref_kernel(grid=(1,))
def mask_times_tile(A, B, C, *, BM: int = 128):
    x = aref.load(A, (0, 0), (BM, BM)).to(aref.float32)
    aref.store(C, (0, 0), ((x > 0) * x).to(C.dtype))  # <-


def test_two_masks_multiply_as_logical_and_and_a_mask_times_a_tile_names_where():
    a, b = A[:, :128].contiguous(), B[:, :128].contiguous()
    kernel = masks_multiplied.specialize(a, b, C)
    out = {"A": a, "B": b, "C": C.clone()}
    run_kernel(kernel, out)
    rows, cols = torch.arange(128)[:, None], torch.arange(128)[None, :]
    assert torch.equal(out["C"], torch.where((rows >= cols) & (a > 0), b, torch.zeros_like(b)))
    from aref import sim
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_90a"))
    got = {"A": a, "B": b, "C": C.clone()}
    assert not sim.simulate(ws, got, seed=3).violations and torch.equal(got["C"], out["C"])
    with pytest.raises(ArefTypeError) as info:
        mask_times_tile.specialize(a, b, C)
    expect_error(info.value, mask_times_tile, ["`*` of a mask", "aref.where(mask, x, 0.0)", "`&`"])


@aref_kernel
def gemm_96(A, B, C, *, BM: int = 96, BN: int = 96, BK: int = 64):
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)  # <-
        ab.consumed()
    aref.store(C, (pid_m, pid_n), acc.to(C.dtype))


@pytest.mark.parametrize("arch, rule", [("sm_90a", "M = 96 (a's rows) is not a multiple of 64"),
                                        ("sm_100a", "M = 96 (a's rows) is neither 64 nor 128")])
def test_a_96_tile_runs_in_the_interpreter_and_the_refusal_points_at_where_the_sizes_are_set(arch, rule):
    from aref.backend.cute import generate_source
    a, b, c = torch.randn(192, 256).half(), torch.randn(192, 256).half(), torch.zeros(192, 192).half()
    kernel = gemm_96.specialize(a, b, c)
    out = {"A": a, "B": b, "C": c.clone()}
    run_kernel(kernel, out)
    assert torch.allclose(out["C"].float(), a.float() @ b.float().T, atol=0.25, rtol=1e-2)
    with pytest.raises(ArefError) as info:
        generate_source(lower_to(kernel, "barrier", CompileOptions(arch=arch)))
    err = info.value
    expect_error(err, gemm_96, [rule, "change the tile sizes where they are set (BM = 96)"], absent=["BN = 96"])
    load_line = marked_line(gemm_96) - 2
    assert [loc.line for _, loc in err.notes] == [load_line, load_line]
    assert "tile shape 96×64" in err.notes[0][0] and err.notes[0][1].col < err.notes[1][1].col


# ------------------------------------------------------------------------------------------- powers
@aref_kernel(grid=(1,))
def powers(A, B, C, *, BM: int = 128):
    x = aref.load(A, (0, 0), (BM, BM)).to(aref.float32)
    y = aref.load(B, (0, 0), (BM, BM)).to(aref.float32)
    aref.store(C, (0, 0), (x ** 2 + x ** 3 + aref.abs(y) ** 0.5 + 2 ** aref.tanh(y)).to(C.dtype))


@aref_kernel(grid=(1,))
def integer_inverse(A, B, C, *, BM: int = 128):
    i = aref.arange(BM)[:, None] + aref.zeros((BM, BM), aref.int32)
    aref.store(C, (0, 0), (i ** -1).to(C.dtype))  # <-


def test_powers_follow_torch_and_integer_inverses_are_refused():
    a, b = A[:, :128].contiguous(), B[:, :128].contiguous()
    out = {"A": a, "B": b, "C": C.clone()}
    run_kernel(powers.specialize(a, b, C), out)
    x, y = a.float(), b.float()
    want = x ** 2 + x ** 3 + y.abs() ** 0.5 + 2 ** torch.tanh(y)
    assert torch.allclose(out["C"].float(), want.half().float(), atol=1e-2, rtol=2e-3)
    with pytest.raises(ArefTypeError) as info:
        integer_inverse.specialize(a, b, C)
    expect_error(info.value, integer_inverse, ["integer tile to the negative power -1", "x.to(aref.float32) ** -1"])


def test_a_register_refusal_does_not_suggest_cooperative_consumers_that_were_tried():
    """Linear attention at D = 128 on Hopper: its D×D float32 state (128 registers a thread) is carried whole by
    every consumer, so the cooperative split the compile search tries after the plain partition is refused too.
    The hint then says so and why, instead of advising the split (issue 31)."""
    from aref.runtime.harness import load_example
    from example_paths import example_path
    ex = load_example(example_path("linear_attention"))
    kernel = ex.kernel.specialize(**ex.inputs("small", D=128))
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_90a"))
    err = ws.resource_error
    assert err is not None and "state" in err.message
    assert "split the rows over cooperative" not in err.hint and "more consumer groups" not in err.hint
    assert "cooperative consumer groups were tried and do not fit either" in err.hint
