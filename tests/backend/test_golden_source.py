"""Golden generated sources: the cooperative GEMM and the ping-pong attention forward (rewrite them with
`pytest --update-goldens` after an intended change of the backend or the lowering)."""
import pytest

from aref.backend.cute import generate_source
from tests.backend.conftest import barrier_ir


@pytest.mark.parametrize("example, consumers", [("gemm", "cooperative"), ("attention_fwd", "pingpong")])
def test_generated_source_matches_golden(golden, example, consumers):
    golden(f"backend/{example}.{consumers}.py", generate_source(barrier_ir(example, "heuristic", consumers)))
