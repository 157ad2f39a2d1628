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
from aref.ir import OpKind
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


def test_each_entry_compiles_to_the_instructions_it_claims_on_hopper(backend_cache):
    """`Hints.ptx`: the instruction whose unit the entry's cost names (tanh.approx.f32 on the MUFU, ...)."""
    from aref.backend.cute import compile_barrier
    claims = {d.name: d.hints.ptx for d in ops.entries() if d.hints.ptx and "epilogue" in d.hints.roles}
    assert {"unary.tanh", "unary.sin", "unary.cos", "unary.floor", "unary.ceil", "binary.pow"} <= set(claims)
    kernel = all_ops("epilogue", "vectors", only=set(claims)).specialize(**all_ops_inputs("epilogue", "vectors"))
    result = compile_barrier(lower_to(kernel, "barrier", CompileOptions(arch="sm_90a", consumers="plain")),
                             cache_dir=backend_cache)
    ptx = result.ptx_path.read_text()
    assert result.spill_bytes == 0, result.ptxas_log
    for name, instructions in claims.items():
        assert all(i in ptx for i in instructions), (name, instructions)


MATH = {"unary.tanh", "unary.sigmoid", "unary.erf", "unary.sin", "unary.cos", "unary.floor", "unary.ceil",
        "binary.pow", "binary.mul", "binary.minimum"}      # mul: of two masks; minimum: aref.clamp


@pytest.mark.parametrize("role", ROLES)
def test_the_math_functions_compile_for_blackwell_in_every_role(backend_cache, role):
    """The same templates on sm_100a (tensor-memory accumulators read into registers in the MMA consumer's
    place): every role, no spills, the claimed instructions."""
    from aref.backend.cute import compile_barrier
    assert {d.name for d, _ in entry_cases(role, False, MATH)} == MATH
    kernel = all_ops(role, "tile", only=MATH).specialize(**all_ops_inputs(role, "tile"))
    result = compile_barrier(lower_to(kernel, "barrier", CompileOptions(arch="sm_100a")), cache_dir=backend_cache)
    ptx = result.ptx_path.read_text()
    assert result.arch == "sm_100a" and result.spill_bytes == 0, result.ptxas_log
    for name in MATH:
        assert all(i in ptx for i in ops.lookup(*_key(name)).hints.ptx), name


def _key(name: str):
    kind, fn = name.split(".")
    return OpKind(kind), fn
