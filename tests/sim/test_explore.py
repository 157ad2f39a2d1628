"""Exhaustive exploration at the trip counts where pipelines break: 0, 1, D, D+1, 2D+1."""
import pytest
from sim_kernels import gemm_ws

from aref.sim import explore


def trips(d):
    return [0, 1, d, d + 1, 2 * d + 1]


CASES = [(dict(depth=2), t) for t in trips(2)] + [(dict(depth=3, mma_depth=1), t) for t in trips(3)] + \
        [(dict(depth=2, consumers=2), t) for t in trips(2)] + \
        [(dict(depth=2, consumers=2, mma_depth=1, regs=(40, 232)), t) for t in trips(2)] + \
        [(dict(depth=2, consumers=2, pingpong=True), t) for t in trips(2)]


@pytest.mark.parametrize("kwargs,trip", CASES, ids=[f"{','.join(f'{k}={v}' for k, v in c.items())}-trip{t}"
                                                    for c, t in CASES])
def test_every_interleaving_is_clean(kwargs, trip):
    ex = explore(gemm_ws(K=64 * max(trip, 1), trip=trip, **kwargs), cta=(1, 0))
    assert ex.completed and ex.ok, [str(v) for v in ex.violations]
    assert ex.states >= 1 and ex.interleavings >= 1
    if trip >= 2:
        assert ex.interleavings > ex.states      # interleavings really were merged by state hashing


def test_state_counts_are_stable():
    # regression anchor for the state space of the plain GEMM (depth 2): grows linearly in the trip count
    counts = [explore(gemm_ws(K=64 * max(t, 1), trip=t), cta=(0, 0)).states for t in trips(2)]
    assert counts == sorted(counts) and counts[0] == 1
    assert counts[-1] - counts[-2] == 2 * (counts[-2] - counts[-3])


def test_all_ctas_and_max_states():
    kernel = gemm_ws(trip=3, K=192)
    every = explore(kernel)
    one = explore(kernel, cta=(0, 0))
    assert every.ctas == 4 and every.states == 4 * one.states and every.completed
    cut = explore(kernel, cta=(0, 0), max_states=20)
    assert not cut.completed and cut.states <= 20 and cut.ok


def test_exploration_finds_the_schedule_of_a_rare_race():
    # The consumer's flipped parity passes its first wait at once; the exploration reports the schedule
    # that reaches the unpublished read.
    ex = explore(gemm_ws(bug="consumer_parity", trip=3, K=192), cta=(0, 0))
    v = ex.violations[0]
    assert v.kind == "read-unpublished-slot"
    assert any(t.startswith("consumer: mbarrier_wait %full") for t in v.trace)
