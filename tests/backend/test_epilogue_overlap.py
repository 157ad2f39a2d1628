"""Epilogue overlap on Hopper persistent kernels (`aref.backend.cute.overlap`): two copies of the consumer warp
group take a CTA's alternate tiles, main loops serialized in tile order, each epilogue overlapping the other
copy's main loop. The generated kernel compiles without spills at the budgets of three groups; the turn
protocol (`overlap.TURNS`) runs as a model of the rings' mbarrier phases and the named barriers over many tiles
and interleavings; kernels it cannot hold for are refused at the user's line."""
import os
import random
import re

import pytest
import torch

from aref.backend.cute import compile_barrier, generate_source, overlap
from aref.backend.cute.analysis import BackendError, plan_kernel
from aref.runtime.harness import load_example
from tests.backend.conftest import barrier_ir
from tests.backend.test_consistency import check


# ------------------------------------------------------------------------------------------- compile
@pytest.mark.parametrize("example, size", [("gemm", "small"), ("gemm", "large"), ("gemm_epilogue", "small"),
                                           ("gemm_reduce", "small"), ("batched_gemm", "small")])
def test_overlapped_kernel_compiles_without_spills(example, size, backend_cache):
    ws = barrier_ir(example, "heuristic", "plain", size)
    result = compile_barrier(ws, cache_dir=backend_cache, persistent=True, ctas=132, epilogue_overlap=True)
    assert result.spill_bytes == 0, result.ptxas_log
    # one producer that gives registers back, two consumer copies that take them: 24 + 2 × 240 of 168 each (the
    # consumer's need, 224, is within the resource model's headroom of 232: the producer gives down to 24)
    assert result.register_budgets == {"producer": 24, "consumer": 240, "consumer_1": 240}
    assert 128 * sum(result.register_budgets.values()) <= 65536
    ins = result.instructions
    assert ins["setmaxnreg.inc"] == 2 and ins["setmaxnreg.dec"] == 1
    assert ins["bar.arrive"] == 4                       # the turn hand-overs: main and epilogue, both copies
    assert ins["mbarrier.init"] == 2 * sum(ch.depth for ch in ws.channels)     # the rings are unchanged
    source = result.source_path.read_text()
    assert "THREADS = 384" in source
    assert "setmaxregister_increase(240)" in source and "setmaxregister_decrease(24)" in source
    plan = plan_kernel(ws, True, 132, 0, True)
    assert check(plan.ws, source) == []              # every Barrier IR op once, in order, in its role


def test_source_alternates_tiles_and_orders_the_main_loops():
    ws = barrier_ir("gemm", "heuristic", "plain", "large")
    source = generate_source(ws, persistent=True, ctas=132, epilogue_overlap=True)
    plain = generate_source(ws, persistent=True, ctas=132)
    consumer = source[source.index("def consumer"):source.index("@cute.kernel")]
    assert "for tile in cutlass.range(first_tile + COPY * num_ctas, NUM_TILES, 2 * num_ctas, unroll=1):" in consumer
    assert "tile_count = (tile - first_tile) // num_ctas" in consumer        # the ring positions of the tile
    assert re.search(r"ab_base = \(tile_count \* 64\) % 10", consumer)
    # the producer is the plain persistent kernel's
    assert source[source.index("def producer"):source.index("def consumer")] == \
        plain[plain.index("def producer"):plain.index("def consumer")]
    # dispatch: copy 0 and copy 1 call one role function with their own constants
    assert re.search(r"elif warp_group == 1:.*\n\s+consumer\(.*COPY=0, GROUP_BARRIER=1\)", source)
    assert re.search(r"elif warp_group == 2:.*\n\s+consumer\(.*COPY=1, GROUP_BARRIER=2\)", source)
    # turns: wait before the main loop, pass after its last ring release, wait before the epilogue's stores,
    # pass after them once the stores have read the staging tile
    lines = consumer.splitlines()
    first_wait = next(i for i, x in enumerate(lines) if "mbarrier_wait(ab_full" in x)
    last_release = max(i for i, x in enumerate(lines) if "arrive_once(ab_empty" in x)
    store = next(i for i, x in enumerate(lines) if "aref.issue_store" in x)
    syncs = [i for i, x in enumerate(lines) if "cute.arch.barrier(barrier_id=3" in x or
             "cute.arch.barrier(barrier_id=4" in x]
    arrives = [i for i, x in enumerate(lines) if "barrier_arrive(barrier_id=" in x]
    assert len(syncs) == 4 and len(arrives) == 4
    assert syncs[1] < first_wait and last_release < arrives[0] < arrives[1] < syncs[2] < syncs[3] < store < arrives[2]
    assert "staging_free" in lines[arrives[2] - 3]
    assert "barrier_id=GROUP_BARRIER" in consumer and "barrier_id=1," not in consumer


# --------------------------------------------------------------------------------------------- model
class ProtocolError(AssertionError):
    pass


def run_protocol(tiles: int, per_tile: int, depth: int, seed: int, turns=None) -> None:
    """A CTA's producer and two consumer copies over `tiles` tiles of `per_tile` ring items (a ring of `depth`
    slots), interleaved at random. mbarriers are modelled as hardware has them: a wait on parity p returns once
    the barrier's completed-phase count has another parity — so a wait for a slot two phases behind returns at
    once, which the model reports as aliasing. Named barriers complete at 256 threads (128 per arrive / sync).
    Raises `ProtocolError` on aliasing, an overwritten slot, a shared staging tile, a deadlock or a pending
    named-barrier arrival at exit."""
    turns = turns or overlap.TURNS
    rng = random.Random(seed)
    full = [0] * depth                     # completed phases of each slot's full / empty barrier
    empty = [0] * depth
    filled = [-1] * depth                  # ring position each slot holds
    named = {0: [], 1: []}                 # copy's turn barrier -> kinds arrived in the current phase
    gen = {0: 0, 1: 0}
    staging = []                           # copies whose epilogue holds the staging tile

    def producer():
        for q in range(tiles * per_tile):
            s, r = q % depth, q // depth
            parity = (r % 2) ^ 1
            yield lambda: empty[s] % 2 != parity
            if empty[s] < r:
                raise ProtocolError(f"producer overwrites slot {s} (position {q - depth} not released)")
            filled[s] = q
            full[s] += 1

    def bar_wait(c):
        named[c].append("sync")
        g = gen[c]
        if len(named[c]) == 2:
            gen[c], named[c] = gen[c] + 1, []
        else:
            yield lambda: gen[c] != g

    def bar_pass(c):
        other = 1 - c
        named[other].append("arrive")
        if len(named[other]) == 2:
            if named[other] == ["arrive", "arrive"]:
                raise ProtocolError(f"two arrivals complete copy {other}'s turn barrier without its sync")
            gen[other], named[other] = gen[other] + 1, []

    def consumer(c):
        for t in range(c, tiles, 2):
            env = {"tile_count": t, "has_next": t + 1 < tiles}
            if eval(turns[(c, "main", "wait")], {}, env):
                yield from bar_wait(c)
            for k in range(per_tile):
                q = t * per_tile + k
                s, r = q % depth, q // depth
                yield lambda: full[s] % 2 != r % 2
                if full[s] != r + 1 or filled[s] != q:
                    raise ProtocolError(f"copy {c} waiting for position {q} (slot {s}) returned with position "
                                        f"{filled[s]} there: parity aliasing")
                if k:
                    empty[(q - 1) % depth] += 1          # wgmma depth 1: the previous item is released now
            empty[(t * per_tile + per_tile - 1) % depth] += 1
            if eval(turns[(c, "main", "pass")], {}, env):
                bar_pass(c)
            if eval(turns[(c, "epilogue", "wait")], {}, env):
                yield from bar_wait(c)
            if staging:
                raise ProtocolError(f"copy {c} stages tile {t} while copy {staging[0]} still stores from the tile")
            staging.append(c)
            yield lambda: True                           # the stores take a while
            staging.remove(c)
            if eval(turns[(c, "epilogue", "pass")], {}, env):
                bar_pass(c)

    roles = [producer(), consumer(0), consumer(1)]
    waiting = {i: (lambda: True) for i in range(3)}
    while waiting:
        ready = [i for i, cond in waiting.items() if cond()]
        if not ready:
            raise ProtocolError(f"deadlock: roles {sorted(waiting)} blocked")
        i = rng.choice(ready)
        try:
            waiting[i] = next(roles[i])
        except StopIteration:
            del waiting[i]
    if any(named.values()):
        raise ProtocolError(f"named-barrier arrivals pending at exit: {named}")


@pytest.mark.parametrize("tiles", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("per_tile, depth", [(1, 2), (3, 2), (4, 5), (7, 3)])
def test_turns_keep_every_ring_wait_exact(tiles, per_tile, depth):
    for seed in range(60):
        run_protocol(tiles, per_tile, depth, seed)


def test_model_catches_unordered_copies_and_wrong_turns():
    """The model can fail: without turns a copy waits on a slot the other copy still owes (aliasing), a turn
    waited for where none precedes deadlocks, a missing sync leaves an arrival pending."""
    none = {k: "False" for k in overlap.TURNS}
    with pytest.raises(ProtocolError, match="aliasing|overwrites|stages"):
        for seed in range(200):
            run_protocol(6, 2, 2, seed, turns=none)
    with pytest.raises(ProtocolError, match="deadlock"):
        run_protocol(3, 2, 2, 0, turns={**overlap.TURNS, (0, "main", "wait"): "True"})
    with pytest.raises(ProtocolError, match="pending"):
        run_protocol(2, 2, 2, 0, turns={**overlap.TURNS, (1, "epilogue", "pass"): "True"})


# ------------------------------------------------------------------------------------------ refusals
def _refused(ws, match, line=None, **kw):
    with pytest.raises(BackendError, match=match) as err:
        generate_source(ws, **{"persistent": True, "ctas": 132, "epilogue_overlap": True, **kw})
    assert err.value.loc.line > 0 and err.value.hint and "epilogue_overlap" in err.value.hint
    if line is not None:
        assert err.value.loc.line == line
    return err.value


def test_refused_without_a_persistent_launch():
    _refused(barrier_ir("gemm", "heuristic", "plain"), "not persistent", persistent=False)


def test_refused_for_more_than_one_consumer_group():
    e = _refused(barrier_ir("gemm", "heuristic", "cooperative"), "one consumer warp group")
    assert "consumers='plain'" in e.hint


def test_refused_when_two_copies_do_not_fit_the_registers():
    """BN=144: the consumer needs 248 registers, which two groups give (≤ 256) but three do not (232)."""
    ws = barrier_ir("gemm", "heuristic", "plain", BN=144)
    assert ws.resource_error is None
    generate_source(ws, persistent=True)                  # the plain persistent kernel fits
    e = _refused(ws, "two copies of warp group 'consumer'.*registers")
    assert e.loc.file.endswith("gemm.py")


def test_refused_for_run_time_trip_counts():
    _refused(barrier_ir("splitk_gemm", "heuristic", "plain"), "known only at run time")


def test_refused_when_a_consumer_puts_into_a_channel():
    from example_paths import SHALLOW_RINGS
    ws = barrier_ir("dual_gemm", "optimal", **SHALLOW_RINGS["dual_gemm"])
    e = _refused(ws, "puts into channel 'silu.x'", line=25)
    assert "consumers='plain'" in e.hint


def test_refused_when_the_consumer_keeps_its_own_shared_tiles():
    _refused(barrier_ir("linear_attention", "heuristic", "plain"), "staged MMA operand")


def test_sm100_overlap_is_the_doubled_accumulator():
    """sm_100a persistent kernels already double the tensor-memory accumulator (the MMA warp's next tile
    writes one stage while the epilogue reads the other): the option generates that kernel, and is refused
    without a persistent launch."""
    from aref.compiler import CompileOptions
    from aref.search import lower_to
    ex = load_example("examples/gemm.py")
    ws = lower_to(ex.kernel.specialize(**ex.inputs("small")), "barrier", CompileOptions(arch="sm_100a"))
    src = generate_source(ws, persistent=True, ctas=148, epilogue_overlap=True)
    assert src == generate_source(ws, persistent=True, ctas=148)
    from aref.backend.cute.sm100 import plan_kernel_sm100
    assert plan_kernel_sm100(ws, True, 148).doubled
    with pytest.raises(BackendError, match="persistent"):
        generate_source(ws, persistent=False, epilogue_overlap=True)


# ------------------------------------------------------------------------------------------------ GPU
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("ctas", [1, 5, 7, 24])
def test_launch_overlapped_gemm_matches_torch(ctas):
    """24 tiles (6 × 4) of K = 320 (5 ring items each): CTAs with odd and even tile counts, one with every
    tile, ones with a single tile (copy 1 idle)."""
    from aref.backend.cute.launch import launch
    from aref.compiler import CompileOptions
    from aref.outputs import compare
    ex = load_example("examples/gemm.py")
    inputs = ex.inputs("small", M=768, N=512, K=320)
    cuda = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    tensors = {k: v for k, v in cuda.items() if isinstance(v, torch.Tensor)}
    launch(ex.kernel.specialize(**inputs), tensors, options=CompileOptions(arch="sm_90a", consumers="plain"),
           persistent=True, ctas=ctas, epilogue_overlap=True)
    torch.cuda.synchronize()
    report = compare({k: v.cpu() for k, v in cuda.items() if isinstance(v, torch.Tensor)},
                     ex.reference_fn(**inputs), ex.tolerance(inputs))
    assert report.ok, report.to_json()


# ------------------------------------------------------------------------------------------------ CLI
def test_compile_command_takes_the_option(capsys, tmp_path):
    """`aref compile --persistent --epilogue-overlap`: the generated source has the consumer's two copies; without
    --persistent the command fails with the backend's rule at the kernel's line, never a traceback."""
    import json

    from aref.cli import main
    from example_paths import example_path
    gemm = example_path("gemm")
    code = main(["compile", gemm, "--consumers", "plain", "--persistent", "--epilogue-overlap", "--emit", "cute",
                 "--out", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and out["register_budgets"] == {"producer": 24, "consumer": 240, "consumer_1": 240}
    assert "COPY=1" in open(out["source_path"]).read()
    code = main(["compile", gemm, "--consumers", "plain", "--epilogue-overlap", "--emit", "cute",
                 "--out", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    err = json.loads(captured.out.strip().splitlines()[-1])
    assert code == 1 and "Traceback" not in captured.err
    assert err["ok"] is False and "not persistent" in err["error"] and "persistent=True" in err["hint"]
    assert os.path.samefile(err["file"], gemm) and err["line"] > 0


def test_copies_walk_the_plain_tile_order_between_them():
    """The copies' tile loops (evaluated from the source) split the plain persistent walk of every CTA: each
    tile once, copy c on the tiles with tile_count % 2 == c, and `has_next` true exactly before the CTA's last."""
    ws = barrier_ir("gemm", "heuristic", "plain", "large")
    consumer = generate_source(ws, persistent=True, epilogue_overlap=True).split("def consumer")[1]
    loop = re.search(r"for tile in cutlass\.range\((.*), unroll=1\):", consumer).group(1)
    count = re.search(r"tile_count = (.*)", consumer).group(1)
    has_next = re.search(r"has_next = (.*?)  #", consumer).group(1)
    rng = {"cutlass": type("C", (), {"range": staticmethod(range)})}
    for tiles, ctas in [(1, 3), (7, 3), (24, 5), (24, 24), (1024, 132)]:
        for first in range(min(ctas, tiles)):
            walk = list(range(first, tiles, ctas))
            got = {}
            for c in (0, 1):
                env = {"first_tile": first, "num_ctas": ctas, "NUM_TILES": tiles, "COPY": c}
                for tile in eval(f"cutlass.range({loop})", rng, env):
                    n = eval(count, {}, {**env, "tile": tile})
                    assert n % 2 == c and tile not in got
                    got[tile] = n
                    assert eval(has_next, {}, {**env, "tile": tile}) == (tile != walk[-1])
            assert sorted(got) == walk and [got[t] for t in walk] == list(range(len(walk)))


def turns_of_source(consumer: str) -> dict:
    """The turn table the generated consumer implements, read back from its four hand-over blocks (in order:
    main wait, main pass, epilogue wait, epilogue pass), each `if cutlass.const_expr(COPY == 0): ... else: ...`
    with an optional `if <condition>:` around the named-barrier call; checks that a copy waits on its own turn
    barrier and passes on the other's."""
    lines = consumer.splitlines()
    starts = [i for i, x in enumerate(lines) if x.strip() == "if cutlass.const_expr(COPY == 0):"]
    assert len(starts) == 4
    table, order = {}, None
    for (point, action), i in zip([("main", "wait"), ("main", "pass"), ("epilogue", "wait"), ("epilogue", "pass")],
                                  starts):
        pad = len(lines[i]) - len(lines[i].lstrip())
        j = i + 1
        for c in (0, 1):
            body = []
            while j < len(lines) and (len(lines[j]) - len(lines[j].lstrip()) > pad):
                body.append(lines[j].strip())
                j += 1
            if c == 0:
                assert lines[j].strip() == "else:"
                j += 1
            cond = body[0][3:-1] if body[0].startswith("if ") else "True"
            call = re.match(r"cute\.arch\.(barrier|barrier_arrive)\(barrier_id=(\d+), number_of_threads=2 \* "
                            r"aref\.WARP_GROUP_THREADS\)", body[-1])
            assert call and call.group(1) == ("barrier" if action == "wait" else "barrier_arrive")
            bar = int(call.group(2))
            order = order or {}
            key = c if action == "wait" else 1 - c            # whose turn barrier this is
            assert order.setdefault(key, bar) == bar
            table[(c, point, action)] = cond
    assert order[0] != order[1]
    return table


def test_generated_turns_are_the_modelled_protocol():
    """The protocol the model checks is the one the kernel runs: read back from the generated source, the turn
    table equals `overlap.TURNS`, and it keeps every ring wait exact in the model."""
    ws = barrier_ir("gemm", "heuristic", "plain", "large")
    consumer = generate_source(ws, persistent=True, epilogue_overlap=True).split("def consumer")[1]
    table = turns_of_source(consumer)
    assert table == overlap.TURNS
    for seed in range(20):
        run_protocol(5, 64, 5, seed, turns=table)
