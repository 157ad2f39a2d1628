"""Paths, names and per-example test knobs shared by the test modules (kept out of conftest.py so test
packages cannot clash)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "aref", "examples")      # (the top-level `examples` links here)
GOLDEN = os.path.join(ROOT, "tests", "golden")
EXAMPLE_NAMES = ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd", "mlp", "attention_causal",
                 "linear_attention", "gemm_epilogue", "splitk_gemm", "rowwise", "batched_gemm"]

# The examples size their rings so the copies in flight cover the machine model's memory latency (STAGES
# slots). Tests that explore every interleaving or compile arbitrary partitions use the shallower rings the
# examples had before: the same synchronization (slot wrap-around, parity flips) in smaller state spaces
# and shared-memory footprints.
SHALLOW_RINGS = {"gemm": dict(STAGES=3), "dual_gemm": dict(STAGES=3), "gemm_reduce": dict(STAGES=3),
                 "attention_fwd": dict(STAGES=2), "attention_bwd": dict(STAGES=2)}

# example -> (the example_inputs argument that sets the loop's trip count, the tile size along it, the depth D
# of its user channel, other example_inputs overrides that make the trip count that argument / tile)
TRIP_KNOB = {
    "gemm": ("K", 64, 3, {}),
    "dual_gemm": ("K", 64, 3, {}),
    "gemm_reduce": ("K", 64, 3, {}),
    "attention_fwd": ("Sk", 128, 2, {}),
    "attention_bwd": ("Sq", 64, 2, {}),
    "mlp": ("H", 64, 3, {}),
    "attention_causal": ("Sq", 128, 2, {}),          # Sk = Sq: the last query block visits Sq / 128 blocks
    "linear_attention": ("S", 64, 2, {}),
    "gemm_epilogue": ("K", 64, 3, {}),
    "splitk_gemm": ("K", 64, 3, {"SPLIT": 1}),
    "rowwise": ("M", 64, 2, {"ROWS": 1024}),
    "batched_gemm": ("K", 64, 3, {}),
}
# inputs for a single CTA (exhaustive exploration covers the whole grid); for run-time trip counts that grow
# with the program id, `EXPLORE_CTA` names the CTA that runs the full count instead
ONE_CTA = {"gemm": dict(M=128, N=128), "dual_gemm": dict(M=128, N=128), "gemm_reduce": dict(M=128, N=128),
           "attention_fwd": dict(BH=1, Sq=128), "attention_bwd": dict(BH=1, Sk=64), "mlp": dict(M=128, N=128),
           "attention_causal": dict(BH=1), "linear_attention": dict(BH=1), "gemm_epilogue": dict(M=128, N=128),
           "splitk_gemm": dict(M=128, N=128), "rowwise": dict(), "batched_gemm": dict(Bt=1, M=128, N=128)}
ONE_CTA = {name: {**kw, **SHALLOW_RINGS.get(name, {})} for name, kw in ONE_CTA.items()}
EXPLORE_CTA = {"attention_causal": lambda trips: (max(trips - 1, 0), 0)}


def example_path(name: str) -> str:
    return os.path.join(EXAMPLES, f"{name}.py")


def trip_inputs(ex, name: str, trips: int, one_cta: bool = False) -> dict:
    """`ex`'s inputs with the loop running `trips` times (in its longest-running CTA)."""
    knob, tile, _, extra = TRIP_KNOB[name]
    return ex.inputs(**{**extra, **(ONE_CTA[name] if one_cta else {}), knob: trips * tile})


def max_trip_count(kernel) -> int:
    """The loop's trip count, the largest over the grid's CTAs (a run-time count depends on program ids)."""
    from aref.interp.tile import trip_counts
    return max(trip_counts(kernel).values(), default=0)


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
