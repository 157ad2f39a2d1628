"""Warp-specialized Hopper GEMM template: every variant compiles for sm_90a with 0 spills and the PTX has
the instructions and barrier counts the schedule implies."""
import re

import pytest

from aref.backend.cute.hopper_gemm import compile_gemm, emit_gemm_source, variant_name
from aref.backend.cute.spec import SpecError, gemm_spec

VARIANTS = [
    (dtype, tile, consumers)
    for dtype in ("f16", "bf16", "f8e4m3")
    for tile in ((128, 128, 64), (128, 256, 64))
    for consumers in (1, 2)
]


def _check_report(spec, report):
    ins = report.instructions
    assert report.spill_bytes == 0, report.ptxas_log
    assert report.stack_frame_bytes == 0
    for opcode in ("wgmma.mma_async", "cp.async.bulk.tensor", "mbarrier.try_wait.parity",
                   "mbarrier.arrive.expect_tx", "fence.proxy.async", "stmatrix"):
        assert ins[opcode] > 0, opcode
    assert ins["setmaxnreg.dec"] == 1 and ins["setmaxnreg.inc"] == 1
    assert ins["mbarrier.init"] == 2 * sum(ch.depth for ch in spec.channels)
    # Every TMA store/load is a bulk tensor copy; the loads alone are one A and one B box per slot fill.
    assert ins["wgmma.wait_group"] == (1 if spec.mma_depth == 0 else 2)


@pytest.mark.parametrize("dtype, tile, consumers", VARIANTS,
                         ids=[f"{d}-{t[0]}x{t[1]}x{t[2]}-g{c}" for d, t, c in VARIANTS])
def test_gemm_variant_compiles_without_spills(tmp_path, dtype, tile, consumers):
    if tile[1] == 256 and consumers == 1:
        # 128×256 fp32 accumulators are 256 registers per thread for a single consumer group.
        with pytest.raises(SpecError, match="accumulators need 256 fp32 registers"):
            gemm_spec(1024, 1024, 1024, tile=tile, in_dtype=dtype, num_consumers=consumers)
        return
    spec = gemm_spec(1024, 1024, 1024, tile=tile, in_dtype=dtype, num_consumers=consumers)
    report = compile_gemm(spec, "sm_90a", tmp_path / variant_name(spec))
    _check_report(spec, report)
    # With min_blocks_per_mp=1 ptxas honours setmaxnreg: no C7508 "ignored" warning.
    assert "setmaxnreg" not in report.ptxas_log


@pytest.mark.parametrize("kw", [
    dict(m=None, n=None, k=None),  # dynamic extents: runtime k-loop trip count and grid
    dict(depth=1, mma_depth=0, tile=(128, 256, 64)),  # ring smaller than the C tile: separate staging buffer
    dict(depth=4, mma_depth=3),
    dict(depth=2, mma_depth=1, tile=(128, 256, 64)),
])
def test_schedule_variants_compile(tmp_path, kw):
    m, n, k = kw.pop("m", 1024), kw.pop("n", 1024), kw.pop("k", 1024)
    kw.setdefault("tile", (128, 128, 64))
    spec = gemm_spec(m, n, k, **kw)
    report = compile_gemm(spec, "sm_90a", tmp_path)
    _check_report(spec, report)
    if spec.channels[0].depth == 1:
        assert not spec.epilogue_aliases_ring and "storage.sC.get_tensor" in report.ptx_path.parent.joinpath(
            "gemm.py").read_text()


def _aref_tags(source):
    """(tag text, next code line) for every `# aref:` comment."""
    lines = source.splitlines()
    tags = []
    for i, line in enumerate(lines):
        m = re.match(r"\s*# aref: (.*)", line)
        if m:
            nxt = next(l.strip() for l in lines[i + 1:] if l.strip() and not l.strip().startswith("#"))
            tags.append((m.group(1), nxt))
    return tags


@pytest.mark.parametrize("depth, mma_depth", [(4, 1), (3, 0), (2, 1)])
def test_aref_tags_match_the_lowering(depth, mma_depth):
    spec = gemm_spec(512, 512, 512, depth=depth, mma_depth=mma_depth)
    source = emit_gemm_source(spec)
    tags = dict(_aref_tags(source))
    d = depth
    assert tags[f"wait empty ab slot=k%{d} parity=((k//{d})%2)^1"] == \
        "cute.arch.mbarrier_wait(ab_empty + slot, ring_parity(k) ^ 1)"
    assert tags[f"wait full ab slot=k%{d} parity=(k//{d})%2"] == \
        "cute.arch.mbarrier_wait(ab_full + slot, ring_parity(k))"
    assert tags[f"put ab slot=k%{d} tma expect_tx={spec.channels[0].tx_bytes} payloads=a,b"] == \
        "with cute.arch.elect_one():"
    assert tags[f"consumed ab slot=k%{d} arrive empty count=1 per consumer group"] == \
        "cute.arch.mbarrier_arrive(empty + ring_slot(k))"
    assert tags["init ab slot=slot full=1 (TMA arrive_and_expect_tx) empty=2"] == \
        "cute.arch.mbarrier_init(full + slot, 1)"
    assert f"AB_DEPTH = {d} " in source and f"MMA_DEPTH = {mma_depth} " in source
    if mma_depth == 0:
        assert "warpgroup.wait_group(MMA_DEPTH)" not in source and "release_slot(ab_empty, k, warp_in_group)" in source
    else:
        assert "release_slot(ab_empty, k - MMA_DEPTH, warp_in_group)" in source


def test_emitter_rejects_specs_the_template_cannot_honour():
    import dataclasses

    spec = gemm_spec(1024, 1024, 1024)
    with pytest.raises(SpecError, match="not persistent yet"):
        emit_gemm_source(dataclasses.replace(spec, persistent=True))
    with pytest.raises(SpecError, match="contradicts the spec's static extent 1024"):
        emit_gemm_source(spec, problem_shape=(2048, 1024, 1024))
    bad = dataclasses.replace(spec.channels[0], consumer_arrivals=8)
    with pytest.raises(SpecError, match="releases a slot once per consumer warp group"):
        emit_gemm_source(dataclasses.replace(spec, channels=(bad,)))
