"""Random tile programs (tests/random_programs.py, wgmma sizes, ragged extents included) through the whole
compiler: heuristic partition → pipeline → aref lowering → simulator (sm_90a and sm_100a, against the
interpreter) → the CuTe DSL compile for both archs (PTX, no GPU needed), with no spills.

A refusal fails the test unless it is one of the documented hardware rules, recognised by its error class:

* `aref.resources.ResourceError` — the program's live tiles need more registers per thread than a warp
  group can be given (setmaxnreg: 256), or more shared memory than an SM has (227 KiB). The message names
  the warp group and the tiles; smaller tiles or another partition are the user's remedy.

Anything else — a `BackendError` (a template gap), a `ToolchainError` or any exception from the CuTe DSL, a
`CompilerBugError`, a simulator violation — fails. `bench/coverage.py` runs the same check on hundreds of
programs and prints the figures (compile share, refusals by rule).
"""
import pytest

from aref.resources import ResourceError
from program_matrix import check_config, compile_sm90
from random_programs import random_program

HARDWARE_RULES = (ResourceError,)
SEEDS = range(8)            # the generator's first programs: deterministic, varied (see their features)


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("random_compile"))
    return {seed: random_program(seed, directory=directory) for seed in SEEDS}


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program_compiles_for_sm90a_or_hits_a_hardware_rule(programs, backend_cache, seed):
    from aref.compiler import CompileOptions
    prog = programs[seed]
    outcomes = {}
    for arch in ("sm_90a", "sm_100a"):
        o = check_config(prog, f"heuristic-{arch}", {"options": CompileOptions(arch=arch)},
                         seeds=2, exhaustive=False)
        assert o.status == "ok", (prog.path, arch, o.detail)
        outcomes[arch] = o
    for arch in ("sm_90a", "sm_100a"):
        result = compile_sm90(outcomes[arch].ir, cache_dir=backend_cache)     # compiles the IR's own arch
        if result.status == "compiled":
            assert result.spill_bytes == 0, (prog.path, arch, result.spill_bytes)
            continue
        assert isinstance(result.error, HARDWARE_RULES), (prog.path, arch, result.rule, result.detail)


def test_blackwell_chains_share_groups_when_the_register_file_is_short(tmp_path, backend_cache):
    """Seed 703 (bench/coverage.py): one four-warp group per chain of register math needed 74,752 registers
    beside the one-warp roles, more than the SM's 65,536 (refused); `lower_to` now retries the heuristic with
    the chains packed into fewer groups (`CompileOptions.compute_groups`). Its column sums of 64-row tiles
    (axis 0) were then refused by the Blackwell templates; they shuffle over the 16 rows of each warp (lanes t
    and t ^ 16 hold the two column halves) and meet across warps in the exchange tile. Its compute group
    holds 193 registers of tiles where it writes a float32 tile to a shared-memory slot: stored in 16-byte
    vectors (ptxas re-packing aligned register quads) it spilled 48 bytes; a register at a time, as the
    resource model counts it, it fits its 248."""
    from aref.backend.cute import compile_barrier
    from aref.compiler import CompileOptions
    from aref.search import lower_to
    from partition.heuristic import HeuristicOptions
    prog = random_program(703, directory=str(tmp_path))
    kernel = prog.kernel.specialize(**prog.inputs)
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a"))
    assert ws.resource_error is None
    packed = sum(g.group.role in ("compute", "softmax") for g in ws.groups)
    one_each = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a", compute_groups=99))
    assert sum(g.group.role in ("compute", "softmax") for g in one_each.groups) > packed
    assert one_each.resource_error is not None and one_each.resource_error.register_file
    assert "fewer independent chains" in one_each.resource_error.hint
    with pytest.raises(Exception, match="compute_groups"):
        HeuristicOptions(compute_groups=0)
    o = check_config(prog, "heuristic-sm_100a", {"options": CompileOptions(arch="sm_100a")}, seeds=2,
                     exhaustive=False)
    assert o.status == "ok", o.detail
    result = compile_barrier(o.ir, cache_dir=backend_cache)
    assert result.spill_bytes == 0
    assert "sm100.col_index(64" in result.source_path.read_text()


def test_a_consumer_near_its_budget_passes_the_cap_without_spilling(tmp_path, backend_cache):
    """Seed 2037 (bench/coverage.py on seeds 2000-2199): one consumer beside the producer, the model counting 216
    registers per thread, was given 240 (BUDGET_CAP) and ptxas spilled 8 bytes; a group within PTXAS_HEADROOM of
    its budget now takes the producer's registers and setmaxnreg's full 256. (Seed 2037 needs less since its
    duplicate column reductions are merged (`aref.passes.cse`); seed 2001 is such a consumer today.)"""
    from aref.compiler import CompileOptions
    prog = random_program(2001, directory=str(tmp_path))
    o = check_config(prog, "heuristic-sm_90a", {"options": CompileOptions(arch="sm_90a")}, seeds=2,
                     exhaustive=False)
    assert o.status == "ok", o.detail
    assert {gp.group.name: gp.group.regs for gp in o.ir.groups} == {"producer": 24, "consumer": 256}
    result = compile_sm90(o.ir, cache_dir=backend_cache)
    assert result.status == "compiled" and result.spill_bytes == 0, (result.rule, result.spill_bytes)


def test_a_column_reduction_written_twice_is_computed_once(tmp_path, backend_cache):
    """Seed 2037 on sm_100a, heuristic partition: `where(u.max(0) > s.sum(0), u.max(0), s.sum(0))` made four
    column reductions (shuffle trees, shared-memory exchanges, column vectors live at once) in one group at 256
    registers, and ptxas spilled 40 bytes. `aref.passes.cse` merges equal reductions: two are left, and the
    program compiles without spills."""
    from aref.backend.cute import compile_barrier
    from aref.compiler import CompileOptions
    from aref.ir import OpKind
    from aref.passes.cse import cse
    prog = random_program(2037, directory=str(tmp_path))
    tile_ir = cse(prog.kernel.specialize(**prog.inputs))
    col = [op for op in tile_ir.all_ops() if op.kind is OpKind.REDUCE and op.attrs.axis == 0]
    assert len(col) == 2 * 2, [op.attrs for op in col]           # a max and a sum for each of the S = 2 tiles
    o = check_config(prog, "heuristic-sm_100a", {"options": CompileOptions(arch="sm_100a")}, seeds=2,
                     exhaustive=False)
    assert o.status == "ok", o.detail
    result = compile_barrier(o.ir, cache_dir=backend_cache)
    assert result.spill_bytes == 0, result.ptxas_log


@pytest.mark.parametrize("seed", [803, 804])
def test_blackwell_rules_found_by_coverage(tmp_path, backend_cache, seed):
    """bench/coverage.py on sm_100a: seed 803 has a group whose only register values are vectors along the
    columns (refused: 'beside register tiles of no rows'; they are held whole, the 128-row layout), seed 804 a
    post-loop store of index math the one-warp epilogue was given (refused: 'stores a register tile'; a
    four-warp group stores it)."""
    from aref.backend.cute import compile_barrier
    from aref.compiler import CompileOptions
    prog = random_program(seed, directory=str(tmp_path))
    o = check_config(prog, "heuristic-sm_100a", {"options": CompileOptions(arch="sm_100a")}, seeds=2,
                     exhaustive=False)
    assert o.status == "ok", o.detail
    assert compile_barrier(o.ir, cache_dir=backend_cache).spill_bytes == 0


@pytest.mark.parametrize("seed", [1062, 1094])
def test_blackwell_budgets_count_what_ptxas_hoists_out_of_the_loop(tmp_path, backend_cache, seed):
    """bench/coverage.py on sm_100a, heuristic partition: seed 1062 spilled 240 bytes (a compute group at 184
    registers; ptxas needed 208) and 1094 96 bytes (a group left at the launch count, 72). ptxas keeps the
    per-element addresses of shared-memory tiles a loop writes or reads at a fixed address (a depth-1 ring, a
    store's staging tile) in registers for the whole loop, and in a loop without memory barriers the values
    of a slot got before it (1094's column vector, re-read in every iteration); the resource model counts
    both (`aref.resources.demand.hoisted_over_loop`), and the budgets it sets compile without spills."""
    from aref.backend.cute import compile_barrier
    from aref.compiler import CompileOptions
    from aref.resources import register_demand
    prog = random_program(seed, directory=str(tmp_path))
    o = check_config(prog, "heuristic-sm_100a", {"options": CompileOptions(arch="sm_100a")}, seeds=2,
                     exhaustive=False)
    assert o.status == "ok", o.detail
    live = [name for gp in o.ir.groups for name, _ in register_demand(gp, "sm_100a").live]
    assert any(name.startswith("addresses of ") for name in live), live
    for gp in o.ir.groups:             # (one-warp roles share a fixed budget: `aref.lower.sm100.ONE_WARP_REGS`)
        assert gp.group.warps == 1 or register_demand(gp, "sm_100a").need <= gp.group.regs
    result = compile_barrier(o.ir, cache_dir=backend_cache)
    assert result.spill_bytes == 0, result.ptxas_log


def _optimal(tmp_path, seed: int, arch: str):
    """Random program `seed` lowered with the optimal partition on `arch` and checked in the simulator."""
    from aref.compiler import CompileOptions
    o = check_config(random_program(seed, directory=str(tmp_path)), f"optimal-{arch}",
                     {"options": CompileOptions(arch=arch, partition="optimal", solver_time_limit=10)},
                     seeds=2, exhaustive=False)
    assert o.status == "ok", o.detail
    return o


def test_a_tensor_core_group_hands_register_math_through_tensor_memory(tmp_path, backend_cache):
    """Seed 902, optimal partition on sm_100a: a four-warp group that issues MMAs also puts a cast it
    computed into a tensor-memory channel for the MMA warp. The slot was published as an MMA result (one
    tcgen05.commit, full count 1) and the backend refused the group's per-thread arrival; every thread stores
    its row (tcgen05.st) and arrives, so the count is the group's threads."""
    from aref.backend.cute import compile_barrier
    o = _optimal(tmp_path, 902, "sm_100a")
    by_threads = [ch for ch in o.ir.channels if ch.kind == "store" and ch.full_count == 128
                  and any(t.space.value == "tmem" for t in ch.payload)
                  and o.ir.groups[ch.producer].group.role != "softmax"]
    assert by_threads, [(ch.name, ch.full_count) for ch in o.ir.channels]
    assert compile_barrier(o.ir, cache_dir=backend_cache).spill_bytes == 0


def test_a_pipelined_tensor_memory_read_carried_in_registers(tmp_path, backend_cache):
    """Seed 1029 (bench/coverage.py; seed 1003 until its dead code was dropped), optimal partition on sm_100a:
    a CUDA-core group's pipeline reads an MMA result from its tensor-memory ring into registers one stage
    ahead, so that read crosses the loop as a loop-carried value of a tensor-memory type. The backend took
    every such carry for an MMA's accumulator and refused the program as its own failure ('a loop-carried
    tensor-memory tile not computed by an MMA'); a tile the group holds in registers is carried as
    registers."""
    from aref.backend.cute import compile_barrier
    o = _optimal(tmp_path, 1029, "sm_100a")
    carried = [c for g in o.ir.groups if g.loop is not None for c in g.loop.carried
               if getattr(c.type, "space", None) is not None and c.type.space.value == "tmem"]
    assert carried, "the premise: a tensor-memory tile carried across the loop"
    assert compile_barrier(o.ir, cache_dir=backend_cache).spill_bytes == 0


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_optimal_partition_of_a_loop_without_loads_keeps_a_producer(tmp_path, backend_cache, arch):
    """Seed 1067 (bench/coverage.py): the loop's loads are dead, so the loop is register math only and the
    solver's schedule has no TMA group; the loads before and after the loop went to the computing group,
    which the backend refuses (TMA issue stays in a data-movement role). The partition adds the producer
    group those loads need."""
    from aref.backend.cute import compile_barrier
    o = _optimal(tmp_path, 1067, arch)
    assert not any(op.kind.value == "load" for gp in o.ir.groups if gp.loop is not None
                   for op in gp.loop.body.ops), "the premise: no load in the loop"
    producers = [gp for gp in o.ir.groups if gp.group.role == "producer"]
    assert len(producers) == 1 and all(gp.group.role == "producer" for gp in o.ir.groups
                                       if any(op.kind.value == "tma_load" for op in gp.all_ops()))
    assert compile_barrier(o.ir, cache_dir=backend_cache).spill_bytes == 0


def test_the_sample_is_varied(programs):
    """The sample covers the generator's features (a test that always refuses would pass vacuously)."""
    feats = set().union(*(p.features for p in programs.values()))
    for f in ("ragged", "channel", "direct-loads", "subtiles:2", "op:mma", "masks", "op:where"):
        assert f in feats, (f, sorted(feats))
    assert len({(p.spec.S, p.spec.SUB, p.spec.BN) for p in programs.values()}) >= 3


def test_coverage_bench_prints_the_figures(tmp_path):
    """`bench/coverage.py` on two programs (source generation only, both archs): the summary, its JSON and the records."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out, records = tmp_path / "cov.json", tmp_path / "cov.jsonl"
    run = subprocess.run([sys.executable, os.path.join(root, "bench", "coverage.py"), "--n", "2", "--partitions",
                          "heuristic", "--emit", "cute", "--seeds", "1", "--cache", str(tmp_path / "cache"),
                          "--json", str(out), "--records", str(records)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root}, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "sm_90a compile, heuristic partition:" in run.stdout and "simulator violations: 0" in run.stdout
    assert "sm_100a compile, heuristic partition:" in run.stdout
    summary = json.loads(out.read_text())["summary"]
    assert summary["programs"] == 2 and set(summary["compile_share"]) == {"heuristic-sm_90a", "heuristic-sm_100a"}
    assert len(records.read_text().splitlines()) == 2


def test_a_slot_row_vector_stored_from_the_optimal_partition_compiles(tmp_path, backend_cache):
    """Seed 67 (bench/coverage.py, optimal partition): a row vector the group reads from a channel slot is
    stored with a rank-1 store; the store read it through a helper that did not exist (a compiler bug,
    `emit_loop_nest`), now through the register read every other use takes."""
    from aref.compiler import CompileOptions
    from aref.search import lower_to
    prog = random_program(67, directory=str(tmp_path))
    ws = lower_to(prog.kernel.specialize(**prog.inputs), "barrier",
                  CompileOptions(partition="optimal", solver_time_limit=10))
    result = compile_sm90(ws, cache_dir=backend_cache)
    assert result.status == "compiled" and result.spill_bytes == 0, (result.rule, result.detail)


def test_a_post_loop_mask_is_made_in_the_group_that_selects_with_it(tmp_path, backend_cache):
    """Seed 73 (optimal partition): after the loop, `where(c > cv, c, cv * 0.25)` — the comparison went to
    the group that made cv, the select to the one that holds c, and the boolean tile between them was refused
    ("carries a boolean tile"). A mask is placed with the op that uses it: no boolean tile crosses groups."""
    from aref.compiler import CompileOptions
    from aref.search import lower_to
    from aref.ir import DType
    prog = random_program(73, directory=str(tmp_path))
    ws = lower_to(prog.kernel.specialize(**prog.inputs), "barrier",
                  CompileOptions(partition="optimal", solver_time_limit=10))
    assert not any(t.dtype is DType.bool_ for ch in ws.channels for t in ch.payload)
    result = compile_sm90(ws, cache_dir=backend_cache)
    assert result.status == "compiled" and result.spill_bytes == 0, (result.rule, result.detail)
