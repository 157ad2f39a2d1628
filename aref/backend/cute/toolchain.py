"""Compile-and-inspect toolchain for CuTe DSL kernels on a machine without a GPU.

`compile_jit` compiles a `@cute.jit` host function with fake tensors for an explicit architecture, keeps the
PTX and cubin in a chosen directory and reports what a kernel engineer looks at first: registers per thread,
spill bytes and how often the instructions that define a warp-specialized kernel occur in the PTX.

Why the architecture cannot leak in from the environment: the DSL reads `CUTE_DSL_ARCH` (and a few other
`CUTE_DSL_*` variables) once, when `cutlass` is imported. Code generation and the DSL's own arch checks use
the `--gpu-arch` compile option in preference to that variable, so passing it always wins for what is
compiled. Variables that would change *what* is produced (`CUTE_DSL_DRYRUN` produces no PTX,
`CUTE_DSL_COMPILER_OPT` injects flags) are overridden on the DSL's settings object for the duration of one
compile and restored afterwards (`_neutral_dsl_settings`).

Register and spill figures are optional information, never a condition for compiling or launching: they
come from `ptxas -arch=<arch> -v` run on the kept PTX when a `ptxas` on PATH accepts it (the figures a CUDA
engineer quotes), otherwise from the attributes of the cubin the DSL built with its own bundled PTX compiler
(`cubin_resources`). A system `ptxas` older than the DSL's PTX (CUDA 13.0's ptxas rejects the `.version 9.4`
that the DSL built for CUDA 13 emits) therefore costs only the spill figure's precision. `resource_source`
names where the figures came from.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Sequence

from aref.target import ARCHS as SUPPORTED_ARCHS   # the archs the CuTe DSL compiles for: every target's
from aref.target import TARGETS

# PTX opcodes that characterise a warp-specialized kernel; each is counted as a prefix of an instruction
# (so `mbarrier.try_wait.parity` also counts `mbarrier.try_wait.parity.shared::cta.b64`).
KEY_OPCODES = (
    "wgmma.mma_async",
    "wgmma.commit_group",
    "wgmma.wait_group",
    "wgmma.fence",
    "cp.async.bulk.tensor",
    "mbarrier.init",
    "mbarrier.try_wait.parity",
    "mbarrier.arrive.expect_tx",
    "mbarrier.arrive",
    "setmaxnreg.inc",
    "setmaxnreg.dec",
    "setmaxnreg",
    "bar.sync",
    "barrier.sync",
    "bar.arrive",
    "barrier.arrive",
    "fence.proxy.async",
    "stmatrix",
    "ldmatrix",
    "shfl.sync",
    "ex2.approx",
    "tcgen05.mma",
    "tcgen05.ld",
    "tcgen05.st",
    "tcgen05.commit",
    "tcgen05.alloc",
    "tcgen05.dealloc",
    "tcgen05.relinquish_alloc_permit",
    "tcgen05.wait::ld",
    "tcgen05.wait::st",
    "tcgen05.fence",
)


# opcode families only one architecture's kernels contain: each target's tensor-core family (Hopper's wgmma,
# Blackwell's tcgen05)
ARCH_ONLY = {f"{t.mma}.": t.name for t in TARGETS.values()}


def arch_opcodes(arch: str) -> tuple[str, ...]:
    """The `KEY_OPCODES` a kernel for `arch` can contain (the other architecture's tensor-core family left out)."""
    return tuple(op for op in KEY_OPCODES
                 if all(not op.startswith(prefix) or only == arch for prefix, only in ARCH_ONLY.items()))


class ToolchainError(RuntimeError):
    """A compile or inspection step failed; the message says which step and why."""


@dataclass
class CompileReport:
    """What one compile produced and what ptxas says about it.

    `registers`/`spill_bytes` are per thread for the (single) kernel entry of the module; `spill_bytes` is
    stores + loads as ptxas reports them. From the cubin (`resource_source == "cubin"`) it is 0 when the
    kernel has no stack frame (a spill needs one) and None (unknown) otherwise. `resource_source` is "ptxas",
    "cubin" or "none"; when a ptxas on PATH refused the PTX, `ptxas_log` holds its message.
    `instructions` maps each opcode of `KEY_OPCODES` to the number of PTX instructions starting with it.
    """

    arch: str
    ptx_path: Path
    cubin_path: Path | None
    registers: int | None
    spill_bytes: int | None
    instructions: dict[str, int]
    compile_seconds: float
    kernel_name: str = ""
    stack_frame_bytes: int | None = None
    ptxas_log: str = ""
    resource_source: str = "none"
    compiled: Any = field(default=None, repr=False)


@functools.lru_cache(maxsize=None)
def dsl_version() -> str:
    """The installed CuTe DSL's version (the generated code depends on its Python API, which moves between
    minor versions)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("nvidia-cutlass-dsl")
    except PackageNotFoundError:        # installed without metadata (e.g. a copied package folder)
        import cutlass
        return getattr(cutlass, "__version__", "unknown")


# --------------------------------------------------------------------------------------------- compiling
@contextlib.contextmanager
def _neutral_dsl_settings() -> Iterator[None]:
    """Override, for one compile, the DSL settings read from `CUTE_DSL_*` that change what is produced."""
    from cutlass.cutlass_dsl import CuTeDSL

    envar = CuTeDSL._get_dsl().envar
    overrides = {"dryrun": False, "compiler_opt": ""}
    saved = {name: getattr(envar, name) for name in overrides}
    try:
        for name, value in overrides.items():
            setattr(envar, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(envar, name, value)


def compile_jit(
    host_fn: Callable[..., Any],
    args: Sequence[Any],
    arch: str,
    out_dir: str | os.PathLike[str],
    *,
    extra_options: str = "",
    resources: bool = True,
) -> CompileReport:
    """Compile `host_fn(*args)` (a `@cute.jit` function with fake arguments) for `arch` into `out_dir`.

    No GPU is needed. `arch` must be one of `SUPPORTED_ARCHS`; it is passed as `--gpu-arch`, which takes
    precedence over `CUTE_DSL_ARCH`. The directory is created if missing; the kept PTX and cubin are named
    after the host function by the DSL. Raises `ToolchainError` if the DSL fails or writes no PTX.
    `resources=False` (the launch path) skips the register / spill figures and with them any external tool.
    """
    if arch not in SUPPORTED_ARCHS:
        raise ToolchainError(f"unsupported arch {arch!r}; expected one of {SUPPORTED_ARCHS}")
    import cutlass.cute as cute

    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)  # the DSL silently writes nothing into a missing directory
    before = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    options = f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {out} {extra_options}".strip()
    start = time.perf_counter()
    try:
        with _neutral_dsl_settings():
            compiled = cute.compile(host_fn, *args, options=options)
    except Exception as exc:  # the DSL raises several unrelated exception types
        raise ToolchainError(f"CuTe DSL compile for {arch} failed: {exc}") from exc
    seconds = time.perf_counter() - start

    ptx = _fresh_artifact(out, before, f".{arch}.ptx")
    if ptx is None:
        raise ToolchainError(f"compile for {arch} wrote no PTX into {out}")
    cubin = _fresh_artifact(out, before, f".{arch}.cubin")
    report = inspect_ptx(ptx, arch, cubin, resources=resources)
    report.compile_seconds = seconds
    report.compiled = compiled
    return report


def _fresh_artifact(out: Path, before: dict[Path, int], suffix: str) -> Path | None:
    """The newest file ending in `suffix` that this compile created or rewrote."""
    fresh = [
        p for p in out.iterdir()
        if p.name.endswith(suffix) and before.get(p) != p.stat().st_mtime_ns
    ]
    return max(fresh, key=lambda p: p.stat().st_mtime_ns) if fresh else None


# ------------------------------------------------------------------------------------------- inspecting
def inspect_ptx(ptx_path: Path, arch: str, cubin_path: Path | None = None,
                resources: bool = True) -> CompileReport:
    """Report registers, spills and key opcode counts for an existing PTX file (and optional cubin).

    The figures come from `ptxas -v` when a ptxas on PATH accepts the PTX, else from the cubin; a ptxas that
    fails is not an error (its message is kept in `ptxas_log`). `resources=False` reads opcodes only.
    """
    text = Path(ptx_path).read_text()
    entries = re.findall(r"^\.visible \.entry (\S+?)\(", text, flags=re.M)
    registers = spill = frame = None
    log, source = "", "none"
    if resources and shutil.which("ptxas"):
        try:
            registers, spill, frame, log = run_ptxas(ptx_path, arch)
            source = "ptxas"
        except ToolchainError as err:
            log = str(err)
    if resources and source == "none" and cubin_path is not None:
        registers, frame = cubin_resources(cubin_path)
        spill = 0 if frame == 0 else None
        source = "cubin" if registers is not None else "none"
    return CompileReport(
        arch=arch,
        ptx_path=Path(ptx_path),
        cubin_path=Path(cubin_path) if cubin_path else None,
        registers=registers,
        spill_bytes=spill,
        instructions=count_opcodes(text),
        compile_seconds=0.0,
        kernel_name=entries[0] if entries else "",
        stack_frame_bytes=frame,
        ptxas_log=log,
        resource_source=source,
    )


def count_opcodes(ptx_text: str, opcodes: Sequence[str] = KEY_OPCODES) -> dict[str, int]:
    """Count PTX instructions whose opcode starts with each of `opcodes` followed by `.` or `::` (so
    `tcgen05.fence` counts `tcgen05.fence::before_thread_sync`; predicates like `@%p1` allowed)."""
    ops = []
    for line in ptx_text.splitlines():
        line = line.strip()
        if not line or line.startswith(("//", ".", "{", "}")) or line.endswith(":"):
            continue
        if line.startswith("@"):
            line = line.split(None, 1)[1] if " " in line else ""
        ops.append(line.split(None, 1)[0].rstrip(";") if line else "")
    return {op: sum(1 for o in ops if o == op or o.startswith((op + ".", op + "::"))) for op in opcodes}


_PTXAS_FUNC = re.compile(r"Function properties for (\S+)")
_PTXAS_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")


def run_ptxas(ptx_path: Path, arch: str) -> tuple[int, int, int, str]:
    """Run `ptxas -arch=<arch> -v`; return (max registers, spill bytes, stack frame bytes, log).

    With several entries the maxima are returned, since a spill anywhere is a spill.
    """
    cmd = ["ptxas", f"-arch={arch}", "-v", str(ptx_path), "-o", os.devnull]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:              # on PATH but not runnable
        raise ToolchainError(f"cannot run ptxas: {exc}") from exc
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise ToolchainError(f"ptxas failed on {ptx_path}:\n{log}")
    regs = [int(m) for m in _PTXAS_REGS.findall(log)]
    spills = [(int(f), int(s) + int(l)) for f, s, l in _PTXAS_SPILL.findall(log)]
    if not regs or not spills:
        raise ToolchainError(f"could not read register/spill figures from ptxas output:\n{log}")
    return max(regs), max(s for _, s in spills), max(f for f, _ in spills), log


# ELF constants for reading a cubin without CUDA tools: the `.nv.info` sections hold (format, attribute, size)
# records; per-function attributes are SVAL records whose payload is (symbol index, value) as two u32.
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 4


def cubin_attributes(cubin_path: Path) -> dict[int, list[int]]:
    """Every per-function (symbol, value) attribute of the `.nv.info*` sections of a 64-bit little-endian cubin,
    as attribute id -> values (one per function)."""
    data = Path(cubin_path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ToolchainError(f"{cubin_path} is not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    str_off = sections[shstrndx][4]

    def name(sec: tuple) -> str:
        start = str_off + sec[0]
        return data[start:data.index(b"\0", start)].decode()

    attrs: dict[int, list[int]] = {}
    for sec in sections:
        if not name(sec).startswith(".nv.info"):
            continue
        pos, end = sec[4], sec[4] + sec[5]
        while pos + 4 <= end:
            fmt, attr, size = data[pos], data[pos + 1], struct.unpack_from("<H", data, pos + 2)[0]
            if fmt == _EIFMT_SVAL:
                if size == 8:
                    attrs.setdefault(attr, []).append(struct.unpack_from("<I", data, pos + 8)[0])
                pos += 4 + size
            else:  # NVAL/BVAL/HVAL carry at most two bytes in the header itself
                pos += 4
    return attrs


def cubin_resources(cubin_path: Path) -> tuple[int | None, int | None]:
    """(registers per thread, stack frame bytes) of the cubin's kernels (maxima), from EIATTR_REGCOUNT and
    EIATTR_FRAME_SIZE; None where the attribute is absent."""
    attrs = cubin_attributes(cubin_path)
    regs, frames = attrs.get(_EIATTR_REGCOUNT), attrs.get(_EIATTR_FRAME_SIZE)
    return (max(regs) if regs else None), (max(frames) if frames else None)


def cubin_register_count(cubin_path: Path) -> int | None:
    """The largest EIATTR_REGCOUNT of the cubin's kernels."""
    return cubin_resources(cubin_path)[0]


# ----------------------------------------------------------------------------------- generated sources
def load_module_from_path(path: str | os.PathLike[str], module_name: str | None = None) -> ModuleType:
    """Import a generated source file as a module (registered in `sys.modules` so the DSL can inspect it)."""
    path = Path(path).resolve()
    name = module_name or f"aref_generated_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ToolchainError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the DSL's AST preprocessor looks functions up through their module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[name]
        raise
    return module


def compile_source_file(
    path: str | os.PathLike[str],
    arch: str,
    out_dir: str | os.PathLike[str],
    *,
    entry: str = "host",
    fake_args: str = "make_fake_args",
) -> CompileReport:
    """Load a generated module and compile its entry point.

    The module must define `entry` (a `@cute.jit` host function) and `fake_args()` returning the fake
    arguments to compile it with.
    """
    module = load_module_from_path(path)
    for attr in (entry, fake_args):
        if not hasattr(module, attr):
            raise ToolchainError(f"{path} defines no `{attr}`")
    return compile_jit(getattr(module, entry), getattr(module, fake_args)(), arch, out_dir)
