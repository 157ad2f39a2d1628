"""Process-wide run-time settings: where compiled kernels are cached on disk and how large that cache may grow.

    import aref
    aref.config.cache_dir = "/scratch/aref-cache"      # before the first compile of the process
    aref.config.cache_size_limit = 8 << 30             # bytes; least recently used entries go first

`aref.config` is a `RuntimeConfig` (an options dataclass, like `CompileOptions`): code sets its fields, nothing
steers compilation from the environment. The one environment variable read is `AREF_CACHE_DIR`, and only as
the default of `cache_dir` (as `TRITON_CACHE_DIR` / `TORCHINDUCTOR_CACHE_DIR` are for those compilers), so a
cluster job can point every rank at one shared directory without code.

What the cache holds, per kernel specialization (a directory named `<kernel>-cute<DSL version>_<hash>`, the hash
over the Barrier IR, the compile options, the DSL version and the backend's sources): the generated CuTe DSL
module, its PTX / cubin when compiled for inspection, and for launches the exported object file of the
compiled host function with its cubin (`<name>.<arch>.launch.o`), which a new process loads in milliseconds
instead of running the CuTe DSL compiler again (`aref.runtime.binary_cache`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def default_cache_dir() -> Path:
    """`$AREF_CACHE_DIR` if set, else `~/.cache/aref`."""
    env = os.environ.get("AREF_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "aref"


@dataclass
class RuntimeConfig:
    """`cache_dir`: the root of aref's on-disk caches (compiled kernels live under `cache_dir/cute`).
    `cache_size_limit`: the most bytes the compiled-kernel cache may hold; after a new entry is written the
    least recently used entries are removed until it fits (0 or None: no limit)."""

    cache_dir: Path = field(default_factory=default_cache_dir)
    cache_size_limit: int | None = 4 << 30

    @property
    def kernel_cache(self) -> Path:
        """Where compiled kernels are kept."""
        return Path(self.cache_dir).expanduser() / "cute"


config = RuntimeConfig()
