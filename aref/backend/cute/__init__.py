"""CuTe DSL backend: Barrier IR → readable, role-based CuTe DSL source → PTX and cubin, for Hopper (sm_90a:
`hopper`, over this package's `analysis`, `role`, `module`) and Blackwell (sm_100a: `sm100`): the module
`ws.arch`'s target names (`aref.target.Target.backend`) plans and generates.

    compile_barrier(ws, out_dir=None, emit="ptx") -> CompileResult

generates one module per kernel specialization (`generate_source`), writes it, and — unless `emit="cute"`
— compiles it with `cute.compile` for `ws.arch` (never the caller's environment) on fake tensors, so no
GPU is needed, keeping the PTX and cubin and reporting ptxas registers / spills and key opcode counts.
Results are cached in memory and on disk under a key that names the CuTe DSL version and hashes the Barrier
IR, the options, that version and this backend's own sources, so a specialization compiles once.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from importlib import import_module
from typing import Any

from aref.backend.cute.analysis import BackendError
from aref.target import TARGETS, target_of

EMITS = ("cute", "ptx", "cubin")
DEFAULT_CACHE = Path.home() / ".cache" / "aref" / "cute"    # `aref.config.kernel_cache` unless changed


@dataclass
class CompileResult:
    """What `compile_barrier` produced. Paths are None for what was not emitted."""

    kernel: str
    arch: str
    source_path: Path
    ptx_path: Path | None = None
    cubin_path: Path | None = None
    registers: int | None = None
    spill_bytes: int | None = None
    instructions: dict[str, int] = field(default_factory=dict)
    compile_seconds: float = 0.0
    register_budgets: dict[str, int] = field(default_factory=dict)
    cache_key: str = ""
    cached: bool = False
    ptxas_log: str = ""
    resource_source: str = "none"                       # where registers / spill_bytes came from (toolchain)
    dsl_version: str = ""                               # the CuTe DSL that generated and compiled the kernel
    compiled: Any = field(default=None, repr=False)     # the DSL's compiled kernel (for launching)

    def to_json(self) -> dict:
        return {
            "arch": self.arch,
            "source_path": str(self.source_path),
            "ptx_path": str(self.ptx_path) if self.ptx_path else None,
            "cubin_path": str(self.cubin_path) if self.cubin_path else None,
            "registers": self.registers,
            "spill_bytes": self.spill_bytes,
            "instructions": dict(self.instructions),
            "compile_seconds": round(self.compile_seconds, 3),
            "register_budgets": dict(self.register_budgets),
            "cache_key": self.cache_key,
            "cached": self.cached,
            "resource_source": self.resource_source,
            "cute_dsl_version": self.dsl_version,
        }


def generate_source(ws, persistent: bool = False, ctas: int = 132, exp2_fma: float = 0.0, raster: int = 0,
                    epilogue_overlap: bool = False, cluster=(1, 1)) -> str:
    """The CuTe DSL module for a Barrier IR kernel (raises `BackendError` for what it cannot express).

    `persistent=True` launches min(`ctas`, tiles) CTAs, one per SM, each walking the tile grid with a
    static round-robin scheduler (`ctas` defaults to the 132 SMs of an H100 SXM).
    `raster` > 1 walks the tiles in groups of that many rows of grid axis 0 (`aref.backend.tile_order`: an L2-friendly
    order), persistent or not (a launch that is not persistent then has one CTA per tile along x).
    `exp2_fma` (sm_100a): the share of a tile's exp2 computed on the FMA units instead of the MUFU (FA4's
    software exp2, which offloads the special-function unit), 0 to 1 in sixteenths.
    `epilogue_overlap` (persistent): one tile's epilogue runs while the next tile's main loop computes — on
    sm_90a two copies of the consumer warp group take alternate tiles (CUTLASS's ping-pong schedule,
    `aref.backend.cute.overlap`); on sm_100a the doubled tensor-memory accumulator of persistent kernels
    already does this, and the option only checks that the accumulator was doubled.
    `cluster` (sm_90a, not persistent): (2, 1) or (1, 2) launches clusters of 2 CTAs along grid axis 0 or 1 that
    multicast the tiles both load (`aref.backend.cute.cluster`); (1, 1): no cluster.
    """
    from aref.backend.cute import cluster as clusters
    target = target_of(ws.arch)
    if clusters.active(cluster) and not target.cluster_multicast:
        multicast = [t.name for t in TARGETS.values() if t.cluster_multicast]
        raise BackendError(f"TMA multicast over a CTA cluster is generated for {' and '.join(multicast)} only, not "
                           f"{ws.arch}", ws.loc, hint=f"compile for {multicast[0]}, or " + clusters.HINT_OFF)
    return backend_of(ws).generate_source(ws, persistent, ctas, exp2_fma, raster, epilogue_overlap, cluster)


def backend_of(ws):
    """The module of `ws.arch`'s templates (`plan`, `generate_source`, `register_budgets`)."""
    return import_module(target_of(ws.arch).backend)


def register_budgets(ws, persistent: bool = False, ctas: int = 132, raster: int = 0,
                     epilogue_overlap: bool = False) -> dict[str, int]:
    """Warp group name -> setmaxnreg budget of the generated kernel (with a Hopper epilogue overlap, the
    budgets of the producer and the consumer's two copies, the copy named `<consumer>_1`)."""
    return backend_of(ws).register_budgets(ws, persistent, ctas, raster, epilogue_overlap)


def _library_fingerprint() -> str:
    """The CuTe DSL version, this backend's sources and the resource model's: a change invalidates cached
    kernels."""
    from aref.backend.cute.toolchain import dsl_version
    h = hashlib.sha256()
    h.update(dsl_version().encode())
    here = Path(__file__).parent
    for path in sorted(here.rglob("*.py")) + sorted((here.parent.parent / "resources").glob("*.py")):
        h.update(path.read_bytes())        # the resource model lays out shared memory and picks TMA or not
    return h.hexdigest()


_FINGERPRINT: str | None = None
_MEMORY: dict[str, CompileResult] = {}


def cache_key(ws, emit: str, persistent: bool = False, ctas: int = 132, exp2_fma: float = 0.0,
              raster: int = 0, epilogue_overlap: bool = False, cluster=(1, 1)) -> str:
    """`cute<DSL version>_<hash>`: the version in clear (so a cache directory says which DSL built it; dots
    become underscores, as the key is part of a module name) and a hash of everything that decides the code."""
    global _FINGERPRINT
    from aref.backend.cute import cluster as clusters
    from aref.backend.cute.toolchain import dsl_version
    from aref.ir.ws import print_ws
    if _FINGERPRINT is None:
        _FINGERPRINT = _library_fingerprint()
    h = hashlib.sha256()
    h.update(print_ws(ws).encode())
    h.update(repr((ws.arch, tuple(ws.grid), sorted((k, repr(v)) for k, v in ws.constexprs.items()),
                   emit != "cute", persistent, ctas if persistent else 0) + ((exp2_fma,) if exp2_fma else ())
                  + (("raster", raster) if raster > 1 else ())
                  + (("epilogue_overlap",) if epilogue_overlap else ())
                  + (("cluster", clusters.normalize(cluster)) if clusters.active(cluster) else ())).encode())
    h.update(_FINGERPRINT.encode())
    version = re.sub(r"\W", "_", dsl_version())
    return f"cute{version}_{h.hexdigest()[:20]}"


def compile_barrier(ws, out_dir: str | os.PathLike | None = None, emit: str = "ptx",
                    cache_dir: str | os.PathLike | None = None, persistent: bool = False,
                    ctas: int = 132, exp2_fma: float = 0.0, raster: int = 0,
                    epilogue_overlap: bool = False, cluster=(1, 1)) -> CompileResult:
    """Generate (and unless `emit="cute"`, compile) the CuTe DSL kernel of Barrier IR `ws`.

    `out_dir` receives the source (and PTX / cubin); without it files stay in the cache directory.
    `persistent` / `ctas` / `exp2_fma` / `raster` / `epilogue_overlap` / `cluster`: see `generate_source`.
    """
    if emit not in EMITS:
        raise BackendError(f"unknown emit {emit!r}", hint=f"choose one of {', '.join(EMITS)}")
    from aref.backend.cute import toolchain

    key = cache_key(ws, emit, persistent, ctas, exp2_fma, raster, epilogue_overlap, cluster)
    from aref.settings import config
    cache = Path(cache_dir or config.kernel_cache) / f"{ws.name}-{key}"
    result = _MEMORY.get(key) or _from_disk(cache, ws, key)
    if result is None:
        source = generate_source(ws, persistent, ctas, exp2_fma, raster, epilogue_overlap, cluster)
        cache.mkdir(parents=True, exist_ok=True)
        src = cache / f"{ws.name}_{key}.py"
        src.write_text(source)
        result = CompileResult(ws.name, ws.arch, src, cache_key=key, dsl_version=toolchain.dsl_version(),
                               register_budgets=register_budgets(ws, persistent, ctas, raster, epilogue_overlap))
        if emit != "cute":
            start = time.perf_counter()
            report = toolchain.compile_source_file(src, ws.arch, cache)
            result.ptx_path = report.ptx_path.replace(cache / f"{ws.name}_{key}.{ws.arch}.ptx")
            if report.cubin_path is not None:
                result.cubin_path = report.cubin_path.replace(cache / f"{ws.name}_{key}.{ws.arch}.cubin")
            result.registers, result.spill_bytes = report.registers, report.spill_bytes
            result.instructions = report.instructions
            result.ptxas_log, result.compiled = report.ptxas_log, report.compiled
            result.resource_source = report.resource_source
            result.compile_seconds = time.perf_counter() - start
        (cache / "result.json").write_text(json.dumps(result.to_json()))
        _MEMORY[key] = result
    else:
        result.cached = True
    return _deliver(result, out_dir)


def _from_disk(cache: Path, ws, key: str) -> CompileResult | None:
    meta = cache / "result.json"
    if not meta.exists():
        return None
    data = json.loads(meta.read_text())
    paths = {k: Path(data[k]) if data.get(k) else None for k in ("source_path", "ptx_path", "cubin_path")}
    if any(p is not None and not p.exists() for p in paths.values()):
        return None
    return CompileResult(ws.name, data["arch"], paths["source_path"], paths["ptx_path"], paths["cubin_path"],
                         data["registers"], data["spill_bytes"], data["instructions"], data["compile_seconds"],
                         data.get("register_budgets", {}), key, resource_source=data.get("resource_source", "none"),
                         dsl_version=data.get("cute_dsl_version", ""))


def _deliver(result: CompileResult, out_dir) -> CompileResult:
    """Copy the artifacts into `out_dir` (the cache keeps its own copy)."""
    if out_dir is None:
        return result
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    copied = {}
    for name in ("source_path", "ptx_path", "cubin_path"):
        p = getattr(result, name)
        if p is not None:
            dst = out / p.name
            if p.resolve() != dst.resolve():
                shutil.copyfile(p, dst)
            copied[name] = dst
    return CompileResult(**{**result.__dict__, **copied})


__all__ = ["BackendError", "CompileResult", "compile_barrier", "generate_source"]
