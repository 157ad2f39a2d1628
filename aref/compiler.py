"""The compiler driver: the ordered list of passes from Tile IR down, steered by `CompileOptions`.

Each step is a pure function of the previous stage's IR (DESIGN.md's one-directional data flow). Later
stages (partitioned, pipelined, barrier) are appended here as they land; the CLI lists `STAGES` from this
module, so a new stage shows up in `aref ir --stage` without touching the CLI.
"""
from __future__ import annotations

from dataclasses import dataclass

from aref.errors import ArefError
from aref.ir import Kernel
from aref.printer import print_kernel
from aref.verify import verify

ARCHS = ("sm_90a", "sm_100a")


@dataclass(frozen=True)
class CompileOptions:
    """Everything that steers compilation; no environment variable or global state does."""

    arch: str = "sm_90a"
    partition: str = "heuristic"      # "heuristic" (Tawa) or "optimal" (Twill solver)
    verify_each_stage: bool = True    # run the verifier between passes (tests keep it on)

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ArefError(f"unsupported arch {self.arch!r}", hint=f"choose one of {', '.join(ARCHS)}")
        if self.partition not in ("heuristic", "optimal"):
            raise ArefError(f"unknown partition mode {self.partition!r}", hint="use 'heuristic' or 'optimal'")


def _tile(kernel: Kernel, options: CompileOptions) -> Kernel:
    if options.verify_each_stage:
        verify(kernel)
    return kernel


# (stage name, pass producing it from the previous stage's IR, printer of that stage)
STEPS = [
    ("tile", _tile, print_kernel),
]
STAGES = tuple(name for name, _, _ in STEPS)


def lower_to(kernel: Kernel, stage: str, options: CompileOptions | None = None):
    """Run the passes up to and including `stage`; return that stage's IR."""
    options = options or CompileOptions()
    if stage not in STAGES:
        raise ArefError(f"unknown stage {stage!r}", hint=f"stages: {', '.join(STAGES)}")
    ir = kernel
    for name, step, _ in STEPS:
        ir = step(ir, options)
        if name == stage:
            return ir
    raise AssertionError("unreachable")


def print_stage(ir, stage: str) -> str:
    return dict((n, p) for n, _, p in STEPS)[stage](ir)
