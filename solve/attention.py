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


def _loads(g: Graph, tile_bytes: int, names: tuple[str, ...], depth: int = 2) -> None:
    for name in names:
        g.add_op(name, {"tma": tile_bytes // SMEM_BYTES_PER_CLK}, footprint={"smem": tile_bytes},
                 streaming=True, depth=depth, kind="tma")


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


def fa_backward_hopper(max_groups: int = 3) -> Graph:
    """FA3-style backward for one 128-row K/V block, looping over 64-row Q blocks.

    The K/V block is split into two 64-row halves (one per consumer warp group, as FA3 does):
    per half S=QK^T, P=exp(S-LSE), dP=dO V^T, dS=P*(dP-D), dV+=P^T dO, dK+=dS^T Q, dQ=dS K; the
    partial dQ goes through shared memory to a TMA reduce-add (a variable-latency op).
    """
    units, machine = hopper_machine(max_groups)
    g = Graph(units, machine, name="fa-bwd-hopper")
    q_rows, k_rows, dim = 64, 64, 128
    _loads(g, q_rows * dim * 2, ("load_Q", "load_dO"))
    mm = gemm_cycles(q_rows, k_rows, dim, HOPPER_TENSOR_FLOP)
    acc = gemm_cycles(k_rows, dim, q_rows, HOPPER_TENSOR_FLOP)
    s_regs, p_regs, acc_regs = tile_registers(q_rows, k_rows), tile_registers(q_rows, k_rows, 2), \
        tile_registers(k_rows, dim)
    for x in "AB":
        g.add_op(f"s_{x}", {"tc": mm}, footprint={"registers": s_regs}, transfer_cost=transfer_cycles(s_regs),
                 kind="gemm")
        g.add_op(f"p_{x}", {"mufu": exp_cycles(q_rows, k_rows), "fma": fma_cycles(q_rows, k_rows)},
                 footprint={"registers": p_regs}, transfer_cost=transfer_cycles(p_regs), kind="exp")
        g.add_op(f"dp_{x}", {"tc": mm}, footprint={"registers": s_regs}, transfer_cost=transfer_cycles(s_regs),
                 kind="gemm")
        g.add_op(f"ds_{x}", {"fma": fma_cycles(q_rows, k_rows, 2)}, footprint={"registers": p_regs},
                 transfer_cost=transfer_cycles(p_regs), kind="elementwise")
        g.add_op(f"dv_{x}", {"tc": acc}, footprint={"registers": acc_regs}, kind="gemm")
        g.add_op(f"dk_{x}", {"tc": acc}, footprint={"registers": acc_regs}, kind="gemm")
        g.add_op(f"dq_{x}", {"tc": mm * dim // k_rows // 2}, footprint={"registers": acc_regs},
                 transfer_cost=transfer_cycles(acc_regs), kind="gemm")
        g.add_op(f"dq_store_{x}", {"tma": q_rows * dim * 4 // SMEM_BYTES_PER_CLK}, variable_latency=True,
                 kind="tma")
        g.add_edge("load_Q", f"s_{x}", 0)
        g.add_edge("load_dO", f"dp_{x}", 0)
        g.add_edge(f"s_{x}", f"p_{x}", mm, blocking=True)
        g.add_edge(f"dp_{x}", f"ds_{x}", mm, blocking=True)
        g.add_edge(f"p_{x}", f"ds_{x}", exp_cycles(q_rows, k_rows))
        g.add_edge(f"p_{x}", f"dv_{x}", exp_cycles(q_rows, k_rows))
        g.add_edge("load_dO", f"dv_{x}", 0)
        g.add_edge(f"ds_{x}", f"dk_{x}", fma_cycles(q_rows, k_rows, 2))
        g.add_edge("load_Q", f"dk_{x}", 0)
        g.add_edge(f"ds_{x}", f"dq_{x}", fma_cycles(q_rows, k_rows, 2))
        g.add_edge(f"dv_{x}", f"dv_{x}", acc, 1)  # accumulators stay in registers
        g.add_edge(f"dk_{x}", f"dk_{x}", acc, 1)
        g.add_edge(f"dq_{x}", f"dq_store_{x}", mm * dim // k_rows // 2, blocking=True)
    return g


def fa_backward_blackwell(max_groups: int = 4) -> Graph:
    """FA4-style backward for one 128-row K/V block, looping over 128-row Q blocks.

    S, dP, dQ and the dK/dV accumulators live in tensor memory; softmax and dS read them with
    tcgen05.ld (blocking); P goes back to tensor memory (over S) for dV, dS to shared memory for
    dK and dQ; a staging op moves dQ from tensor to shared memory for the TMA reduce-add.
    Shared memory holds K and V (resident), two Q stages, one dO stage, dS and half of dQ.
    """
    units, machine = blackwell_machine(max_groups)
    g = Graph(units, machine, name="fa-bwd-blackwell")
    rows, dim = 128, 128
    _loads(g, rows * dim * 2, ("load_Q",), depth=2)
    _loads(g, rows * dim * 2, ("load_dO",), depth=1)
    mm = gemm_cycles(rows, rows, dim, BLACKWELL_TENSOR_FLOP)
    ld = rows * rows * 4 // 512
    regs = tile_registers(rows, rows)
    for name in ("s", "dp", "dq"):
        g.add_op(name, {"tc": mm}, footprint={"tmem": rows}, kind="gemm")
    for name in ("dv", "dk"):
        g.add_op(name, {"tc": mm}, footprint={"tmem": dim}, kind="gemm")
    g.add_op("softmax", {"tmem_ld": ld, "mufu": exp_cycles(rows, rows), "tmem_st": ld // 2},
             footprint={"tmem": rows // 2, "registers": regs // 2}, transfer_cost=transfer_cycles(regs // 2),
             kind="exp")
    g.add_op("ds", {"tmem_ld": ld, "fma": fma_cycles(rows, rows, 2)}, footprint={"smem": rows * rows * 2},
             kind="elementwise")
    g.add_op("dq_stage", {"tmem_ld": ld, "fma": fma_cycles(rows, dim)}, footprint={"smem": rows * dim * 2},
             kind="stage")  # dQ leaves in two fp32 halves; the reduce-add drains one while the next fills
    g.add_op("dq_store", {"tma": rows * dim * 4 // SMEM_BYTES_PER_CLK}, variable_latency=True, kind="tma")
    wait = mm + MMA_COMMIT_CYCLES
    g.add_edge("load_Q", "s", 0)
    g.add_edge("load_Q", "dk", 0)
    g.add_edge("load_dO", "dp", 0)
    g.add_edge("load_dO", "dv", 0)
    g.add_edge("s", "softmax", wait, blocking=True, transfer=False)
    g.add_edge("dp", "ds", wait, blocking=True, transfer=False)
    g.add_edge("softmax", "ds", exp_cycles(rows, rows), memories=["registers"])  # P in registers
    g.add_edge("softmax", "dv", exp_cycles(rows, rows) + BARRIER_CYCLES, transfer=False, memories=["tmem"])
    g.add_edge("ds", "dk", fma_cycles(rows, rows, 2) + BARRIER_CYCLES, transfer=False)
    g.add_edge("ds", "dq", fma_cycles(rows, rows, 2) + BARRIER_CYCLES, transfer=False)
    g.add_edge("dq", "dq_stage", wait, blocking=True, transfer=False)
    g.add_edge("dq_stage", "dq_store", ld + fma_cycles(rows, dim) + BARRIER_CYCLES, transfer=False)
    g.add_edge("dv", "dv", mm, 1)  # accumulators stay in tensor memory
    g.add_edge("dk", "dk", mm, 1)
    g.add_edge("dv", "s", 0, 1, data=False)  # P (over S's columns) read by dV before the next S
    g.add_edge("dq_stage", "dq", 0, 1, data=False)  # dQ's columns drained before the next dQ
    return g
