"""The generated sm_100a code is checked against its Barrier IR as on Hopper: every synchronisation op (waits,
arrives, TMA loads, tcgen05 MMA issues, commits and waits, tensor-memory fences, allocation and release, named
barriers, register reallocation, stores) appears once as an `# aref-ir[group#index]` tag, inside the role
function that group's warps run, in the IR's order. A golden source pins FA4's attention forward."""
import re

import pytest

from aref.backend.cute import generate_source
from aref.ir import OpKind
from tests.backend.sm100_helpers import EXAMPLES, PARTITIONS, sm100_ir
from tests.backend.test_consistency import TAGGED
from tests.backend.test_consistency import check as hopper_check

SM100_TAGGED = TAGGED | {OpKind.MMA_COMMIT, OpKind.TMEM_ALLOC, OpKind.TMEM_DEALLOC, OpKind.TMEM_STORE_FENCE}
CASES = [(e, p) for e in EXAMPLES for p in PARTITIONS]


def dispatch(source):
    """group name -> the function its warp range of the kernel calls."""
    return {m.group(1): m.group(2) for m in re.finditer(r"if warp [^\n]*:  # (\S+)\n\s+(\w+)\(", source)}


def check(ws, source):
    return hopper_check(ws, source, SM100_TAGGED, dispatch)


@pytest.mark.parametrize("example, partition", CASES, ids=[f"{e}-{p}" for e, p in CASES])
def test_tags_match_the_barrier_ir(example, partition):
    ws = sm100_ir(example, partition)
    assert check(ws, generate_source(ws)) == []


def test_checker_catches_a_dropped_or_reordered_commit():
    ws = sm100_ir("attention_fwd", "optimal")
    lines = generate_source(ws).splitlines()
    commits = [i for i, line in enumerate(lines) if "# aref-ir[" in line and "mma_commit" in line]
    dropped = "\n".join(lines[:commits[2]] + lines[commits[2] + 1:])
    assert any("!= IR" in p for p in check(ws, dropped))
    swapped = lines[:]
    a, b = commits[3], commits[4]
    swapped[a], swapped[b] = swapped[b], swapped[a]
    assert any("!= IR" in p for p in check(ws, "\n".join(swapped)))


def test_softmax_groups_share_one_role_function():
    ws = sm100_ir("attention_fwd", "heuristic")
    calls = dispatch(generate_source(ws))
    assert calls["softmax0"] == calls["softmax1"] == "softmax"
    assert calls["mma"] == "mma" and calls["correction"] == "correction" and calls["load"] == "load"


def test_golden_source_of_fa4_attention_forward(golden):
    """`aref compile examples/attention_fwd.py --arch sm_100a --partition optimal --emit cute`."""
    golden("backend/attention_fwd.sm100.optimal.py", generate_source(sm100_ir("attention_fwd", "optimal")))
