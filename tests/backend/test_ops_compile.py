"""Every op of the registry compiles for sm_90a in every role it claims, with no spills.

One kernel per role holds every test case of every entry that claims the role (float32 and int32 inputs;
narrow float types through the cast cases), plus one with the cases that need square tiles (transposes of
register tiles): a wgmma consumer computing on accumulator fragments inside the loop, a CUDA-core group
computing on loaded tiles, and the code after the loop. The elementwise cases on row vectors, column vectors
and single values (the same templates in every role; tests/test_ops_registry.py generates them in each)
compile in one kernel. Entries list the refusals they expect
(`Hints.gaps`); none of these cases is one.
"""
import pytest

from aref import ops
from aref.compiler import CompileOptions
from aref.search import lower_to
from tests.ops_kernels import ROLES, all_ops, all_ops_inputs, entry_cases

# elementwise ops on vectors compile to the same templates in every role: one role compiles them. The
# CUDA-core group's cases on tiles are split over two kernels (every case in one held 255 registers: ptxas
# computes the independent cases side by side before summing them)
PARTS = {("compute", "tile"): 2}
CONFIGS = [(role, variant) for role in ROLES for variant in ("tile", "square")] + [("epilogue", "vectors")]


@pytest.mark.parametrize("role, variant", CONFIGS, ids=[f"{r}-{v}" for r, v in CONFIGS])
def test_every_op_compiles_in_its_roles(backend_cache, role, variant):
    from aref.backend.cute import compile_barrier
    assert entry_cases(role, variant == "square"), "no case claims this role"
    n = PARTS.get((role, variant), 1)
    src = ptx = ""
    for i in range(n):
        kernel = all_ops(role, variant, part=(i, n)).specialize(**all_ops_inputs(role, variant))
        ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_90a", consumers="plain"))
        result = compile_barrier(ws, cache_dir=backend_cache)
        assert result.spill_bytes == 0, result.ptxas_log
        src += result.source_path.read_text()
        ptx += result.ptx_path.read_text()
    if variant == "tile":
        # reductions along columns and to one value cross lanes 4, 8, 16 apart and meet in the exchange tile
        assert "shuffle_sync_bfly(x, offset=16)" in src and "_xchg" in src
        assert "shfl.sync.bfly" in ptx
        # narrow float results are rounded where register math produces them
        assert "aref.rounded(" in src and "cvt.rn.f16.f32" in ptx and "cvt.rn.satfinite.e4m3x2.f32" in ptx
        assert "aref.row_index(group_tidx" in src and "aref.col_index(group_tidx" in src
    elif variant == "square":   # a register transpose, and a row vector read along columns: the exchange tile
        assert "aref.exchange_view(" in src and "read it along the columns" in src
    else:                       # math on row vectors (index r), column vectors (index c) and single values
        assert "row_max[r]" in src and "col_min[c]" in src and "[0] = " in src


def test_expected_gaps_are_documented_rules():
    """Every expected backend gap an entry lists names a (role, layout) key the lookup knows."""
    for d in ops.entries():
        for (role, layout), reason in d.hints.gaps.items():
            assert role in (None,) + ops.ROLES and layout in (None,) + ops.LAYOUTS and reason, d.name
