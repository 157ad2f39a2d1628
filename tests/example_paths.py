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


def source_line(path: str, text: str) -> int:
    """The 1-based number of the one line of `path` that contains `text` (tests name lines by their code, so
    editing an example or a test file cannot silently shift what they check)."""
    with open(path) as f:
        hits = [i for i, line in enumerate(f, 1) if text in line]
    assert len(hits) == 1, f"{text!r} occurs on lines {hits} of {path}, expected exactly one"
    return hits[0]


def poison_outputs(ex, kernel, inputs: dict) -> None:
    """Fill the outputs of `inputs` (those `ex.reference_fn` returns) with 7.0, so that a program that skips a
    store fails (at trip count 0 the expected outputs are zeros, like freshly allocated ones). Reduce-add
    targets of Tile IR `kernel` keep their initial contents, which the reduction adds to."""
    from aref.ir import OpKind
    accumulated = {op.operands[0] for op in kernel.all_ops() if op.kind is OpKind.STORE and op.attrs.reduce}
    outputs = ex.reference_fn(**inputs)
    for p in kernel.params:
        if p.name in outputs and p.value not in accumulated:
            inputs[p.name].fill_(7.0)
