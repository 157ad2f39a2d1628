"""FA3-structure Hopper attention template: compiles for sm_90a with 0 spills; PTX and aref tags match."""
import re

import pytest

from aref.backend.cute.hopper_attention import compile_attention, emit_attention_source, variant_name
from aref.backend.cute.spec import SpecError, attention_spec

VARIANTS = [("f16", 128, 2), ("bf16", 128, 2), ("f16", 64, 2), ("bf16", 64, 1)]


@pytest.mark.parametrize("dtype, head_dim, kv_depth", VARIANTS,
                         ids=[f"{d}-hd{h}-kv{k}" for d, h, k in VARIANTS])
def test_attention_variant_compiles_without_spills(tmp_path, dtype, head_dim, kv_depth):
    spec = attention_spec(1024, 2048, head_dim=head_dim, dtype=dtype, kv_depth=kv_depth)
    report = compile_attention(spec, "sm_90a", tmp_path / variant_name(spec))
    ins = report.instructions
    assert report.spill_bytes == 0 and report.stack_frame_bytes == 0, report.ptxas_log
    assert ins["mbarrier.init"] == 2 * sum(ch.depth for ch in spec.channels)
    assert ins["setmaxnreg.dec"] == 1 and ins["setmaxnreg.inc"] == 1
    for opcode in ("cp.async.bulk.tensor", "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx",
                   "fence.proxy.async", "stmatrix"):
        assert ins[opcode] > 0, opcode
    # Q·Kᵀ twice (tile 0 and the loop) and P·V twice (loop and drain), head_dim/16 and BN/16 k-steps each.
    assert ins["wgmma.mma_async"] == 2 * head_dim // 16 + 2 * 128 // 16
    # exp2 of every S element a thread holds (BM·BN/128) in both softmax sites, plus one correction per row.
    assert ins["ex2.approx"] == 2 * (64 * 128 // 128 + 2)
    # Ping-pong turn barriers: the pre-granted turn, one hand-over per Q·Kᵀ site.
    assert ins["bar.arrive"] == 3
    assert ins["shfl.sync"] >= 12  # quad max reductions in two softmax sites + quad sum reductions


def test_aref_tags_in_attention_source():
    spec = attention_spec(None, None, kv_depth=3)
    source = emit_attention_source(spec)
    tags = [m.group(1) for m in re.finditer(r"# aref: (.*)", source)]
    assert "wait empty k slot=n%3 parity=((n//3)%2)^1" in tags
    assert "wait full k slot=n%3 parity=(n//3)%2" in tags
    assert "wait full v slot=(n-1)%3 parity=((n-1)//3)%2" in tags
    assert f"put k slot=n%3 tma expect_tx={128 * 128 * 2} payloads=k" in tags
    assert "consumed v slot=(n-1)%3 arrive empty count=1 per consumer group" in tags
    assert "wait full q slot=0 parity=0" in tags and "consumed q slot=0 arrive empty count=1 per consumer group" in tags
    assert "cute.sym_int32(divisibility=128)" in source  # dynamic sequence lengths


def test_attention_spec_errors():
    with pytest.raises(SpecError, match=r"accumulators need 256 fp32 registers"):
        attention_spec(1024, 1024, head_dim=64, bm=128)
    with pytest.raises(SpecError, match=r"attention head dim \(tile.bk\) must be 64 or 128; got 96"):
        attention_spec(1024, 1024, head_dim=96)
    with pytest.raises(SpecError, match=r"tensor K mode 0 has extent 1000"):
        attention_spec(1024, 1000)
    with pytest.raises(SpecError, match=r"attention supports 16-bit inputs only"):
        attention_spec(1024, 1024, dtype="f8e4m3")
    with pytest.raises(SpecError, match=r"shared memory \d+ B exceeds"):
        attention_spec(1024, 1024, kv_depth=4)
