"""Machine figures, op costs from tile shapes, and the discrete-event timing model."""
import json
import random

import pytest
from sim_kernels import gemm_ws

from aref.errors import SrcInfo
from aref.ir import DType, FnAttrs, MmaAttrs, Op, OpKind, Space, TileType, Value
from aref.target.machine import B200, CALIBRATION_DIR, H100, H100_DATASHEET, machine_for, op_cost, unit_busy
from aref.sim.timing import simulate_timing


def mma(m, n, k, dtype=DType.float16):
    a = Value(TileType((m, k), dtype, Space.SMEM))
    b = Value(TileType((k, n), dtype, Space.SMEM))
    return Op(OpKind.MMA_ASYNC, (a, b), (Value(TileType((m, n), DType.float32)),), MmaAttrs(), SrcInfo("x", 1))


def unary(fn, shape):
    x = Value(TileType(shape, DType.float32))
    return Op(OpKind.UNARY, (x,), (Value(TileType(shape, DType.float32)),), FnAttrs(fn), SrcInfo("x", 1))


def test_machine_figures():
    assert machine_for("sm_90a") is H100 and machine_for("sm_100a") is B200
    with pytest.raises(ValueError):
        machine_for("sm_80")
    assert H100.tensor_flop_per_clk[DType.float16] == 4096 and H100.tensor_flop_per_clk[DType.float8_e4m3] == 8192
    assert B200.tensor_flop_per_clk[DType.bfloat16] == 8192 and B200.tensor_flop_per_clk[DType.float8_e5m2] == 16384
    for m in (H100, B200):
        assert (m.mufu_per_clk, m.fma_per_clk, m.smem_bytes_per_clk, m.registers) == (16, 128, 128, 65536)
        assert (m.max_regs_per_thread, m.setmaxnreg_min, m.setmaxnreg_max, m.setmaxnreg_step) == (255, 24, 256, 8)
        assert m.smem_per_block == 227 * 1024
    assert (B200.tmem_lanes, B200.tmem_columns, H100.tmem_columns) == (128, 512, 0)
    assert (H100_DATASHEET.tma_bytes_per_clk, B200.tma_bytes_per_clk) == (64, 128)
    assert H100_DATASHEET.tma_latency == B200.tma_latency == (400, 550, 1200)
    # the H100 in use is the datasheet model with the figures its calibration file fits (bench/calibrate.py)
    fitted = json.loads((CALIBRATION_DIR / "H100.json").read_text())["parameters"]
    assert (H100.tma_bytes_per_clk, H100.tma_latency) == (fitted["tma_bytes_per_clk"], tuple(fitted["tma_latency"]))
    # the datasheet's 989.4 dense fp16 TFLOP/s follows from the per-SM figure
    assert abs(H100.sms * H100.clock_ghz * 1e9 * 4096 / 1e12 - 989.4) < 1


def test_op_costs_from_tile_shapes():
    assert op_cost(mma(128, 128, 128), H100) == ("tc", 1024)      # Twill's "roughly 1000 cycles"
    assert op_cost(mma(128, 128, 64), B200) == ("tc", 256)
    assert op_cost(mma(64, 128, 64, DType.float8_e4m3), H100) == ("tc", 128)
    assert op_cost(unary("exp2", (128, 128)), H100) == ("mufu", 1024)
    assert op_cost(unary("abs", (128, 128)), H100) == ("fma", 128)
    x = Value(TileType((128, 128), DType.float32))
    red = Op(OpKind.REDUCE, (x,), (Value(TileType((128,), DType.float32)),), FnAttrs("max", 1), SrcInfo("x", 1))
    assert op_cost(red, H100) == ("fma", 128)


def test_tma_cost_is_latency_plus_transfer_and_busy_is_transfer():
    kernel = gemm_ws(BM=128, BN=128, K=64)
    tma = next(op for op in kernel.groups[0].all_ops() if op.kind is OpKind.TMA_LOAD)
    # the datasheet model, without a generator: the mean latency of the triangular (400, 550, 1200)
    # distribution, 2150 / 3 ≈ 717 cycles, plus the transfer of one 128×64 fp16 tile (16 KB) at 64 B per clock
    unit, cycles = op_cost(tma, H100_DATASHEET)
    assert (unit, cycles) == ("tma", 717 + 256)
    assert unit_busy(tma, H100_DATASHEET) == 256         # the copy engine is busy for the transfer only
    draws = [op_cost(tma, H100_DATASHEET, random.Random(s))[1] - 256 for s in range(200)]
    assert len(set(draws)) > 50 and all(400 <= d <= 1200 for d in draws)
    assert abs(sum(draws) / len(draws) - 717) < 40     # the draws follow the distribution, not its bounds
    # the calibrated model, worked out from its file: the copy's bytes arrive at one rate, the engine is busy
    # at another
    fitted = json.loads((CALIBRATION_DIR / "H100.json").read_text())["parameters"]
    lat = round(sum(fitted["tma_latency"]) / 3)
    arrive = -(-16384 // fitted["tma_copy_bytes_per_clk"])
    assert op_cost(tma, H100) == ("tma", lat + arrive) and arrive > 256
    assert unit_busy(tma, H100) == -(-16384 // fitted["tma_bytes_per_clk"])
    assert op_cost(tma, H100, random.Random(3)) == op_cost(tma, H100, random.Random(3))    # pure


def _timing(depth, mma_depth, machine=H100, K=4096):
    return simulate_timing(gemm_ws(M=128, N=128, K=K, BM=128, BN=128, BK=64, depth=depth, mma_depth=mma_depth),
                           None, machine, seed=0)


def test_deeper_rings_approach_the_tensor_core_bound():
    reports = {d: _timing(d, 1 if d > 1 else 0, H100_DATASHEET) for d in (1, 2, 4)}
    per_iter = [reports[d].cycles_per_iter for d in (1, 2, 4)]
    assert per_iter == sorted(per_iter, reverse=True)
    mma_cycles = 2 * 128 * 128 * 64 // 4096            # 512: one 128×128×64 fp16 MMA at 4096 FLOP/clk
    transfer = 2 * 128 * 64 * 2 // 64                   # 512: A and B tiles (32 KB) at 64 B/clk
    bound = max(mma_cycles, transfer)
    assert bound <= per_iter[-1] < 1.25 * bound
    assert reports[1].cycles_per_iter > 2 * bound           # one slot: every load's latency is exposed
    r = reports[4]
    assert r.iterations == 64 and r.ok
    assert 0.75 < r.utilization["tc"] <= 1.0 and r.utilization["mufu"] == 0.0
    assert r.total_cycles >= 64 * bound


def test_blackwell_halves_the_mma_time():
    h, b = _timing(4, 1, H100, K=1024), _timing(4, 1, B200, K=1024)
    tc_h = sum(e.end - e.start for e in h.timeline if e.unit == "tc")
    tc_b = sum(e.end - e.start for e in b.timeline if e.unit == "tc")
    assert tc_h == 2 * tc_b


def test_timeline_is_a_consistent_gantt_chart():
    r = _timing(3, 1, K=512)
    assert {e.group for e in r.timeline} == {"producer", "consumer"}
    assert all(e.start <= e.end <= r.total_cycles for e in r.timeline)
    tc = sorted((e.start, e.end) for e in r.timeline if e.unit == "tc")
    assert len(tc) == 8 and all(a[1] <= b[0] for a, b in zip(tc, tc[1:]))      # one tensor core
    waits = [e for e in r.timeline if e.unit == "wait"]
    assert any(e.group == "consumer" and e.op.startswith("mbarrier_wait %full") for e in waits)
    assert all(e.line > 0 for e in r.timeline)
    js = r.to_json()
    assert set(js) >= {"total_cycles", "cycles_per_iter", "utilization", "timeline"}
    assert js["timeline"][0].keys() >= {"group", "op", "unit", "start", "end", "line"}


def test_copy_engine_is_work_conserving():
    """A copy takes the engine's idle cycles wherever they are: a load issued before a store that was booked
    first (its group ran ahead in simulation order) uses the cycles before the store and finishes after it,
    rather than queueing whole behind it; the engine is never idle while a copy is outstanding."""
    from types import SimpleNamespace

    from aref.sim.timing import _Clock
    clock = _Clock(SimpleNamespace(prog=SimpleNamespace(groups=[])), H100, random.Random(0))
    assert clock.copy(300, 200) == (300, 500)          # the store, booked first
    assert clock.copy(0, 400) == (0, 600)              # the load: 0..300, then 500..600 (one interval: 500..900)
    assert clock.booked["tma"] == [(0, 600)] and clock.busy["tma"] == 600
    assert clock.copy(100, 50) == (600, 650)           # nothing idle before 600: it queues
    assert clock.copy(700, 0) == (700, 700)


def test_timing_reports_schedule_bugs():
    r = simulate_timing(gemm_ws(depth=1, mma_depth=1), None, H100)
    assert not r.ok and r.violations[0].kind == "deadlock"


def test_resource_limits():
    from aref.sim import check_resources, shared_memory_bytes
    ok = gemm_ws(BM=128, BN=128, BK=64, depth=3)
    # the resource model's layout: the barriers, then 1024-aligned rings (3 slots of A and B tiles) and C's
    # staging tile, plus 1024 bytes for aligning the storage itself
    assert shared_memory_bytes(ok) == 1024 + 3 * (2 * 128 * 64 * 2) + 128 * 128 * 2 + 1024
    assert check_resources(ok) == []
    big = gemm_ws(BM=128, BN=128, BK=128, depth=4)          # 4 slots of 64 KB
    problems = check_resources(big)
    assert len(problems) == 1 and problems[0].startswith("shared memory: the kernel needs 296960 B")
    assert simulate_timing(big, None, H100).warnings == problems
    from sim_kernels import gemm_inputs, gemm_reference

    from aref.sim import check
    report = check(big, gemm_inputs(M=128, N=128, K=256), gemm_reference, seeds=2)
    assert report.ok and report.to_json()["warnings"] == problems
    greedy = gemm_ws(consumers=2)
    greedy.groups[1].group = type(greedy.groups[1].group)(1, "consumer0", "consumer", 4, 256)
    greedy.groups[2].group = type(greedy.groups[2].group)(2, "consumer1", "consumer", 4, 256)
    assert any(p.startswith("registers: the groups' budgets") for p in check_resources(greedy))


def test_blackwell_group_reads_its_own_accumulator_through_tcgen05(monkeypatch):
    """Where the solver puts FA's P·V on the softmax group, that group rescales O, its own MMA's accumulator,
    in tensor memory: the timing model charges the tcgen05.ld of O and the tcgen05.st of O·α on the tensor
    memory paths, as the solver's graph does (the rescale node's tmem_ld / tmem_st), 64 cycles each for a
    64x128 fp32 tile at 512 bytes per clock."""
    import functools

    import partition.optimal as po
    from aref.compiler import CompileOptions
    from aref.search import lower_to
    from aref.runtime.harness import load_example
    from aref.sim.program import Prog
    monkeypatch.setattr(po, "extract_graph", functools.partial(po.extract_graph, group_costs=True,
                                                                   reservations=False))
    # the timing model's charges for such a group, on the Barrier IR of the solver's own assignment: the
    # partition now hands P·V to an MMA warp (P is computed in registers), which the code generator needs
    import partition.assignment as pa
    monkeypatch.setattr(pa, "_mma_warp_for_register_operands", lambda *a: None)
    ex = load_example("examples/attention_fwd.py")
    inputs = ex.inputs("small")
    kernel = ex.kernel.specialize(**inputs)
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_100a", partition="optimal", solver_transfers=False))
    prog = Prog(ws)
    marked = [(g.name, ins) for g, p in zip(prog.groups, prog.programs) for ins in p
              if ins.tmem_ld_bytes or ins.tmem_st_bytes]
    rescales = [ins for _, ins in marked if ins.tmem_st_bytes]
    assert rescales and all(ins.tmem_ld_bytes == ins.tmem_st_bytes == ins.op.result.type.nbytes for ins in rescales)
    assert all(any(i.kind is OpKind.MMA_ASYNC for i in p if i.op is not None)
               for g, p in zip(prog.groups, prog.programs) if any(g.name == n for n, _ in marked))
    report = simulate_timing(ws, {p.name: inputs[p.name] for p in ws.params}, B200)
    assert report.ok
    units = {e.unit for e in report.timeline if "mul" in e.op and e.group in {n for n, _ in marked}}
    assert {"tmem_ld", "tmem_st"} <= units
