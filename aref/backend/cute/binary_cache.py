"""Warm starts: the launch-ready compiled function of a specialization, kept on disk as an object file.

`cute.compile` of a generated module takes 0.5–3 s per specialization (the DSL traces the Python host and kernel
functions into MLIR, lowers it and runs ptxas); FlashAttention-4's users saw minutes per training step from it
until a persistent cache became the default. What a new process needs to launch is the compiled host function
and its cubin, which the DSL exports as one relocatable object (`JitCompiledFunction.export_to_c` /
`dump_to_object`) and loads back with `cutlass.cute.runtime.load_module` (an in-process JIT link, ~20 ms). No
GPU is needed for either: the object is compiled for the target arch from the module's fake arguments, so a
CPU machine can fill the cache that GPU processes then only load.

The object sits beside the generated source in the specialization's cache entry (`aref.settings`), so it is
keyed as the entry is: CuTe DSL version, Barrier IR, compile options, backend sources. A file that cannot be
loaded (truncated, another DSL build) is compiled again and replaced; writes go through a temporary file and an
atomic rename, so concurrent processes (the ranks of one job) never read a half-written object.

`compiler_runs()` counts the CuTe DSL compiles this module ran in this process (what the warm-start test and
`bench/warm_start.py` read).
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import tempfile
from pathlib import Path

_COMPILES = 0
_LOADS = 0
_RUNTIME_LOADED = False


def compiler_runs() -> int:
    """How many times this process ran the CuTe DSL compiler for a launch."""
    return _COMPILES


def loads() -> int:
    """How many compiled functions this process loaded from the disk cache."""
    return _LOADS


def object_path(source_path: Path, arch: str) -> Path:
    """Where the exported launch object of a generated module lives (beside the module)."""
    return source_path.with_name(f"{source_path.stem}.{arch}.launch.o")


def _prefix(source_path: Path) -> str:
    """The object's symbol prefix: a C identifier unique to the specialization."""
    return "aref_" + re.sub(r"\W", "_", source_path.stem)


def _load_runtime() -> None:
    """Make the DSL runtime's symbols global: exporting links the host function against them."""
    global _RUNTIME_LOADED
    if _RUNTIME_LOADED:
        return
    from cutlass.runtime import find_runtime_libraries
    for path in find_runtime_libraries(enable_tvm_ffi=False):
        if Path(path).exists():
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    _RUNTIME_LOADED = True


def compiled_function(source_path: Path, arch: str):
    """The launch-ready compiled host function of the generated module at `source_path` for `arch`: loaded
    from its exported object when there is one, else compiled (from the module's fake arguments) and
    exported for the next process."""
    global _COMPILES, _LOADS
    obj = object_path(Path(source_path), arch)
    if obj.exists():
        try:
            fn = _load(obj)
            _LOADS += 1
            os.utime(obj)                               # least-recently-used order for the size limit
            return fn
        except Exception:  # noqa: BLE001 - an unreadable object is rebuilt, whatever the DSL raised
            pass
    from aref.backend.cute import toolchain
    module = toolchain.load_module_from_path(source_path)
    report = toolchain.compile_jit(module.host, module.make_fake_args(), arch, Path(source_path).parent / "gpu",
                                   resources=False)
    _COMPILES += 1
    _export(report.compiled, obj)
    return report.compiled


def _load(obj: Path):
    from cutlass.cute.runtime import load_module
    _load_runtime()
    return getattr(load_module(str(obj)), _prefix_of_object(obj))


def _prefix_of_object(obj: Path) -> str:
    stem = obj.name[: -len(".launch.o")]
    return _prefix(obj.with_name(stem.rsplit(".", 1)[0] + ".py"))


def _export(compiled, obj: Path) -> None:
    """Write the object atomically; a DSL that cannot export only costs the next process a compile."""
    _load_runtime()
    prefix = _prefix_of_object(obj)
    try:
        with tempfile.TemporaryDirectory(dir=obj.parent) as tmp:
            compiled.export_to_c(tmp, "launch", prefix)
            os.replace(Path(tmp) / "launch.o", obj)
    except Exception:  # noqa: BLE001 - the launch itself does not depend on the export
        return
    enforce_size_limit()


def enforce_size_limit(root: Path | None = None, limit: int | None = None) -> list[Path]:
    """Remove the least recently used cache entries (directories under `root`) until the cache holds at most
    `limit` bytes (defaults: `aref.config`); returns the removed entries."""
    from aref.settings import config
    root = Path(root or config.kernel_cache)
    limit = config.cache_size_limit if limit is None else limit
    if not limit or not root.is_dir():
        return []
    entries = []
    for d in root.iterdir():
        if d.is_dir():
            files = [f for f in d.rglob("*") if f.is_file()]
            size = sum(f.stat().st_size for f in files)
            used = max((f.stat().st_mtime for f in files), default=d.stat().st_mtime)
            entries.append((used, size, d))
    total = sum(size for _, size, _ in entries)
    removed = []
    for used, size, d in sorted(entries):
        if total <= limit:
            break
        shutil.rmtree(d, ignore_errors=True)
        total -= size
        removed.append(d)
    if removed:
        from aref.backend import cute
        cute._MEMORY.clear()          # the in-memory results may point into removed entries
    return removed
