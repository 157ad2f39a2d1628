"""Every example × {heuristic, optimal} partition × {its default size, a ragged size} compiles for sm_90a with 0
spill bytes — or is refused by a hardware rule of the resource model (`aref.resources.ResourceError`: the
register file, shared memory), and only in the cells listed in `REFUSED` with the reason. A refusal of any other
class (a template gap of the backend, a partitioner or pipeliner failure) fails the test, and so does a listed
cell that compiles (the list is kept exact).

Each cell is compiled once per session (`cell`) and shared by the test functions: the compile test of every
cell, and the test that each listed refusal is for the resource the list names.
"""
import pytest

from aref.errors import ArefError
from aref.resources import ResourceError
from example_paths import EXAMPLE_NAMES
from tests.backend.test_shapes import RAGGED as OLD_RAGGED

# every kernel of examples/ (rowwise.py defines two)
EXAMPLES = EXAMPLE_NAMES + ["rowwise:softmax"]

# extents that divide no tile of the example's defaults (tiles 128×128×64 unless noted)
RAGGED = {
    **OLD_RAGGED,
    "attention_causal": {"Sq": 200},                     # keys = queries: a ragged last block of both
    "linear_attention": {"S": 200},                      # chunks of 64 tokens
    "mlp": {"M": 200, "H": 200, "N": 136},               # hidden slices of 64
    "gemm_epilogue": {"M": 200, "N": 136, "K": 72},
    "splitk_gemm": {"M": 200, "N": 136, "K": 1000},      # 16 K blocks over 4 slices, the last one short
    "rowwise": {"M": 1000},                              # blocks of 64 rows, 256 rows per CTA
    "rowwise:softmax": {"M": 1000},
    "batched_gemm": {"M": 200, "N": 136, "K": 72},
}
SIZES = ["default", "ragged"]
PARTITIONS = ["heuristic", "optimal"]

# (example, partition, size) -> the resource the resource model refuses the cell for. The solver counts the
# shared memory of its hand-offs (each channel's slots over the pipeline steps it spans, and the epilogue's
# post-loop hand-offs), and where no partition of the unsplit tile fits (dual_gemm: two 128×128 fp32
# accumulators, a 64 KB hand-off after the loop beside its 4-stage ring) it solves the row-split tile, as the
# heuristic's cooperative consumers run it. Every cell compiles today; a hardware refusal that appears must be
# listed here with its resource.
REFUSED: dict[tuple[str, str, str], str] = {}

CELLS = [(e, p, s) for e in EXAMPLES for p in PARTITIONS for s in SIZES]


def _path(example: str) -> str:
    name, _, kernel = example.partition(":")
    return f"examples/{name}.py" + (f":{kernel}" if kernel else "")


def _compile(example: str, partition: str, size: str, cache_dir):
    """(Barrier IR, CompileResult) of one cell, or the ArefError that refused it."""
    from aref.backend.cute import compile_barrier
    from aref.compiler import CompileOptions
    from aref.search import lower_to
    from aref.runtime.harness import load_example
    ex = load_example(_path(example))
    overrides = RAGGED[example] if size == "ragged" else {}
    try:
        kernel = ex.kernel.specialize(**ex.inputs("small", **overrides))
        # the command line's 60 s: attention_bwd's proof takes ~20 s on an idle core, and a solve cut short
        # by load keeps another schedule of the same II (one that spills 16 bytes: see the stop note)
        ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_90a", partition=partition, solver_time_limit=60))
        return ws, compile_barrier(ws, cache_dir=cache_dir)
    except ArefError as err:
        return err


_CELLS: dict = {}


@pytest.fixture(scope="session")
def cell(backend_cache):
    """`cell(example, partition, size)`: `_compile`'s outcome, once per session."""
    def get(example, partition, size):
        key = (example, partition, size)
        if key not in _CELLS:
            _CELLS[key] = _compile(example, partition, size, backend_cache)
        return _CELLS[key]
    return get


def test_ragged_sizes_divide_no_tile():
    """Every example has a ragged size, and it is ragged: some extent is not a multiple of the tile along it."""
    assert set(RAGGED) == set(EXAMPLES)
    from aref.runtime.harness import load_example
    for example in EXAMPLES:
        ex = load_example(_path(example))
        small, ragged = ex.inputs("small"), ex.inputs("small", **RAGGED[example])
        changed = [k for k, v in ragged.items() if hasattr(v, "shape") and tuple(v.shape) != tuple(small[k].shape)]
        assert changed, example
        assert any(d % 64 for k in changed for d in ragged[k].shape), example     # tiles are 64 or 128 wide


@pytest.mark.parametrize("example, partition, size", CELLS, ids=["-".join(c) for c in CELLS])
def test_example_compiles_without_spills(cell, example, partition, size):
    got = cell(example, partition, size)
    if isinstance(got, ArefError):
        assert isinstance(got, ResourceError), f"refused by a non-hardware rule: {got.render()}"
        assert (example, partition, size) in REFUSED, f"refused, and not listed in REFUSED: {got.render()}"
        # a listed cell is refused for the resource the list gives, naming the kernel's line (an error a user
        # can act on: lower a ring depth, use smaller tiles or the heuristic partition)
        assert REFUSED[example, partition, size] in str(got) and got.loc is not None
        return
    assert (example, partition, size) not in REFUSED, "listed in REFUSED but compiles: drop it from the list"
    ws, result = got
    assert result.arch == "sm_90a"
    assert result.spill_bytes == 0, result.ptxas_log
    assert result.instructions["mbarrier.init"] == 2 * sum(ch.depth for ch in ws.channels)
    assert 0 < result.registers <= 255


def test_optimal_partition_splits_rows_where_no_unsplit_partition_fits(cell):
    """dual_gemm's two 128×128 fp32 accumulators fit no partition of the unsplit tile (one group: over the
    register file; two: a 64 KB hand-off after the loop beside the 192 KB ring), so the optimal partitioner
    solves the row-split tile: each consumer replica computes both products on its 64 rows, no hand-off."""
    got = cell("dual_gemm", "optimal", "default")
    assert not isinstance(got, ArefError), got.render()
    ws, result = got
    assert [gp.group.role for gp in ws.groups] == ["producer", "consumer", "consumer"]
    assert not any(ch.region == "post" for ch in ws.channels)           # no accumulator handed over
    assert any("rows split over 2 replicas: no partition of the unsplit tile fits the SM (" in n
               for n in ws.notes), ws.notes
    assert result.spill_bytes == 0


def test_guard_keeps_a_fitting_program_where_no_solver_partition_fits(monkeypatch):
    """With the guard on (the command line's default), `--partition optimal` never refuses a kernel the
    heuristic partitioner compiles: where the solver's space holds no fitting partition (here: without its
    row-split fallback, dual_gemm's hand-off does not fit), the heuristic's program is kept and says why."""
    import partition.optimal
    from aref.compiler import CompileOptions
    from aref.search import lower_to
    from aref.runtime.harness import load_example
    monkeypatch.setattr(partition.optimal, "_row_split_fallback", lambda *a: None)
    ex = load_example(_path("dual_gemm"))
    kernel = ex.kernel.specialize(**ex.inputs("small"))
    ws = lower_to(kernel, "barrier", CompileOptions(arch="sm_90a", partition="optimal", solver_time_limit=20,
                                                   timing_guard=True))
    assert ws.resource_error is None
    assert ws.fallback.startswith("no partition of the solver's space fits, the optimal partitioner keeps the "
                                  "heuristic's program; its own was refused for resources")
