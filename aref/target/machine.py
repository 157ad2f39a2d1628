"""Machine models of one SM of each device (H100, H200, B200) and the cost of an op on them.

A `Machine` holds per-SM, per-clock throughputs of the functional units a warp-specialized kernel competes
for, the register / shared-memory / tensor-memory budgets, and the latency distribution of a TMA copy.
`op_cost(op, machine)` turns an op's tile shapes into the unit it occupies and for how many cycles; the
simulator's timing model (`aref.sim.timing`) and the solver integration both use it, so it is a pure
function of the op's types and attributes.

Units (names shared with `solve/`): "tc" tensor core, "tma" copy engine, "mufu" special-function unit,
"fma" fp32 pipe, "smem" shared-memory port, and on Blackwell "tmem_ld" / "tmem_st", the tensor-memory
read and write paths (tcgen05.ld / tcgen05.st); "issue" marks ops that occupy only their own warp group's
instruction stream (scalars, barrier ops, views) and is not a shared resource.

Every figure carries its source. "Datasheet" figures are NVIDIA's published numbers; figures marked
ASSUMPTION are order-of-magnitude choices of this model. The per-arch limits (register file, setmaxnreg, shared
and tensor memory) are the device's `Target`'s (`aref.target.targets`); the rest is the device's own. Devices are
keyed by name under their arch (`DEVICES`; `machine_for(arch)` is the arch's default device). Where a GPU was
measured, `calibrated` replaces the fitted figures with those of `aref/target/calibration/<device>.json`, which
`bench/calibrate.py` writes from a file of measurements (the datasheet machines stay available as `DATASHEETS`,
e.g. `H100_DATASHEET`).
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from aref.ir import DType, Op, OpKind, TileType
from aref.ops.memory import tma_bytes
from aref.target.targets import SM_90A, SM_100A, TARGETS, Target


SHARED_UNITS = ("tc", "tma", "mufu", "fma", "smem", "tmem_ld", "tmem_st")
ISSUE = "issue"


@dataclass(frozen=True)
class Machine:
    """One SM of a GPU: unit throughputs per clock, on-chip budgets and memory timing."""

    name: str
    arch: str
    sms: int
    clock_ghz: float
    tensor_flop_per_clk: dict = field(default_factory=dict)   # DType of the A operand -> dense FLOP per clock
    mufu_per_clk: int = 16
    fma_per_clk: int = 128
    smem_bytes_per_clk: int = 128
    registers: int = 65536                 # 32-bit registers per SM (and per block)
    max_regs_per_thread: int = 255
    setmaxnreg_min: int = 24
    setmaxnreg_max: int = 256
    setmaxnreg_step: int = 8
    smem_per_block: int = 227 * 1024
    tmem_lanes: int = 0
    tmem_columns: int = 0                  # 32-bit columns per lane; 0: no tensor memory
    tmem_bytes_per_clk: int = 0            # tcgen05.ld / tcgen05.st bandwidth per SM and direction
    mma_instr_issue_cycles: int = 0        # Blackwell: one warp issues each tcgen05.mma (0: a warp group's wgmma)
    tma_bytes_per_clk: int = 64            # the SM's copy engine: bytes per clock over all copies in flight
    tma_copy_bytes_per_clk: int = 0        # one copy's bytes arrive at this rate after its latency (0: as above)
    tma_latency: tuple = (400, 550, 1200)  # (min, mode, max) cycles of a triangular distribution
    sync_cycles: int = 32                  # issue-to-effect of an mbarrier / named-barrier op
    async_issue_cycles: int = 16           # issuing warp group's own cost of an async MMA or TMA copy
    # Sustained fraction of the datasheet tensor rate (clock throttling under load, issue gaps): 1.0 until a
    # calibration measures it.
    tensor_efficiency: float = 1.0
    # The share of that rate a whole GPU sustains when every SM runs tensor work (its clock drops under the power
    # limit): like the L2 misses below, an effect of the whole launch, which `aref.tune.perf.predict` applies; one
    # SM's timing and the solver keep the rate above. 1.0 until a calibration measures it.
    loaded_tensor_efficiency: float = 1.0
    cta_overhead_cycles: int = 0           # per CTA, outside its Barrier IR: launch, setup, teardown
    l2_bytes: int = 50 * 1024 * 1024       # L2 cache shared by all SMs
    # Slow-down of TMA transfers per unit of L2 miss share (inputs larger than L2 stream from DRAM): 0 until
    # a calibration measures it.
    l2_miss_penalty: float = 0.0
    calibration: str = ""                  # where the calibrated figures come from ("" for none)
    memory_bytes_per_s: float = 0.0        # datasheet DRAM bandwidth (the timing model sees DRAM through the
                                           # calibrated `l2_miss_penalty`, fitted per device)

    @property
    def target(self) -> Target:
        """The arch this device is (its limits and features)."""
        return TARGETS[self.arch]

    @property
    def tma_copy_rate(self) -> int:
        """Bytes per clock at which one copy's data arrives (the engine's rate unless calibrated apart)."""
        return self.tma_copy_bytes_per_clk or self.tma_bytes_per_clk

    def tma_latency_draw(self, rng: random.Random | None = None) -> int:
        """One TMA latency in cycles: the distribution's mean without `rng`, a draw with it."""
        lo, mode, hi = self.tma_latency
        if rng is None:
            return round((lo + mode + hi) / 3)
        return round(rng.triangular(lo, hi, mode))

    def tma_latency_quantile(self, q: float) -> int:
        """The TMA latency that a fraction `q` of copies beat (the inverse of the triangular distribution)."""
        lo, mode, hi = self.tma_latency
        q = min(1.0, max(0.0, q))
        if hi == lo:
            return lo
        split = (mode - lo) / (hi - lo)
        if q <= split:
            return round(lo + math.sqrt(q * (hi - lo) * (mode - lo)))
        return round(hi - math.sqrt((1 - q) * (hi - lo) * (hi - mode)))

    def ring_latency(self, depth: int, copies: int = 1) -> int:
        """The copy latency a ring of `depth` slots, refilled by TMA and read in order, is planned for.
        ASSUMPTION: the reader waits for the late copies, not the average one: the latency that depth−1 of
        depth copies beat (the (1 − 1/depth) quantile), never below the mean. Against the max-plus recursion
        of such a ring with this latency distribution (a slot refilled when its reader is done; reads in
        order) it gives the ring's throughput within ~2% for depths 2..6 (the mean alone is 10-15%
        optimistic at depth 5). An item of `copies` copies, each with its own latency, lands with its last
        one: never below the mean of the latest of them (linear_attention's Q, K and V item at depth 2: 870
        cycles, where one copy's rule gives 717: its program ran at 1314 cycles per iteration against II 1224;
        the same quantile of the latest copy instead gave gemm's A and B at depth 4 II 327, where its program
        runs at 299)."""
        return max(self.tma_latency_latest(copies), self.tma_latency_quantile(1 - 1 / max(1, depth)))

    def tma_latency_latest(self, copies: int) -> int:
        """The mean latency of the latest of `copies` copies, each drawn apart (E[max] = lo + ∫ 1 − F^copies,
        the triangular distribution's CDF F, summed per cycle); for one copy the distribution's mean."""
        lo, mode, hi = self.tma_latency
        if copies <= 1 or hi == lo:
            return self.tma_latency_draw()

        def cdf(x: float) -> float:
            if x <= mode:
                return (x - lo) ** 2 / ((hi - lo) * (mode - lo)) if mode > lo else 0.0
            return 1 - (hi - x) ** 2 / ((hi - lo) * (hi - mode)) if hi > mode else 1.0
        return round(lo + sum(1 - cdf(x + 0.5) ** copies for x in range(lo, hi)))

    def to_json(self) -> dict:
        out = dict(vars(self))
        out["tensor_flop_per_clk"] = {d.value: f for d, f in self.tensor_flop_per_clk.items()}
        out["tma_latency"] = list(self.tma_latency)
        return out


def _limits(target: Target) -> dict:
    """The `Machine` fields a device takes from its arch."""
    return dict(arch=target.name, registers=target.registers_per_sm, max_regs_per_thread=target.max_regs_per_thread,
                setmaxnreg_min=target.setmaxnreg_min, setmaxnreg_max=target.setmaxnreg_max,
                setmaxnreg_step=target.setmaxnreg_step, smem_per_block=target.smem_per_cta,
                tmem_lanes=target.tmem_lanes, tmem_columns=target.tmem_columns)


# H100 SXM5. Sources: NVIDIA H100 Tensor Core GPU datasheet / Hopper whitepaper: 132 SMs, 989.4 dense fp16/bf16
# tensor TFLOP/s and 1978.9 fp8 TFLOP/s, i.e. 4096 and 8192 FLOP per SM per clock at the 1830 MHz those figures
# use (989.4e12 / (132 * 1830e6) = 4096); 16 SFU (MUFU) and 128 fp32 FMA lanes per SM per clock; 128 B/clk
# shared memory; 3.35 TB/s HBM3; register file, setmaxnreg and shared memory per block: `SM_90A`.
H100_DATASHEET = Machine(
    name="H100", sms=132, clock_ghz=1.83, **_limits(SM_90A),
    tensor_flop_per_clk={DType.float16: 4096, DType.bfloat16: 4096,
                         DType.float8_e4m3: 8192, DType.float8_e5m2: 8192},
    # ASSUMPTION: ~64 B/clk per SM from L2 into shared memory through TMA (the HBM3 share alone is
    # 3.35e12 B/s / (132 * 1.83e9) = 13.9 B/clk; GEMM tiles mostly hit in L2, which delivers several times that).
    tma_bytes_per_clk=64,
    # ASSUMPTION: global-memory / L2 latency as commonly measured by microbenchmarks (several hundred cycles,
    # with a long tail under load).
    tma_latency=(400, 550, 1200),
    l2_bytes=50 * 1024 * 1024,             # datasheet: 50 MB L2 (H100 SXM5)
    memory_bytes_per_s=3.35e12,
)

# H200 SXM. Sources: NVIDIA H200 Tensor Core GPU datasheet (Nov. 2023): the same GH100 die as the H100 SXM5 —
# 132 SMs, 50 MB L2, 989.5 dense fp16 / 1979 fp8 tensor TFLOP/s (1979 / 3958 with sparsity) and a 1980 MHz
# maximum boost clock, as the H100 SXM5's, so the same 1830 MHz and per-SM rates as above — with 141 GB of
# HBM3e at 4.8 TB/s (H100: 80 GB HBM3, 3.35 TB/s). ASSUMPTION: the L2 -> shared-memory TMA rate and latency
# of the H100 (the L2 is the same; DRAM enters the model only through the calibrated L2-miss penalty, which
# has not been measured on an H200: no calibration file yet).
H200_DATASHEET = replace(H100_DATASHEET, name="H200", memory_bytes_per_s=4.8e12)

# B200. Sources: the issue's figures (from NVIDIA's Blackwell datasheet: 2.25 PFLOP/s dense fp16 over 148 SMs
# at ~1.86 GHz = 8192 FLOP per SM per clock, fp8 twice that; HBM3e 8 TB/s); MUFU and FMA rates as Hopper;
# tensor memory, registers, setmaxnreg and shared memory: `SM_100A`.
B200_DATASHEET = Machine(
    name="B200", sms=148, clock_ghz=1.86, **_limits(SM_100A),
    tensor_flop_per_clk={DType.float16: 8192, DType.bfloat16: 8192,
                         DType.float8_e4m3: 16384, DType.float8_e5m2: 16384},
    # ASSUMPTION: 128 lanes x 32 bit per clock each way (a warp moves 32 lanes x 32 bit per tcgen05.ld beat; four
    # sub-partitions in parallel), the figure the solver's graphs of FA4 use.
    tmem_bytes_per_clk=512,
    # ASSUMPTION: the single MMA warp spends ~4 cycles per tcgen05.mma (one per K atom: K=16 for 16-bit, 32
    # for 8-bit types) building descriptors and issuing; FA4's MMA warp issues a 128x128x128 QK^T as 8 of them.
    mma_instr_issue_cycles=4,
    # ASSUMPTION: twice Hopper's per-SM L2->SMEM rate (HBM3e 8 TB/s is 2.4x H100's 3.35 TB/s).
    tma_bytes_per_clk=128,
    tma_latency=(400, 550, 1200),          # ASSUMPTION: as Hopper
    memory_bytes_per_s=8e12,
)

# Figures a calibration may set (bench/calibrate.py fits them): each a field of `Machine`.
CALIBRATED_FIELDS = ("tensor_efficiency", "loaded_tensor_efficiency", "tma_bytes_per_clk", "tma_copy_bytes_per_clk", "tma_latency", "sync_cycles",
                     "cta_overhead_cycles", "l2_miss_penalty")
CALIBRATION_DIR = Path(__file__).parent / "calibration"


def with_parameters(machine: Machine, params: dict, source: str = "") -> Machine:
    """`machine` with the figures in `params` (names from `CALIBRATED_FIELDS`) replaced; integer fields are
    rounded, `tma_latency` is a (min, mode, max) triple."""
    kinds = {f.name: f.type for f in fields(Machine)}
    changes = {}
    for name, value in params.items():
        if name not in CALIBRATED_FIELDS:
            raise ValueError(f"{name!r} is not a calibrated machine figure; known: {', '.join(CALIBRATED_FIELDS)}")
        if name == "tma_latency":
            value = tuple(int(round(v)) for v in value)
            if len(value) != 3 or not 0 < value[0] <= value[1] <= value[2]:
                raise ValueError(f"tma_latency must be (min, mode, max) cycles, got {value}")
        elif kinds[name] == "int":
            value = int(round(value))
            if value < (0 if name == "cta_overhead_cycles" else 1):
                raise ValueError(f"{name} must be positive, got {value}")
        else:
            value = float(value)
        changes[name] = value
    return replace(machine, calibration=source or machine.calibration, **changes)


def calibrated(machine: Machine, path: str | Path | None = None) -> Machine:
    """`machine` with the fitted figures of its calibration file (`aref/target/calibration/<device>.json`, or
    `path`); unchanged when there is none. The file's "parameters" hold the figures, "source" the measurements."""
    path = Path(path) if path is not None else CALIBRATION_DIR / f"{machine.name}.json"
    if not path.exists():
        return machine
    data = json.loads(path.read_text())
    if data.get("machine", machine.name) != machine.name:
        raise ValueError(f"{path} calibrates {data.get('machine')}, not {machine.name}")
    return with_parameters(machine, data["parameters"], f"{path.name} ({data.get('source', 'unknown data')})")


# The models as the datasheets give them, and as used: calibrated wherever the device has a calibration file.
DATASHEETS = {m.name: m for m in (H100_DATASHEET, H200_DATASHEET, B200_DATASHEET)}
DEVICES = {name: calibrated(m) for name, m in DATASHEETS.items()}
H100, H200, B200 = DEVICES["H100"], DEVICES["H200"], DEVICES["B200"]


def _check_devices() -> None:
    """Every target's devices exist and are of its arch; every device belongs to a target."""
    listed = {d: t.name for t in TARGETS.values() for d in t.devices}
    for name, m in DEVICES.items():
        if listed.get(name) != m.arch:
            raise AssertionError(f"device {name} ({m.arch}) is not listed under its target")
    for t in TARGETS.values():
        if t.default_device not in t.devices or any(d not in DEVICES for d in t.devices):
            raise AssertionError(f"target {t.name}: devices {t.devices}, default {t.default_device}")


_check_devices()


def machine_for(arch: str, device: str | None = None) -> Machine:
    """The machine model of an architecture name: its `device` ("H100", "H200" for sm_90a), by default the
    arch's default device ("sm_90a" -> H100, "sm_100a" -> B200)."""
    target = TARGETS.get(arch)
    if target is None:
        raise ValueError(f"no machine model for arch {arch!r}; known: {', '.join(TARGETS)}")
    name = device or target.default_device
    if name not in target.devices:
        raise ValueError(f"no {arch} device {name!r}; known: {', '.join(target.devices)}")
    return DEVICES[name]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _numel(t) -> int:
    return t.numel if isinstance(t, TileType) else 1


def tmem_tile_columns(t: TileType) -> int:
    """32-bit tensor-memory columns a 2-D tile takes: one row per lane for 128-row tiles, and a 64-row tile
    (tcgen05's M = 64 layout) uses 16 lanes of each 32-lane sub-partition over the same columns, so it takes
    as many columns as a 128-row one; a 32-bit (R, C) tile takes C columns, a 16-bit one C / 2. The one rule
    of the solver's footprints (`partition.optimal`) and the lowering's plan (`aref.lower.tmem`)."""
    return max(1, t.shape[-1] * t.dtype.bits // 32)


def op_cost(op: Op, machine: Machine, rng: random.Random | None = None) -> tuple[str, int]:
    """`(unit, cycles)`: the functional unit `op` occupies and for how long, from its tile shapes.

    * MMA / MMA_ASYNC: "tc", 2·M·N·K / tensor FLOP per clock of the A operand's dtype.
    * UNARY exp/exp2/log/log2/sqrt/rsqrt: "mufu", elements / MUFU ops per clock.
    * other elementwise, reductions, casts, compares, FULL/ARANGE on tiles: "fma", elements / FMA lanes.
    * SLOT_STORE: "smem", bytes / shared-memory bytes per clock; into tensor memory "tmem_st" at its rate
      (nothing for an MMA result published where the MMA wrote it). SLOT_READ of tensor memory: "tmem_ld"
      (a tcgen05.ld; the timing model charges nothing when only MMAs use the tile, `aref.sim.program`).
    * TMA_LOAD, LOAD: "tma", a latency (the distribution's mean, or drawn from `rng`) plus bytes / the
      copy's arrival rate — the time until the data has landed. The copy engine itself is busy only for
      bytes / its own rate: see `unit_busy`.
    * STORE (a TMA store from registers): "tma", bytes / TMA bytes per clock (fire and forget).
    * views (TRANSPOSE, EXPAND_DIMS, SLOT_READ, SELECT), scalars and constants: "issue", 0 or 1 cycle.
    * barrier, fence, MMA-wait and register ops: "issue", `machine.sync_cycles` (any blocking comes on top).
    Cycles are at least 1 for every op that does work. Pure: same op, machine and rng state, same answer.
    The unit and the formula are the op's registry entry's (`aref.ops`); the figures are this machine's.
    """
    from aref import ops
    try:
        ops.entry(op)
    except KeyError:
        raise ValueError(f"no cost model for {op.kind.value}") from None
    return ops.cost(op, machine, rng)


def mma_issue_cycles(op: Op, machine: Machine) -> int:
    """Cycles the issuing group spends on an asynchronous MMA: on Blackwell one warp issues a tcgen05.mma per
    K atom (16 elements of a 16-bit type, 32 of an 8-bit one), elsewhere the machine's async issue cost."""
    if not machine.mma_instr_issue_cycles:
        return machine.async_issue_cycles
    a = op.operands[0].type
    atom = 32 if a.dtype.bits == 8 else 16
    return max(machine.async_issue_cycles, _ceil_div(a.shape[-1], atom) * machine.mma_instr_issue_cycles)


def unit_busy(op: Op, machine: Machine) -> int:
    """Cycles `op` keeps its unit busy: `op_cost`'s cycles, except that a TMA copy occupies the copy engine
    only for its transfer (the memory latency overlaps other copies)."""
    k = op.kind
    if k is OpKind.TMA_LOAD or (k is OpKind.LOAD and isinstance(op.result.type, TileType)):
        return max(1, _ceil_div(tma_bytes(op), machine.tma_bytes_per_clk))
    return op_cost(op, machine)[1]
