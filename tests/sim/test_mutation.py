"""Mutation testing of the simulator in CI: the small slice of `bench/mutation.py` (which sweeps every example ×
arch × partition). Every synchronization bug planted in the GEMM's Barrier IR, one at a time, is caught by
`aref.sim.check` with its default settings, or shown equivalent by the bench's stated rules or a complete
exploration."""
import os
import sys

import pytest
from example_paths import ROOT

from aref.sim.mutants import KINDS, Mutant, mutants, op_of, planted

sys.path.insert(0, os.path.join(ROOT, "bench"))
import mutation  # noqa: E402


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_every_planted_bug_in_the_gemm_is_caught_or_equivalent(arch):
    # one CTA, 4 K-steps (the check's protocol sizes wrap the 5-slot ring twice)
    row = mutation.run_config("gemm", arch, "heuristic", KINDS, max_states=20_000, verbose=False,
                              heuristic_text={}, sizes=dict(M=128, N=128, K=256))
    assert not row.note, row.note
    missed = [(o.mutant, o.detail) for o in row.outcomes if o.status not in ("caught", "equivalent")]
    assert not missed
    kinds = {o.mutant.split()[0] for o in row.outcomes}
    assert {"delete-wait", "flip-parity", "delete-mma-wait", "raise-pending"} <= kinds
    assert ("delete-expect-tx" if arch == "sm_90a" else "delete-commit") in kinds
    assert row.count("caught") >= len(row.outcomes) - 2          # equivalents are the exception


def test_mutations_apply_and_undo():
    _, _, ws = mutation.compile_example("gemm", "sm_90a", "heuristic")
    from aref.ir.ws import print_ws
    before = print_ws(ws)
    found = mutants(ws)
    assert {m.kind for m in found} == {"delete-wait", "flip-parity", "delete-arrive", "delete-expect-tx",
                                      "delete-mma-wait", "raise-pending"}           # no fence on this kernel
    for m in found:
        op = op_of(ws, m)
        with planted(ws, m):
            text = print_ws(ws)
            assert text != before
            if m.kind.startswith("delete"):
                assert all(o is not op for gp in ws.groups for o in gp.all_ops())
        assert print_ws(ws) == before
    with pytest.raises(ValueError):
        with planted(ws, Mutant("delete-fence", found[0].group, found[0].region, found[0].index)):
            pass


def test_fence_mutants_exist_where_kernels_fence():
    _, _, ws = mutation.compile_example("attention_fwd", "sm_100a", "heuristic")
    assert any(m.kind == "delete-fence" for m in mutants(ws))
