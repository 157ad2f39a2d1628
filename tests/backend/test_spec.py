"""Kernel spec validation: every rejected spec names the field, the value and the limit."""
import dataclasses

import pytest

from aref.backend.cute.spec import (
    ChannelSpec, ConsumerMode, PayloadSpec, RegisterBudget, SpecError, gemm_spec,
)


def test_default_gemm_spec_is_consistent():
    spec = gemm_spec(1024, 2048, 512)
    (ab,) = spec.channels
    assert ab.tx_bytes == (128 * 64 + 128 * 64) * 2
    assert ab.consumer_arrivals == spec.num_consumers == 2
    assert spec.num_threads == 384 and spec.num_mbarriers == 8
    assert spec.epilogue_aliases_ring and spec.smem_bytes < 227 * 1024


def test_dynamic_extents_are_accepted():
    assert gemm_spec(None, None, None).tensor("A").shape == (None, None)


@pytest.mark.parametrize("mnk, message", [
    ((1000, 1024, 1024), r"tensor A mode 0 has extent 1000, not a positive multiple of the tile extent 128"),
    ((1024, 1024, 96), r"tensor A mode 1 has extent 96, not a positive multiple of the tile extent 64"),
    ((1024, 200, 1024), r"tensor B mode 0 has extent 200"),
])
def test_shape_not_divisible_by_tile(mnk, message):
    with pytest.raises(SpecError, match=message):
        gemm_spec(*mnk)


@pytest.mark.parametrize("dtype, message", [
    ("f32", r"a_dtype='f32' is not a wgmma operand dtype"),
    ("int8", r"a_dtype='int8' is not a dtype name"),
])
def test_dtype_unsupported_by_wgmma(dtype, message):
    with pytest.raises(SpecError, match=message):
        gemm_spec(1024, 1024, 1024, in_dtype=dtype, out_dtype="f16")


def test_mixed_16_bit_operands_are_rejected():
    spec = gemm_spec(1024, 1024, 1024)
    with pytest.raises(SpecError, match=r"matching 16-bit operands.*a_dtype='f16', b_dtype='bf16'"):
        dataclasses.replace(spec, b_dtype="bf16").validate()


def test_fp8_output_is_rejected():
    with pytest.raises(SpecError, match=r"out_dtype='f8e4m3': the epilogue stores one of"):
        gemm_spec(1024, 1024, 1024, in_dtype="f8e4m3", out_dtype="f8e4m3")


def test_register_budget_over_64k():
    with pytest.raises(SpecError, match=r"128 × \(64 \+ 2 × 240\) = 69632 exceeds the 65536 registers"):
        gemm_spec(1024, 1024, 1024, registers=RegisterBudget(64, 240))


@pytest.mark.parametrize("regs, message", [
    (RegisterBudget(44, 232), r"registers.producer=44: setmaxnreg takes a multiple of 8 in 24..256"),
    (RegisterBudget(16, 232), r"registers.producer=16"),
    (RegisterBudget(40, 264), r"registers.consumer=264"),
])
def test_register_counts_must_suit_setmaxnreg(regs, message):
    with pytest.raises(SpecError, match=message):
        gemm_spec(1024, 1024, 1024, registers=regs)


def test_depth_below_one():
    with pytest.raises(SpecError, match=r"channel 'ab' has depth 0; a ring needs depth >= 1"):
        gemm_spec(1024, 1024, 1024, depth=0, mma_depth=0)


def test_mma_depth_must_leave_a_free_slot():
    with pytest.raises(SpecError, match=r"mma_depth=4 must be in 0..depth-1=3 of channel 'ab'"):
        gemm_spec(1024, 1024, 1024, depth=4, mma_depth=4)


def test_smem_over_227_kb():
    # 128×256×64 fp16: 48 KB per slot, so 5 slots = 240 KB.
    with pytest.raises(SpecError, match=r"shared memory \d+ B exceeds the 232448 B \(227 KB\).*ab: 5×49152 B"):
        gemm_spec(1024, 1024, 1024, tile=(128, 256, 64), depth=5)


def test_accumulator_does_not_fit_one_consumer():
    with pytest.raises(SpecError, match=r"accumulators need 256 fp32 registers per consumer thread"):
        gemm_spec(1024, 1024, 1024, tile=(128, 256, 64), num_consumers=1)


def test_tile_rows_must_split_across_consumers():
    with pytest.raises(SpecError, match=r"tile.bm=64 must be a multiple of 64 × num_consumers=2"):
        gemm_spec(1024, 1024, 1024, tile=(64, 128, 64), num_consumers=2)


def test_pingpong_gemm_needs_persistence():
    spec = gemm_spec(1024, 1024, 1024)
    with pytest.raises(SpecError, match=r"mode=PINGPONG for gemm needs a persistent tile scheduler"):
        dataclasses.replace(spec, mode=ConsumerMode.PINGPONG).validate()


def test_tma_channel_has_one_producer_arrival():
    spec = gemm_spec(1024, 1024, 1024)
    bad = dataclasses.replace(spec.channels[0], producer_arrivals=4)
    with pytest.raises(SpecError, match=r"a TMA channel's full barrier has exactly 1 arrival"):
        dataclasses.replace(spec, channels=(bad,)).validate()


def test_payload_bytes_and_slot_alignment():
    ch = ChannelSpec("kv", 2, (PayloadSpec("k", (128, 64), "f8e4m3"), PayloadSpec("v", (100, 8), "f16")))
    assert ch.tx_bytes == 128 * 64 + 100 * 8 * 2
    assert ch.slot_bytes == 8192 + 2048  # each payload starts on a 1024-byte swizzle boundary
