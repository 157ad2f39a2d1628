"""One `Target` per architecture aref compiles for: what the passes may ask about the hardware.

A target is a frozen record of an arch's name, compute capability, per-SM limits and feature flags, and the
modules that hold its arch-specific lowering and backend. The compiler asks it questions
(`target.has_tensor_memory`, `target.mma == "tcgen05"`, `target.cluster_multicast`, ...) instead of comparing
arch names, and reads the hardware limits from it, so a third arch is one more record here (plus its lowering
and backend modules), not a hunt through the passes. The devices of an arch (H100 and H200 are both sm_90a)
are the machine models of `aref.target.machine`, each with its own calibration file; `default_device` is
the one a compile for the arch is timed on.

Sources: PTX ISA 8.x (setmaxnreg: multiples of 8 in 24..256; tcgen05: 128 lanes x 512 columns of 32-bit
tensor memory, allocated in powers of two from 32 columns), CUDA programming guide (compute capability 9.0
and 10.0: 64K 32-bit registers per SM, at most 255 per thread, 227 KB of opt-in shared memory per block),
DeepSeek-V3 technical report §3.3.2 (Hopper's fp8 wgmma keeps ~14 bits of its running sum).
"""
from __future__ import annotations

from dataclasses import dataclass

from aref.errors import ArefError


@dataclass(frozen=True)
class Target:
    """One architecture: its name, limits, features and where its arch-specific code lives."""

    name: str                          # "sm_90a": the CompileOptions / command-line spelling
    family: str                        # "Hopper", "Blackwell" (for messages)
    compute_capability: tuple[int, int]
    mma: str                           # the tensor-core instruction family: "wgmma" (a warp group issues,
                                       # accumulators in registers) or "tcgen05" (one thread issues,
                                       # accumulators in tensor memory, completion through tcgen05.commit)
    tma: bool                          # bulk tensor copies (cp.async.bulk.tensor) between global and shared memory
    tmem_lanes: int                    # tensor memory: lanes x 32-bit columns per SM (0: none)
    tmem_columns: int
    tmem_min_alloc: int                # tcgen05.alloc: a power of two of columns, at least this many
    setmaxnreg: bool                   # warp groups move registers between them at run time
    setmaxnreg_min: int
    setmaxnreg_max: int
    setmaxnreg_step: int
    registers_per_sm: int              # 32-bit registers per SM (and per CTA at one CTA per SM)
    max_regs_per_thread: int           # what a launch may give a thread
    smem_per_cta: int                  # opt-in dynamic shared memory per CTA, bytes
    cluster_multicast: bool            # this target's templates launch CTA clusters that TMA-multicast the tiles
                                       # they share (`aref.backend.cute.cluster`)
    fp8_accumulator_bits: int          # bits of an fp8 MMA's running sum the tensor core keeps (32: full fp32)
    lowering: str                      # module of the arch's aref-lowering rules (`lower_kernel(ws)`)
    backend: str                       # module of the arch's CuTe DSL templates (`generate_source`, `plan`)
    devices: tuple[str, ...]           # machine models of this arch (`aref.target.machine.DEVICES`)
    default_device: str                # the one a compile for the arch is timed on

    @property
    def has_tensor_memory(self) -> bool:
        """Accumulators and hand-offs may live in tensor memory (tcgen05.ld / tcgen05.st move them)."""
        return self.tmem_columns > 0

    def tmem_allocation(self, columns: int) -> int:
        """The columns tcgen05.alloc takes for `columns`: a power of two, at least `tmem_min_alloc` (0 on a target
        without tensor memory)."""
        if not self.has_tensor_memory:
            return 0
        p = self.tmem_min_alloc
        while p < columns:
            p *= 2
        return p

    @property
    def reduced_fp8_accumulator(self) -> bool:
        """Does an fp8 MMA accumulate in less than fp32 (where `promote_every` rewrites the loop)?"""
        return self.fp8_accumulator_bits < 32


SM_90A = Target(
    name="sm_90a", family="Hopper", compute_capability=(9, 0), mma="wgmma", tma=True,
    tmem_lanes=0, tmem_columns=0, tmem_min_alloc=0,
    setmaxnreg=True, setmaxnreg_min=24, setmaxnreg_max=256, setmaxnreg_step=8,
    registers_per_sm=65536, max_regs_per_thread=255, smem_per_cta=227 * 1024,
    cluster_multicast=True, fp8_accumulator_bits=14,
    lowering="aref.lower.hopper", backend="aref.backend.cute.hopper",
    devices=("H100", "H200"), default_device="H100",
)

SM_100A = Target(
    name="sm_100a", family="Blackwell", compute_capability=(10, 0), mma="tcgen05", tma=True,
    tmem_lanes=128, tmem_columns=512, tmem_min_alloc=32,
    setmaxnreg=True, setmaxnreg_min=24, setmaxnreg_max=256, setmaxnreg_step=8,
    registers_per_sm=65536, max_regs_per_thread=255, smem_per_cta=227 * 1024,
    # the hardware multicasts too; the Blackwell templates have no cluster launch yet
    cluster_multicast=False, fp8_accumulator_bits=32,
    lowering="aref.lower.sm100", backend="aref.backend.cute.sm100",
    devices=("B200",), default_device="B200",
)

# The registry: every arch list of the compiler (command-line choices, supported archs, capabilities) is this.
TARGETS: dict[str, Target] = {t.name: t for t in (SM_90A, SM_100A)}
ARCHS: tuple[str, ...] = tuple(TARGETS)
DEFAULT_ARCH = SM_90A.name             # what a compile without `arch` targets


def target_of(arch: str) -> Target:
    """The target named `arch` (an `ArefError` listing the known ones otherwise)."""
    try:
        return TARGETS[arch]
    except (KeyError, TypeError):
        raise ArefError(f"unsupported arch {arch!r}", hint=f"choose one of {', '.join(ARCHS)}") from None


def arch_of_capability(capability: tuple[int, int]) -> str | None:
    """The arch aref compiles for a GPU of this compute capability, or None where it has no target."""
    for t in TARGETS.values():
        if t.compute_capability == tuple(capability):
            return t.name
    return None


def uniform(figure: str):
    """A limit every target shares (the register file, setmaxnreg's range), for modules that count it
    without an arch at hand; an import-time error the day a target differs, so that module learns to ask its
    kernel's target instead."""
    values = {getattr(t, figure) for t in TARGETS.values()}
    if len(values) != 1:
        raise AssertionError(f"targets differ in {figure} ({values}): read it from the kernel's target")
    return values.pop()
