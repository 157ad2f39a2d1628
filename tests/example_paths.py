"""Paths and names shared by the test modules (kept out of conftest.py so test packages cannot clash)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
GOLDEN = os.path.join(ROOT, "tests", "golden")
EXAMPLE_NAMES = ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd"]


def example_path(name: str) -> str:
    return os.path.join(EXAMPLES, f"{name}.py")
