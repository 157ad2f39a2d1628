"""Regression tests for synchronization and rewrite bugs the simulator found in programs outside the
examples (issue 9), each fixed at its rule:

* a channel's release must follow every reader of its tiles, views included (`x[:, None]`, a row slice):
  a bias tile loaded after the loop in cooperative consumers, and Blackwell's correction group reading `l`;
* the cooperative row split cuts every op with a row extent to the replica's rows, and index tiles keep
  their global values (`arange(M)` in replica j is j·M/2 + arange(M/2));
* integer scalar math of any spelling (`aref.maximum` on program ids, comparisons, `where`, `abs`) is index
  math that every stage accepts and every group recomputes;
* on sm_100a a tile an MMA accumulates on in place and hands to two groups: the group that writes it back
  (`part = where(last, 0.0, part)`) waits until every reader released the previous item, not only itself.
"""
import math

import pytest
import torch

import aref
from aref import aref_kernel, sim
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.interp.tile import run_kernel
from aref.ir import OpKind, ScalarType
from partition.rowsplit import row_split

LOG2E = math.log2(math.e)


@aref_kernel
def gemm_bias_after_loop(A, B, bias, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    bt = aref.load(bias, (pid_m, pid_n), (BM, BN))           # loaded after the loop, read through a row slice
    aref.store(C, (pid_m, pid_n), aref.maximum(acc + bt.to(aref.float32), 0.0).to(C.dtype))


def bias_inputs(M=256, N=128, K=128):
    g = torch.Generator().manual_seed(0)
    return {"A": torch.randn(M, K, generator=g).half(), "B": torch.randn(N, K, generator=g).half(),
            "bias": torch.randn(M, N, generator=g).half(), "C": torch.zeros(M, N).half()}


@aref_kernel(grid=lambda Q, BM, **_: (Q.shape[1] // BM, Q.shape[0]))
def causal(Q, K, V, O, *, BM: int = 128, BN: int = 128):
    pid_m, bh = aref.program_id(0), aref.program_id(1)
    D = Q.shape[2]
    q = aref.load(Q, (bh, pid_m, 0), (BM, D))
    o = aref.zeros((BM, D), aref.float32)
    m = aref.full((BM,), -1e30, aref.float32)
    l = aref.zeros((BM,), aref.float32)
    rows = aref.arange(BM) + pid_m * BM                      # an index tile with a row extent
    kc = aref.channel(depth=2)
    vc = aref.channel(depth=2)
    for j in aref.range(K.shape[1] // BN):
        kc.put(aref.load(K, (bh, j, 0), (BN, D)))
        vc.put(aref.load(V, (bh, j, 0), (BN, D)))
        k = kc.get()
        v = vc.get()
        cols = aref.arange(BN) + j * BN
        s = aref.where(rows[:, None] >= cols[None, :], aref.mma(q, k.T) * (LOG2E / math.sqrt(D)), -1e30)
        m_new = aref.maximum(m, aref.rowmax(s))
        p = aref.exp2(s - m_new[:, None])
        alpha = aref.exp2(m - m_new)
        l = l * alpha + aref.rowsum(p)
        o = aref.mma(p.to(Q.dtype), v, o * alpha[:, None])
        m = m_new
        kc.consumed()
        vc.consumed()
    aref.store(O, (bh, pid_m, 0), (o / l[:, None]).to(O.dtype))


def causal_inputs(S=256, D=64):
    g = torch.Generator().manual_seed(1)
    Q, K, V = (torch.randn(1, S, D, generator=g).half() for _ in range(3))
    return {"Q": Q, "K": K, "V": V, "O": torch.zeros(1, S, D).half()}


def causal_reference(Q, K, V, O, **_):
    S = Q.shape[1]
    s = (Q.float() @ K.float().transpose(1, 2) / math.sqrt(Q.shape[2])).masked_fill(
        ~torch.ones(S, S, dtype=torch.bool).tril(), -math.inf)
    return {"O": (torch.softmax(s, -1) @ V.float()).to(O.dtype)}


@aref_kernel(grid=(4,))
def scalar_index_math(A, C, *, BM: int = 64, W: int = 64):
    pid_m = aref.program_id(0)
    start = aref.maximum(pid_m * BM - W, 0) // BM               # the line
    n = aref.where(pid_m > 1, aref.minimum(pid_m + 1, 3) - start, abs(-pid_m) + 1 - start)
    acc = aref.zeros((BM, 64), aref.float32)
    for j in aref.range(n):
        acc = acc + aref.load(A, (start + j, 0), (BM, 64)).to(aref.float32)
    aref.store(C, (pid_m, 0), acc)


def scalar_reference(A, C, **_):
    out = torch.zeros_like(C)
    for p in range(4):
        start = max(p * 64 - 64, 0) // 64
        n = min(p + 1, 3) - start if p > 1 else abs(-p) + 1 - start
        for j in range(n):
            out[p * 64:(p + 1) * 64] += A[(start + j) * 64:(start + j + 1) * 64].float()
    return {"C": out}


def _explore_small(kernel_fn, inputs, options, **knobs):
    ws = lower_to(kernel_fn.specialize(**inputs, **knobs), "barrier", options)
    res = sim.explore(ws, {p.name: inputs[p.name] for p in ws.params}, max_states=60_000)
    assert not res.violations, [str(v) for v in res.violations]
    return res


@pytest.mark.parametrize("arch,consumers", [("sm_90a", "cooperative"), ("sm_90a", "plain"), ("sm_100a", "auto")])
def test_bias_tile_loaded_after_the_loop(arch, consumers):
    inputs = bias_inputs()
    ws = lower_to(gemm_bias_after_loop.specialize(**inputs), "barrier", CompileOptions(arch=arch,
                                                                                         consumers=consumers))
    ref = {"C": torch.relu(inputs["A"].float() @ inputs["B"].float().T + inputs["bias"].float()).half()}
    report = sim.check(ws, inputs, lambda **_: ref, seeds=10)
    assert report.ok, report.to_json()
    for trips in (0, 1, 2, 3):
        _explore_small(gemm_bias_after_loop, bias_inputs(M=128, K=64 * trips),
                       CompileOptions(arch=arch, consumers=consumers))


def test_release_follows_the_readers_of_a_view():
    """In each cooperative consumer the bias slot is released after the cast that reads its row slice."""
    inputs = bias_inputs()
    ws = lower_to(gemm_bias_after_loop.specialize(**inputs), "partitioned", CompileOptions(consumers="cooperative"))
    for gp in ws.groups[1:]:
        post = gp.post.ops
        get = next(i for i, op in enumerate(post) if op.kind is OpKind.GET)
        views = {id(post[get].result)}
        last_reader = 0
        for i, op in enumerate(post):
            if any(id(v) in views for v in op.operands):
                last_reader = i
                if op.kind is OpKind.SLICE:
                    views.add(id(op.result))
        release = next(i for i, op in enumerate(post) if op.kind is OpKind.CONSUMED)
        assert post[last_reader].kind is OpKind.CAST and release > last_reader


@pytest.mark.parametrize("arch,consumers", [("sm_90a", "cooperative"), ("sm_90a", "plain"), ("sm_100a", "auto")])
def test_causal_attention_with_index_masks(arch, consumers):
    inputs = causal_inputs()
    ws = lower_to(causal.specialize(**inputs), "barrier", CompileOptions(arch=arch, consumers=consumers))
    if consumers == "cooperative":
        assert len(ws.groups) == 3
    report = sim.check(ws, inputs, causal_reference, seeds=10)
    assert report.ok, report.to_json()
    for trips in (0, 1, 2, 3):
        _explore_small(causal, {**causal_inputs(S=128 * max(trips, 1)), "K": causal_inputs(S=128 * trips)["K"],
                                "V": causal_inputs(S=128 * trips)["V"]} if trips else
                       {**causal_inputs(S=128), "K": torch.zeros(1, 0, 64).half(),
                        "V": torch.zeros(1, 0, 64).half()}, CompileOptions(arch=arch, consumers=consumers))


def test_row_split_keeps_index_tiles_global():
    """The row-split kernel computes exactly what the original does, and replica j's arange starts at its
    first row (not at 0)."""
    inputs = causal_inputs()
    kernel = causal.specialize(**inputs)
    split, replica = row_split(kernel, 2)
    expected, got = ({k: v.clone() for k, v in inputs.items()} for _ in range(2))
    run_kernel(kernel, expected)
    run_kernel(split, got)
    assert torch.equal(expected["O"], got["O"])
    aranges = [op for op in split.pre.ops if op.kind is OpKind.ARANGE]
    assert [op.attrs.n for op in aranges] == [64, 64]
    offsets = [op for op in split.pre.ops if op.kind is OpKind.BINARY and op.operands[0] is aranges[1].result]
    assert offsets and next(c.attrs.value for c in split.pre.ops if c.results and c.result is
                            offsets[0].operands[1]) == 64


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
def test_scalar_min_max_where_abs_on_program_ids(arch, partition):
    A = torch.randn(256, 64).half()
    inputs = {"A": A, "C": torch.zeros(256, 64)}
    kernel = scalar_index_math.specialize(**inputs)
    fns = {op.attrs.fn for op in kernel.pre.ops if op.kind is OpKind.SCALAR_BINARY}
    assert {"max", "min"} <= fns
    # every op on scalars alone (a compare, a where) is index math every group recomputes: no group owns it,
    # so no channel ever has to carry a scalar
    from partition.model import replicated_ops
    rep = replicated_ops(kernel)
    assert all(op in rep for op in kernel.all_ops()
               if op.results and all(isinstance(v.type, ScalarType) for v in op.operands + op.results))
    got = {k: v.clone() for k, v in inputs.items()}
    scalar_index_math(**got)
    torch.testing.assert_close(got["C"], scalar_reference(**inputs)["C"])
    ws = lower_to(kernel, "barrier", CompileOptions(arch=arch, partition=partition, solver_time_limit=10))
    report = sim.check(ws, inputs, scalar_reference, seeds=5)
    assert report.ok, report.to_json()


@aref_kernel(grid=(1,))
def two_subtiles(A, B, W, C0, C1, *, SUB: int = 64, BN: int = 64, BK: int = 64):
    acc0 = aref.zeros((SUB, BN), aref.float32)
    acc1 = aref.zeros((SUB, BN), aref.float32)
    ch = aref.channel(depth=2)                   # one item per A sub-tile: two puts per iteration
    unread = aref.channel(depth=1)               # computed tiles that no one reads
    for k in aref.range(A.shape[1] // BK):
        ch.put(aref.load(A, (0, k), (SUB, BK)))
        ch.put(aref.load(A, (1, k), (SUB, BK)))
        a0 = ch.get()
        a1 = ch.get()
        b = aref.load(B, (0, k), (BN, BK))
        w = aref.load(W, (k, 0), (BN, BN))
        acc0 = aref.mma(a0, b.T, acc0)                                   # sub-tile 0: one pipeline stage
        p1 = aref.exp2(aref.minimum(aref.mma(a1, b.T) * 0.125, 2.0))      # sub-tile 1: MMA, softmax-like, MMA:
        acc1 = aref.mma(p1.to(aref.float16), w, acc1)                    # two stages (T/C/U)
        unread.put(p1.to(aref.float16))
        unread.get()
        unread.consumed()
        ch.consumed()
        ch.consumed()
    aref.store(C0, (0, 0), acc0)
    aref.store(C1, (0, 0), acc1)


def two_subtile_inputs(trips=3):
    g = torch.Generator().manual_seed(2)
    return {"A": (torch.randn(128, 64 * trips, generator=g) * 0.5).half(),
            "B": (torch.randn(64, 64 * trips, generator=g) * 0.5).half(),
            "W": (torch.randn(64 * max(trips, 1), 64, generator=g) * 0.5).half(),
            "C0": torch.zeros(64, 64), "C1": torch.zeros(64, 64)}


@pytest.mark.parametrize("arch,consumers", [("sm_90a", "pingpong"), ("sm_90a", "plain"), ("sm_100a", "auto")])
def test_subtiles_of_different_depth_unread_channel_and_two_items_per_iteration(arch, consumers):
    """Ping-pong groups with different pipeline depths (their tensor-core turns would not balance: it
    deadlocked at trip count 0), a user channel no group reads (its ring filled up), two puts per iteration
    read by a two-stage consumer (its prologue computed slots from a predicated-off item index)."""
    options = CompileOptions(arch=arch, consumers=consumers)
    inputs = two_subtile_inputs()
    kernel = two_subtiles.specialize(**inputs)
    expected = {k: v.clone() for k, v in inputs.items()}
    run_kernel(kernel, expected)
    ws = lower_to(kernel, "barrier", options)
    report = sim.check(ws, inputs, lambda **_: {"C0": expected["C0"], "C1": expected["C1"]}, seeds=10,
                       tolerance={"C0": (1e-5, 1e-5), "C1": (1e-5, 1e-5)})
    assert report.ok, report.to_json()
    for trips in (0, 1, 2, 3):
        _explore_small(two_subtiles, two_subtile_inputs(trips), options)


def test_a_channel_keeps_one_producer_under_any_partition():
    """Random partitions that put a channel's two puts in different groups: both filled item 0 of the ring."""
    from partition.custom import assignable_ops, custom_partition
    from partition.model import check_partition
    kernel = two_subtiles.specialize(**two_subtile_inputs())
    ops = assignable_ops(kernel)
    puts = [i for i, op in enumerate(ops) if op.kind is OpKind.PUT and op.operands[0].name == "ch"]
    groups = [0] * len(ops)
    groups[puts[1]] = 1
    part = custom_partition(kernel, groups)
    assert part.assign[ops[puts[1]]] == part.assign[ops[puts[0]]]
    part.assign[ops[puts[1]]] = 1
    with pytest.raises(aref.ArefError, match="one producer"):
        check_partition(kernel, part)


@aref_kernel(grid=(1,))
def linked_subtiles(A, B, C0, *, SUB: int = 64, BN: int = 64, BK: int = 64):
    acc0 = aref.zeros((SUB, BN), aref.float32)
    hand = aref.channel(depth=1)
    for k in aref.range(A.shape[1] // BK):
        a0 = aref.load(A, (0, k), (SUB, BK))
        a1 = aref.load(A, (1, k), (SUB, BK))
        b = aref.load(B, (0, k), (BN, BK))
        hand.put(aref.mma(a1, b.T).to(aref.float16))          # sub-tile 1's product, handed to sub-tile 0
        acc0 = aref.mma(a0, b.T, acc0) + hand.get().to(aref.float32)
        hand.consumed()
    aref.store(C0, (0, 0), acc0)


def test_subtiles_linked_through_a_user_channel_are_not_ping_pong_partners():
    """Sub-tile 0 waiting for data of sub-tile 1 while holding the tensor-core turn deadlocked."""
    g = torch.Generator().manual_seed(3)
    inputs = {"A": torch.randn(128, 128, generator=g).half(), "B": torch.randn(64, 128, generator=g).half(),
              "C0": torch.zeros(64, 64)}
    with pytest.raises(aref.ArefError, match="two independent sub-tiles"):
        lower_to(linked_subtiles.specialize(**inputs), "partitioned", CompileOptions(consumers="pingpong"))


@pytest.mark.parametrize("seed, groups", [(5, 2), (8, 2), (12, 3), (19, 4)])
def test_accumulator_read_from_a_slot_is_released_after_its_mma_retires(seed, groups):
    """A partition that computes `o * alpha` in another group hands the MMA its accumulator through a channel
    slot; the wgmma reads that slot as asynchronously as its A and B operands, so the slot is released only
    after an `mma_wait` retires it — in the drained epilogue too (the release once followed the issue
    directly there: release-while-reading in the simulator)."""
    from program_matrix import compile_config

    from aref.runtime.harness import load_example
    ex = load_example("examples/attention_fwd.py")
    inputs = ex.inputs(BM=64, BN=64, SUBTILE=1)
    kernel = ex.kernel.specialize(**inputs)
    barrier = compile_config(kernel, {"arch": "sm_90a", "groups": groups, "seed": seed})
    acc_from_slot = [op for gp in barrier.groups for op in gp.all_ops() if op.kind is OpKind.MMA_ASYNC
                     and len(op.operands) > 2 and op.operands[2].type.space.value == "smem"]
    assert acc_from_slot, "the partition no longer hands an accumulator through a slot"
    report = sim.check(barrier, inputs, ex.reference_fn, seeds=3, tolerance=ex.tolerance(inputs))
    assert report.ok, [str(v) for v in report.violations]


@aref_kernel
def two_readers(A, B, C, *, BM: int = 128, BN: int = 64, BK: int = 64):
    """The MMA accumulates on `part` in place; one group adds it into `acc`, another rescales it and writes it
    back into the tensor memory the MMA accumulates on (the shape of a promoted fp8 GEMM, in fp16)."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    part = aref.zeros((BM, BN), aref.float32)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        a = aref.load(A, (pid_m, k), (BM, BK))
        b = aref.load(B, (pid_n, k), (BN, BK))
        part = aref.mma(a, b.T, part)
        acc = acc + part
        part = part * 0.5
    aref.store(C, (pid_m, pid_n), (acc + part).to(C.dtype))


def two_readers_reference(A, B, C, **_):
    acc = torch.zeros(C.shape)
    part = torch.zeros(C.shape)
    for k in range(0, A.shape[1], 64):
        part = part + A[:, k:k + 64].float() @ B[:, k:k + 64].float().T
        acc, part = acc + part, part * 0.5
    return {"C": (acc + part).half()}


def _in_place_programs():
    """(kernel, inputs(K, BN, **size), reference, tolerance) of the two programs with a twice-read in-place tile."""
    from tests.test_promote import GEMM, fp8_gemm, hand_promoted

    def fp16(K, BN, **size):
        return GEMM.inputs("small", K=K, BN=BN, BK=64, **size)
    return {"hand_promoted": (hand_promoted, lambda K, BN, **size: fp8_gemm(K=K, BN=BN, **size)[0],
                              GEMM.reference_fn, GEMM.tolerance),
            "two_readers": (two_readers, fp16, two_readers_reference, GEMM.tolerance)}


def _writer_waits(ws, written: str, shared: str) -> bool:
    """Does the group that stores into tensor-memory ring `written` wait on `shared`'s empty barrier first?"""
    for gp in ws.groups:
        ops = list(gp.loop.body.ops) if gp.loop is not None else []
        stores = [i for i, op in enumerate(ops) if op.kind is OpKind.SLOT_STORE and op.attrs.channel == written]
        if stores:
            return any(op.kind is OpKind.MBAR_WAIT and op.attrs.channel == shared and op.attrs.which == "empty"
                       for op in ops[:stores[0]])
    raise AssertionError(f"no group stores into {written}")


@pytest.mark.parametrize("BN", [64, 128])
@pytest.mark.parametrize("program", ["hand_promoted", "two_readers"])
def test_in_place_tile_rewritten_after_every_reader_released_it(program, BN):
    """`part.x` (written by compute1, read by the MMA) and `part_1.x` (the MMA's result, read by compute0 and
    compute1) are one tensor-memory buffer. compute1 rewrote it for step k + 1 once it had read item k itself,
    while compute0 could still be reading item k: write-to-borrowed-slot in the simulator. Its write now also
    waits on `part_1.x.empty`, which both readers' releases complete."""
    kernel, make_inputs, reference, tolerance = _in_place_programs()[program]
    inputs = make_inputs(448, BN)
    ws = lower_to(kernel.specialize(**inputs), "barrier", CompileOptions(arch="sm_100a"))
    assert ws.tmem.ring_buffer["part.x"] == ws.tmem.ring_buffer["part_1.x"], ws.tmem.lines()
    shared = next(ch for ch in ws.channels if ch.name == "part_1.x")
    assert len(shared.consumers) == 2 and _writer_waits(ws, "part.x", "part_1.x")
    report = sim.check(ws, inputs, reference, seeds=5, tolerance=tolerance(inputs))
    assert report.ok, report.to_json()
    knobs = {"N": 2} if program == "hand_promoted" else {}     # a promotion step inside three trips
    for trips in (0, 1, 2, 3):
        _explore_small(kernel, make_inputs(64 * trips, BN, M=128, N=BN), CompileOptions(arch="sm_100a"), **knobs)


def test_mma_group_waits_for_its_mmas_before_tensor_memory_is_freed(tmp_path):
    """sm_100a, random program seed 2608 under a random partition: the group issuing the MMAs was not the one
    that allocated tensor memory, and it arrived at the dealloc barrier with its last MMA still running (the
    simulator: `mma-in-flight-at-exit`, trips=1). Every group whose last MMA no wait covers now waits for its
    own MMAs first."""
    import random

    from program_matrix import run_matrix
    from random_programs import random_program
    prog = random_program(2608, directory=str(tmp_path))
    result = run_matrix(prog, "sm_100a", random.Random(2608), seeds=2, max_states=1500)
    assert [o.config for o in result.outcomes] == ["heuristic", "optimal", "random0"]
    assert not result.failures, [(o.config, o.detail) for o in result.failures]
