"""Barrier IR of the examples for sm_100a and its compiled kernels, made once per test session."""
import functools

from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from example_paths import example_path

EXAMPLES = ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd"]
PARTITIONS = ["heuristic", "optimal"]


@functools.lru_cache(maxsize=None)
def sm100_ir(example: str, partition: str = "heuristic", **overrides):
    name, _, kernel_name = example.partition(":")          # `rowwise:softmax`: one kernel of a file
    ex = load_example(example_path(name) + (f":{kernel_name}" if kernel_name else ""))
    kernel = ex.kernel.specialize(**ex.inputs(**overrides))
    return lower_to(kernel, "barrier", CompileOptions(arch="sm_100a", partition=partition))


_COMPILED = {}


def sm100_compiled(cache_dir, example: str, partition: str = "heuristic", **overrides):
    """(Barrier IR, CompileResult) of an example for sm_100a, compiled once per session into `cache_dir`."""
    from aref.backend.cute import compile_barrier
    key = (example, partition, tuple(sorted(overrides.items())))
    if key not in _COMPILED:
        ws = sm100_ir(example, partition, **overrides)
        _COMPILED[key] = (ws, compile_barrier(ws, cache_dir=cache_dir))
    return _COMPILED[key]
