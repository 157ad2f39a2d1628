"""Run by tests/test_warm_start.py and bench/warm_start.py in a fresh process: make one specialization of
examples/gemm.py launch-ready for sm_90a (no launch, no GPU needed) with `aref.config.cache_dir` = CACHE, and
print as JSON how often the CuTe DSL compiler ran (`cute.compile` calls, counted by wrapping it), how many
compiled functions were loaded from the disk cache, and the seconds to launch-ready.

    python tests/warm_start_check.py CACHE [M]
"""
import json
import os
import sys
import time

START = time.perf_counter()
import cutlass.cute as cute  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CALLS = []
_compile = cute.compile


def _counting(*args, **kwargs):
    CALLS.append(1)
    return _compile(*args, **kwargs)


cute.compile = _counting

import aref  # noqa: E402
from aref.runtime.harness import load_example  # noqa: E402
from aref.backend.cute import binary_cache  # noqa: E402
from aref.runtime import warm  # noqa: E402


def main() -> None:
    aref.config.cache_dir = sys.argv[1]
    m = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    imported = time.perf_counter() - START
    ex = load_example(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "gemm.py"))
    with torch.device("meta"):
        inputs = ex.inputs("small", M=m)
    fn, seconds = warm.prepare(ex.kernel, **inputs, arch="sm_90a")
    print(json.dumps({"cute_compile_calls": len(CALLS), "compiler_runs": binary_cache.compiler_runs(),
                      "loads": binary_cache.loads(), "launch_ready_s": round(seconds, 4),
                      "import_s": round(imported, 3), "compiled": type(fn).__name__}))


if __name__ == "__main__":
    main()
