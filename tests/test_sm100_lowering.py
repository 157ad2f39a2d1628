"""The sm_100a pipeline and aref lowering: FA4's MMA order, tensor-memory rings, tcgen05.commit hand-offs,
register budgets, and the Blackwell units of the machine model."""
import pytest

from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from aref.ir import OpKind, Space
from aref.target.machine import B200, H100, mma_issue_cycles, op_cost
from example_paths import example_path
from partition.model import REGISTERS_PER_SM


def stage(example, level, partition="heuristic", **overrides):
    ex = load_example(example_path(example))
    kernel = ex.kernel.specialize(**ex.inputs(**overrides))
    return lower_to(kernel, level, CompileOptions(arch="sm_100a", partition=partition))


def mma_group(ws):
    return next(gp for gp in ws.groups if gp.group.role in ("mma", "consumer") and gp.loop is not None)


@pytest.mark.parametrize("overrides, order", [
    ({"BM": 256, "D": 128}, [(1, 3), (0, 2), (1, 3), (0, 2)]),     # P in tensor memory: FA4's order
    ({}, [(0, 2), (0, 2), (1, 3), (1, 3)]),                          # P in shared memory: every Q·Kᵀ first
])
def test_mma_warp_issue_order(overrides, order):
    """With P in tensor memory (128-row sub-tiles), per sub-tile P·V of the previous block (stage 1), then
    Q·Kᵀ of this one (stage 0), so S may be written over P; with P in shared memory every Q·Kᵀ goes first. V is
    released after the last P·V, K after the last Q·Kᵀ."""
    ws = stage("attention_fwd", "pipelined", **overrides)
    body = mma_group(ws).loop.body.ops
    mmas = [(op.stage, len(op.operands)) for op in body if op.kind is OpKind.MMA]
    assert mmas == order
    releases = [op for op in body if op.kind is OpKind.CONSUMED]
    names = [ws.channel_of(op.operands[0]).name for op in releases]
    last_pv = max(i for i, op in enumerate(body) if op.kind is OpKind.MMA and len(op.operands) == 3)
    last_qk = max(i for i, op in enumerate(body) if op.kind is OpKind.MMA and len(op.operands) == 2)
    assert body.index(releases[names.index("vc")]) > last_pv
    assert body.index(releases[names.index("kc")]) > last_qk


@pytest.mark.parametrize("overrides, p_space", [({}, Space.SMEM), ({"BM": 256}, Space.TMEM)])
def test_p_goes_through_tensor_memory_for_128_row_sub_tiles(overrides, p_space):
    """tcgen05 reads A from tensor memory one row per lane: P of a 128-row sub-tile is written there by the
    softmax group; a 64-row P goes through shared memory."""
    ws = stage("attention_fwd", "partitioned", **overrides)
    softmax = {gp.group.id for gp in ws.groups if gp.group.role == "softmax"}
    p = [ch for ch in ws.channels if ch.producer in softmax and any(t.dtype.bits == 16 for t in ch.payload)]
    assert p and all(t.space is p_space for ch in p for t in ch.payload)


def test_tensor_memory_rings_hold_one_item_and_mma_results_are_committed():
    ws = stage("attention_fwd", "barrier")
    tmem = [ch for ch in ws.channels if any(t.space is Space.TMEM for t in ch.payload)]
    assert tmem and all(ch.depth == 1 for ch in tmem)
    mma = mma_group(ws)
    kinds = [op.kind for op in mma.all_ops()]
    # the MMA warp never waits for its MMAs, but once at the very end, before it frees tensor memory
    waits = [i for i, k in enumerate(kinds) if k is OpKind.MMA_WAIT]
    assert len(waits) <= 1 and all(kinds[i + 1:] == [OpKind.NAMED_BAR_SYNC, OpKind.TMEM_DEALLOC] for i in waits), kinds
    published = {op.attrs.channel for op in mma.all_ops() if op.kind is OpKind.MMA_COMMIT and op.attrs.which == "full"}
    assert published == {ch.name for ch in tmem if ch.producer == mma.group.id}
    assert all(ch.full_count == 1 for ch in tmem if ch.producer == mma.group.id)
    # every slot the MMAs read (K, V, Q, P, the rescaled O) is released by a commit, never by a plain arrive
    plain = {op.attrs.channel for op in mma.all_ops() if op.kind is OpKind.MBAR_ARRIVE and op.attrs.which == "empty"}
    assert not plain


def test_correction_releases_o_before_publishing_it_rescaled():
    ws = stage("attention_fwd", "barrier")
    corr = next(gp for gp in ws.groups if gp.group.role == "correction")
    body = corr.loop.body.ops
    for store in (op for op in body if op.kind is OpKind.SLOT_STORE and op.operands[0].type.tile.space is Space.TMEM):
        i = body.index(store)
        released = [op.attrs.channel for op in body[:i] if op.kind is OpKind.MBAR_ARRIVE and op.attrs.which == "empty"]
        assert any(ws.tmem.ring_buffer.get(c) == ws.tmem.ring_buffer[store.attrs.channel] for c in released)


@pytest.mark.parametrize("example", ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd"])
@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
def test_register_budgets_fit_the_register_file(example, partition):
    ws = stage(example, "barrier", partition)
    one = [gp.group.regs for gp in ws.groups if gp.group.warps == 1]
    assert len(set(one)) <= 1                       # one setmaxnreg for the warp group they share
    padded = -(-len(one) // 4) * 4 * 32
    total = padded * (one[0] if one else 0) + sum(gp.group.regs * gp.group.threads for gp in ws.groups
                                                  if gp.group.warps == 4)
    assert total <= REGISTERS_PER_SM
    assert all(gp.group.regs % 8 == 0 and 24 <= gp.group.regs <= 256 for gp in ws.groups)


def test_dual_gemm_epilogue_runs_over_column_chunks():
    """Two 128x128 fp32 accumulators would take 256 registers per thread: the epilogue is subtiled."""
    ws = stage("dual_gemm", "barrier")
    epi = next(gp for gp in ws.groups if gp.group.warps == 4)
    stores = [op for op in epi.post.ops if op.kind is OpKind.STORE]
    assert len(stores) > 1 and all(op.attrs.tile_shape[1] < 128 for op in stores)
    assert all(op.attrs.axis == 1 for op in epi.post.ops if op.kind is OpKind.SLICE)
    # each accumulator is released after the last chunk of it was read
    ops = epi.post.ops
    reads = {id(op.result): op.attrs.channel for op in ops if op.kind is OpKind.SLOT_READ}
    for i, op in enumerate(ops):
        if op.kind is OpKind.MBAR_ARRIVE and op.attrs.which == "empty":
            slices = [j for j, s in enumerate(ops) if s.kind is OpKind.SLICE
                      and reads.get(id(s.operands[0])) == op.attrs.channel]
            assert len(slices) > 1 and max(slices) < i



def test_epilogue_chunks_read_a_register_accumulator_by_columns():
    """A GEMM that scales each K step's product in registers and sums it into a register accumulator: the
    accumulator leaves the loop in registers, and the subtiled epilogue reads its columns chunk by chunk (it
    used to cast the whole 128-column tile into a 64-column result: a compiler bug at the verifier)."""
    import aref
    from aref import aref_kernel
    import torch

    @aref_kernel
    def scaled_steps(A, B, S, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
        pid_m, pid_n = aref.program_id(0), aref.program_id(1)
        acc = aref.zeros((BM, BN), aref.float32)
        ch = aref.channel(depth=2)
        for k in aref.range(A.shape[1] // BK):
            ch.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
            a, b = ch.get()
            acc = acc + aref.mma(a, b.T) * 0.5
            ch.consumed()
        aref.store(C, (pid_m, pid_n), acc.to(C.dtype))

    args = dict(A=torch.zeros(128, 128, dtype=torch.float16), B=torch.zeros(128, 128, dtype=torch.float16),
                S=torch.zeros(1), C=torch.zeros(128, 128, dtype=torch.bfloat16))
    chunked = {}
    for partition in ("heuristic", "optimal"):
        ws = lower_to(scaled_steps.specialize(**args), "barrier", CompileOptions(arch="sm_100a", partition=partition))
        epi = next(gp for gp in ws.groups if any(op.kind is OpKind.CAST for op in gp.post.ops))
        casts = [op for op in epi.post.ops if op.kind is OpKind.CAST]
        assert all(op.operands[0].type.shape == op.result.type.shape for op in casts)
        chunked[partition] = len(casts)
        if len(casts) > 1:                         # chunked: each cast reads a column slice of the accumulator
            assert all(any(s.kind is OpKind.SLICE and s.result is op.operands[0] for s in epi.post.ops)
                       for op in casts)
    assert chunked["optimal"] > 1, chunked          # the solver's partition stores from the group that casts


def test_blackwell_units_of_the_machine_model():
    ws = stage("attention_fwd", "barrier")
    ops = [op for gp in ws.groups for op in gp.all_ops()]
    ld = next(op for op in ops if op.kind is OpKind.SLOT_READ and op.result.type.space is Space.TMEM
              and op.result.type.shape == (64, 128))
    assert op_cost(ld, B200) == ("tmem_ld", 64 * 128 * 4 // B200.tmem_bytes_per_clk)
    st = next(op for op in ops if op.kind is OpKind.SLOT_STORE and op.operands[3].type.space is Space.RMEM
              and op.operands[0].type.tile.space is Space.TMEM)
    assert op_cost(st, B200)[0] == "tmem_st"
    in_place = next(op for op in ops if op.kind is OpKind.SLOT_STORE and op.operands[3].type.space is Space.TMEM)
    assert op_cost(in_place, B200) == ("issue", 0)
    qk = next(op for op in ops if op.kind is OpKind.MMA_ASYNC and len(op.operands) == 2)
    # one warp issues a tcgen05.mma per 16-element K atom; Hopper's warp group pays the async issue cost
    assert mma_issue_cycles(qk, B200) == max(B200.async_issue_cycles, qk.operands[0].type.shape[1] // 16 *
                                             B200.mma_instr_issue_cycles)
    assert mma_issue_cycles(qk, H100) == H100.async_issue_cycles


def test_timing_model_runs_blackwell_schedules():
    from aref.target.machine import machine_for
    from aref.sim.timing import simulate_timing
    for partition in ("heuristic", "optimal"):
        ws = stage("attention_fwd", "barrier", partition)
        report = simulate_timing(ws, None, machine_for("sm_100a"))
        assert report.ok, report.violations
        assert report.utilization["tc"] > 0 and report.utilization["tmem_ld"] > 0
        assert report.utilization["tmem_st"] > 0 and report.cycles_per_iter > 0


def test_tensor_memory_slot_released_after_its_load_where_the_graph_states_the_streams():
    """mlp: the softmax group copies H whole into registers (tcgen05.ld), so where the solver's graph states the
    nodes' streams (Blackwell's default graph: each node's own stream) the slot is released right after the
    load, the MMA warp writes the next H while the group computes, and the program reaches the solver's II
    (1006 cycles against 1008; 1121 before); the occupancy-free graph, and `early_tmem_release=False`, keep the
    release after the last use of the copy."""
    from aref.interp.tile import longest_cta
    from aref.sim.timing import simulate_timing

    ex = load_example(example_path("mlp"))
    kernel = ex.kernel.specialize(**ex.inputs("large"))

    def lowered(**options):
        ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a", partition="optimal", **options))
        softmax = next(gp for gp in ws.groups if gp.group.role == "softmax")
        ops = softmax.loop.body.ops
        read = next(i for i, op in enumerate(ops) if op.kind is OpKind.SLOT_READ and op.attrs.channel == "h.x")
        after = next(op for op in ops[read + 1:] if op.kind is not OpKind.SCALAR_BINARY)
        early = after.kind is OpKind.MBAR_ARRIVE and after.attrs.channel == "h.x" and after.attrs.which == "empty"
        report = simulate_timing(ws, None, B200, cta=longest_cta(kernel))
        assert not report.violations, report.violations[:1]
        return ws, early, report.cycles_per_iter

    for options in ({"solver_occupancy_free": True}, {"early_tmem_release": False}):
        ws, early, _ = lowered(**options)
        assert not ws.streams and not early, options
    ws, early, cycles = lowered()
    ii = int(next(n for n in ws.notes if n.startswith("II=")).split()[0][3:])
    assert ws.streams and early and cycles <= ii * 1.03, (cycles, ii)


def test_mma_waits_for_the_readers_of_a_published_accumulator_before_updating_it():
    """linear attention's state lives in tensor memory: the MMA warp publishes it to the group that casts it
    for q·S right after the MMA that makes it (the next chunk's item), then the next chunk's MMA accumulates
    kᵀ·v into the same columns. That MMA first waits on the state's empty barrier for the item it publishes
    (free once its reader released the state before it), and in every iteration, also the last, which
    publishes nothing: without the wait the update wrote the columns under the reader (the timing model's
    write-to-borrowed-slot). The put itself runs in all but the last iteration."""
    from aref.interp.tile import longest_cta
    from aref.sim.timing import simulate_timing

    ex = load_example(example_path("linear_attention"))
    kernel = ex.kernel.specialize(**ex.inputs("large"))
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a", partition="optimal"))
    ops = mma_group(ws).loop.body.ops
    put = next(i for i, op in enumerate(ops) if op.kind is OpKind.SLOT_STORE and op.attrs.channel == "state.x")
    update = next(i for i, op in enumerate(ops) if op.kind is OpKind.MMA_ASYNC and op.result is ops[put].operands[3])
    assert update < put and ops[update].operands[2] in mma_group(ws).loop.carried
    wait = ops[update - 1]
    assert wait.kind is OpKind.MBAR_WAIT and wait.attrs.channel == "state.x" and wait.attrs.which == "empty"
    assert wait.operands[1] is ops[put].operands[1] and wait.pred is ops[update].pred      # the put's slot
    assert ops[put].pred is not None and ops[put].pred is not wait.pred                   # ... not the last
    report = simulate_timing(ws, None, B200, cta=longest_cta(kernel))
    assert not report.violations, report.violations[:1]


def test_a_ring_get_issues_with_the_readers_of_its_own_stage():
    """linear attention's MMA warp on the solver's schedule (its qkv ring of 2 starved): the get of this
    chunk's q, k, v issues with the first MMA of its own stage, after the MMAs of the previous chunk that the
    solver starts earlier in the step (the previous chunk's O MMA): sorted by those it waited for the next
    item at the top of the step (2025 cycles per iteration against 1708 on the stream graph's schedule of
    then). The stream graph's schedule in chunks of 32 tokens has that shape (the O MMA a stage after the
    item's other MMAs; the occupancy-free graph's of 64-token chunks, which had it before, now starts every
    MMA in the item's own stage)."""
    ex = load_example(example_path("linear_attention"))
    kernel = ex.kernel.specialize(**ex.inputs("large", BC=32))
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a", partition="optimal"))
    ops = mma_group(ws).loop.body.ops
    wait = next(i for i, op in enumerate(ops) if op.kind is OpKind.MBAR_WAIT and op.attrs.channel == "qkv")
    first = next(i for i, op in enumerate(ops) if op.kind is OpKind.MMA_ASYNC)
    assert ops[first].stage > ops[wait].stage and first < wait


def test_a_ring_release_is_committed_before_the_next_mma_that_does_not_read_the_slot():
    """attention_bwd's MMA warp: the Q/dO slot's last reader is dK's MMA; dQ's MMA (dS·K) does not read the
    slot. A tcgen05.commit arrives once every MMA issued before it is done, so the slot's release is committed
    between the two: behind dQ's MMA it freed the slot 128 cycles later, on a ring whose round trip then
    bounded the loop (1021 cycles per iteration in the steady state against the solver's II of 976)."""
    from aref.interp.tile import longest_cta
    from aref.sim.timing import simulate_timing

    ex = load_example(example_path("attention_bwd"))
    kernel = ex.kernel.specialize(**ex.inputs("large"))
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a", partition="optimal"))
    ops = mma_group(ws).loop.body.ops
    release = next(i for i, op in enumerate(ops) if op.kind is OpKind.MMA_COMMIT and op.attrs.channel == "qdo")
    mmas = [i for i, op in enumerate(ops) if op.kind is OpKind.MMA_ASYNC and op.stage == ops[release].stage]
    # (the later stage reads the slot's tiles as the loop carries them from the step that got them: by name)
    readers = [i for i in mmas if any(getattr(v, "name", None) in ("q", "do") for v in ops[i].operands)]
    assert readers and max(readers) < release < max(mmas), (readers, release, mmas)
    report = simulate_timing(ws, None, B200, cta=longest_cta(kernel))
    assert not report.violations, report.violations[:1]
