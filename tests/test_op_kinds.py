"""The op-kind sets the passes share are defined once, from the registry's traits (`aref.ops`), and no module
writes one out again (issue 26)."""
from __future__ import annotations

import ast
import os

from aref import ops
from aref.ir import INDEX_MATH, INDEX_SOURCES, OpKind

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("aref", "partition", "pipeline", "solve")
K = OpKind
# each set as it is derived, and (spelled out) what it holds today
SETS = {
    "VIEWS": (ops.VIEWS, {K.TRANSPOSE, K.EXPAND_DIMS, K.SLICE}),
    "SCALARS": (ops.SCALARS, {K.CONST, K.PROGRAM_ID, K.SCALAR_BINARY}),
    "TILE_SOURCES": (ops.TILE_SOURCES, {K.FULL, K.ARANGE}),
    "INDEX_SOURCE_KINDS": (ops.INDEX_SOURCE_KINDS, {K.CONST, K.PROGRAM_ID, K.SCALAR_BINARY, K.FULL, K.ARANGE}),
    "CUDA_CORE_KINDS": (ops.CUDA_CORE_KINDS, {K.UNARY, K.BINARY, K.COMPARE, K.WHERE, K.REDUCE, K.CAST}),
    "ELEMENTWISE_KINDS": (ops.ELEMENTWISE_KINDS, {K.UNARY, K.BINARY, K.COMPARE, K.WHERE, K.CAST, K.SELECT}),
    "MMA_KINDS": (ops.MMA_KINDS, {K.MMA, K.MMA_ASYNC}),
    "CHANNEL_KINDS": (ops.CHANNEL_KINDS, {K.CHANNEL, K.PUT, K.GET, K.CONSUMED}),
    "CROSS_GROUP_KINDS": (ops.CROSS_GROUP_KINDS, {K.MBAR_WAIT, K.MBAR_ARRIVE, K.MBAR_EXPECT_TX, K.TMA_LOAD,
                                                  K.SLOT_STORE, K.SLOT_READ, K.MMA_ASYNC, K.MMA_WAIT, K.MMA_COMMIT,
                                                  K.TMEM_DEALLOC, K.NAMED_BAR_SYNC, K.NAMED_BAR_ARRIVE,
                                                  K.SETMAXNREG}),
    "EFFECT_FREE": (ops.EFFECT_FREE, {K.CONST, K.PROGRAM_ID, K.SCALAR_BINARY, K.LOAD, K.FULL, K.ARANGE,
                                      K.TRANSPOSE, K.EXPAND_DIMS, K.SLICE, K.MMA, K.UNARY, K.BINARY, K.COMPARE,
                                      K.WHERE, K.REDUCE, K.CAST, K.SELECT}),
    "CUDA_CORE_KINDS & ELEMENTWISE_KINDS": (ops.CUDA_CORE_KINDS & ops.ELEMENTWISE_KINDS,
                                            {K.UNARY, K.BINARY, K.COMPARE, K.WHERE, K.CAST}),
}


def test_the_sets_derive_from_the_traits():
    for name, (derived, today) in SETS.items():
        assert derived == frozenset(today), name


def test_the_passes_use_the_registry_sets():
    from aref.backend.cute import role
    from aref.passes import cse, squeeze
    from aref.sim import program
    from partition import dimsplit, model
    from pipeline import sm100
    assert cse.PURE is ops.EFFECT_FREE and cse.MERGED == ops.VIEWS | {K.CAST}
    assert model.REPLICATED == ops.INDEX_SOURCE_KINDS | ops.VIEWS | {K.CHANNEL, K.GET, K.CONSUMED}
    assert role.PURE == ops.SCALARS | ops.VIEWS | {K.SLOT_READ, K.SELECT, K.FULL}
    assert program.VISIBLE is ops.CROSS_GROUP_KINDS and program.COMPUTE | program.VISIBLE | ops.CHANNEL_KINDS \
        == frozenset(OpKind) and not program.COMPUTE & program.VISIBLE
    assert sm100.VIEWS is ops.VIEWS and squeeze.ELEMENTWISE is ops.ELEMENTWISE_KINDS
    assert dimsplit.ELEMENTWISE == SETS["CUDA_CORE_KINDS & ELEMENTWISE_KINDS"][0]
    # the IR, below the registry, keeps its own index-math sets; importing `aref.ops` checks they agree
    assert INDEX_SOURCES == ops.INDEX_SOURCE_KINDS and INDEX_MATH == ops.CUDA_CORE_KINDS & ops.ELEMENTWISE_KINDS \
        | ops.VIEWS


def kind_literals(source: str) -> list[tuple[int, str]]:
    """(line, set name) for every tuple, list or set literal of `OpKind.X` members equal to a registry set."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.Set, ast.List)) and len(node.elts) > 1 and all(
                isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "OpKind"
                for e in node.elts):
            kinds = frozenset(OpKind[e.attr] for e in node.elts)
            out += [(node.lineno, name) for name, (derived, _) in SETS.items() if kinds == derived]
    return out


def test_no_module_writes_a_registry_set_out():
    found = []
    for package in PACKAGES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, package)):
            for f in files:
                path = os.path.relpath(os.path.join(dirpath, f), ROOT).replace(os.sep, "/")
                if not f.endswith(".py") or path == "aref/ir/__init__.py":    # below the registry: checked above
                    continue
                found += [f"{path}:{line}: {name}" for line, name in
                          kind_literals(open(os.path.join(ROOT, path), encoding="utf-8").read())]
    assert not found, "use the set of `aref.ops`:\n" + "\n".join(found)


def test_the_scan_finds_a_written_out_set():
    src = "VIEWS = (OpKind.TRANSPOSE, OpKind.SLICE, OpKind.EXPAND_DIMS)\nx = k in (OpKind.MMA_ASYNC, OpKind.MMA)\n"
    assert kind_literals(src) == [(1, "VIEWS"), (2, "MMA_KINDS")]
