"""`aref tune`'s and `aref compile`'s tables at 80 columns: every line fits, the columns a user needs are
there, reasons are whole (wrapped, never cut), and the compile table says what matters on the target."""
import pytest
from rich.console import Console

from aref.cli.tables import compile_table, tune_table

WIDTH = 80


def render(renderable) -> list[str]:
    console = Console(width=WIDTH, record=True, color_system=None, force_terminal=False)
    console.print(renderable)
    return console.export_text().splitlines()


def words(lines: list[str]) -> str:
    """The text with line breaks and indentation folded away (what a reader reads)."""
    return " ".join(" ".join(lines).split())


@pytest.fixture(scope="module")
def gemm_tuning(tmp_path_factory):
    """`aref tune examples/gemm.py`'s ranking (the example's whole space, size large, the timing model)."""
    import torch

    from aref.runtime.harness import load_example
    from aref.tune import TuneOptions
    ex = load_example("examples/gemm.py")
    with torch.device("meta"):
        tensors = {k: v for k, v in ex.inputs("large").items() if isinstance(v, torch.Tensor)}
    opts = TuneOptions(arch="sm_90a", use_gpu=False, cache_dir=tmp_path_factory.mktemp("tune"))
    return ex.kernel.tune(**tensors, options=opts)


def test_the_tune_table_fits_80_columns_and_keeps_every_column(gemm_tuning):
    lines = render(tune_table(gemm_tuning))
    assert max(map(len, lines)) <= WIDTH
    header = next(line for line in lines if "configuration" in line)
    for col in ("#", "configuration", "pred. ms", "TFLOP/s", "TC", "status"):
        assert col in header, header
    assert "meas. ms" not in header and "no GPU measurement" in words(lines)  # nothing measured: said once
    text = words(lines)
    ranked = [c for c in gemm_tuning.candidates if c.rank is not None]
    pruned = [c for c in gemm_tuning.candidates if c.status == "pruned"]
    assert ranked and pruned
    starts = [i for i, line in enumerate(lines) if line.split()[:1] and line.split()[0].isdigit()]
    for c in ranked:                     # each row: its rank, the whole label (folded onto at most 3 lines), ok
        i = next(i for i in starts if lines[i].split()[0] == str(c.rank))
        block = lines[i:next((j for j in starts if j > i), i + 4)][:3]
        assert set(c.config.label().split()) <= set(" ".join(block).split()) and "ok" in lines[i], block
    for c in pruned:                                   # the whole reason, once per group, and the label
        reason = c.reason.split(": ", 1)[1] if c.reason.startswith(f"{c.stage}: ") else c.reason
        assert " ".join(reason.split()) in text and c.config.label() in text
    # a pruned candidate takes its label and reason's lines, not one table row per wrapped word
    assert len(lines) < len(ranked) * 3 + len(pruned) * 6 + 12


def test_a_measured_tuning_shows_the_measured_times_and_why_a_candidate_failed(gemm_tuning):
    from dataclasses import replace

    from aref.tune.gpu import Timing
    ranked = [c for c in gemm_tuning.candidates if c.rank is not None]
    first = replace(ranked[0], measured=Timing(0.2345, 0, 0, 5))
    failed = replace(ranked[1], status="failed", stage="gpu", reason="output differs from reference() by 0.5 "
                     "(tolerance 0.01 + 0.01·|ref|) in C", rank=None)
    result = replace(gemm_tuning, method="gpu", device="NVIDIA H100", candidates=[first, failed] + ranked[2:])
    lines = render(tune_table(result))
    assert max(map(len, lines)) <= WIDTH
    header = next(line for line in lines if "configuration" in line)
    assert "meas. ms" in header and "status" in header
    assert "0.2345" in next(line for line in lines if line.split()[:1] == ["1"])
    text = words(lines)
    assert "failed (1):" in text and "gpu: output differs from reference() by 0.5 (tolerance 0.01 + 0.01·|ref|) " \
                                     "in C" in text
    assert "measured on NVIDIA H100" in text


COUNTS = {"wgmma.mma_async": 48, "wgmma.commit_group": 8, "cp.async.bulk.tensor": 6, "mbarrier.try_wait.parity": 14,
          "setmaxnreg": 3, "bar.sync": 0, "ldmatrix": 0, "tcgen05.mma": 0, "tcgen05.ld": 0, "tcgen05.alloc": 0,
          "ex2.approx": 260}


def _data(arch: str, cached: bool, counts: dict) -> dict:
    out = "/tmp/aref_out/attention_fwd.sm_90a.heuristic"
    return {"arch": arch, "source_path": f"{out}/attention_fwd_cute4_8_1_c5060ef64ed32562c75e.py",
            "ptx_path": f"{out}/attention_fwd_cute4_8_1_c5060ef64ed32562c75e.{arch}.ptx",
            "cubin_path": f"{out}/attention_fwd_cute4_8_1_c5060ef64ed32562c75e.{arch}.cubin", "registers": 168,
            "spill_bytes": 0, "instructions": counts, "compile_seconds": 4.438,
            "register_budgets": {"producer": 24, "consumer0": 240, "consumer1": 240},
            "cache_key": "cute4_8_1_c5060ef64ed32562c75e", "cached": cached, "resource_source": "ptxas"}


def test_the_compile_table_fits_and_says_what_matters_on_hopper():
    lines = render(compile_table("attention_fwd", "heuristic", _data("sm_90a", True, COUNTS)))
    assert max(map(len, lines)) <= WIDTH
    text = words(lines)
    assert "cached: built in 4.4 s by an earlier run" in text
    assert "producer 24 · consumer0 240 · consumer1 240" in text and "setmaxnreg" in text
    assert "168 registers per thread at launch, 0 bytes spilled" in text
    assert "tcgen05" not in text                                # Blackwell's counters on a Hopper kernel
    assert "wgmma.mma_async 48" in text and "ex2.approx 260" in text
    assert "ldmatrix" not in text and "bar.sync" not in text    # zero counts left out (--json has them)


def test_the_compile_table_on_blackwell_leaves_out_wgmma_and_a_fresh_compile_says_its_time():
    counts = {"tcgen05.mma": 4, "tcgen05.ld": 4, "wgmma.mma_async": 0, "wgmma.fence": 0, "cp.async.bulk.tensor": 4}
    lines = render(compile_table("gemm", "optimal", _data("sm_100a", False, counts)))
    assert max(map(len, lines)) <= WIDTH
    text = words(lines)
    assert "wgmma" not in text and "tcgen05.mma 4" in text and "cached" not in text
    assert "compile 4.4 s" in text and "gemm for sm_100a (optimal partition)" in text
