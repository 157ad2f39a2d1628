"""Planted schedule bugs: each is detected with the right kind, op, source line and group — under random
interleavings (every seed where the bug is deterministic) and by exhaustive exploration."""
import pytest
from sim_kernels import LINE, gemm_inputs, gemm_reference, gemm_ws

from aref.ir import OpKind
from aref.sim import check, explore, simulate


def first(kernel, seed=0):
    res = simulate(kernel, gemm_inputs(), seed=seed)
    assert not res.ok, "the planted bug went unnoticed"
    return res.violations[0]


def explored(kernel):
    ex = explore(kernel, cta=(0, 0))
    assert ex.violations, "exhaustive exploration missed the planted bug"
    return ex.violations[0]


# (gemm_ws arguments, kind, op text prefix, line, group): bugs that show up the same way in every interleaving
DETERMINISTIC = [
    # a wait on the wrong parity: the producer's first wait on `empty` blocks, nothing can move
    (dict(bug="producer_parity"), "deadlock", "mbarrier_wait %empty", LINE["put"], "producer"),
    # a missing arrive: without arrive_expect_tx the full barrier's phase never completes
    (dict(bug="no_expect_tx", trip=2), "wait-never-completes", "mbarrier_wait %full", LINE["get"], "consumer"),
    # consumed() dropped: nothing ever arrives on `empty`, so the producer's wait for slot reuse never returns
    (dict(bug="no_release", trip=4), "wait-never-completes", "mbarrier_wait %empty", LINE["put"], "producer"),
    # consumed() dropped where the ring never wraps: the item is never released by the end of the CTA
    (dict(bug="no_release", trip=2), "arrive-underflow", "%", LINE["get"], "consumer"),
    # one of two cooperative consumers drops its arrive: the empty barrier's phase is left half-arrived
    (dict(bug="no_release", trip=2, consumers=2), "arrive-underflow", "mbarrier_arrive %empty", LINE["consumed"],
     "consumer1"),
    # a depth-1 channel where the consumer holds item k-1 while waiting for item k (MMA depth 1) needs 2 slots
    (dict(depth=1, mma_depth=1), "deadlock", "mbarrier_wait %empty", LINE["put"], "producer"),
    # the producer exits one iteration early: the consumer's last wait can never complete
    (dict(producer_trip=3), "wait-never-completes", "mbarrier_wait %full", LINE["get"], "consumer"),
    # an extra consumed(): the second arrive on `empty` for the same item overflows the phase
    (dict(bug="double_release"), "arrive-overflow", "mbarrier_arrive %empty", LINE["consumed"] + 1, "consumer"),
    # releasing the slot while the MMA reading it is in flight
    (dict(bug="release_early"), "release-while-reading", "mbarrier_arrive %empty", LINE["consumed"], "consumer"),
    # converting the accumulator before the mma_wait that retires the last MMA
    (dict(bug="cast_before_wait", mma_depth=1), "mma-result-not-ready", "%", LINE["store"], "consumer"),
    # register reallocation that cannot fit: 40·128 + 2·240·128 > 64K
    (dict(consumers=2, regs=(40, 240)), "register-budget", "setmaxnreg inc 240", LINE["regs"], None),
    (dict(consumers=2, regs=(44, 232)), "register-budget", "setmaxnreg dec 44", LINE["regs"], "producer"),
]


@pytest.mark.parametrize("kwargs,kind,op,line,group", DETERMINISTIC,
                         ids=[f"{d[1]}-{'-'.join(f'{k}={v}' for k, v in d[0].items())}" for d in DETERMINISTIC])
def test_deterministic_bug_detected_in_every_interleaving(kwargs, kind, op, line, group):
    kernel = gemm_ws(**kwargs)
    for v in [first(kernel, seed) for seed in range(10)] + [explored(kernel)]:
        assert (v.kind, v.line) == (kind, line), str(v)
        assert v.op.startswith(op), v.op
        assert v.file.endswith("gemm_user.py")
        if group is not None:
            assert v.group == group
        assert v.cta == (0, 0)


def test_deadlock_lists_every_blocked_group_with_its_wait():
    v = first(gemm_ws(bug="producer_parity"))
    assert [(b["group"], b["line"]) for b in v.blocked] == [("producer", LINE["put"]), ("consumer", LINE["get"])]
    assert "parity 0: phase bit is 0" in v.blocked[0]["waiting_for"]
    assert "arrivals come from consumer" in v.blocked[0]["waiting_for"]


def test_missing_expect_tx_with_a_wrapping_ring_is_a_deadlock_pointing_at_the_starved_wait():
    # the producer blocks on `empty` too, so it is a deadlock; the starved wait is the consumer's, whose
    # barrier got transaction bytes but never the arrival
    v = first(gemm_ws(bug="no_expect_tx"))
    assert (v.kind, v.group, v.line) == ("deadlock", "consumer", LINE["get"])
    assert "-32768 transaction bytes" in v.message or "-16384 transaction bytes" in v.message


def test_wrong_parity_on_the_consumer_wait_reads_an_unpublished_slot():
    # With the flipped parity the consumer's first wait returns at once (the phase bit already differs), so
    # it reads a slot the producer has not filled — or, if the producer got there first, it waits one phase
    # too long and deadlocks. Either way every interleaving fails; exploration finds the unpublished read.
    kernel = gemm_ws(bug="consumer_parity")
    kinds = {first(kernel, seed).kind for seed in range(30)}
    assert kinds <= {"read-unpublished-slot", "deadlock"} and "read-unpublished-slot" in kinds
    v = explored(kernel)
    assert (v.kind, v.line, v.group) == ("read-unpublished-slot", LINE["get"], "consumer")
    assert v.op.startswith("%") and "slot_read %ring0" in v.op
    assert "last wait on full[0] was `mbarrier_wait %full" in v.message
    # the last step is the consumer's wait on full, which runs the slot_read after it (reads are not
    # scheduling points: the item stays until this group releases it)
    assert v.trace and v.trace[-1].startswith("consumer: mbarrier_wait %full")


def test_missing_empty_wait_is_a_race_found_by_random_and_exhaustive_search():
    kernel = gemm_ws(bug="no_empty_wait")
    report = check(kernel, gemm_inputs(), gemm_reference, seeds=20, exhaustive=True)
    assert not report.ok
    kinds = {v.kind for v in report.violations}
    assert "write-to-borrowed-slot" in kinds
    borrowed = next(v for v in report.violations if v.kind == "write-to-borrowed-slot")
    assert (borrowed.line, borrowed.group) == (LINE["put"], "producer") and borrowed.op.startswith("tma_load %A")
    assert "still borrowed" in borrowed.message
    # depth-first search meets the same race one step earlier in some schedules: the producer arrives on
    # full[0] for item 2 while item 0's phase is still waiting for its bytes
    v = explored(kernel)
    assert (v.kind, v.line, v.group) in {("write-to-borrowed-slot", LINE["put"], "producer"),
                                         ("arrive-overflow", LINE["put"], "producer")}


def test_check_reports_violations_as_json():
    from aref.ir.ws import print_ws
    kernel = gemm_ws(producer_trip=3)
    report = check(kernel, gemm_inputs(), gemm_reference, seeds=5)
    out = report.to_json()
    assert out["ok"] is False and out["deadlocks"] == 5 and out["interleavings"] == 5
    assert len(out["violations"]) == 1          # the same violation in every interleaving, reported once
    v = out["violations"][0]
    assert set(v) == {"kind", "op", "line", "group", "message"}
    assert (v["kind"], v["line"], v["group"]) == ("wait-never-completes", LINE["get"], "consumer")
    # the op is the consumer's wait on `full`, as `aref ir --stage barrier` prints it
    consumer = print_ws(kernel).split('"consumer" role=consumer')[1]
    assert v["op"].startswith("mbarrier_wait %full[") and v["op"] in consumer, v["op"]
    # K = 256 in 64-wide blocks: 4 items; the producer publishes 3, so the consumer starves on item 3,
    # which lives in slot 3 mod 2 = 1 with parity (3 // 2) mod 2 = 1
    assert "can never complete" in v["message"] and "full[1] of channel ab with parity 1" in v["message"]
    assert "arrivals come from producer (finished)" in v["message"]


def test_violation_op_text_matches_print_ws():
    from aref.ir.ws import print_ws
    kernel = gemm_ws(bug="release_early")
    v = first(kernel)
    assert v.op in print_ws(kernel)
    assert any(op.kind is OpKind.MBAR_ARRIVE for op in kernel.groups[1].all_ops())
