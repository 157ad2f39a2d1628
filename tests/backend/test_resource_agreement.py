"""One resource model: what the partitioners and the lowering accept, the backend compiles.

The lowering sets every group's setmaxnreg budget from the resource model's liveness (`aref.resources`), the
optimal partitioner's solver budgets registers and shared memory with the same tile sizes, and the backend
checks its role code against the same figures (refusing, as an internal error, any role that holds more
registers than the model counted). So: whenever `lower_to(..., "barrier")` succeeds, `generate_source`
succeeds, and the compiled kernel has no spills.
"""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aref
from aref import aref_kernel
from aref.backend.cute import compile_barrier, generate_source
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.errors import ArefError
from aref.runtime.harness import load_example
from aref.resources import register_demand
from aref.resources.memory import smem_plan
from example_paths import EXAMPLE_NAMES

SIZES = {
    "gemm": [{}, {"M": 200, "N": 136, "K": 72}, {"BN": 256}, {"K": 0}, {"BM": 64, "BN": 64}],
    "dual_gemm": [{}, {"M": 200, "N": 136, "K": 72}],
    "gemm_reduce": [{}, {"M": 200, "K": 136}],
    "attention_fwd": [{}, {"D": 128}, {"SUBTILE": 1, "BM": 64}, {"Sq": 200}],
    "attention_bwd": [{}, {"D": 128}, {"BN": 128}, {"D": 128, "BN": 128}, {"Sq": 200, "Sk": 200}],
}
CONFIGS = [(e, p, c, kw) for e, sizes in SIZES.items() for kw in sizes for p, c in
           (("heuristic", "auto"), ("heuristic", "plain"), ("heuristic", "cooperative"), ("optimal", "auto"))]


def _barrier(example, partition, consumers, kw):
    ex = load_example(f"examples/{example}.py")
    kernel = ex.kernel.specialize(**ex.inputs("small", **kw))
    try:
        ws = lower_to(kernel, "barrier", CompileOptions(partition=partition, consumers=consumers,
                                                        solver_time_limit=10))
    except ArefError:
        return None                     # the middle end refused it (a named rule): nothing for the backend
    if ws.resource_error is not None:
        return None                     # the lowering's register refusal (the backend raises it)
    # shared memory over the limit (deep user rings beside a solver's hand-offs) is the same model's refusal,
    # reported where the storage is laid out (the backend); it is not a partition the backend compiles
    return None if smem_plan(ws).problem() else ws


@pytest.mark.parametrize("cfg", CONFIGS, ids=[f"{e}-{p}-{c}" + "".join(f"-{k}={v}" for k, v in kw.items())
                                              for e, p, c, kw in CONFIGS])
def test_accepted_partitions_generate_within_the_model(cfg):
    """Every accepted configuration generates code (the backend's own register check passes: its roles hold at
    most what the model counted), with budgets that hold each group's need and fit the register pool."""
    ws = _barrier(*cfg)
    if ws is None:
        return
    source = generate_source(ws)
    assert source.startswith('"""aref kernel')
    total = sum(gp.group.regs * gp.group.threads for gp in ws.groups)
    assert total <= 65536
    for gp in ws.groups:
        assert register_demand(gp).need <= gp.group.regs or not register_demand(gp).computes


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(CONFIGS))
def test_accepted_partitions_compile_without_spills(tmp_path_factory, cfg):
    """Property: a configuration the partitioner and the lowering accept compiles with 0 spill bytes."""
    ws = _barrier(*cfg)
    if ws is None:
        return
    result = compile_barrier(ws, cache_dir=tmp_path_factory.mktemp("agree"))
    assert result.spill_bytes == 0, (cfg, result.ptxas_log)


@pytest.mark.parametrize("kernel", ["rowwise", "rowwise:softmax"])
@pytest.mark.parametrize("partition", ["heuristic", "optimal"])
def test_rowwise_large_size_fits_a_warp_group(kernel, partition):
    """The row-wise examples' large size (64-row blocks of 256 columns) fits one warp group's registers with
    either partition (layer norm held its weight and bias as float32 column vectors beside the block: 352
    registers per thread, refused), and the backend's roles hold what the model counted."""
    name, _, kname = kernel.partition(":")
    ex = load_example(f"examples/{name}.py" + (f":{kname}" if kname else ""))
    k = ex.kernel.specialize(**ex.inputs("large"))
    ws = lower_to(k, "barrier", CompileOptions(partition=partition, timing_guard=False, solver_time_limit=30))
    assert ws.resource_error is None, ws.resource_error
    assert generate_source(ws).startswith('"""aref kernel')
    assert all(register_demand(gp).need <= gp.group.regs for gp in ws.groups if register_demand(gp).computes)


@pytest.mark.parametrize("example, partition, consumers, kw", [
    ("gemm", "heuristic", "cooperative", {}), ("dual_gemm", "optimal", "auto", {"STAGES": 3}),
    ("attention_fwd", "heuristic", "auto", {"D": 128}), ("attention_bwd", "heuristic", "auto", {"D": 128, "BN": 128}),
])
def test_the_code_holds_what_the_model_counted(example, partition, consumers, kw):
    """On the examples the model's per-group peak is exactly what the generated roles hold (it mirrors the code
    generator's storage rules), not an estimate."""
    from aref.backend.cute.analysis import ir_namer, plan_kernel
    from aref.backend.cute.role import RoleEmitter
    ws = _barrier(example, partition, consumers, kw)
    plan = plan_kernel(ws)
    plan.namer = ir_namer(ws)
    for g in plan.groups:
        em = RoleEmitter(plan, g)
        em.emit()
        assert em.peak[0] == register_demand(g.gp).peak, g.gp.group.name


@pytest.mark.parametrize("seed, partition", [(28, "heuristic"), (45, "heuristic"), (97, "heuristic"),
                                             (101, "heuristic"), (286, "heuristic"), (125, "optimal")])
def test_random_programs_hold_what_the_model_counted(tmp_path, seed, partition):
    """Random programs whose roles once held more than the model counted (the backend refused them as internal
    errors, or held tiles the budget did not include): a pipeline step under a run-time guard whose result is
    fused into a later user made its fused operands before the guard (45, 97, 101); a value nothing reads was
    computed into registers (45); an MMA whose result nothing reads was given no storage by the model (28); cheap index math a store reads whole
    was kept in registers from there to its last use, where the model counted none (286: it is made for each such
    read only, and counted there); a slot's tile stored to global memory is copied through registers, which the
    model did not count (125, optimal partition)."""
    from random_programs import random_program
    from aref.backend.cute.analysis import ir_namer, plan_kernel
    from aref.backend.cute.role import RoleEmitter
    prog = random_program(seed, directory=str(tmp_path))
    ws = lower_to(prog.kernel.specialize(**prog.inputs), "barrier",
                  CompileOptions(partition=partition, solver_time_limit=5))
    assert ws.resource_error is None
    plan = plan_kernel(ws)
    plan.namer = ir_namer(ws)
    for g in plan.groups:
        em = RoleEmitter(plan, g)
        em.emit()
        assert em.peak[0] <= register_demand(g.gp).peak, (seed, g.gp.group.name, em.peak[0])


@pytest.mark.parametrize("seed, peak", [(31, 164), (190, None), (224, None)])
def test_a_rounded_expression_is_not_held_twice(tmp_path, seed, peak):
    """A 16-bit cast of an elementwise expression nothing else reads (`store(P, minimum(maximum(s + v, ..)).to(f16))`
    with `s` still live) is rounded where the IR puts it, the expression fused into it: only the narrow tile is
    held. (Deferred to the store, the wide expression was stored beside the narrow copy: these programs were
    refused for registers, 228 + 32 > 256 for seed 31.) Read by a store, it is counted at 16 bits (seed 190
    compiles at that count with 0 spill bytes in ptxas); read by an MMA from registers it is counted at 32 bits
    (`Liveness.unpacked`: the halves are packed only at the wgmma, after its fence — at 16 bits the MLP
    example's optimal partition of commit 937b4f3 was counted 192 registers and spilled 1100 bytes)."""
    from random_programs import random_program
    prog = random_program(seed, directory=str(tmp_path))
    ws = lower_to(prog.kernel.specialize(**prog.inputs), "barrier", CompileOptions())
    assert ws.resource_error is None
    if peak is not None:
        assert max(register_demand(gp).peak for gp in ws.groups) == peak
    generate_source(ws)                      # and the code holds no more than that (the backend's own check)


@aref_kernel(grid=lambda Q, BM, **_: (-(-Q.shape[0] // BM),))
def _stores_after_a_pipelined_loop(Q, K, V, Bias, C, *, BM: int = 64, BN: int = 64):
    """A loop whose MMA feeds CUDA-core work feeding a second MMA (software-pipelined one step ahead, so the
    consumer has a prologue and an epilogue) into an accumulator that starts from a loaded tile, then four
    tiles computed and stored one after another."""
    pid = aref.program_id(0)
    D = Q.shape[1]
    q = aref.load(Q, (pid, 0), (BM, D))
    o = aref.load(Bias, (pid, 0), (BM, D)).to(aref.float32) * 0.25
    for j in aref.range(aref.cdiv(K.shape[0], BN)):
        s = aref.mma(q, aref.load(K, (j, 0), (BN, D)).T)
        p = aref.maximum(s, 0.0).to(aref.float16)
        o = o + aref.mma(p, aref.load(V, (j, 0), (BN, D)))
    b = aref.load(Bias, (pid, 0), (BM, D)).to(aref.float32)
    for i in range(4):
        aref.store(C, (i, pid, 0), (o * (0.5 + i) - b).to(aref.float16))


def _post_loop_inputs(n: int) -> dict:
    import torch
    g = torch.Generator().manual_seed(0)
    r = lambda *s: (torch.randn(*s, generator=g) * 0.3).half()      # noqa: E731
    return dict(Q=r(128, 128), K=r(n, 128), V=r(n, 128), Bias=r(128, 128),
                C=torch.zeros(4, 128, 128, dtype=torch.float16))


@pytest.mark.parametrize("rows", [0, 64, 192])
def test_post_loop_tiles_after_a_steady_loop_of_no_trips(tmp_path, rows):
    """The backend tracks liveness at the resource model's positions. With fewer trips than pipeline steps
    (0 here, K of 0 rows; seed 198's optimal partition: 1 trip, a recurrence scheduled two steps ahead) the
    steady loop is not emitted, and the backend used to count positions over emitted ops only: after the loop
    every last use the model gave lay one loop body further on, so the four stored tiles looked live at once
    (256 registers held, 176 counted: an internal error). And the loop result, the accumulator's init (a
    loaded tile) left in its storage, was not marked as held there: the bias tile loaded after the loop was
    written over it before the stores read it. The roles hold at most what the model counted and keep the
    result until its last read, the kernel compiles with no spills and simulates as the interpreter computes."""
    import torch
    from aref.backend.cute.analysis import ir_namer, plan_kernel
    from aref.backend.cute.role import RoleEmitter
    from aref.backend.cute.values import Reg
    from aref.interp.tile import run_kernel
    from aref.sim import simulate
    args = _post_loop_inputs(rows)
    kernel = _stores_after_a_pipelined_loop.specialize(**args)
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_90a"))
    assert ws.resource_error is None
    consumer = next(gp for gp in ws.groups if gp.loop is not None and gp.epilogue.ops)
    assert consumer.prologue.ops                  # pipelined: the steady loop runs trips - 1 times
    plan = plan_kernel(ws)
    plan.namer = ir_namer(ws)
    for g in plan.groups:
        em = RoleEmitter(plan, g)
        em.emit()
        assert em.peak[0] <= register_demand(g.gp).peak, (rows, g.gp.group.name, em.peak[0])
        # the loop result (in the init's storage when the steady loop has no trips) keeps its registers until
        # its last read: no tile made after the loop before then is written over it
        lv, lp = em.liveness, g.gp.loop
        for res in lp.results if lp is not None else ():
            held = em.env.get(id(res))
            if not isinstance(held, Reg):
                continue
            clobbers = [v for v in (w for op in g.gp.post.ops for w in op.results)
                        if isinstance(em.env.get(id(v)), Reg) and em.env[id(v)].buf is held.buf
                        and lv.def_at[id(v)] < lv.last_use(res)]
            assert not clobbers, (rows, held.buf.name, clobbers)
    result = compile_barrier(ws, cache_dir=tmp_path)
    assert result.spill_bytes == 0, result.ptxas_log
    want = {k: v.clone() for k, v in args.items()}
    run_kernel(kernel, want)
    got = {k: v.clone() for k, v in args.items()}
    res = simulate(ws, got, seed=1)
    assert not res.violations, [str(v) for v in res.violations]
    assert torch.equal(got["C"], want["C"])


SM100_CASES = [(e, p) for e in EXAMPLE_NAMES for p in ("heuristic", "optimal")] + [
    ("general:gemm_dropout_colsum", "heuristic"), ("general:gemm_dropout_colsum", "optimal")]


def _sm100_barrier(example: str, partition: str):
    if example.startswith("general:"):
        from tests.backend.general_programs import PROGRAMS, inputs
        name = example.split(":", 1)[1]
        kernel = PROGRAMS[name][0].specialize(**inputs(name))
        return lower_to(kernel, "barrier", CompileOptions(arch="sm_100a", partition=partition, solver_time_limit=20))
    from tests.backend.sm100_helpers import sm100_ir
    return sm100_ir(example, partition)


def _storage_bytes(source: str, path) -> int:
    """The bytes of the generated module's shared storage struct (what the launch asks for)."""
    import importlib.util
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"generated_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SharedStorage.size_in_bytes()


@pytest.mark.parametrize("example, partition", SM100_CASES, ids=[f"{e}-{p}" for e, p in SM100_CASES])
def test_sm100_shared_memory_is_at_most_the_models(tmp_path, example, partition):
    """On sm_100a the backend lays staging tiles out where the resource model places them (`smem_plan`): the
    column chunks of a subtiled epilogue's store share one staging tile (each chunk's TMA store waits for the
    previous one to have read it), a post-loop store reuses an idle ring or an earlier staging tile. So the
    backend's figure and its storage struct take at most what the model counted (dual_gemm's chunked epilogue
    was planned 230,528 B against the model's 215,040 B, gemm_dropout_colsum 166,512 B against 150,784 B; now
    214,144 B and 149,872 B), and the zero tile of the tensor core's zero fills, the MMA barriers and the
    tensor-memory address slot come from the same rule (`aref.resources.tensor_core`)."""
    from aref.backend.cute.errors import BackendError
    from aref.backend.cute.sm100.plan import plan_kernel_sm100
    from aref.resources.memory import SWIZZLE_ALIGN
    try:
        ws = _sm100_barrier(example, partition)
    except ArefError:
        return                          # the middle end refused it (a named rule): nothing for the backend
    model = smem_plan(ws)
    try:
        plan = plan_kernel_sm100(ws)
    except BackendError as e:           # a construct the Blackwell templates do not take, never shared memory
        assert model.problem() or "shared memory" not in str(e), str(e)
        return
    # staging: the backend allocates the staging storage the model places (less where it stores straight from
    # a slot, for which the model counts a staging tile)
    own = [b for b in plan.staging_buffers() if plan.host_of(b) is None]
    staged, modelled = sum(b.nbytes for b in own), sum(i.nbytes for i in model.items if i.kind == "staging")
    assert staged <= modelled and (staged == modelled or plan.direct_stores), (staged, modelled)
    # the stores the model gives one staging tile (a store's column chunks) share one buffer in the backend
    for op_id, buf in plan.staging.items():
        item = model.item(("staging", op_id))
        if item.alias_of is not None and item.alias_of[0] == "staging" and item.alias_of[1] in plan.staging:
            host = plan.staging[item.alias_of[1]]
            assert buf is host or plan.host_of(buf) is host, (buf.name, host.name)
    if example in ("dual_gemm", "general:gemm_dropout_colsum"):      # chunked epilogues: one tile per store
        assert len(own) < len(plan.staging) and len(own) == len({id(b) for b in plan.staging.values()})
    # the whole layout: at most the model's, which counts Blackwell's zero tile, MMA barriers and tensor-memory
    # address slot too (`aref.resources.tensor_core`; attention_fwd / attention_causal optimal and splitk_gemm
    # were 1.4-3.3 KB over the model before)
    assert plan.smem_bytes <= model.total, (plan.smem_bytes, model.total)
    zeros = [i for i in model.items if i.kind == "zero"]
    assert (plan.zero_tile is None) == (not zeros) and all(i.tile == plan.zero_tile.tile for i in zeros)
    struct = _storage_bytes(generate_source(ws), tmp_path / "kernel.py")
    assert struct <= -(-(model.total - SWIZZLE_ALIGN) // SWIZZLE_ALIGN) * SWIZZLE_ALIGN, (struct, model.total)


def test_causal_attention_at_head_dim_128_compiles_without_spills(tmp_path):
    """Causal attention at D=128 (cooperative consumers) once spilled 8 bytes on sm_90a: the model counted 200
    registers per consumer thread, ptxas needed more than the 232 the consumers got beside a 40-register
    producer. A computing group within `PTXAS_HEADROOM` of its budget takes the producer's registers (FA3's
    24 / 240 / 240 split)."""
    ws = _barrier("attention_causal", "heuristic", "auto", {"D": 128})
    assert ws is not None
    budgets = {gp.group.name: gp.group.regs for gp in ws.groups}
    assert budgets == {"producer": 24, "consumer0": 240, "consumer1": 240}
    result = compile_barrier(ws, cache_dir=tmp_path)
    assert result.spill_bytes == 0, result.ptxas_log


def test_a_producer_gives_registers_only_to_groups_near_their_need():
    """The producer keeps its budget when the computing groups' needs are far below theirs (a GEMM's 128 of
    232), and gives down to 24 when a group's need is within the headroom of its share — only if the pool then
    raises that group's budget (the pool is the launch allocation: 168 × 384 threads)."""
    from aref.ir.ws import WarpGroup
    from aref.resources import assign_budgets
    from aref.resources.demand import RegisterDemand
    groups = [WarpGroup(0, "producer", "producer", 4, 40), WarpGroup(1, "consumer0", "consumer", 4, 232),
              WarpGroup(2, "consumer1", "consumer", 4, 232)]

    def demands(peak):
        return {0: RegisterDemand("producer", 0, computes=False), 1: RegisterDemand("consumer0", peak),
                2: RegisterDemand("consumer1", peak)}
    assert assign_budgets(groups, demands(96)) == {0: 40, 1: 232, 2: 232}
    assert assign_budgets(groups, demands(168)) == {0: 24, 1: 240, 2: 240}
