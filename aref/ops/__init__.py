"""The op registry (`aref.ops.registry`): one entry per (OpKind, fn) holding everything the compiler knows
about that op, and the entries themselves, one module per family (`elementwise`, `reduce`, `tiles`,
`memory`). Importing this package registers them all and checks that every OpKind and every fn has exactly
one entry; the passes ask it through this package (`from aref import ops; ops.lookup(...)`).
"""
from __future__ import annotations

from aref.ir import INDEX_MATH, INDEX_SOURCES, SIDE_EFFECTS, OpKind
from aref.ops.registry import (ELEMENTWISE, REDUCTION, VIEW, TILE_SOURCE, SCALAR, CUDA_CORE, MUFU, EXPONENTIAL,
                                 RUNNING_MAX, MEMORY, MMA, CHANNEL, SYNC, PIPELINE, SIDE_EFFECT, PREDICATE,
                                 CROSS_GROUP, TRAITS, ROLES, LAYOUTS, EXPR, VIEWING, REDUCING, STRUCTURAL,
                                 ReduceSpec, Emit, Algebra, Cost, Case, Hints, TORCH, torch_fn, use_language, lang,
                                 OpDef, register, lookup,
                                 entry, entries, fns, kinds_with, has_trait, result_types, round_to, interpret, cost,
                                 compute_class, NoEmission, cute_emission, _REGISTRY)  # noqa: F401  (the registry's API)
from aref.ops import elementwise, memory, reduce, tiles  # noqa: F401  (importing them registers the entries)


def _check_complete() -> None:
    """Every OpKind has an entry; function-carrying kinds have one per fn; side effects agree with the IR."""
    for kind in OpKind:
        if not any(k is kind for (k, _) in _REGISTRY):
            raise AssertionError(f"op kind {kind.value} has no registry entry")
    for d in _REGISTRY.values():
        if (SIDE_EFFECT in d.traits) != (d.kind in SIDE_EFFECTS):
            raise AssertionError(f"op {d.name}: side-effect trait disagrees with aref.ir.SIDE_EFFECTS")
        for e in d.cute:
            if e.form not in (EXPR, VIEWING, REDUCING, STRUCTURAL):
                raise AssertionError(f"op {d.name}: unknown emission form {e.form!r}")
        if ELEMENTWISE in d.traits and d.interpret is None:
            raise AssertionError(f"op {d.name}: elementwise without an interpreter rule")


_check_complete()

UNARY_FNS = fns(OpKind.UNARY)
BINARY_FNS = fns(OpKind.BINARY)
COMPARE_FNS = fns(OpKind.COMPARE)
REDUCE_FNS = fns(OpKind.REDUCE)
SCALAR_FNS = tuple(f for f in fns(OpKind.SCALAR_BINARY) if not lookup(OpKind.SCALAR_BINARY, f).has(PREDICATE))
SCALAR_PREDICATES = tuple(f for f in fns(OpKind.SCALAR_BINARY) if f not in SCALAR_FNS)
MUFU_FNS = frozenset(fn for (k, fn), d in _REGISTRY.items() if k is OpKind.UNARY and MUFU in d.traits)

# ------------------------------------------------------------------------------------- op-kind sets
# The sets of op kinds the passes share, each defined once here from the entries' traits (a pass that needs
# one imports it; a new op kind joins the sets its traits put it in).
VIEWS = kinds_with(VIEW) - kinds_with(MEMORY)     # transpose, expand_dims, slice: a tile's data renamed
SCALARS = kinds_with(SCALAR)                      # const, program_id, scalar_binary: CTA-uniform integers
TILE_SOURCES = kinds_with(TILE_SOURCE)            # full, arange: tiles from attributes alone
INDEX_SOURCE_KINDS = SCALARS | TILE_SOURCES       # where index values come from
CUDA_CORE_KINDS = kinds_with(CUDA_CORE)           # register math of the CUDA cores
ELEMENTWISE_KINDS = kinds_with(ELEMENTWISE)       # per element (select included)
MMA_KINDS = kinds_with(MMA)                       # mma, mma_async
CHANNEL_KINDS = kinds_with(CHANNEL)               # the aref protocol: channel, put, get, consumed
EFFECT_FREE = frozenset(OpKind) - kinds_with(SIDE_EFFECT)   # nothing but their results: dead when unread
CROSS_GROUP_KINDS = kinds_with(CROSS_GROUP)       # what other warp groups observe (the simulator's steps)


def _check_ir_sets() -> None:
    """The IR (below the registry) keeps its own index-math sets: they agree with the traits."""
    if INDEX_SOURCES != INDEX_SOURCE_KINDS:
        raise AssertionError("aref.ir.INDEX_SOURCES disagrees with the registry's scalar and tile-source kinds")
    if INDEX_MATH != kinds_with(CUDA_CORE, ELEMENTWISE) | VIEWS:
        raise AssertionError("aref.ir.INDEX_MATH disagrees with the registry's CUDA-core elementwise kinds and views")


_check_ir_sets()
