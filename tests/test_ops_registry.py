"""The op registry (`aref.ops`) is the one place an op's rules live, and every entry holds what it claims.

For each entry with test cases: the interpreter matches the case's torch oracle for every dtype the entry
declares; the simulator computes bit for bit what the interpreter computes (per role, all cases in one
kernel); `op_cost` reports the declared unit; the CuTe backend emits it in every role it claims (the
compile itself is in tests/backend/test_ops_compile.py); and the passes' op tables derive from the traits.
"""
import pytest
import torch

import aref
from aref import ops
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.ir.dtypes import to_torch
from aref.errors import ArefTypeError, VerifyError
from aref.interp.tile import run_kernel
from aref.ir import DType, FnAttrs, Op, OpKind, Space, TileType, Value
from aref.target.machine import H100, op_cost
from aref.sim import simulate
from tests.ops_kernels import (ROLES, T, VARIANTS, all_ops, all_ops_inputs, case_id, entry_cases, inputs,
                               one_op)

CASES = entry_cases()


# ------------------------------------------------------------------------------------------- structure
def test_every_op_kind_and_function_has_one_entry():
    kinds = {d.kind for d in ops.entries()}
    assert kinds == set(OpKind)
    assert len({d.key for d in ops.entries()}) == len(ops.entries())
    # the function tuples the rest of the compiler reads are the registry's (the IR, below the registry, does
    # not carry them)
    from aref import ir
    assert ops.UNARY_FNS == ops.fns(OpKind.UNARY) and ops.REDUCE_FNS == ops.fns(OpKind.REDUCE)
    assert not hasattr(ir, "UNARY_FNS") and not hasattr(ir, "REDUCE_FNS")
    assert set(ops.COMPARE_FNS) == {"lt", "le", "gt", "ge", "eq", "ne", "and", "or"}      # and / or: of masks
    assert {"min", "max"} <= set(ops.SCALAR_FNS)
    assert set(ops.SCALAR_PREDICATES) == set(ops.COMPARE_FNS) - {"and", "or"}


def test_pass_tables_derive_from_traits():
    from aref.backend.cute import math as cute_math
    from partition import optimal, rowsplit
    from pipeline import schedule
    cuda = {OpKind.UNARY, OpKind.BINARY, OpKind.COMPARE, OpKind.WHERE, OpKind.REDUCE, OpKind.CAST}
    assert optimal.CUDA_CORE == schedule.CUDA_CORE == cuda
    assert rowsplit.ELEMENTWISE == cuda - {OpKind.REDUCE}
    assert set(cute_math.FUSABLE_USERS) == set(cute_math.ELEMENTWISE) | {OpKind.REDUCE}
    assert OpKind.EXPAND_DIMS in cute_math.ELEMENTWISE and OpKind.ARANGE in cute_math.LAZY
    from aref.ops import MUFU_FNS
    assert MUFU_FNS == {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos"}


def test_every_entry_has_a_cost_and_compute_entries_an_interpreter_rule():
    for d in ops.entries():
        assert d.cost is not None and (callable(d.cost.unit) or d.cost.unit in ("tc", "tma", "mufu", "fma",
                                                                                 "smem", "issue")), d.name
        if d.hints.cases:
            assert d.interpret is not None and d.hints.roles, d.name
        if not d.hints.cases and not d.hints.carrier:
            assert d.kind in (OpKind.SLICE, OpKind.SELECT, OpKind.CONST), f"{d.name} has no test hints"


def test_the_op_table_is_generated_from_the_registry():
    from aref.ops.__main__ import table
    text = table()
    assert text.count("\n") == len(ops.entries()) + 1 and "| `unary.exp` | aref.exp |" in text


def test_emission_helpers_exist_in_the_support_module():
    from aref.backend.cute import support
    for d in ops.entries():
        for e in d.cute:
            for name in e.helpers:
                assert callable(getattr(support, name, None)), f"{d.name}: support.{name}"


def test_the_verifier_reapplies_the_languages_dtype_gates():
    """A hand-built op that the language would refuse is refused by the verifier too (one type rule)."""
    x = Value(TileType((4, 4), DType.int32))
    bad = Op(OpKind.UNARY, (x,), (Value(TileType((4, 4), DType.int32)),), FnAttrs("exp"))
    from aref.verify import expected_result_types
    with pytest.raises(ArefTypeError, match="aref.exp needs a float tile"):
        expected_result_types(bad)
    unknown = Op(OpKind.UNARY, (x,), (Value(TileType((4, 4), DType.int32)),), FnAttrs("cbrt"))
    with pytest.raises(VerifyError, match="unknown function 'cbrt'"):
        expected_result_types(unknown)


def test_emission_lookup_is_exact_then_default_then_decomposition_then_one_error():
    d = ops.lookup(OpKind.ARANGE)
    assert "row_index" in ops.cute_emission(d, "compute", "row", "int").template
    assert "col_index" in ops.cute_emission(d, "epilogue", "col", "int").template
    assert ops.cute_emission(ops.lookup(OpKind.BINARY, "maximum"), "compute", "acc", "int") is None  # decomposes
    with pytest.raises(ops.NoEmission, match=r"cannot emit binary.div \(int operands\) in a compute role on the "
                                             r"acc layout"):
        ops.cute_emission(ops.lookup(OpKind.BINARY, "div"), "compute", "acc", "int")


# ------------------------------------------------------------------------------- interpreter vs oracle
def _oracle(d, c, x, y, result_dtype):
    xd = x.double() if x.is_floating_point() else x.long()
    yd = y.double() if y.is_floating_point() else y.long()
    return c.oracle(xd, yd)


@pytest.mark.parametrize("d, c", CASES, ids=[case_id(d, c) for d, c in CASES])
def test_interpreter_matches_the_torch_oracle(d, c):
    for dtype in d.hints.dtypes:
        x, y = inputs(d, dtype)
        z_type = _result_type(c, x, y)
        z = torch.zeros(z_type[0], dtype=z_type[1])
        kernel = one_op(c).specialize(X=x, Y=y, Z=z)
        out = {"X": x, "Y": y, "Z": z.clone()}
        run_kernel(kernel, out)
        want = _oracle(d, c, x, y, z.dtype)
        got = out["Z"]
        if got.dtype in (torch.bool, torch.int32):
            assert torch.equal(got.long(), want.long()), f"{dtype.name}: {got} vs {want}"
        else:
            # float32 results: the oracle in float64 rounded once; narrow results: within one ulp of the dtype
            eps = torch.finfo(got.dtype).eps
            tol = (4 * eps if got.dtype == torch.float32 else 2 * eps) * want.abs().max().clamp(min=1).item()
            assert torch.allclose(got.double(), want.double(), atol=tol, rtol=4 * eps), \
                f"{dtype.name}: max error {(got.double() - want).abs().max()}"


def _result_type(c, x, y):
    """Shape and torch dtype of the case's result (from tracing it once)."""
    holder = {}

    @aref.aref_kernel(grid=lambda X, **_: (1,))
    def probe(X, Y, Z):
        z = c.build(aref.load(X, (0, 0), X.shape), aref.load(Y, (0, 0), Y.shape))
        holder["t"] = z.value.type
        aref.store(Z, (0, 0), aref.zeros(Z.shape, aref.float32))
    probe.specialize(X=x, Y=y, Z=torch.zeros(x.shape))
    t = holder["t"]
    return t.shape, to_torch(DType.int32 if t.dtype is DType.bool_ else t.dtype)


# ------------------------------------------------------------------------------ simulator == interpreter
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("role", ROLES)
def test_simulator_equals_interpreter_bit_for_bit_on_every_op(role, variant):
    inp = all_ops_inputs(role, variant, k_tiles=2)
    kernel = all_ops(role, variant).specialize(**inp)
    expected = {k: v.clone() for k, v in inp.items() if isinstance(v, torch.Tensor)}
    run_kernel(kernel, expected)
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_90a", consumers="plain"))
    got = {k: v.clone() for k, v in inp.items() if isinstance(v, torch.Tensor)}
    res = simulate(ws, got, seed=1)
    assert not res.violations, [str(v) for v in res.violations]
    assert torch.equal(got["Z"], expected["Z"])
    assert torch.isfinite(expected["Z"]).all()


def test_op_cost_reports_each_entrys_declared_unit():
    kernel = all_ops("compute").specialize(**all_ops_inputs("compute"))
    seen = set()
    for op in kernel.all_ops():
        d = ops.entry(op)
        unit = d.cost.unit(op) if callable(d.cost.unit) else d.cost.unit
        assert op_cost(op, H100)[0] == unit
        if op.results and isinstance(op.results[0].type, TileType):
            seen.add((d.key, unit))
    declared = {(d.key, d.cost.declared_unit) for d in ops.entries() if d.has(ops.CUDA_CORE) and d.hints.cases}
    assert declared <= seen
    assert all(d.cost.declared_unit == ("mufu" if d.has(ops.MUFU) else "fma") for d in ops.entries()
               if d.has(ops.CUDA_CORE))


# ------------------------------------------------------------------------------------ backend emission
@pytest.mark.parametrize("role", ROLES)
def test_backend_emits_every_op_in_every_role_it_claims(role, monkeypatch):
    """Source generation on tiles, square tiles and vectors (the compile is test_ops_compile's); every op
    lands in the role it should, and every elementwise op is emitted on each layout."""
    from aref.backend.cute import generate_source
    from aref.backend.cute.analysis import plan_kernel
    looked_up, lookup = set(), ops.cute_emission

    def recording(d, role_key, layout, cls):
        looked_up.add((d.key, role_key, layout))
        return lookup(d, role_key, layout, cls)
    monkeypatch.setattr(ops, "cute_emission", recording)
    for variant in VARIANTS:
        kernel = all_ops(role, variant).specialize(**all_ops_inputs(role, variant))
        ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_90a", consumers="plain"))
        plan = plan_kernel(ws)
        computing = [g for g in plan.groups if g.role != "tma_producer"]
        assert [g.role for g in computing] == ["compute" if role == "compute" else "mma_consumer"]
        regions = {region for region, block in computing[0].gp.regions()
                   for op in block.ops if (ops.has_trait(op, ops.CUDA_CORE) or op.kind is OpKind.TRANSPOSE)
                   and op.results[0].type.space is Space.RMEM}
        if role == "epilogue":
            assert regions == {"post"}
        else:
            assert regions and regions <= {"loop", "prologue", "epilogue"}
        source = generate_source(ws)
        compile(source, "<generated>", "exec")                    # valid Python
    for d in ops.entries():
        if role not in d.hints.roles or d.kind in (OpKind.SELECT, OpKind.SLICE) or not d.cute:
            continue
        layouts = {"acc", "row", "col", "scalar"} if d.has(ops.ELEMENTWISE) else \
            {"acc", "row", "col"} if d.has(ops.REDUCTION) else {"row", "col"} if d.kind is OpKind.ARANGE else set()
        assert layouts <= {layout for key, r, layout in looked_up if key == d.key and r == role}, d.name


def test_integer_tiles_take_floor_division_and_remainder():
    x = torch.arange(-32, 32, dtype=torch.int32).repeat(T, 1)
    y = torch.full((T, T), 7, dtype=torch.int32)
    d = ops.lookup(OpKind.BINARY, "mod")
    out = {"X": x, "Y": y, "Z": torch.zeros(T, T, dtype=torch.int32)}
    run_kernel(one_op(d.hints.cases[0]).specialize(**out), out)
    assert torch.equal(out["Z"], torch.remainder(x, y))
    with pytest.raises(ArefTypeError, match="`%` on float tiles"):
        one_op(d.hints.cases[0]).specialize(X=x.float(), Y=y.float(), Z=torch.zeros(T, T))


def test_casts_round_like_the_gpu():
    """float → int32 truncates and saturates (NaN → 0); fp8 saturates to its largest finite value."""
    from aref.ops import round_to
    x = torch.tensor([3.7, -3.7, 3e9, -3e9, float("nan"), 1e6, -1e6])
    assert round_to(x, TileType((7,), DType.int32)).tolist() == [3, -3, 2 ** 31 - 1, -2 ** 31, 0, 10 ** 6, -10 ** 6]
    assert round_to(x[5:], TileType((2,), DType.float8_e5m2)).float().tolist() == [57344.0, -57344.0]
    assert round_to(x[5:], TileType((2,), DType.float8_e4m3)).float().tolist() == [448.0, -448.0]
