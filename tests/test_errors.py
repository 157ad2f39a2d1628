"""The error catalogue: each user error names the user's file and line, shows the source with a caret, and
says what to change. The expected line of each case is marked in this file with a `# <-` comment."""
import inspect

import pytest
import torch

import aref
from aref import aref_kernel
from aref.errors import ArefError, ArefSyntaxError, ArefTypeError, ChannelError

THIS_FILE = __file__
A = torch.zeros(128, 128, dtype=torch.float16)
B = torch.zeros(128, 128, dtype=torch.float16)
C = torch.zeros(128, 128, dtype=torch.float16)


def marked_line(fn, marker="# <-") -> int:
    lines, first = inspect.getsourcelines(getattr(fn, "fn", fn))
    hits = [first + i for i, text in enumerate(lines) if marker in text]
    assert len(hits) == 1, f"{fn} must mark exactly one line"
    return hits[0]


def expect_error(kernel, err_type, words, *args, **kwargs):
    with pytest.raises(err_type) as info:
        kernel.specialize(*(args or (A, B, C)), **kwargs)
    err = info.value
    assert err.loc.file == THIS_FILE
    assert err.loc.line == marked_line(kernel), err.render()
    text = err.render()
    for w in words:
        assert w in text, text
    # the excerpt: the marked source line itself, then a caret line
    src = inspect.getsourcelines(kernel.fn)[0][err.loc.line - kernel.fn.__code__.co_firstlineno].strip()
    assert src in text and "^" in text
    assert f"{THIS_FILE}:{err.loc.line}" in text
    return err


# ----------------------------------------------------------------------------------- type errors
@aref_kernel(grid=(1,))
def mma_shape_mismatch(A, B, C, *, BM: int = 128, BK: int = 64):
    acc = aref.zeros((BM, BM), aref.float32)
    a = aref.load(A, (0, 0), (BM, BK))
    b = aref.load(B, (0, 0), (BM, BK))
    acc = aref.mma(a, b, acc)  # <-
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_mma_shape_mismatch():
    err = expect_error(mma_shape_mismatch, ArefTypeError, ["mma shape mismatch", "64", "128", "b.T"])
    assert err.hint


@aref_kernel(grid=(1,))
def bad_broadcast(A, B, C, *, BM: int = 128):
    x = aref.load(A, (0, 0), (BM, BM)).to(aref.float32)
    r = aref.rowsum(x)
    y = x - r[None, :][:, :] + aref.zeros((BM, 64))  # <-
    aref.store(C, (0, 0), y.to(aref.float16))


def test_incompatible_broadcast():
    expect_error(bad_broadcast, ArefTypeError, ["incompatible broadcast", "(128, 128)", "(128, 64)"])


@aref_kernel(grid=(1,))
def mma_on_float32(A, B, C, *, BM: int = 128):
    a = aref.load(A, (0, 0), (BM, BM)).to(aref.float32)
    acc = aref.mma(a, a.T)  # <-
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_dtype_not_supported_by_mma():
    expect_error(mma_on_float32, ArefTypeError, ["float32", "tensor core", "to(aref.float16)"])


def test_dtype_not_supported_for_tensor_argument():
    ints = torch.zeros(128, 128, dtype=torch.int64)
    with pytest.raises(ArefTypeError) as info:
        mma_on_float32.specialize(ints, B, C)  # <- the caller's line is named
    assert "dtype not supported" in str(info.value) and "torch.int64" in str(info.value)
    assert info.value.loc.file == THIS_FILE


@aref_kernel(grid=(1,))
def store_wrong_dtype(A, B, C, *, BM: int = 128):
    acc = aref.zeros((BM, BM), aref.float32)
    aref.store(C, (0, 0), acc)  # <-


def test_store_dtype_mismatch():
    expect_error(store_wrong_dtype, ArefTypeError, ["float32 tile into C", ".to(aref.float16)"])


@aref_kernel(grid=(1,))
def float_loop_bound(A, B, C, *, BK: int = 64):
    acc = aref.zeros((128, 128), aref.float32)
    for k in aref.range(A.shape[1] / BK):  # <-
        acc = acc + 1.0
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_loop_bound_not_an_integer():
    expect_error(float_loop_bound, ArefTypeError, ["loop bound must be an integer", "//"])


# -------------------------------------------------------------------------------- aref misuse
@aref_kernel(grid=(1,))
def get_without_put(A, B, C, *, BK: int = 64):
    acc = aref.zeros((128, 128), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(2):
        a = ab.get()  # <-
        acc = aref.mma(a, a.T, acc)
        ab.consumed()
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_get_without_any_put():
    expect_error(get_without_put, ChannelError, ["get on channel 'ab' before any put"])


@aref_kernel(grid=(1,))
def get_before_put_in_iteration(A, B, C, *, BK: int = 64):
    acc = aref.zeros((128, 128), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(2):
        a = ab.get()  # <-
        ab.put(aref.load(A, (0, k), (128, BK)))
        acc = aref.mma(a, a.T, acc)
        ab.consumed()
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_get_before_put_in_the_iteration():
    expect_error(get_before_put_in_iteration, ChannelError, ["get on channel 'ab' before any put"])


@aref_kernel(grid=(1,))
def consumed_without_get(A, B, C, *, BK: int = 64):
    acc = aref.zeros((128, 128), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(2):
        ab.put(aref.load(A, (0, k), (128, BK)))
        ab.consumed()  # <-
        a = ab.get()
        acc = aref.mma(a, a.T, acc)
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_consumed_without_get():
    expect_error(consumed_without_get, ChannelError, ["consumed() without a get", "ab.get()"])


@aref_kernel(grid=(1,))
def two_puts_depth_one(A, B, C, *, BK: int = 64):
    acc = aref.zeros((128, 128), aref.float32)
    ab = aref.channel(depth=1)
    for k in aref.range(2):
        ab.put(aref.load(A, (0, k), (128, BK)))
        ab.put(aref.load(B, (0, k), (128, BK)))  # <-
        a = ab.get()
        b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
        ab.consumed()
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_two_puts_into_depth_one_channel():
    err = expect_error(two_puts_depth_one, ChannelError, ["depth 1", "slots are taken", "depth=2"])
    assert "has not been consumed" in err.message


def test_two_puts_fit_a_depth_two_channel():
    """The same program with two slots is legal."""
    kernel = two_slots.specialize(A, B, C)
    assert [op.kind.value for op in kernel.loop.body.ops].count("put") == 2


@aref_kernel(grid=(1,))
def two_slots(A, B, C, *, BK: int = 64):
    acc = aref.zeros((128, 128), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(2):
        ab.put(aref.load(A, (0, k), (128, BK)))
        ab.put(aref.load(B, (0, k), (128, BK)))
        a = ab.get()
        b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
        ab.consumed()
    aref.store(C, (0, 0), acc.to(aref.float16))


@aref_kernel(grid=(1,))
def channel_outside_loop(A, B, C, *, BK: int = 64):
    ab = aref.channel(depth=2)
    ab.put(aref.load(A, (0, 0), (128, BK)))  # <-
    a = ab.get()
    aref.store(C, (0, 0), aref.mma(a, a.T).to(aref.float16))


def test_channel_used_outside_the_loop():
    expect_error(channel_outside_loop, ChannelError, ["before the loop", "use the tile directly"])


@aref_kernel(grid=(1,))
def use_after_consumed(A, B, C, *, BK: int = 64):
    acc = aref.zeros((128, 128), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(2):
        ab.put(aref.load(A, (0, k), (128, BK)))
        a = ab.get()
        ab.consumed()
        acc = aref.mma(a, a.T, acc)  # <-
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_use_of_a_released_slot():
    expect_error(use_after_consumed, ChannelError, ["used after ab.consumed()", "released its slot"])


@aref_kernel(grid=(1,))
def never_consumed(A, B, C, *, BK: int = 64):
    acc = aref.zeros((128, 128), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(2):
        ab.put(aref.load(A, (0, k), (128, BK)))
        a = ab.get()  # <-
        acc = aref.mma(a, a.T, acc)
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_slot_never_released():
    expect_error(never_consumed, ChannelError, ["never released", "ab.consumed()"])


# ----------------------------------------------------------------------------- unsupported Python
@aref_kernel(grid=(1,))
def with_while(A, B, C):
    acc = aref.zeros((128, 128), aref.float32)
    while True:  # <-
        break
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_while_is_rejected():
    expect_error(with_while, ArefSyntaxError, ["`while` loops are not supported", "aref.range"])


@aref_kernel(grid=(1,))
def if_on_tile(A, B, C):
    acc = aref.zeros((128, 128), aref.float32)
    if acc.max() > 0:  # <-
        acc = acc + 1.0
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_if_on_a_tile_is_rejected():
    expect_error(if_on_tile, ArefSyntaxError, ["no Python truth value", "aref.where"])


@aref_kernel(grid=(1,))
def two_loops(A, B, C):
    acc = aref.zeros((128, 128), aref.float32)
    for k in aref.range(2):
        acc = acc + 1.0
    for k in aref.range(2):  # <-
        acc = acc + 1.0
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_second_loop_is_rejected():
    expect_error(two_loops, ArefSyntaxError, ["single aref.range loop", "first is on line"])


@aref_kernel(grid=(1,))
def nested_loop(A, B, C):
    acc = aref.zeros((128, 128), aref.float32)
    for i in range(2):
        for k in aref.range(2):  # <-
            acc = acc + 1.0
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_nested_aref_loop_is_rejected():
    expect_error(nested_loop, ArefSyntaxError, ["top-level statement"])


@aref_kernel(grid=(1,))
def break_in_loop(A, B, C):
    acc = aref.zeros((128, 128), aref.float32)
    for k in aref.range(2):
        acc = acc + 1.0
        break  # <-
    aref.store(C, (0, 0), acc.to(aref.float16))


def test_break_is_rejected():
    expect_error(break_in_loop, ArefSyntaxError, ["`break` inside the aref.range loop"])


W = torch.zeros(128, 128, dtype=torch.float16)


@aref_kernel(grid=(1,))
def closure_over_tensor(A, B, C):
    w = aref.load(W, (0, 0), (128, 128))  # <-
    aref.store(C, (0, 0), w)


def test_closure_over_a_tensor_is_rejected():
    expect_error(closure_over_tensor, ArefSyntaxError, ["reads tensor 'W' from an enclosing scope",
                                                        "pass 'W' as a kernel argument"])


@aref_kernel(grid=(1,))
def loop_local_used_after(A, B, C):
    for k in aref.range(2):
        t = aref.zeros((128, 128), aref.float32)
    aref.store(C, (0, 0), t.to(aref.float16))  # <-


def test_loop_local_value_used_after_the_loop():
    expect_error(loop_local_used_after, ArefSyntaxError, ["'t' is assigned inside the loop",
                                                          "give 't' a value before the loop"])


@aref_kernel(grid=(1,))
def carried_type_change(A, B, C):
    acc = aref.zeros((128, 128), aref.float32)
    for k in aref.range(2):  # <-
        acc = acc.to(aref.float16)
    aref.store(C, (0, 0), acc)


def test_carried_value_changing_type():
    expect_error(carried_type_change, ArefTypeError, ["'acc'", "must keep its type"])


@aref_kernel
def no_grid(A, B, C):
    x = aref.load(A, (aref.program_id(0) + 1, 0), (128, 128))
    aref.store(C, (aref.program_id(0) * 2, 0), x)


def test_grid_that_cannot_be_inferred():
    with pytest.raises(ArefTypeError) as info:
        no_grid.specialize(A, B, C)
    assert "cannot infer the grid" in info.value.message and "grid=" in info.value.hint


def test_errors_hide_compiler_frames():
    """The raised error's traceback starts at the public entry point, not deep in the compiler."""
    import traceback
    try:
        mma_shape_mismatch.specialize(A, B, C)
    except ArefError as err:
        frames = traceback.extract_tb(err.__traceback__)
        assert all("/aref/frontend" not in f.filename and "/aref/lang" not in f.filename for f in frames)
    else:
        pytest.fail("no error raised")
