"""`aref compare` (issue 12): the JSON document on every example and both architectures, the verdict, the
pictures, model fidelity (the lowered optimal program reaches the solver's II in the timing model), and a
command line that answers --help without importing torch, the CuTe DSL or OR-tools."""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from aref.cli import main
from aref.cli.compare import STEADY_ITERATIONS, STEADY_SEEDS
from partition.optimal import CYCLE_QUANTUM
from example_paths import EXAMPLE_NAMES, ROOT, example_path, source_line

ARCHS = ("sm_90a", "sm_100a")
# The model-fidelity and optimal-vs-heuristic claims hold for these examples (bench/fidelity.py); the examples
# added for issue 8 get the JSON contract and join the claims once their figures are measured and any gap is
# listed in KNOWN_GAPS with its cause.
MEASURED = ["gemm", "dual_gemm", "gemm_reduce", "attention_fwd", "attention_bwd", "attention_causal", "rowwise",
            "mlp", "linear_attention", "gemm_epilogue", "splitk_gemm", "batched_gemm"]
# GEMM-shaped examples keep their accumulator in registers on Blackwell too (no tensor-memory channel)
NO_TMEM = ("gemm", "dual_gemm", "gemm_reduce", "gemm_epilogue", "splitk_gemm", "batched_gemm", "rowwise")
FIDELITY = 0.03
# Where the lowered optimal program does not yet reach the solver's II, and why (bench/fidelity.py prints the
# figures: the steady state, `aref.cli.compare.steady_state`, a loop of at least STEADY_ITERATIONS iterations,
# the mean over STEADY_SEEDS copy-latency seeds). Each entry must still be outside 3%: when a fix closes a gap,
# this list has to shrink with it.
KNOWN_GAPS: dict = {}
# ... the most a known gap may grow to (measured figure plus a margin): closing a gap in part stays closed
GAP_AT_MOST: dict = {}
# ... and where compare's 60-second solve finds the II without its proof, and why (then the gap may also close)
# (none now: attention_bwd on sm_90a, 400 s before, is proven in about 16 s since the search probes the found II
# minus one first and leaves the IIs below a schedule unexplained)
NOT_PROVEN: dict = {}
# ... and where the heuristic's program is faster in the timing model (by more than its jitter), and why. The
# optimal partitioner's timing guard (`aref.search._never_slower`, on in the command line) keeps the
# heuristic's program wherever the timing model finds it faster, so none is left.
OPTIMAL_SLOWER: dict = {}
JITTER = 0.005

_RESULTS: dict = {}


def compare(capsys, name, arch, *extra):
    key = (name, arch, extra)
    if key not in _RESULTS:
        code = main(["compare", example_path(name), "--arch", arch, "--json", *extra])
        out, err = capsys.readouterr()
        assert code == 0, out + err
        _RESULTS[key] = json.loads(out)
    return _RESULTS[key]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_compare_json_on_every_example(capsys, name, arch):
    out = compare(capsys, name, arch)
    assert out["kernel"] and out["arch"] == arch and out["lower_bound"] > 0
    for mode in ("heuristic", "optimal"):
        e = out[mode]
        assert {"ii", "cycles_per_iter", "tc_utilization", "warp_groups", "groups", "stages", "channels",
                "smem_bytes", "tmem_columns", "utilization", "tflops", "solve_seconds", "refused"} <= set(e), e
        assert e["warp_groups"] == len(e["groups"]) > 1 and e["stages"] >= 1
        assert all({"name", "role", "warps", "regs"} <= set(g) for g in e["groups"])
        assert all(c["depth"] >= 1 and c["producer"] for c in e["channels"])
        assert set(e["utilization"]) >= {"tc", "mufu", "fma", "tma"}
        assert all(0.0 <= u <= 1.0 for u in e["utilization"].values())
        assert (e["tflops"] > 0) == (e["utilization"]["tc"] > 0) and e["cycles_per_iter"] > 0 and e["smem_bytes"] > 0
    assert out["optimal"]["ii"] >= out["lower_bound"]
    assert out["optimal"]["proven_optimal"] is True or (name, arch) in NOT_PROVEN
    if arch == "sm_100a":
        assert out["optimal"]["tmem_columns"] > 0 or name in NO_TMEM
    verdict = out["verdict"]
    assert verdict and "\n" not in verdict and ("faster" in verdict or "both partitions" in verdict)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", MEASURED)
def test_optimal_never_slower_than_heuristic(capsys, name, arch):
    out = compare(capsys, name, arch)
    h, o = out["heuristic"]["cycles_per_iter"], out["optimal"]["cycles_per_iter"]
    assert out["optimal"]["refused"] is None or out["heuristic"]["refused"], out["optimal"]["refused"]
    if out["heuristic"]["refused"]:
        # a heuristic program over the SM's resources is no baseline (the backend refuses it); the verdict says so
        assert "heuristic program does not fit" in out["verdict"]
        return
    if (name, arch) in OPTIMAL_SLOWER:
        assert o > h * (1 + JITTER), f"{name} on {arch} is no longer slower: remove it from OPTIMAL_SLOWER"
        if o > h * (1 + FIDELITY):
            assert "heuristic is" in out["verdict"] and "faster" in out["verdict"]
    else:
        # equal up to the timing model's jitter, or within one of the solver's cost quanta (its costs are
        # rounded up to CYCLE_QUANTUM cycles: dual_gemm on sm_90a runs at its II of 1344, the heuristic at 1334)
        assert o <= h * (1 + JITTER) or o <= min(h + CYCLE_QUANTUM, out["optimal"]["ii"] * (1 + JITTER)), (h, o)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", MEASURED)
def test_model_fidelity(capsys, name, arch):
    """The simulated steady state of the lowered optimal program is within 3% of the solver's II."""
    out = compare(capsys, name, arch)
    fid = out["fidelity"]
    # the figure is the steady state of the same lowered program: its loop run long (the example's own may be
    # a few iterations of pipeline fill) and the copy latencies drawn from several seeds
    assert fid["ii"] == out["optimal"]["ii"] and fid["example_cycles_per_iter"] == out["optimal"]["cycles_per_iter"]
    assert fid["iterations"] >= STEADY_ITERATIONS and fid["seeds"] == len(fid["per_seed"]) == STEADY_SEEDS > 1
    assert fid["cycles_per_iter"] == round(sum(fid["per_seed"]) / STEADY_SEEDS, 1)
    assert f"{fid['iterations']} loop iterations" in fid["measures"]
    if (name, arch) in KNOWN_GAPS:
        assert not fid["within"] or (name, arch) in NOT_PROVEN, f"{name} on {arch} now holds: remove it from KNOWN_GAPS"
        assert abs(fid["gap"]) <= GAP_AT_MOST.get((name, arch), float("inf")), fid
    else:
        assert fid["within"] and abs(fid["gap"]) <= FIDELITY, fid


def test_timing_guard_is_said(capsys):
    """Where the optimal partitioner keeps the heuristic's program (faster in the timing model), the JSON and
    the verdict say so; where it keeps its own, nothing is said."""
    out = compare(capsys, "gemm_reduce", "sm_100a")
    assert out["optimal"]["fallback"] and "heuristic's program" in out["optimal"]["fallback"]
    assert "timing guard" in out["verdict"]
    assert out["optimal"]["cycles_per_iter"] == out["heuristic"]["cycles_per_iter"]
    # where neither program fits the SM, nothing is kept and the verdict says what does not fit: attention_fwd
    # at the large size with the Hopper-sized K/V block its example picks for sm_90a (on sm_100a it picks 64
    # keys, which fit a B200: below)
    big = compare(capsys, "attention_fwd", "sm_100a", "--set", "BN=128")
    assert big["optimal"]["refused"] and big["heuristic"]["refused"] and big["optimal"]["fallback"] is None
    assert "does not fit (shared memory" in big["verdict"]
    # on Blackwell the guard also lowers the occupancy-free graph's schedule and keeps it where it is faster
    fits = compare(capsys, "attention_fwd", "sm_100a")
    assert fits["optimal"]["refused"] is None and fits["heuristic"]["refused"] is None
    assert fits["optimal"]["smem_bytes"] <= 232448 and "does not fit" not in fits["verdict"]
    # (linear_attention in chunks of 32 tokens kept it, 1420 cycles per iteration against the stream graph's
    # 1472, until the state was handed over right after its MMA: the stream graph's program runs at ~1133 and
    # is kept; what is kept is never slower than the occupancy-free graph's program)
    from aref.cli.compare import measure
    from aref.compiler import CompileOptions
    from aref.runtime.harness import load_example
    free = compare(capsys, "linear_attention", "sm_100a", "--set", "BC=32")
    assert free["optimal"]["cycles_per_iter"] < free["heuristic"]["cycles_per_iter"]
    ex = load_example(example_path("linear_attention"))
    inputs = ex.inputs("large", "sm_100a", BC=32)
    other = measure(ex.kernel.specialize(**inputs), inputs,
                    CompileOptions(arch="sm_100a", partition="optimal", solver_occupancy_free=True))[0]
    assert free["optimal"]["cycles_per_iter"] <= other["cycles_per_iter"]
    # on Hopper the guard also lowers the schedule of the graph whose stores hold their group until the copy
    # ends and keeps the faster program, saying so where that is the waited stores' (attention_bwd: 1788 cycles
    # per iteration against the fire-and-forget schedule's 1793, until the graph stated the Q/dO item's round
    # trip from any reader to any reader; at the same II the solver's schedules now lower to 1798 and 1957)
    waited = compare(capsys, "attention_bwd", "sm_90a")
    ex = load_example(example_path("attention_bwd"))
    inputs = ex.inputs("large", "sm_90a")
    kernel = ex.kernel.specialize(**inputs)
    own, alt = (measure(kernel, inputs, CompileOptions(arch="sm_90a", partition="optimal", timing_guard=False,
                                                       solver_detached_stores=held))[0]["cycles_per_iter"]
                for held in (None, False))
    assert waited["optimal"]["cycles_per_iter"] == min(own, alt)
    assert (alt < own) == bool(waited["optimal"]["fallback"] and "waited stores" in waited["optimal"]["fallback"])
    assert (alt < own) == ("timing guard" in waited["verdict"])
    plain = compare(capsys, "attention_causal", "sm_100a")
    assert plain["optimal"]["fallback"] is None and "timing guard" not in plain["verdict"]


def test_trip_count_and_measurement_without_a_gpu(capsys):
    import torch

    from aref.cli.compare import inputs_trip_count
    from aref.runtime.harness import load_example
    ex = load_example(example_path("attention_fwd"))
    inputs = ex.inputs("large")
    assert inputs_trip_count(ex.kernel.specialize(**inputs), inputs) == inputs["K"].shape[1] // 128
    if not torch.cuda.is_available():
        assert compare(capsys, "gemm", "sm_90a")["measured"] is None     # the model's figures stand alone


def test_example_inputs_follow_the_target():
    """An example_inputs with an `arch` parameter is told the command's target (attention_fwd's K/V block fits
    a B200 block at 64 keys where its head dim is 128); one without it, or `tune`, gets the defaults."""
    import argparse

    from aref.cli.common import example_and_inputs
    from aref.runtime.harness import load_example
    ex = load_example(example_path("attention_fwd"))
    assert ex.takes_arch and "BN" not in ex.inputs("large") and "BN" not in ex.inputs("large", "sm_90a")
    assert ex.inputs("large", "sm_100a")["BN"] == 64 and ex.inputs("small", "sm_100a")["BN"] == 128
    assert ex.inputs("large", "sm_100a", BN=128)["BN"] == 128            # --set wins
    args = argparse.Namespace(target=example_path("attention_fwd"), size="large", overrides=[], arch="sm_100a")
    assert example_and_inputs(args)[1]["BN"] == 64 and "BN" not in example_and_inputs(args, for_arch=False)[1]
    gemm = load_example(example_path("gemm"))
    assert not gemm.takes_arch and set(gemm.inputs("small", "sm_100a")) == set(gemm.inputs("small"))


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_measured_tflops_on_a_gpu(capsys):
    out = compare(capsys, "gemm", "sm_90a")
    assert out["measured"] and out["measured"]["heuristic"]["tflops"] > 0


def test_verdict_names_the_cause(capsys):
    out = compare(capsys, "attention_bwd", "sm_100a")
    assert out["speedup"] > 1.2
    assert out["verdict"].startswith(f"optimal is {out['speedup']:.2f}× faster")
    assert "tensor core idle" in out["verdict"] and "while" in out["verdict"]


def test_pictures_are_valid_images(capsys, tmp_path):
    from PIL import Image
    gantt, graph = tmp_path / "g.png", tmp_path / "d.svg"
    out = compare(capsys, "attention_fwd", "sm_90a", "--gantt", str(gantt), "--graph", str(graph))
    assert out["pictures"] == {"gantt": str(gantt), "graph": str(graph), "dot": str(tmp_path / "d.dot")}
    with Image.open(gantt) as img:
        assert img.format == "PNG" and img.width > 800 and img.height > 500
        assert len(img.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 8      # not a blank canvas
    root = ET.parse(graph).getroot()
    assert root.tag.endswith("svg") and os.path.getsize(graph) > 10_000
    svg = graph.read_text()
    for node in ("mma", "exp", "load"):                 # the solver's nodes are labelled
        assert node in svg
    dot = (tmp_path / "d.dot").read_text()
    assert dot.startswith('digraph "attention_fwd"') and "->" in dot and "fillcolor" in dot
    # the graph names the warp groups as the table does (producer / consumer0 / consumer1, not the solver's
    # producer0 / consumer1 / consumer2)
    labels = set(re.findall(r'subgraph "cluster_[^"]+" \{ label="([^"]+)"', dot))
    assert labels == {g["name"] for g in out["optimal"]["groups"]} == {"producer", "consumer0", "consumer1"}


def test_the_gantt_says_which_mma_which_group_and_what_a_wait_waits_on():
    """On the tensor-core lane, Q·Kᵀ and P·V are told apart by their source and each bar names its issuing
    consumer; every blocked bar says what it waits on."""
    from aref.cli.compare import measure
    from aref.compiler import CompileOptions
    from aref.runtime.harness import load_example
    from aref.viz.gantt import Panel, UNIT_LANES, mma_label, panel_bars, steady_window, wait_label
    path = example_path("attention_fwd")
    assert mma_label(path, source_line(path, "s = aref.mma(q, k.T)")) == "s=q·kᵀ"
    assert mma_label(path, source_line(path, "o = aref.mma(p.to(dtype), v,")) == "o=p·v"
    assert wait_label("mbarrier_wait %kc.full[%3] parity %4") == "waits kc"
    assert wait_label("mbarrier_wait %vc.empty[%3] parity %4") == "waits free vc slot"
    assert wait_label("named_barrier_sync id=2 threads=256", {2: "tensor-core turn of consumer1"}) == "waits TC turn"
    ex = load_example(path)
    inputs = ex.inputs("large", "sm_90a")
    _, ws, report = measure(ex.kernel.specialize(**inputs), inputs, CompileOptions(arch="sm_90a", timing_guard=True))
    panel = Panel("heuristic", report, [(g.group.name, g.group.name) for g in ws.groups], None,
                  {b.id: b.purpose for b in ws.named_barriers})
    t0, t1, _ = steady_window(report)
    bars = panel_bars(panel, t0, t1, UNIT_LANES)
    tc = {bar.labels[1] for bar in bars if bar.lane == "unit:tc"}
    assert {"s=q·kᵀ consumer0", "s=q·kᵀ consumer1", "o=p·v consumer0", "o=p·v consumer1"} <= tc, tc
    waits = [bar for bar in bars if bar.kind == "wait"]
    assert waits and all(bar.labels and bar.labels[0].startswith("waits") for bar in waits)
    assert {"waits its MMAs", "waits free vc slot"} <= {bar.labels[0] for bar in waits if bar.width > 200}


def test_compare_table_and_text(capsys, tmp_path):
    code = main(["compare", example_path("gemm"), "--arch", "sm_90a", "--size", "small", "--gantt",
                 str(tmp_path / "g.svg"), "--text-gantt"])
    out, _ = capsys.readouterr()
    assert code == 0
    for row in ("II (cycles)", "simulated cycles / iteration", "stages", "warp groups", "channels (depth)",
                "shared memory", "tensor memory", "tensor core busy", "MUFU busy", "TFLOP/s", "solve / lowering"):
        assert row in out, row
    assert "verdict:" in out and "wrote gantt" in out
    assert ET.parse(tmp_path / "g.svg").getroot().tag.endswith("svg")


def _imports_after(argv):
    code = ("import sys\nfrom aref.cli import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'cutlass', 'ortools') if m in sys.modules]\nprint('HEAVY=' + ','.join(heavy))"
            % (argv,))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0, proc.stderr
    return next(line for line in proc.stdout.splitlines() if line.startswith("HEAVY="))[len("HEAVY="):]


@pytest.mark.parametrize("argv", [["--help"], ["compare", "--help"], ["run", "--help"], ["solve", "--help"],
                                  ["compile", "--help"]])
def test_help_imports_neither_torch_nor_cutlass(argv):
    assert _imports_after(argv) == ""


LOOPLESS = '''
import torch, aref
from aref import aref_kernel

@aref_kernel(grid=lambda X, BM, **_: (-(-X.shape[0] // BM),))
def softmax_rows(X, Y, *, BM: int = 64):
    x = aref.load(X, (aref.program_id(0), 0), (BM, X.shape[1])).to(aref.float32)
    p = aref.exp(x - aref.rowmax(x)[:, None])
    aref.store(Y, (aref.program_id(0), 0), (p / aref.rowsum(p)[:, None]).to(Y.dtype))

def example_inputs(size="small", **kw):
    g = torch.Generator().manual_seed(0)
    return {"X": torch.randn(256, 128, generator=g).half(), "Y": torch.zeros(256, 128).half(), **kw}

def reference(X, Y, **_):
    return {"Y": torch.softmax(X.float(), -1).half()}
'''


def test_compare_on_a_kernel_without_a_loop(tmp_path, capsys):
    """A kernel with no aref.range loop has nothing for the solver to schedule: compare shows the heuristic's
    partition (its cycles per CTA, not per iteration), the optimal column says why it is empty, and the
    verdict says there is one partition (it used to stop with the solver's refusal)."""
    path = tmp_path / "softmax_rows.py"
    path.write_text(LOOPLESS)
    assert main(["compare", str(path), "--arch", "sm_90a", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "no aref.range loop" in out["optimal"]["error"] and out["verdict"].startswith("one partition only")
    assert out["heuristic"]["stages"] == 0 and out["heuristic"]["total_cycles"] > 0
    assert main(["compare", str(path), "--arch", "sm_100a"]) == 0
    text = capsys.readouterr().out
    assert "no loop:" in text and "one partition only" in text
