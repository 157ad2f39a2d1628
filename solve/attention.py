"""Hand-built attention loop bodies shaped like Twill section 6, with H100 / B200 cycle counts.

Per SM and clock: H100 does 4096 dense fp16 tensor FLOP, B200 8192; both do 16 MUFU ex2 and 128
fp32 FMA.  So a 128x128x128 fp16 GEMM is 1024 cycles on Hopper (512 on Blackwell), the exponential
of a 128x128 tile 1024 cycles, an elementwise FMA pass over it 128 cycles.  Register footprints are
per thread of a 128-thread warp group (a 128x128 fp32 tile is 128 registers).  A cross-group
register transfer goes through shared memory: write and read at 128 B/clk plus a barrier round trip.

These graphs serve the tests and the benchmark, and show how to describe a loop to the solver.
"""

from __future__ import annotations

from .graph import Graph, Machine

HOPPER_TENSOR_FLOP = 4096
BLACKWELL_TENSOR_FLOP = 8192
MUFU_PER_CLK = 16
FMA_PER_CLK = 128
SMEM_BYTES_PER_CLK = 128
BARRIER_CYCLES = 64
MMA_COMMIT_CYCLES = 64  # tcgen05.commit / wgmma completion reaching the waiting consumer
THREADS = 128


def gemm_cycles(m: int, n: int, k: int, flop_per_clk: int) -> int:
    return 2 * m * n * k // flop_per_clk


def exp_cycles(rows: int, cols: int) -> int:
    return rows * cols // MUFU_PER_CLK


def fma_cycles(rows: int, cols: int, passes: int = 1) -> int:
    return passes * rows * cols // FMA_PER_CLK


def tile_registers(rows: int, cols: int, bytes_per_elem: int = 4) -> int:
    """Registers per thread of one warp group holding a rows x cols tile."""
    return rows * cols * bytes_per_elem // 4 // THREADS


def transfer_cycles(registers: int) -> int:
    """Hand ``registers`` per thread of a warp group to another group through shared memory."""
    return 2 * registers * 4 * THREADS // SMEM_BYTES_PER_CLK + BARRIER_CYCLES


def hopper_machine(max_groups: int = 3, allow_transfers: bool = True) -> tuple[dict[str, int], Machine]:
    """H100 SM: one tensor core pipe, MUFU, FMA, TMA; 227 KB shared memory minus resident Q."""
    units = {"tc": 1, "mufu": 1, "fma": 1, "tma": 1}
    return units, Machine(max_groups=max_groups, registers_per_thread=255, registers_per_sm=65536,
                          threads_per_group=THREADS, reg_granularity=8, base_registers=24,
                          memory={"smem": 232448 - 32768}, allow_transfers=allow_transfers)


def blackwell_machine(max_groups: int = 5, allow_transfers: bool = True) -> tuple[dict[str, int], Machine]:
    """B200 SM: as Hopper plus tensor memory (512 columns) and its load / store paths."""
    units = {"tc": 1, "mufu": 1, "fma": 1, "tma": 1, "tmem_ld": 1, "tmem_st": 1}
    return units, Machine(max_groups=max_groups, registers_per_thread=255, registers_per_sm=65536,
                          threads_per_group=THREADS, reg_granularity=8, base_registers=24,
                          memory={"smem": 232448 - 65536, "tmem": 512}, allow_transfers=allow_transfers)


def _loads(g: Graph, tile_bytes: int, names: tuple[str, ...]) -> None:
    for name in names:
        g.add_op(name, {"tma": tile_bytes // SMEM_BYTES_PER_CLK}, footprint={"smem": tile_bytes},
                 streaming=True, depth=2, kind="tma")


def fa_forward_hopper(subtiles: int = 2, max_groups: int = 3, allow_transfers: bool = True) -> Graph:
    """FA3-style forward: per Q sub-tile S=QK^T (registers), softmax, O rescale, O+=PV.

    The CTA covers 128 query rows split into ``subtiles`` sub-tiles; K/V tiles are 128 x 128.
    wgmma results are waited for synchronously (blocking edges).
    """
    units, machine = hopper_machine(max_groups, allow_transfers)
    g = Graph(units, machine, name=f"fa-fwd-hopper-{subtiles}x")
    rows, keys, dim = 128 // subtiles, 128, 128
    _loads(g, keys * dim * 2, ("load_K", "load_V"))
    qk = gemm_cycles(rows, keys, dim, HOPPER_TENSOR_FLOP)
    pv = gemm_cycles(rows, dim, keys, HOPPER_TENSOR_FLOP)
    softmax = exp_cycles(rows, keys)
    s_regs, p_regs, o_regs = tile_registers(rows, keys), tile_registers(rows, keys, 2) + 8, tile_registers(rows, dim)
    for x in "AB"[:subtiles]:
        g.add_op(f"qk_{x}", {"tc": qk}, footprint={"registers": s_regs},
                 transfer_cost=transfer_cycles(s_regs), kind="gemm")
        g.add_op(f"softmax_{x}", {"mufu": softmax, "fma": fma_cycles(rows, keys, 3)},
                 footprint={"registers": p_regs}, transfer_cost=transfer_cycles(p_regs), kind="exp")
        g.add_op(f"rescale_{x}", {"fma": fma_cycles(rows, dim)}, footprint={"registers": o_regs},
                 transfer_cost=transfer_cycles(o_regs), kind="rescale")
        g.add_op(f"pv_{x}", {"tc": pv}, footprint={"registers": o_regs},
                 transfer_cost=transfer_cycles(o_regs), kind="gemm")
        g.add_edge("load_K", f"qk_{x}", 0)
        g.add_edge(f"qk_{x}", f"softmax_{x}", qk, blocking=True)
        g.add_edge(f"softmax_{x}", f"softmax_{x}", softmax, 1, transfer_cost=BARRIER_CYCLES)  # max / sum
        g.add_edge(f"softmax_{x}", f"rescale_{x}", fma_cycles(rows, keys),  # new row max first
                   transfer_cost=BARRIER_CYCLES)
        g.add_edge(f"pv_{x}", f"rescale_{x}", pv, 1, blocking=True)
        g.add_edge(f"softmax_{x}", f"pv_{x}", softmax)
        g.add_edge(f"rescale_{x}", f"pv_{x}", fma_cycles(rows, dim))
        g.add_edge("load_V", f"pv_{x}", 0)
    return g


def fa_forward_blackwell(subtiles: int = 2, max_groups: int = 5, allow_transfers: bool = True) -> Graph:
    """FA4-style forward: S and O in tensor memory, softmax reads S with tcgen05.ld (blocking).

    The CTA covers 256 query rows split into ``subtiles`` sub-tiles; K/V tiles are 128 x 128.
    P is written back over S in tensor memory, so the next S of a sub-tile waits for its PV.
    """
    units, machine = blackwell_machine(max_groups, allow_transfers)
    g = Graph(units, machine, name=f"fa-fwd-blackwell-{subtiles}x")
    rows, keys, dim = 256 // subtiles, 128, 128
    _loads(g, keys * dim * 2, ("load_K", "load_V"))
    qk = gemm_cycles(rows, keys, dim, BLACKWELL_TENSOR_FLOP)
    pv = gemm_cycles(rows, dim, keys, BLACKWELL_TENSOR_FLOP)
    s_cols, o_cols = keys * rows // 128, dim * rows // 128
    s_regs = tile_registers(rows, keys) // (rows // 128)
    ld_s = rows * keys * 4 // 512
    ex = exp_cycles(rows, keys)
    for x in "AB"[:subtiles]:
        g.add_op(f"qk_{x}", {"tc": qk}, footprint={"tmem": s_cols}, kind="gemm")
        g.add_op(f"max_{x}", {"tmem_ld": ld_s, "fma": fma_cycles(rows, keys)},
                 footprint={"registers": s_regs}, transfer_cost=transfer_cycles(s_regs), kind="softmax")
        g.add_op(f"exp_{x}", {"mufu": ex, "fma": fma_cycles(rows, keys, 2), "tmem_st": ld_s // 2},
                 footprint={"tmem": s_cols // 2, "registers": 8}, transfer_cost=transfer_cycles(8),
                 kind="exp")
        g.add_op(f"rescale_{x}", {"tmem_ld": ld_s, "fma": fma_cycles(rows, dim), "tmem_st": ld_s},
                 footprint={"tmem": o_cols}, kind="rescale")
        g.add_op(f"pv_{x}", {"tc": pv}, footprint={"tmem": o_cols}, kind="gemm")
        g.add_edge("load_K", f"qk_{x}", 0)
        g.add_edge(f"qk_{x}", f"max_{x}", qk + MMA_COMMIT_CYCLES, blocking=True, transfer=False)
        g.add_edge(f"max_{x}", f"exp_{x}", fma_cycles(rows, keys))
        # Running max / sum stay in registers; P goes to tensor memory for the PV MMA.
        g.add_edge(f"exp_{x}", f"max_{x}", ex, 1, memories=["registers"])
        g.add_edge(f"max_{x}", f"rescale_{x}", fma_cycles(rows, keys), transfer_cost=BARRIER_CYCLES)
        g.add_edge(f"pv_{x}", f"rescale_{x}", pv + MMA_COMMIT_CYCLES, 1, blocking=True, transfer=False)
        g.add_edge(f"exp_{x}", f"pv_{x}", ex + BARRIER_CYCLES, transfer=False, memories=["tmem"])
        g.add_edge(f"rescale_{x}", f"pv_{x}", ld_s * 2 + BARRIER_CYCLES, transfer=False)
        g.add_edge("load_V", f"pv_{x}", 0)
        g.add_edge(f"pv_{x}", f"qk_{x}", 0, 1, data=False)  # S/P columns reused by the next S
    return g
