"""Paths and names shared by the test modules (kept out of conftest.py so test packages cannot clash)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
GOLDEN = os.path.join(ROOT, "tests", "golden")
EXAMPLE_NAMES = ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd"]


def example_path(name: str) -> str:
    return os.path.join(EXAMPLES, f"{name}.py")


def source_line(path: str, text: str) -> int:
    """The 1-based number of the one line of `path` that contains `text` (tests name lines by their code, so
    editing an example or a test file cannot silently shift what they check)."""
    with open(path) as f:
        hits = [i for i, line in enumerate(f, 1) if text in line]
    assert len(hits) == 1, f"{text!r} occurs on lines {hits} of {path}, expected exactly one"
    return hits[0]
