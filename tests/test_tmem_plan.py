"""Tensor memory on Blackwell: the allocation plan of the aref lowering (aref.lower.tmem) and what it refuses.

FA4's configuration — two 128-row Q sub-tiles, 128 keys per block, head dim 128 — needs S₀, S₁, O₀, O₁ of 128
columns each, plus P₀, P₁ (16-bit, 64 columns): 640 columns side by side, 512 exist. The plan writes P over
the top half of S (the MMA warp issues P·V before the next Q·Kᵀ overwrites S) and rescales O in place, so
the kernel fits in exactly 512 — with both partitioners.
"""
import pytest

from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.errors import ArefError
from aref.runtime.harness import load_example
from aref.ir import OpKind
from aref.lower.tmem import plan_tensor_memory, tile_columns
from aref.target import SM_100A
from example_paths import example_path

COLUMNS = SM_100A.tmem_columns

FA4 = dict(BM=256, D=128)          # two 128-row sub-tiles, head dim 128


def barrier(example, partition="heuristic", **overrides):
    ex = load_example(example_path(example))
    kernel = ex.kernel.specialize(**ex.inputs(**overrides))
    return lower_to(kernel, "barrier", CompileOptions(arch="sm_100a", partition=partition))


@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
def test_fa4_attention_fits_512_columns_with_p_over_s(partition):
    ws = barrier("attention_fwd", partition, **FA4)
    plan = ws.tmem
    assert (plan.used, plan.columns) == (512, 512)
    by_name = {b.name: b for b in plan.buffers}
    aliased = [b for b in plan.buffers if b.alias_of is not None]
    assert len(aliased) == 2
    for p in aliased:
        s = by_name[p.alias_of]
        assert p.tile.dtype.bits == 16 and s.tile.dtype.bits == 32
        assert (p.col, p.cols) == (s.col + s.cols - 64, 64)          # the top half of S's 128 columns
    # O is one buffer for the MMA's accumulator, the correction's rescaled copy and the final result
    o = [b for b in plan.buffers if len(b.holds) == 3]
    assert len(o) == 2 and all(b.cols == 128 for b in o)
    # without the aliasing the tiles would need 640 columns
    assert sum(b.cols for b in plan.buffers) == 640


def test_every_mma_names_its_buffer_and_the_allocation_is_a_power_of_two():
    for example in ("gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd"):
        ws = barrier(example)
        names = {b.name for b in ws.tmem.buffers}
        mmas = [op for gp in ws.groups for op in gp.all_ops() if op.kind is OpKind.MMA_ASYNC]
        assert mmas and all(op.attrs.tmem in names for op in mmas)
        assert ws.tmem.columns in (32, 64, 128, 256, 512) and ws.tmem.used <= ws.tmem.columns
        assert all(op.result.type.space.value == "tmem" for op in mmas)
        # one group allocates first thing and frees last; the others arrive at its barrier when done
        alloc = ws.groups[ws.tmem.allocator]
        assert alloc.pre.ops[0].kind in (OpKind.SETMAXNREG, OpKind.TMEM_ALLOC)
        assert alloc.post.ops[-1].kind is OpKind.TMEM_DEALLOC
        assert alloc.post.ops[-2].kind is OpKind.NAMED_BAR_SYNC


def test_a_plan_that_does_not_fit_names_the_tiles():
    # head dim 256 with FA4's sub-tiles: O alone needs 2 x 256 columns
    with pytest.raises(ArefError) as err:
        barrier("attention_fwd", BM=256, D=256)
    text = str(err.value)
    assert "tensor memory" in text and f"an SM has {COLUMNS}" in text
    assert "(128x256 f32) 256" in text            # each O accumulator named with its shape and columns


def test_unsafe_issue_order_gets_no_aliasing():
    """If the MMA warp issued the next Q·Kᵀ (writing S) before the P·V that reads P, P must not share S's
    columns: the plan keeps them apart (and then the FA4 configuration no longer fits)."""
    import copy

    import aref.lower.tmem as T
    ws = barrier("attention_fwd", **FA4)
    mma = ws.groups[ws.tmem.allocator]
    body = mma.loop.body.ops
    pvs = [op for op in body if op.kind is OpKind.MMA_ASYNC and len(op.operands) == 3]
    assert pvs
    reordered = copy.copy(ws)
    reordered.tmem = None
    for op in pvs:                        # pretend each P·V ran a step later than the Q·Kᵀ it reads behind
        op.stage = (op.stage or 0) + 2
    with pytest.raises(ArefError, match="need 640 columns"):
        T.plan_tensor_memory(reordered)


@pytest.mark.parametrize("shape, dtype_bits, cols", [((128, 128), 32, 128), ((64, 128), 32, 128),
                                                      ((128, 128), 16, 64), ((128, 256), 32, 256)])
def test_tile_columns(shape, dtype_bits, cols):
    from aref.ir import DType, Space, TileType
    dtype = DType.float32 if dtype_bits == 32 else DType.float16
    assert tile_columns(TileType(shape, dtype, Space.TMEM), "t", None, SM_100A.tmem_lanes) == cols


def test_tiles_taller_than_the_lanes_are_refused():
    from aref.ir import DType, Space, TileType
    with pytest.raises(ArefError, match="128 lanes"):
        tile_columns(TileType((256, 64), DType.float32, Space.TMEM), "tile x", None, SM_100A.tmem_lanes)


def test_resource_report_counts_the_plan():
    from aref.sim.resources import tensor_memory_columns
    ws = barrier("attention_fwd", **FA4)
    assert tensor_memory_columns(ws) == 512 == plan_tensor_memory(ws).columns


def test_p_is_not_written_over_s_that_another_group_still_reads(tmp_path):
    """A random program (seed 18; seed 16 until dead code was dropped) whose MMA result S is read by two
    CUDA-core groups, one of which writes a cast of it (P) back for the MMA warp: P over S would race with the
    other group's read of S (write-to-borrowed-slot in the simulator), so the plan keeps them apart and the
    kernel simulates clean."""
    from program_matrix import interpret
    from random_programs import random_program

    from aref import sim
    prog = random_program(18, directory=str(tmp_path))
    kernel = prog.kernel.specialize(**prog.inputs)
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a"))
    shared = [ch for ch in ws.channels if len(ch.consumers) > 1 and any(t.space.value == "tmem" for t in ch.payload)]
    assert shared, "the program no longer shares a tensor-memory tile between groups"
    expected = interpret(kernel, prog.inputs)
    report = sim.check(ws, prog.inputs, lambda **_: expected, seeds=3)
    assert not report.violations, [str(v) for v in report.violations]


def test_tensor_memory_is_freed_after_the_allocators_last_mma(tmp_path):
    """A random program (bench/coverage.py seed 128) whose CTA (0, 1) runs fewer steps than its consumers'
    last item: no commit's waiter observes the MMA warp's last MMA, so the allocator waits for its own MMAs
    before it frees the columns (the simulator saw tmem_dealloc with an MMA in flight)."""
    from program_matrix import interpret
    from random_programs import random_program

    from aref import sim
    prog = random_program(128, directory=str(tmp_path))
    kernel = prog.kernel.specialize(**prog.inputs)
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a"))
    expected = interpret(kernel, prog.inputs)
    report = sim.check(ws, prog.inputs, lambda **_: expected, seeds=3)
    assert not report.violations, [str(v) for v in report.violations]


def test_two_tensor_memory_tiles_for_one_user_cross_in_two_channels(tmp_path):
    """A random program (bench/coverage.py seed 97) whose partition hands two MMA results to one group for the
    same first user: each tensor-memory tile crosses in a channel of its own (the plan maps a tensor-memory
    channel to one buffer; one channel for both made the simulator see the second tile published in the first
    one's place, and was refused by rule after that), and the simulator agrees with the interpreter."""
    from program_matrix import interpret
    from random_programs import random_program

    from aref import sim
    from aref.ir import Space
    prog = random_program(97, directory=str(tmp_path))
    kernel = prog.kernel.specialize(**prog.inputs)
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a"))
    tmem = [ch for ch in ws.channels if not ch.user and any(t.space is Space.TMEM for t in ch.payload)]
    assert len(tmem) >= 2 and all(len(ch.payload) == 1 for ch in tmem)
    expected = interpret(kernel, prog.inputs)
    report = sim.check(ws, prog.inputs, lambda **_: expected, seeds=3)
    assert not report.violations, [str(v) for v in report.violations]

def test_a_groups_own_mma_tile_takes_one_buffer_for_the_prologue_and_the_loop(monkeypatch):
    """Where the solver's graph with group costs and reservations puts attention forward's two Q·Kᵀ on one
    softmax group (tests/test_cli_compare.py KNOWN_GAPS), the pipeline's prologue computes that group's own
    first S with an MMA of its own: that tile is dead before the loop writes its S, so it takes the loop's
    columns (it had a buffer beside the loop's, and the kernel needed 640 of 512 columns). The timing model
    runs the kernel without a violation."""
    import functools

    import partition.optimal as po
    from aref.target.machine import B200
    from aref.sim.timing import simulate_timing
    monkeypatch.setattr(po, "extract_graph", functools.partial(po.extract_graph, group_costs=True,
                                                               allow_transfers=False, reservations=True))
    ex = load_example(example_path("attention_fwd"))
    inputs = ex.inputs("large")
    kernel = ex.kernel.specialize(**inputs)
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a", partition="optimal"))
    private = [b for b in ws.tmem.buffers if not b.holds]
    writes = {b.name: {region for gp in ws.groups for region, block in gp.regions() for op in block.ops
                       if op.kind is OpKind.MMA_ASYNC and op.attrs.tmem == b.name} for b in private}
    assert any({"prologue", "loop"} <= w for w in writes.values()), writes
    assert ws.tmem.used == COLUMNS
    report = simulate_timing(ws, {p.name: inputs[p.name] for p in ws.params}, B200)
    assert report.ok and not report.violations
