"""The verifier rejects hand-made bad IR, naming the op's line."""
import copy

import pytest

from aref.errors import ChannelError, VerifyError
from aref.runtime.harness import load_example
from aref.ir import (CastAttrs, DType, FnAttrs, FullAttrs, NoAttrs, Op, OpKind, ScalarType, Space, TileType,
                     Value)
from aref.verify import verify
from example_paths import example_path


@pytest.fixture
def gemm_ir():
    ex = load_example(example_path("gemm"))
    kernel = ex.kernel.specialize(**ex.inputs())
    verify(kernel)
    return copy.deepcopy(kernel)


def body_op(kernel, kind):
    return next(op for op in kernel.loop.body.ops if op.kind is kind)


def test_good_ir_passes(gemm_ir):
    verify(gemm_ir)


def test_use_of_a_loop_value_after_the_loop(gemm_ir):
    mma = body_op(gemm_ir, OpKind.MMA)
    cast = next(op for op in gemm_ir.post.ops if op.kind is OpKind.CAST)
    cast.operands = (mma.result,)
    with pytest.raises(VerifyError, match="not defined before it in scope") as info:
        verify(gemm_ir)
    assert info.value.loc.line == cast.loc.line


def test_wrong_attribute_class(gemm_ir):
    cast = next(op for op in gemm_ir.post.ops if op.kind is OpKind.CAST)
    cast.attrs = FnAttrs("add")
    with pytest.raises(VerifyError, match="must carry CastAttrs"):
        verify(gemm_ir)


def test_wrong_result_type(gemm_ir):
    mma = body_op(gemm_ir, OpKind.MMA)
    mma.results[0].type = TileType((128, 64), DType.float32, Space.RMEM)
    with pytest.raises(VerifyError, match="mma should produce tile<128x128xf32"):
        verify(gemm_ir)


def test_cast_result_dtype_mismatch(gemm_ir):
    cast = next(op for op in gemm_ir.post.ops if op.kind is OpKind.CAST)
    cast.attrs = CastAttrs(DType.bfloat16)
    with pytest.raises(VerifyError, match="cast should produce"):
        verify(gemm_ir)


def test_loop_carried_type_mismatch(gemm_ir):
    loop = gemm_ir.loop
    loop.results[0].type = TileType((128, 128), DType.float16, Space.RMEM)
    with pytest.raises(VerifyError, match="changes type"):
        verify(gemm_ir)


def test_trip_count_must_be_integer(gemm_ir):
    gemm_ir.loop.trip_count.type = ScalarType(DType.float32)
    with pytest.raises(VerifyError, match="trip count"):
        verify(gemm_ir)


def test_channel_protocol_get_before_put(gemm_ir):
    ops = gemm_ir.loop.body.ops
    put, get = body_op(gemm_ir, OpKind.PUT), body_op(gemm_ir, OpKind.GET)
    i, j = ops.index(put), ops.index(get)
    ops[i], ops[j] = get, put
    with pytest.raises(ChannelError, match="get on channel 'ab' before any put") as info:
        verify(gemm_ir)
    assert info.value.loc.line == get.loc.line


def test_dropped_consumed(gemm_ir):
    gemm_ir.loop.body.ops.remove(body_op(gemm_ir, OpKind.CONSUMED))
    with pytest.raises(ChannelError, match="never released"):
        verify(gemm_ir)


def test_put_outside_the_loop(gemm_ir):
    put = body_op(gemm_ir, OpKind.PUT)
    ab = put.operands[0]
    a_tile = Value(TileType((128, 64), DType.float16, Space.RMEM))
    full = Op(OpKind.FULL, (), (a_tile,), FullAttrs((128, 64), 0.0, DType.float16), put.loc)
    gemm_ir.post.ops[:0] = [full, Op(OpKind.PUT, (ab, a_tile, a_tile), (), NoAttrs(), put.loc)]
    with pytest.raises(ChannelError, match="put outside the loop"):
        verify(gemm_ir)


def test_channel_created_inside_the_loop(gemm_ir):
    ch = gemm_ir.channels()[0]
    gemm_ir.pre.ops.remove(ch)
    gemm_ir.loop.body.ops.insert(0, ch)
    with pytest.raises((ChannelError, VerifyError)):
        verify(gemm_ir)


def test_store_of_wrong_shape(gemm_ir):
    store = next(op for op in gemm_ir.post.ops if op.kind is OpKind.STORE)
    store.attrs = type(store.attrs)((64, 128))
    with pytest.raises(VerifyError, match="store of"):
        verify(gemm_ir)


def test_verifier_catches_unknown_function(gemm_ir):
    x = Value(TileType((128, 128), DType.float32))
    acc = gemm_ir.loop.results[0]
    gemm_ir.post.ops.insert(0, Op(OpKind.UNARY, (acc,), (x,), FnAttrs("cbrt"), gemm_ir.loc))
    with pytest.raises(VerifyError, match="unknown function 'cbrt'"):
        verify(gemm_ir)


def test_interpreter_inputs_unchanged_by_verify(gemm_ir):
    """verify is a pure check: it leaves the IR as it found it."""
    from aref.ir.printer import print_kernel
    before = print_kernel(gemm_ir)
    verify(gemm_ir)
    assert print_kernel(gemm_ir) == before
