"""Persistent kernels: min(ctas, tiles) CTAs walk the tile grid round-robin; every aref ring continues
across a CTA's tiles, so each slot and parity of the Barrier IR is shifted by the ring position at the
start of the tile."""
import re

import pytest

from aref.backend.cute import compile_barrier, generate_source
from tests.backend.conftest import barrier_ir
from tests.backend.test_consistency import check


@pytest.mark.parametrize("example, consumers, size", [("gemm", "cooperative", "small"),
                                                      ("gemm", "cooperative", "large"),
                                                      ("attention_fwd", "pingpong", "small")])
def test_persistent_kernel_compiles(example, consumers, size, backend_cache):
    ws = barrier_ir(example, "heuristic", consumers, size)
    result = compile_barrier(ws, cache_dir=backend_cache, persistent=True, ctas=132)
    assert result.spill_bytes == 0, result.ptxas_log
    assert result.instructions["mbarrier.init"] == 2 * sum(ch.depth for ch in ws.channels)
    source = result.source_path.read_text()
    tiles = 1
    for g in ws.grid:
        tiles *= g
    assert f"NUM_TILES = {tiles}" in source and f"GRID = ({min(132, tiles)}, 1, 1)" in source
    assert "for tile in cutlass.range(first_tile, NUM_TILES, num_ctas, unroll=1):" in source
    assert check(ws, source) == []                 # the tags still follow the Barrier IR
    assert "recast_tile" not in source             # a next tile's loads would overwrite an aliased staging


def _eval_ring(expr: str, env: dict) -> int:
    return eval(expr, {"__builtins__": {}}, env)


def test_ring_position_continues_across_tiles():
    """The consumer's steady-state wait of the GEMM, evaluated for tiles n and items k: the slot and parity
    equal those of ring item n·T + k (T items per tile), which is what the producer fills."""
    ws = barrier_ir("gemm", "heuristic", "cooperative")
    source = generate_source(ws, persistent=True, ctas=3)
    depth = ws.channel("ab").depth
    per_tile = int(re.search(r"ab_base = \(tile_count \* (\d+)\) % (\d+)", source).group(1))
    assert per_tile == ws.params[0].value.type.shape[1] // 64                   # K / BK items per tile
    body = source[source.index("def consumer"):]
    loop = body[body.index("for k in cutlass.range"):]
    slot_expr = re.search(r"ab_slot = (.*)", loop).group(1)
    wait = re.search(r"cute.arch.mbarrier_wait\(ab_full \+ (.*), (.*)\)\n", loop)
    for n in range(5):
        base = (n * per_tile) % (2 * depth)
        for k in range(per_tile - 1):
            env = {"k": k, "ab_base": base}
            env["ab_slot"] = _eval_ring(slot_expr, env)
            item = n * per_tile + k + 1                 # the steady state reads item k + 1 of the tile
            assert _eval_ring(wait.group(1), env) == item % depth
            assert _eval_ring(wait.group(2), env) == (item // depth) % 2


@pytest.mark.parametrize("persistent", [False, True])
def test_rasterized_tile_order_compiles(persistent, backend_cache):
    """`raster`: the tiles are walked in groups of rows of grid axis 0 (`aref.backend.tile_order`); a launch that is not
    persistent becomes one CTA per tile along x, each finding its coordinates by the same rule."""
    from aref.backend.tile_order import tile_coords_source
    ws = barrier_ir("gemm", "heuristic", "cooperative", "large")
    result = compile_barrier(ws, cache_dir=backend_cache, persistent=persistent, ctas=132, raster=4)
    assert result.spill_bytes == 0, result.ptxas_log
    source = result.source_path.read_text()
    tiles = ws.grid[0] * ws.grid[1]
    if persistent:
        assert f"block = {tile_coords_source('tile', ws.grid, 4)}" in source
        assert f"GRID = ({min(132, tiles)}, 1, 1)" in source
    else:
        assert f"block = {tile_coords_source('cute.arch.block_idx()[0]', ws.grid, 4)}" in source
        assert f"GRID = ({tiles}, 1, 1)" in source and "for tile in" not in source
    assert "block = cute.arch.block_idx()\n" not in source
    assert check(ws, source) == []


def test_raster_is_refused_when_negative():
    from aref.errors import ArefError
    with pytest.raises(ArefError, match="raster must be 0"):
        generate_source(barrier_ir("gemm", "heuristic", "cooperative"), raster=-1)
    with pytest.raises(ArefError, match="raster must be 0"):
        generate_source(_blackwell_gemm(), raster=-1)


@pytest.mark.parametrize("persistent", [False, True])
def test_rasterized_tile_order_on_blackwell(persistent, backend_cache):
    """The sm_100a roles take the same tile-order rule (their tile loop is the Hopper templates')."""
    from aref.backend.tile_order import tile_coords_source
    ws = _blackwell_gemm(M=1024, N=512)
    result = compile_barrier(ws, cache_dir=backend_cache, persistent=persistent, ctas=148, raster=4)
    assert result.spill_bytes == 0 and result.instructions["tcgen05.mma"] > 0, result.ptxas_log
    source = result.source_path.read_text()
    var = "tile" if persistent else "cute.arch.block_idx()[0]"
    assert f"block = {tile_coords_source(var, ws.grid, 4)}" in source
    assert "block = cute.arch.block_idx()\n" not in source
    from tests.backend.test_sm100_consistency import check as check_sm100
    assert check_sm100(ws, source) == []


def _blackwell_gemm(**overrides):
    from aref.compiler import CompileOptions
    from aref.search import lower_to
    from aref.runtime.harness import load_example
    ex = load_example("examples/gemm.py")
    return lower_to(ex.kernel.specialize(**ex.inputs("small", **overrides)), "barrier",
                    CompileOptions(arch="sm_100a"))


@pytest.mark.parametrize("example", ["dual_gemm", "gemm_dropout_colsum"])
def test_blackwell_subtiled_epilogue_reads_the_tiles_accumulator_stage(example, backend_cache):
    """Persistent sm_100a: the accumulator has two tensor-memory stages, and the subtiled epilogue's column
    chunks are read from this tile's stage (they used to stop at 'a column chunk of a multi-slot tile')."""
    import re
    from aref.compiler import CompileOptions
    from aref.search import lower_to
    if example == "dual_gemm":
        from aref.runtime.harness import load_example
        ex = load_example("examples/dual_gemm.py")
        kernel = ex.kernel.specialize(**ex.inputs("small"))
    else:
        from tests.backend.general_programs import PROGRAMS, inputs
        kernel = PROGRAMS[example][0].specialize(**inputs(example))
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a"))
    result = compile_barrier(ws, cache_dir=backend_cache, persistent=True, ctas=148)
    assert result.spill_bytes == 0 and result.instructions["tcgen05.mma"] > 0, result.ptxas_log
    source = result.source_path.read_text()
    chunks = re.findall(r"= sm100\.tmem_tile\(tmem, (\d+) \+ (\d+) \* \(\((\w+) \+ 0\) % 2\), 128, (\d+)\)", source)
    assert len(chunks) >= 2 and all(int(w) < 128 for *_, w in chunks)
    from tests.backend.test_sm100_consistency import check as check_sm100
    assert check_sm100(ws, source) == []
