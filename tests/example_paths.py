"""Paths and names shared by the test modules (kept out of conftest.py so test packages cannot clash)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
GOLDEN = os.path.join(ROOT, "tests", "golden")
EXAMPLE_NAMES = ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd"]
# The examples size their rings so the copies in flight cover the machine model's memory latency (STAGES
# slots). Tests that explore every interleaving or compile arbitrary partitions use the shallower rings the
# examples had before: the same synchronization (slot wrap-around, parity flips) in smaller state spaces
# and shared-memory footprints.
SHALLOW_RINGS = {"gemm": dict(STAGES=3), "dual_gemm": dict(STAGES=3), "gemm_reduce": dict(STAGES=3),
                 "attention_fwd": dict(STAGES=2), "attention_bwd": dict(STAGES=2)}


def example_path(name: str) -> str:
    return os.path.join(EXAMPLES, f"{name}.py")
