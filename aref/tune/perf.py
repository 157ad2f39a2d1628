"""Whole-GPU time of a kernel, predicted from the timing model of one CTA (`aref.sim.timing`).

`simulate_timing` gives the cycles of one CTA on one SM. A launch runs the grid in waves of
`sms × ctas_per_sm` CTAs (the last one possibly partial), each CTA paying the machine's
`cta_overhead_cycles` for what its Barrier IR does not show (launch, setup, teardown). A persistent launch
starts min(`ctas`, tiles) CTAs that walk the tiles round-robin; as the backend's persistent loop does not yet
overlap one tile's epilogue with the next tile's main loop, each tile costs what a CTA costs. Seconds use the
machine's clock; TFLOP/s count the Tile IR's tensor-core work.

Two effects are the whole GPU's, not one SM's. With every SM running tensor work the GPU sustains only a share of
the datasheet tensor rate (the calibrated `loaded_tensor_efficiency`: the clock drops under the power limit; the
fastest dense GEMM measured on the calibration's H100, cuBLAS at 4096³-8192³, ran 752 of the datasheet's 989
TFLOP/s). And when the tiles one wave of CTAs reads outgrow the L2 cache
(`wave_footprint`), a share 1 − L2/footprint of their bytes misses, and every SM's TMA transfers slow down by
the machine's calibrated `l2_miss_penalty` per unit of that share (`problem_machine`).

The tuner ranks candidates by `predict`, and `bench/calibrate.py` fits the machine's figures so that
`predict` matches measured times.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from aref.ir import Kernel, OpKind
from aref.ops.memory import mma_flops
from aref.target import target_of
from aref.target.machine import Machine
from aref.backend.tile_order import tile_coords


@dataclass(frozen=True)
class Prediction:
    """What the model predicts for one launch: `seconds`, the one-CTA figures it rests on, and TFLOP/s."""

    seconds: float
    cta_cycles: int                 # one CTA (one tile), from the timing model
    cycles_per_iter: float          # steady state of the CTA's loop
    tc_utilization: float           # tensor-core busy share within the CTA
    waves: int                      # CTA waves (persistent: tiles per CTA)
    ctas_per_sm: int
    flops: int | None               # tensor-core FLOP of the whole launch (None: run-time trip count)
    ok: bool = True                 # False when the timing model found a schedule bug
    problem: str = ""

    @property
    def tflops(self) -> float | None:
        return self.flops / self.seconds / 1e12 if self.flops and self.seconds > 0 else None

    def to_json(self) -> dict:
        out = dict(vars(self))
        out["tflops"] = self.tflops
        return out


def kernel_flops(kernel: Kernel) -> int | None:
    """Tensor-core FLOP of every CTA of a Tile IR kernel: 2·M·N·K per MMA, loop MMAs times the trip count
    (None when the trip count is not a compile-time constant)."""
    per_cta = sum(mma_flops(op) for op in (*kernel.pre.ops, *kernel.post.ops) if op.kind is OpKind.MMA)
    if kernel.loop is not None:
        body = sum(mma_flops(op) for op in kernel.loop.body.ops if op.kind is OpKind.MMA)
        if body:
            trip = _constant(kernel, kernel.loop.trip_count)
            if trip is None:
                return None
            per_cta += trip * body
    return per_cta * math.prod(kernel.grid)


def _constant(kernel: Kernel, value) -> int | None:
    for op in kernel.all_ops():
        if op.kind is OpKind.CONST and op.result is value:
            return int(op.attrs.value)
    return None


def typical_cta(kernel: Kernel) -> tuple[int, ...]:
    """A CTA of Tile IR `kernel` whose loop runs the grid's average trip count (the nearest; the first CTA when
    the count does not depend on the program ids): the one whose time stands for every CTA's in `predict`."""
    from aref.interp.tile import trip_counts
    counts = trip_counts(kernel)
    first = tuple(0 for _ in kernel.grid)
    if not counts or len(set(counts.values())) == 1:
        return first
    mean = sum(counts.values()) / len(counts)
    return min(counts, key=lambda c: (abs(counts[c] - mean), c))


def wave_footprint(ws, ctas: int, raster: int = 0) -> int:
    """Bytes of global memory the first `ctas` CTAs (one wave, in the launch's tile order: x fastest, or
    `raster`ized, `aref.backend.tile_order`) read through TMA: each loaded
    tensor counts with the share of its tiles those CTAs touch, from the grid axes its load coordinates
    depend on (a GEMM's A by the M axis, B by the N axis; attention's K and V by the head axis)."""
    from aref.ir import TensorType
    prod = {id(r): op for gp in ws.groups for op in gp.all_ops() for r in op.results}

    def axes(v, depth=0) -> set:
        op = prod.get(id(v))
        if op is None or depth > 32 or isinstance(op.result.type, TensorType):
            return set()
        if op.kind is OpKind.PROGRAM_ID:
            return {op.attrs.axis}
        return set().union(*(axes(o, depth + 1) for o in op.operands)) if op.operands else set()

    deps: dict[int, set] = {}
    for gp in ws.groups:
        for op in gp.all_ops():
            if op.kind is OpKind.TMA_LOAD or op.kind is OpKind.LOAD:
                coords = op.operands[1:-4] if op.kind is OpKind.TMA_LOAD else op.operands[1:]
                deps.setdefault(id(op.operands[0]), set()).update(*(axes(c) for c in coords))
    grid = tuple(ws.grid)
    wave = [tile_coords(i, grid, raster) for i in range(min(ctas, math.prod(grid)))]
    total = 0
    for p in ws.params:
        if id(p.value) in deps:
            dims = sorted(deps[id(p.value)])
            touched = len({tuple(c[d] for d in dims) for c in wave})
            nbytes = math.prod(p.value.type.shape) * p.value.type.dtype.nbytes
            total += nbytes * touched // max(1, math.prod(grid[d] for d in dims))
    return total


def problem_machine(ws, machine: Machine, ctas: int, raster: int = 0) -> Machine:
    """`machine` as one SM of it sees `ws`'s problem: the tensor rate the whole GPU sustains under load
    (`loaded_tensor_efficiency`), and TMA rates reduced by the L2 miss share of one wave of `ctas` CTAs
    (walking the tiles in the `raster` order)."""
    if machine.loaded_tensor_efficiency != 1.0:
        machine = replace(machine, tensor_efficiency=machine.tensor_efficiency * machine.loaded_tensor_efficiency,
                          loaded_tensor_efficiency=1.0)
    if machine.l2_miss_penalty <= 0:
        return machine
    footprint = wave_footprint(ws, ctas, raster)
    if footprint <= machine.l2_bytes:
        return machine
    slow = 1.0 + machine.l2_miss_penalty * (1.0 - machine.l2_bytes / footprint)
    return replace(machine, tma_bytes_per_clk=max(1, round(machine.tma_bytes_per_clk / slow)),
                   tma_copy_bytes_per_clk=max(1, round(machine.tma_copy_rate / slow)))


def occupancy(ws, machine: Machine) -> int:
    """CTAs of `ws` (Barrier IR) one SM holds at once: limited by shared memory, registers and threads."""
    from aref.sim.resources import MAX_THREADS_PER_BLOCK, shared_memory_bytes
    smem = max(1, shared_memory_bytes(ws))
    regs = max(1, sum(g.group.regs * g.group.threads for g in ws.groups))
    threads = max(1, ws.total_threads)
    return max(1, min(machine.smem_per_block // smem, machine.registers // regs,
                      2 * MAX_THREADS_PER_BLOCK // threads))


def epilogue_cycles(ws, report) -> int:
    """Cycles of one tile after its consumers' last ring release (the epilogue an overlap can hide)."""
    name = {gp.group.id: gp.group.name for gp in ws.groups}
    consumers = {name[c] for ch in ws.channels for c in ch.consumers}
    last = max((e.end for e in report.timeline if e.group in consumers and e.op.startswith("mbarrier_arrive")),
               default=report.total_cycles)
    return max(0, report.total_cycles - last)


def predict(ws, machine: Machine, *, flops: int | None = None, persistent: bool = False,
            ctas: int | None = None, raster: int = 0, seed: int = 0, epilogue_overlap: bool = False,
            cta: tuple[int, ...] | None = None) -> Prediction:
    """Predicted time of launching Barrier IR `ws` on the whole GPU of `machine` (see the module docstring).

    `flops`: the launch's tensor-core FLOP (`kernel_flops` of its Tile IR) for the TFLOP/s figure;
    `persistent`/`ctas`: a persistent launch of min(`ctas` (default: one per SM), tiles) CTAs; `raster`: the
    tile order (`aref.backend.tile_order`), which decides what one wave reads. `epilogue_overlap` (persistent, sm_90a):
    two consumer copies on alternate tiles hide each tile's epilogue but the CTA's last behind the next main loop.
    `cta`: the CTA whose timing stands for every CTA (default the first; where trip counts differ per CTA, as with
    causal block skipping, one of average length: `typical_cta`).
    """
    from aref.sim.timing import simulate_timing
    tiles = math.prod(ws.grid)
    per_sm = occupancy(ws, machine)
    workers = min(ctas or machine.sms * per_sm, tiles) if persistent else machine.sms * per_sm
    report = simulate_timing(ws, None, problem_machine(ws, machine, workers, raster), seed=seed, cta=cta)
    # CTAs sharing an SM share its units: a wave lasts at least the busiest unit's work of all of them
    busiest = max(report.utilization.values(), default=0.0) * report.total_cycles
    cta_cycles = max(report.total_cycles, math.ceil(per_sm * busiest))
    # The backend's persistent loop runs every tile's fill, drain and epilogue as a fresh CTA would, so a
    # tile costs the same either way; only how tiles spread over CTAs differs — unless the epilogue overlaps.
    waves = math.ceil(tiles / workers)
    cycles = waves * (machine.cta_overhead_cycles + cta_cycles)
    if epilogue_overlap and persistent and target_of(ws.arch).mma == "wgmma" and waves > 1:
        # each tile's epilogue runs during the other consumer copy's next main loop, as far as that lasts
        epilogue = epilogue_cycles(ws, report)
        cycles -= (waves - 1) * min(epilogue, cta_cycles - epilogue)
    problem = "; ".join(v.message for v in report.violations)
    return Prediction(cycles / (machine.clock_ghz * 1e9), report.total_cycles, report.cycles_per_iter,
                      report.utilization.get("tc", 0.0), waves, per_sm, flops, report.ok, problem)
