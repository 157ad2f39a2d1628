"""TMA multicast over a 2-CTA cluster on Hopper (`aref.backend.cute.cluster`): a tile both CTAs of a cluster
load (GEMM's B tile for a cluster along M) is loaded half by each with a multicast TMA into both CTAs' slot.
The generated kernel compiles for sm_90a without spills and holds the protocol's pieces (multicast copies,
remote releases on the empty barriers with doubled counts, cluster syncs after init and before exit); the
cross-CTA ring protocol runs as a model of mbarrier phases over random interleavings (and fails without the
remote release); kernels it cannot hold for are refused at the user's line; a launch matches torch on a GPU."""
import random
import re

import pytest
import torch

import aref
from aref import aref_kernel
from aref.backend.cute import compile_barrier, generate_source
from aref.backend.cute.analysis import BackendError, plan_kernel
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.runtime.harness import load_example
from tests.backend.conftest import barrier_ir
from tests.backend.test_consistency import check


# ------------------------------------------------------------------------------------------- compile
@pytest.mark.parametrize("example, size, cluster, shared", [
    ("gemm", "small", (2, 1), "B"), ("gemm", "large", (2, 1), "B"), ("gemm", "large", (1, 2), "A")])
def test_clustered_gemm_compiles_with_multicast_and_no_spills(example, size, cluster, shared, backend_cache):
    ws = barrier_ir(example, "heuristic", "plain", size)
    result = compile_barrier(ws, cache_dir=backend_cache, cluster=cluster)
    plain = compile_barrier(ws, cache_dir=backend_cache)
    assert result.spill_bytes == 0, result.ptxas_log
    assert result.registers <= plain.registers
    ins = result.instructions
    assert ins["mbarrier.init"] == plain.instructions["mbarrier.init"]
    assert ins["cp.async.bulk.tensor"] == plain.instructions["cp.async.bulk.tensor"]
    ptx = result.ptx_path.read_text()
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.\S*multicast::cluster", ptx)) == 1   # the shared tile only
    assert ptx.count("fence.mbarrier_init.release.cluster") == 1
    assert ptx.count("barrier.cluster.arrive") == 2 and ptx.count("barrier.cluster.wait") == 2
    # each release of the ring reaches the barrier of both CTAs through its cluster address
    assert ptx.count("mbarrier.arrive.shared::cluster") == ptx.count("mapa.shared::cluster") >= 4
    source = result.source_path.read_text()
    depth = ws.channels[0].depth
    assert f"aref.init_ring(ab_full, ab_empty, {depth}, 1, 2)" in source          # empty count doubled
    other = "A" if shared == "B" else "B"
    assert re.search(rf"tma_{shared}, tma_{shared}_gmem = cpasync.make_tiled_tma_atom\(cpasync."
                     rf"CopyBulkTensorTileG2SMulticastOp\(\), {shared}, .*num_multicast=2\)", source)
    assert re.search(rf"tma_{other}, tma_{other}_gmem = cpasync.make_tiled_tma_atom\(cpasync."
                     rf"CopyBulkTensorTileG2SOp\(\)", source)
    assert re.search(rf"cute.copy\(tma_{shared}, .*mcast_mask=cutlass.Int16\(3\)\)", source)
    assert not re.search(rf"cute.copy\(tma_{other}, .*mcast_mask", source)
    assert f"tma_{shared}, cute.arch.block_idx_in_cluster(), cute.make_layout(2)," in source
    consumer = source[source.index("def consumer"):source.index("@cute.kernel")]
    assert "arrive_once(ab_empty" not in consumer and consumer.count("aref.arrive_cluster(ab_empty") == 2
    kernel = source[source.index("@cute.kernel"):source.index("def host")]
    assert "sync_threads" not in kernel and kernel.count("cute.arch.cluster_arrive()") == 2
    assert kernel.index("mbarrier_init_fence") < kernel.index("cluster_wait()") < kernel.index("producer(")
    assert kernel.rindex("cluster_wait()") > kernel.index("consumer(")           # the exit sync
    assert f"cluster={cluster + (1,)}," in source
    plan = plan_kernel(ws)
    assert check(plan.ws, source) == []              # every Barrier IR op once, in order, in its role


def test_other_kernels_share_what_does_not_depend_on_the_cluster_axis(backend_cache):
    """Attention forward clustered along the query axis shares its K and V tiles; layer norm its weight and
    bias (loaded once), not the rows each CTA owns (a trip count that depends on program_id(0))."""
    result = compile_barrier(barrier_ir("attention_fwd", "heuristic", "auto", "small"), cache_dir=backend_cache,
                             cluster=(2, 1))
    assert result.spill_bytes == 0, result.ptxas_log
    src = result.source_path.read_text()
    assert "mcast_mask" not in src[src.index("tma_Q"):src.index("tma_Q") + 300].split("\n")[0]
    assert re.search(r"tma_K, tma_K_gmem = .*G2SMulticastOp", src) and re.search(r"tma_V, tma_V_gmem = .*G2SMulticastOp",
                                                                                    src)
    assert re.search(r"tma_Q, tma_Q_gmem = .*G2SOp\(\)", src)
    ws = barrier_ir("rowwise", "heuristic", "auto", "small")
    result = compile_barrier(ws, cache_dir=backend_cache, cluster=(2, 1))
    src = result.source_path.read_text()
    assert result.spill_bytes == 0
    assert re.search(r"tma_W, .*G2SMulticastOp", src) and re.search(r"tma_X, .*G2SOp\(\)", src)


@aref_kernel
def gram(A, C, *, BM: int = 128, BK: int = 64):
    """C = A·Aᵀ: both operands are boxes of A, one at the CTA's rows and one at its columns."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BM), aref.float32)
    ab = aref.channel(depth=4)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(A, (pid_n, k), (BM, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    aref.store(C, (pid_m, pid_n), acc.to(C.dtype))


def gram_inputs():
    g = torch.Generator().manual_seed(0)
    return {"A": (torch.randn(256, 192, generator=g) * 0.5).half(), "C": torch.zeros(256, 256).half()}


@pytest.mark.parametrize("cluster, shared", [((2, 1), "pid_n"), ((1, 2), "pid_m")])
def test_a_box_loaded_shared_and_not_gets_a_multicast_atom_of_its_own(cluster, shared, backend_cache):
    ws = lower_to(gram.specialize(**gram_inputs()), "barrier", CompileOptions(arch="sm_90a", consumers="plain"))
    result = compile_barrier(ws, cache_dir=backend_cache, cluster=cluster)
    assert result.spill_bytes == 0, result.ptxas_log
    src = result.source_path.read_text()
    assert re.search(r"tma_A, tma_A_gmem = .*\(cpasync.CopyBulkTensorTileG2SOp\(\), A,", src)
    assert re.search(r"tma_A_mc, tma_A_mc_gmem = .*G2SMulticastOp\(\), A, .*num_multicast=2\)", src)
    assert re.search(rf"cute.copy\(tma_A_mc, A_tiles_?\d*\[None, {shared}, k\], .*mcast_mask=cutlass.Int16\(3\)\)",
                     src), src[src.index("def producer"):src.index("def consumer")]
    assert len(re.findall(r"mcast_mask", src)) == 1
    assert check(ws, src) == []


# --------------------------------------------------------------------------------------------- model
class ProtocolError(AssertionError):
    pass


class Mbarrier:
    """An mbarrier as hardware has it: pending arrivals and a transaction count; the phase completes when both
    reach zero; a wait on parity p returns once the current phase's parity differs from p."""

    def __init__(self, count: int):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self, expect_tx: int = 0):
        self.tx += expect_tx
        self.pending -= 1
        if self.pending < 0:
            raise ProtocolError("more arrivals than the barrier's count in one phase")
        self._maybe_complete()

    def complete_tx(self, nbytes: int):
        self.tx -= nbytes
        self._maybe_complete()

    def passed(self, parity: int) -> bool:
        return self.phase % 2 != parity


def run_cluster_ring(items: int, depth: int, seed: int, remote_release: bool = True,
                     empty_count: int = 2) -> None:
    """Two CTAs, each a producer and a consumer of one ring of `depth` slots holding an own tile A (16 KB) and a
    shared tile B whose halves (8 KB each) the two producers multicast into both CTAs (the generated GEMM
    with cluster (2, 1)). Every asynchronous event (a TMA's bytes landing in one CTA, a remote arrive) is
    delivered in a random order. Raises `ProtocolError` when bytes land in a slot whose previous item a
    consumer has not released, when a consumer reads a slot that does not hold its item, when a barrier is
    signalled in another phase than the item's, or on a deadlock."""
    rng = random.Random(seed)
    A, HALF = 16384, 8192
    full = [[Mbarrier(1) for _ in range(depth)] for _ in range(2)]
    empty = [[Mbarrier(empty_count) for _ in range(depth)] for _ in range(2)]
    data = [[{} for _ in range(depth)] for _ in range(2)]       # cta -> slot -> part -> item
    released = [set(), set()]                                    # cta -> items its consumer released
    inflight: list = []
    prod = [dict(i=0, step=0) for _ in range(2)]
    cons = [dict(i=0, step=0) for _ in range(2)]

    def land(cta, part, item, nbytes):
        slot = item % depth
        if item >= depth and item - depth not in released[cta]:
            raise ProtocolError(f"item {item} lands in CTA {cta}'s slot {slot} before its consumer released "
                                f"item {item - depth}")
        if full[cta][slot].phase != item // depth:
            raise ProtocolError(f"item {item}'s bytes complete on CTA {cta}'s full[{slot}] in phase "
                                f"{full[cta][slot].phase}")
        data[cta][slot][part] = item
        full[cta][slot].complete_tx(nbytes)

    def remote_arrive(cta, item):
        bar = empty[cta][item % depth]
        if bar.phase != item // depth:
            raise ProtocolError(f"a release of item {item} arrives on CTA {cta}'s empty in phase {bar.phase}")
        bar.arrive()

    def producer_step(r):
        p = prod[r]
        i, slot = p["i"], p["i"] % depth
        if p["step"] == 0:                       # wait for the slot to be free (both CTAs' consumers)
            if not empty[r][slot].passed(1 - (i // depth) % 2):
                return False
        elif p["step"] == 1:                     # the whole slot's bytes, own A and both halves of B
            full[r][slot].arrive(expect_tx=A + 2 * HALF)
        elif p["step"] == 2:
            inflight.append(lambda: land(r, "A", i, A))
        else:                                    # this CTA's half of B, multicast to both CTAs
            for t in (0, 1):
                inflight.append(lambda t=t: land(t, f"B{r}", i, HALF))
        p["step"] += 1
        if p["step"] == 4:
            p["i"], p["step"] = i + 1, 0
        return True

    def consumer_step(r):
        c = cons[r]
        i, slot = c["i"], c["i"] % depth
        if c["step"] == 0:
            if not full[r][slot].passed((i // depth) % 2):
                return False
            if any(data[r][slot].get(part) != i for part in ("A", "B0", "B1")):
                raise ProtocolError(f"CTA {r}'s consumer reads slot {slot} for item {i}: {data[r][slot]}")
        else:                                    # release in both CTAs (or only the own one)
            released[r].add(i)
            for t in ((0, 1) if remote_release else (r,)):
                if t == r:
                    remote_arrive(t, i)
                else:
                    inflight.append(lambda t=t: remote_arrive(t, i))
        c["step"] += 1
        if c["step"] == 2:
            c["i"], c["step"] = i + 1, 0
        return True

    while any(p["i"] < items for p in prod) or any(c["i"] < items for c in cons) or inflight:
        actions = [("p", r) for r in (0, 1) if prod[r]["i"] < items] + \
                  [("c", r) for r in (0, 1) if cons[r]["i"] < items] + [("e", k) for k in range(len(inflight))]
        rng.shuffle(actions)
        for kind, x in actions:
            if kind == "e":
                inflight.pop(x)()
                break
            if (producer_step if kind == "p" else consumer_step)(x):
                break
        else:
            raise ProtocolError(f"deadlock: producers at {[p['i'] for p in prod]}, consumers at "
                                f"{[c['i'] for c in cons]}")


@pytest.mark.parametrize("items, depth", [(0, 2), (1, 2), (2, 2), (3, 2), (5, 2), (7, 3), (11, 5), (40, 4)])
def test_cross_cta_ring_protocol_holds_over_interleavings(items, depth):
    for seed in range(150):
        run_cluster_ring(items, depth, seed)


def test_ring_protocol_fails_without_the_remote_release():
    """Each consumer releasing only its own CTA's slot (the plain ring): a producer multicasts into its peer's
    slot while the peer's consumer still reads it."""
    with pytest.raises(ProtocolError, match="before its consumer released"):
        for seed in range(300):
            run_cluster_ring(12, 2, seed, remote_release=False, empty_count=1)
    with pytest.raises(ProtocolError, match="deadlock"):          # doubled count, no remote arrive
        run_cluster_ring(12, 2, 0, remote_release=False, empty_count=2)


# ------------------------------------------------------------------------------------------ refusals
def test_a_box_is_shared_only_when_it_splits_into_two_tma_boxes():
    from aref.backend.cute.cluster import halvable
    from aref.ir import DType
    assert halvable((128, 64), DType.float16) and halvable((16, 64), DType.float16)
    assert not halvable((8, 64), DType.float16) and not halvable((24, 64), DType.float16)
    assert halvable((64,), DType.float16) and halvable((16,), DType.float16)
    assert not halvable((24,), DType.float16) and not halvable((8,), DType.float16)


def _refused(ws, match, line=None, **kw):
    with pytest.raises(BackendError, match=match) as err:
        generate_source(ws, **kw)
    assert err.value.loc.line > 0 and err.value.hint
    if line is not None:
        assert err.value.loc.line == line
    return err.value


def test_refusals_name_the_kernel_line_and_what_to_change():
    gemm = barrier_ir("gemm", "heuristic", "plain", "small")
    e = _refused(gemm, r"clusters of 2 CTAs along one grid axis", line=12, cluster=(2, 2))
    assert e.loc.file.endswith("gemm.py") and "cluster=(2, 1) or (1, 2)" in e.hint
    _refused(gemm, r"clusters of 2 CTAs", line=12, cluster=(4, 1))
    _refused(gemm, r"not persistent", line=12, cluster=(2, 1), persistent=True)
    _refused(gemm, r"raster=4", line=12, cluster=(2, 1), raster=4)
    odd = barrier_ir("gemm", "heuristic", "plain", "small", M=384)
    e = _refused(odd, r"grid \(3, 2\) has 3 CTAs along axis 0, not a multiple", line=12, cluster=(2, 1))
    assert "other axis" in e.hint
    generate_source(odd, cluster=(1, 2))                      # along N the grid is even: A is shared
    _refused(barrier_ir("attention_causal", "heuristic", "auto", "small"), r"no loaded tile is the same",
             line=19, cluster=(2, 1))
    # layer norm at N=24: its weight's box of 48 bytes cannot be split into two 16-byte-granular TMA boxes
    _refused(barrier_ir("rowwise", "heuristic", "auto", "small", N=24), r"cannot be split", cluster=(2, 1))
    ex = load_example("examples/gemm.py")
    sm100 = lower_to(ex.kernel.specialize(**ex.inputs("small")), "barrier", CompileOptions(arch="sm_100a"))
    _refused(sm100, r"sm_90a only, not sm_100a", line=12, cluster=(2, 1))


def test_cli_compile_takes_a_cluster(tmp_path, capsys):
    import json
    import os

    from aref.cli import main
    gemm = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gemm.py")
    assert main(["compile", gemm, "--emit", "cute", "--cluster", "2x1", "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "G2SMulticastOp" in open(out["source_path"]).read()
    # a refused launch fails with the backend's rule at the kernel's line, never a traceback
    code = main(["compile", gemm, "--emit", "cute", "--cluster", "2x1", "--persistent", "--out", str(tmp_path),
                 "--json"])
    captured = capsys.readouterr()
    err = json.loads(captured.out.strip().splitlines()[-1])
    assert code == 1 and "Traceback" not in captured.err
    assert err["ok"] is False and "not persistent" in err["error"] and "persistent=False" in err["hint"]
    assert os.path.samefile(err["file"], gemm) and err["line"] == 12


# ---------------------------------------------------------------------------------------------- GPU
CASES = [("gemm", "small", (2, 1)), ("gemm", "large", (2, 1)), ("gemm", "large", (1, 2)),
         ("gemm", "small", (2, 1), {"K": 0}), ("attention_fwd", "small", (2, 1))]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c[:2])) + "-" + "x".join(map(str, c[2]))
                                             + "".join(f"-{k}={v}" for k, v in (c[3] if len(c) > 3 else {}).items())
                                             for c in CASES])
def test_clustered_kernel_matches_torch(case):
    """A cluster launch computes what the reference computes (twice: the second launch reuses the kernel)."""
    from aref.backend.cute.launch import launch
    from aref.outputs import compare
    example, size, cluster = case[:3]
    ex = load_example(f"examples/{example}.py")
    inputs = ex.inputs(size, **(case[3] if len(case) > 3 else {}))
    cuda = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    tensors = {k: v for k, v in cuda.items() if isinstance(v, torch.Tensor)}
    kernel = ex.kernel.specialize(**inputs)
    for _ in range(2):
        launch(kernel, tensors, cluster=cluster)
    torch.cuda.synchronize()
    report = compare({k: v.cpu() for k, v in tensors.items()}, ex.reference(**inputs), ex.tolerance(inputs))
    assert report.ok, report.to_json()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("cluster", [(2, 1), (1, 2)])
def test_clustered_gram_matches_torch(cluster):
    """One box of A multicast, the other loaded by each CTA alone, through two atoms of the same box."""
    from aref.backend.cute.launch import launch
    inputs = gram_inputs()
    cuda = {k: v.cuda() for k, v in inputs.items()}
    launch(gram.specialize(**inputs), cuda, cluster=cluster)
    torch.cuda.synchronize()
    want = (inputs["A"].float() @ inputs["A"].float().T).half()
    torch.testing.assert_close(cuda["C"].cpu(), want, rtol=2e-3, atol=2e-2)
