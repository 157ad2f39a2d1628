"""The optimal partitioner on graphs extracted from the examples' Tile IR: Twill's results at realistic shapes,
the `aref solve --json` contract (re-checked independently), and optimal partitions that simulate exactly."""
import json
import subprocess
import sys

import pytest

import aref
import solve as S
from aref import sim
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from example_paths import EXAMPLE_NAMES, ROOT, example_path
from partition.optimal import CYCLE_QUANTUM, extract_graph


def solved(name, arch, time_limit=120, graph=None, **dims):
    ex = load_example(example_path(name))
    kernel = ex.kernel.specialize(**ex.inputs(**dims))
    extraction = extract_graph(kernel, arch, **(graph or {}))
    return extraction, S.solve(extraction.graph, S.SolveOptions(time_limit=time_limit))


def quanta(cycles, quantum):
    """`cycles` rounded up to whole quanta (as `solve.round_up_to_quantum` rounds a graph's costs)."""
    return -(-cycles // quantum) * quantum


def kinds(extraction, result):
    return {g: sorted(extraction.kind[n] for n in ops) for g, ops in result.groups.items()}


def test_gemm_reaches_the_resource_bound():
    """128×128×64 tiles: the II is the busier unit's work per iteration — on the calibrated H100 the copy
    engine's two 16 KB loads (in 16-cycle quanta), not the tensor core's 512 cycles (as measured: this tile
    runs at 0.67× cuBLAS, copy-bound)."""
    from aref.target.machine import H100
    ex, r = solved("gemm", "sm_90a")
    copy = -(-(128 * 64 * 2) // H100.tma_bytes_per_clk)        # one 16 KB load on the copy engine
    tma = 2 * 16 * -(-copy // 16)                               # two of them, in whole 16-cycle quanta
    assert r.status == S.OPTIMAL and r.proven_optimal and r.ii == r.lower_bound == max(512, tma)
    assert sorted(kinds(ex, r).values()) == [["gemm"], ["tma", "tma"]]


def test_blackwell_gemm_ring_round_trip_bounds_the_ii():
    """sm_100a, 128×128×64 tiles in a 5-slot ring: no tcgen05.commit between an MMA and its own next
    accumulation (the tensor core runs them back to back), and the ring's refill round trip — the MMA, its
    commit, the copy's issue, the latency a ring read in order meets, its transfer, the MMA warp's wake-up
    and issue — bounds the II, as it bounds the simulated program (bench/fidelity.py: within 3%)."""
    from aref.target.machine import B200, mma_issue_cycles
    from partition.optimal import MMA_COMMIT_CYCLES
    ex, r = solved("gemm", "sm_100a", size="large")
    g = ex.graph
    mma = next(n for n, k in ex.kind.items() if k == "gemm")
    (chain,) = [e for e in g.edges if e.src == e.dst == mma and e.data]
    assert chain.delay == g.ops[mma].usage["tc"] == 256
    # the MMA warp's stream (`partition.streams.mma_warp_streams`): one wait for the put of A and B after
    # its slot and parity math, the issue, one commit of the slot's release (in whole cycle quanta); the
    # tensor core takes the MMA after the wait and the issue
    from partition.streams import MMA_WARP, SLOT_MATH, scalar_cycles
    issue = mma_issue_cycles(ex.members[mma][0], B200)
    before = B200.sync_cycles + SLOT_MATH * scalar_cycles() + issue
    assert g.ops[mma].usage[MMA_WARP] == quanta(before + B200.sync_cycles, CYCLE_QUANTUM)
    assert g.ops[mma].offset["tc"] == quanta(before, CYCLE_QUANTUM) and g.ops[mma].duration == 256 + quanta(
        before, CYCLE_QUANTUM)
    item = 2 * 128 * 64 * 2 // B200.tma_bytes_per_clk              # the A and B tiles share the copy engine
    trip = (256 + MMA_COMMIT_CYCLES + 2 * B200.async_issue_cycles + B200.ring_latency(5) + item
            + B200.sync_cycles + mma_issue_cycles(ex.members[mma][0], B200))
    (ring,) = [e for e in g.edges if e.src == e.dst == mma and not e.data]
    assert ring.distance == 5 and trip <= ring.delay < trip + 16
    assert r.proven_optimal and r.ii == r.lower_bound == -(-ring.delay // 5) > 256


def test_mma_warp_stream_bounds_attention_forward_on_blackwell():
    """FA4's MMA warp issues attention forward's four MMAs per K/V block (the example's 64-key block on a
    B200) and for them waits on 10 barriers (K's and V's puts, P and the rescaled O of each sub-tile, the
    free slots of S and O) and commits to 10, each holding the warp `sync_cycles` as in the timing model,
    and each wait first computes its slot and parity (two scalar ops, a third for the producer's parity of
    the four free-slot waits): with the issues that stream is the II's bound (the simulated MMA warp spends
    ~770 cycles of its own per iteration, 34 of them index math)."""
    from aref.target.machine import B200, mma_issue_cycles
    from partition.streams import MMA_WARP, SLOT_MATH, scalar_cycles
    ex0 = load_example(example_path("attention_fwd"))
    kernel = ex0.kernel.specialize(**ex0.inputs("large", "sm_100a"))
    exact = extract_graph(kernel, "sm_100a", quantum=1)
    ex = extract_graph(kernel, "sm_100a")
    gemms = [n for n in ex.graph.ops if ex.kind[n] == "gemm"]
    stream = sum(ex.graph.ops[n].usage[MMA_WARP] for n in gemms)
    assert len(gemms) == 4
    math = (10 * SLOT_MATH + 4) * scalar_cycles()
    assert sum(exact.graph.ops[n].usage[MMA_WARP] for n in gemms) == 20 * B200.sync_cycles + math + sum(
        mma_issue_cycles(ex.members[n][0], B200) for n in gemms)
    assert stream == sum(quanta(exact.graph.ops[n].usage[MMA_WARP], CYCLE_QUANTUM) for n in gemms)
    r = S.solve(ex.graph, S.SolveOptions(time_limit=60))
    assert r.proven_optimal and r.ii == r.lower_bound == stream
    assert len({r.assignment[n] for n in gemms}) == 1               # one MMA warp


def test_ring_latency_plans_for_late_copies():
    from aref.target.machine import B200
    lo, mode, hi = B200.tma_latency
    assert B200.tma_latency_quantile(0) == lo and B200.tma_latency_quantile(1) == hi
    assert B200.tma_latency_quantile((mode - lo) / (hi - lo)) == mode
    lat = [B200.ring_latency(d) for d in range(1, 9)]
    assert lat == sorted(lat) and lat[0] == B200.tma_latency_draw() and lo < lat[-1] < hi


def test_hopper_gemm_releases_a_slot_before_waiting_for_the_next_item():
    """The solver frees a ring slot when its MMA ends; the lowering must too. A steady step that waited for
    item k+1 before releasing slot k (its get sorted by the release's residue) kept only depth − 1 slots of
    copies in flight: a depth-3 ring ran 1036 cycles per iteration against the II of 896."""
    from aref.cli.compare import FIDELITY, measure
    from aref.ir import OpKind
    ex = load_example(example_path("gemm"))
    inputs = ex.inputs("large", STAGES=3)
    kernel = ex.kernel.specialize(**inputs)
    entry, ws, _ = measure(kernel, inputs, CompileOptions(arch="sm_90a", partition="optimal", timing_guard=False))
    (consumer,) = [g for g in ws.groups if g.group.role == "consumer"]
    body = consumer.loop.body.ops
    at = {(op.kind, op.attrs.which): i for i, op in enumerate(body)
          if op.kind in (OpKind.MBAR_WAIT, OpKind.MBAR_ARRIVE) and op.attrs.channel == "ab"}
    assert at[(OpKind.MBAR_ARRIVE, "empty")] < at[(OpKind.MBAR_WAIT, "full")]
    _, result = solved("gemm", "sm_90a", size="large", STAGES=3)
    assert abs(entry["cycles_per_iter"] / result.ii - 1) <= FIDELITY, (entry["cycles_per_iter"], result.ii)


def test_hopper_attention_is_fa3_ping_pong():
    """Head dim 128, two 64-row sub-tiles: II equals the tensor-core bound, TMA alone, and each sub-tile's
    GEMMs and softmax on its own consumer group."""
    ex, r = solved("attention_fwd", "sm_90a", D=128)
    assert r.proven_optimal and r.ii == r.lower_bound == 4 * 512      # 512-cycle GEMMs: whole quanta
    groups = kinds(ex, r)
    assert ["tma", "tma"] in groups.values()
    consumers = [k for k in groups.values() if "gemm" in k]
    assert len(consumers) == 2 and all(k.count("exp") == 1 and k.count("gemm") == 2 for k in consumers)


def test_blackwell_attention_is_fa4():
    """256 query rows in two 128-row sub-tiles: TMA alone, every MMA from one group with no softmax work, the
    two sub-tiles' exponentials on two different groups, the O rescaling on a third group apart from both.
    The occupancy-free graph (each node costs its busiest unit: the MUFU bound); the stream graph, the
    default, bounds the II by each softmax group's own stream instead."""
    ex, r = solved("attention_fwd", "sm_100a", D=128, BM=256, Sq=512, graph={"reservations": False})
    assert r.proven_optimal and r.ii == r.lower_bound
    groups = kinds(ex, r)
    mma_groups = [g for g, k in groups.items() if "gemm" in k]
    assert len(mma_groups) == 1 and set(groups[mma_groups[0]]) == {"gemm"}
    exp_groups = [g for g, k in groups.items() if "exp" in k]
    assert len(exp_groups) == 2
    rescale_groups = {g for g, k in groups.items() if "rescale" in k}
    assert rescale_groups and not rescale_groups & (set(exp_groups) | set(mma_groups))
    assert ["tma", "tma"] in groups.values()


def test_group_costs_bound_each_softmax_group_on_blackwell():
    """With the groups' stream costs (a linear sum per group, no stream order), the attention-forward graph
    at compare's sizes is no longer at the MUFU bound: each softmax group runs its row max, exponentials,
    sum and cast one after another, and the II covers that group's issue and hand-offs. It is proven within
    the time limit (a solve time belongs in bench/, not in a unit test)."""
    ex0 = load_example(example_path("attention_fwd"))
    kernel = ex0.kernel.specialize(**ex0.inputs("large"))
    plain = S.solve(extract_graph(kernel, "sm_100a", reservations=False).graph, S.SolveOptions(time_limit=60))
    ex = extract_graph(kernel, "sm_100a", group_costs=True, allow_transfers=False, reservations=False)
    g = ex.graph
    assert not g.machine.stream_order and all(g.ops[n].issue for n in g.ops if ex.kind[n] != "tma")
    r = S.solve(g, S.SolveOptions(time_limit=60))
    assert r.proven_optimal and r.ii > plain.ii == plain.lower_bound
    loads = S.check(g, r.ii, r.schedule, r.assignment).occupancy
    assert max(loads.values()) <= r.ii and max(loads.values()) > plain.ii


def test_reservation_tables_see_the_softmax_groups_collide_on_blackwell():
    """`extract_graph(reservations=True)`: a CUDA-core node takes each unit when its ops do, one after
    another in its group (a reservation table), not all of them from its start. The exponentials node of
    attention forward subtracts the row max on the FMA pipe, then runs exp2 on the MUFU, then the row sum and
    the cast on the FMA pipe again. The group-cost schedule (II 1296) books those FMA cycles while the MUFU
    runs, where the other softmax group's row max then collides with them (the timing model's ~190-cycle
    stall): the reservation graph rejects it and proves a larger II."""
    ex0 = load_example(example_path("attention_fwd"))
    kernel = ex0.kernel.specialize(**ex0.inputs("large"))
    plain = extract_graph(kernel, "sm_100a", group_costs=True, allow_transfers=False, reservations=False)
    ex = extract_graph(kernel, "sm_100a", group_costs=True, allow_transfers=False, reservations=True)
    g = ex.graph
    exp = next(n for n in g.ops if ex.kind[n] == "exp")
    (mufu_at, mufu), = g.ops[exp].spans("mufu")
    fma = g.ops[exp].spans("fma")
    assert len(fma) == 2 and fma[0][0] == 0 and fma[0][0] + fma[0][1] <= mufu_at
    assert fma[1][0] >= mufu_at + mufu - CYCLE_QUANTUM
    from partition.streams import MMA_WARP            # (the own-stream graph's MMAs also take the MMA warp)
    assert all({u: c for u, c in g.ops[n].usage.items() if u != MMA_WARP} == plain.graph.ops[n].usage
               for n in g.ops)                                                      # the same cycles, placed
    assert g.ops[exp].duration <= g.ops[exp].issue + CYCLE_QUANTUM                # within the group's stream
    old = S.solve(plain.graph, S.SolveOptions(time_limit=60))
    assert any("unit fma" in v for v in S.check(g, old.ii, old.schedule, old.assignment).violations)
    r = S.solve(g, S.SolveOptions(time_limit=60))
    assert r.proven_optimal and r.ii > old.ii
    assert S.check(g, r.ii, r.schedule, r.assignment).ok


def test_detached_stores_free_the_storing_group_on_hopper():
    """`extract_graph`'s `detached_stores` (on by default on Hopper): a TMA store holds its group only while it
    stages the tile (the lowering's store is fire and forget), not for its copy. On attention backward the
    graph with waited stores has II 1872, bound by the store's 1168 cycles in flight beside the dV → dQ →
    scale chain of its group; detached, the graph reaches the copy engine's bound, with a schedule whose
    blocking ops start during a store's copy."""
    ex0 = load_example(example_path("attention_bwd"))
    kernel = ex0.kernel.specialize(**ex0.inputs("large"))
    plain = extract_graph(kernel, "sm_90a", detached_stores=False).graph
    g = extract_graph(kernel, "sm_90a").graph
    assert not any(op.detached for op in plain.ops.values())
    assert [n for n, op in g.ops.items() if op.detached] == ["store"]
    assert g.ops["store"].flight == g.ops["store"].issue < g.ops["store"].duration == plain.ops["store"].flight
    r = S.solve(g, S.SolveOptions(time_limit=60))
    assert r.proven_optimal and r.ii == r.lower_bound < 1872
    assert S.check(g, r.ii, r.schedule, r.assignment).ok
    assert any("while store" in v for v in S.check(plain, r.ii, r.schedule, r.assignment).violations)


def test_post_loop_stores_stage_in_a_tile_only_their_group_reads():
    """The solver's budget states the lowering's staging of the stores after the loop (`smem_plan`): dK's and
    dV's staging tiles go into K's and V's tiles (loaded before the loop) only where the group storing them is
    the only reader of that tile, or into the dQ store's staging tile of their group; else they take 16 KB
    each (a partition that put dK and dV apart from everything else was refused for that, by 512 B)."""
    from aref.resources.memory import packing_hosts, staging_hosts
    ex0 = load_example(example_path("attention_bwd"))
    kernel = ex0.kernel.specialize(**ex0.inputs("large"))
    hosted = [(op, need) for op, need, host in staging_hosts(kernel) if host is not None]
    assert [need for _, need in hosted] == [16384, 16384] and all(op in kernel.post.ops for op, _ in hosted)
    assert all(len(stores) == 1 for stores in packing_hosts(kernel).values()) and len(packing_hosts(kernel)) == 2
    g = extract_graph(kernel, "sm_90a").graph
    staging = {ps.dst: ps for ps in g.post_staging}
    assert set(staging) == {"mma_dk", "mma_dv"}
    assert staging["mma_dk"].hosts == (("mma_dq", "mma_s"), ("store",))
    assert staging["mma_dv"].hosts == (("mma_dp",), ("store",))
    # dK and dV apart from the readers of K and V and from dQ's store take their own 16 KB each; beside the
    # store, or beside the readers, none
    group = {n: 0 if g.ops[n].streaming else 1 for n in g.ops}
    apart = dict(group, mma_dk=2, mma_dv=2)
    assert [ps.taken(apart) for ps in g.post_staging] == [True, True]
    assert [ps.taken(dict(apart, store=2)) for ps in g.post_staging] == [False, False]
    assert [ps.taken(group) for ps in g.post_staging] == [False, False]
    assert [ps.taken(dict(apart, mma_dp=2)) for ps in g.post_staging] == [True, False]
    assert not extract_graph(kernel, "sm_90a", channel_memory=False).graph.post_staging


def test_solve_json_contract_and_independent_recheck():
    proc = subprocess.run([sys.executable, "-m", "aref", "solve", example_path("attention_fwd"), "--set", "D=128",
                           "--json"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("ii", "lower_bound", "proven_optimal", "solve_seconds", "length", "assignment", "schedule",
                "encoding", "ops", "graph", "infeasible"):
        assert key in out
    assert {"name", "kind", "line", "unit", "group", "cycle", "stage"} <= set(out["ops"][0])
    graph = S.Graph.from_json(out["graph"])
    report = S.check(graph, out["ii"], out["schedule"], out["assignment"])
    assert report.ok, report


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_optimal_partition_simulates_like_the_reference(name, arch):
    ex = load_example(example_path(name))
    inputs = ex.inputs()
    ws = lower_to(ex.kernel.specialize(**inputs), "barrier",
                  CompileOptions(arch=arch, partition="optimal", solver_time_limit=20))
    report = sim.check(ws, inputs, ex.reference_fn, seeds=10)
    assert report.ok, report.to_json()


@aref.aref_kernel(grid=(1,))
def no_loop(A, C):  # <- the optimal partitioner schedules a loop
    aref.store(C, (0, 0), aref.load(A, (0, 0), (64, 64)))


def test_solver_error_names_the_kernel():
    import inspect
    import torch
    from partition.optimal import SolverError
    A = torch.zeros(64, 64, dtype=torch.float16)
    kernel = no_loop.specialize(A, A.clone())
    with pytest.raises(SolverError) as info:
        lower_to(kernel, "partitioned", CompileOptions(partition="optimal"))
    assert "has none" in info.value.message
    assert info.value.loc.line == inspect.getsourcelines(no_loop.fn)[1]


@aref.aref_kernel(grid=(1,))
def operand_and_result(A, B, C, *, BM: int = 64, BK: int = 64):
    ch = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ch.put(aref.load(A, (0, k), (BM, BK)), aref.load(B, (0, k), (BK, BK)))
        a, b = ch.get()
        t = a.to(aref.float32) * 2.0                    # feeds the MMA ...
        s = aref.mma(t.to(aref.float16), b.T)
        aref.store(C, (0, k), (s + t).to(C.dtype))       # ... and, with its result, the store
        ch.consumed()


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_cuda_core_work_on_both_sides_of_an_mma_is_two_nodes(arch):
    """`t` and `s + t` are connected through t, but the MMA sits between them: fused into one node they
    would wait for themselves (a dependence cycle of distance 0; the solver proved such programs
    infeasible). The extraction keeps them apart, and the optimal partition simulates like the interpreter."""
    import torch
    from aref.interp.tile import run_kernel
    g = torch.Generator().manual_seed(0)
    args = dict(A=(torch.randn(64, 128, generator=g) * 0.2).half(), B=(torch.randn(64, 128, generator=g) * 0.2).half(),
                C=torch.zeros(64, 128, dtype=torch.float16))
    kernel = operand_and_result.specialize(**args)
    ex = extract_graph(kernel, arch)
    mma = next(n for n, k in ex.kind.items() if k == "gemm")
    feeds = {e.src for e in ex.graph.edges if e.dst == mma and e.distance == 0}
    reads = {e.dst for e in ex.graph.edges if e.src == mma and e.distance == 0}
    assert feeds and reads and not feeds & reads
    ws = lower_to(kernel, "barrier", CompileOptions(arch=arch, partition="optimal", solver_time_limit=20))
    want = {k: v.clone() for k, v in args.items()}
    run_kernel(kernel, want)
    got = {k: v.clone() for k, v in args.items()}
    assert not sim.simulate(ws, got, seed=2).violations
    assert torch.equal(got["C"], want["C"])


def test_blackwell_graph_states_each_nodes_own_stream():
    """On Blackwell a CUDA-core node's ops run one after another in its group, once per iteration: its
    duration is that stream (reservations) and a recurrence of the node bounds the II by it, with the mask
    its group recomputes (causal attention's 128×128 compare) and its waits and hand-offs. attention_causal's
    softmax: not the MUFU's 1040 cycles but more than its ops' 2000, and its rescale on another group."""
    ex0 = load_example(example_path("attention_causal"))
    kernel = ex0.kernel.specialize(**ex0.inputs("large"))
    free = extract_graph(kernel, "sm_100a", reservations=False)
    ex = extract_graph(kernel, "sm_100a")
    exp = next(n for n in ex.graph.ops if ex.kind[n] == "exp")
    own = [e for e in ex.graph.edges if e.src == exp and e.dst == exp and e.distance == 1 and not e.data]
    ops = sum(ex.graph.ops[exp].usage.values())
    assert own and own[0].delay > ops + 128
    assert not any(e.src == e.dst == exp and not e.data for e in free.graph.edges)
    r = S.solve(ex.graph, S.SolveOptions(time_limit=60))
    plain = S.solve(free.graph, S.SolveOptions(time_limit=60))
    assert r.proven_optimal and r.ii >= own[0].delay > 2 * plain.ii
    assert r.assignment[exp] != r.assignment[next(n for n in ex.graph.ops if ex.kind[n] == "rescale")]


def test_blackwell_group_runs_its_nodes_streams_one_after_another():
    """attention_bwd on sm_100a: the softmax node's own stream (the exponentials, the casts and hand-offs of
    P and dS, its waits for S and dP and for the ring item whose LSE and Δ it reads) and the dQ node's (its
    tcgen05.ld, the scale, the store's staging) do not fit one II together: a group runs its nodes one after
    another, so their streams add up in its II (`extract_graph(group_streams=True)`: `solve.Op.stream`).
    Without it the graph put both on one group at the same II, which lowered to 2066 cycles per iteration
    (since the graph states the MMA warp's stream, `streams.mma_warp_streams`, its schedule splits them too);
    with it they take two groups, and the II is the softmax node's stream."""
    ex0 = load_example(example_path("attention_bwd"))
    kernel = ex0.kernel.specialize(**ex0.inputs("large"))
    plain = extract_graph(kernel, "sm_100a")
    p = S.solve(plain.graph, S.SolveOptions(time_limit=60))
    assert not any(op.stream for op in plain.graph.ops.values())
    ex = extract_graph(kernel, "sm_100a", group_streams=True)
    g = ex.graph
    exp = next(n for n in g.ops if ex.kind[n] == "exp")
    dq = next(n for n in g.ops if ex.kind[n] == "compute")
    own = {e.src: e.delay for e in g.edges if e.src == e.dst and e.distance == 1 and not e.data}
    assert g.ops[exp].stream == own[exp] and g.ops[dq].stream == own[dq]
    assert not any(g.ops[n].stream for n in g.ops if ex.kind[n] in ("gemm", "tma"))
    r = S.solve(g, S.SolveOptions(time_limit=60))
    assert r.proven_optimal and r.ii == own[exp] < own[exp] + own[dq]
    assert r.assignment[exp] != r.assignment[dq]
    loads = S.check(g, r.ii, r.schedule, r.assignment).occupancy
    assert loads[r.assignment[exp]] == own[exp] and max(loads.values()) <= r.ii
    assert r.ii == p.ii


def test_in_place_accumulator_is_read_before_its_mma_on_blackwell():
    """linear attention's state accumulates in place in tensor memory (S += kᵀ·v): the node reading the
    state for q·S must end before that MMA of the same iteration starts."""
    ex0 = load_example(example_path("linear_attention"))
    kernel = ex0.kernel.specialize(**ex0.inputs("large"))
    ex = extract_graph(kernel, "sm_100a")
    state = next(n for n, ops in ex.members.items() if ex.kind[n] == "gemm" and ops[0].operands[2:]
                 and ops[0].operands[2] in kernel.loop.carried)
    readers = [e for e in ex.graph.edges if e.dst == state and e.distance == 0 and not e.data]
    # ... before the tensor core takes it: after the MMA warp's waits and issue (`offset["tc"]`); the reader's
    # ops end with its units (with `group_order` its `duration` also counts its group's stream)
    tc = ex.graph.ops[state].offset.get("tc", 0)

    def ops_end(n):
        op = ex.graph.ops[n]
        return max(o + c for u in op.usage for o, c in op.spans(u))
    assert readers and all(e.delay + tc >= ops_end(e.src) for e in readers)
    r = S.solve(ex.graph, S.SolveOptions(time_limit=60))
    assert all(r.schedule[e.src] + ops_end(e.src) <= r.schedule[state] + tc for e in readers)
