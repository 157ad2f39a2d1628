"""Shared fixtures of the CuTe backend tests: Barrier IR of the examples and compiled kernels, each made once
per test session (compiles take 0.3–2 s each; the disk cache lives in a session temporary directory so a
run always compiles what it checks)."""
import functools

import pytest

from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example

def config_id(cfg):
    return "-".join(cfg)


@functools.lru_cache(maxsize=None)
def barrier_ir(example: str, partition: str = "heuristic", consumers: str = "auto", size: str = "small",
               **overrides):
    ex = load_example(f"examples/{example}.py")
    kernel = ex.kernel.specialize(**ex.inputs(size, **overrides))
    return lower_to(kernel, "barrier", CompileOptions(arch="sm_90a", partition=partition, consumers=consumers))


_COMPILED = {}


@pytest.fixture(scope="session")
def backend_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cute_cache")


@pytest.fixture(scope="session")
def compiled(backend_cache):
    """`compiled(example, partition, consumers, **overrides)` → CompileResult, once per session."""
    from aref.backend.cute import compile_barrier

    def get(example, partition="heuristic", consumers="auto", size="small", **overrides):
        key = (example, partition, consumers, size, tuple(sorted(overrides.items())))
        if key not in _COMPILED:
            ws = barrier_ir(example, partition, consumers, size, **overrides)
            _COMPILED[key] = (ws, compile_barrier(ws, cache_dir=backend_cache))
        return _COMPILED[key]
    return get


def with_budgets(ws, consumer_regs: int, producer_regs: int = 40):
    """A copy of `ws` with other register budgets (and matching setmaxnreg ops).

    The optimal partitioner's register model currently gives consumer groups budgets below their
    accumulators (reported by the backend as a clear error); tests use this to compile its Barrier IR
    with budgets a CUTLASS kernel would use.
    """
    import copy
    import dataclasses

    from aref.ir import OpKind, SetMaxNRegAttrs
    from aref.lower import launch_registers

    ws = copy.deepcopy(ws)
    base = launch_registers(ws)
    for gp in ws.groups:
        regs = producer_regs if gp.group.role == "producer" else consumer_regs
        gp.group = dataclasses.replace(gp.group, regs=regs)
        gp.pre.ops = [op for op in gp.pre.ops if op.kind is not OpKind.SETMAXNREG]
        if regs != base:
            from aref.ir import Op
            gp.pre.ops.insert(0, Op(OpKind.SETMAXNREG, (), (), SetMaxNRegAttrs(regs, regs > base), ws.loc))
    return ws
