"""The column-separability rule of Blackwell epilogue subtiling (aref.lower.subtile_sm100): which post-loop blocks
run over column chunks, and which stay whole (and so are refused by the register rule when they do not fit)."""
import re

import pytest
import torch

import aref
from aref import aref_kernel
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.interp.tile import run_kernel
from aref.ir import OpKind
from aref.resources.registers import ResourceError
from aref.sim import simulate
from aref.lower.subtile_sm100 import _columns


@aref_kernel
def bias_colmax(A, B, C, MX, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """A (BN,) bias broadcast against the tile (numpy-style, no [None, :]), a (BM, 1) row term, and the column
    max stored as a (BN,) vector: all column-separable."""
    pm, pn = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ch = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ch.put(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (pn, k), (BN, BK)))
        a, b = ch.get()
        acc = aref.mma(a, b.T, acc)
        ch.consumed()
    bias = (pn * BN + aref.arange(BN)).to(aref.float32) * 0.01
    rows = (pm * BM + aref.arange(BM)).to(aref.float32)
    y = acc * 2.0 + bias + rows[:, None] * 0.001
    aref.store(C, (pm, pn), y.to(C.dtype))
    aref.store(MX, (pm, pn), y.max(0))


@aref_kernel
def row_sums(A, B, C, RS, CS, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """The sum of each row across the columns (each chunk's partial, added after the last chunk) beside the
    column sums (each chunk's own)."""
    pm, pn = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ch = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ch.put(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (pn, k), (BN, BK)))
        a, b = ch.get()
        acc = aref.mma(a, b.T, acc)
        ch.consumed()
    rows = pm * BM + aref.arange(BM)
    cols = pn * BN + aref.arange(BN)
    y = aref.where((rows[:, None] * 31 + cols[None, :] * 17) % 7 != 0, acc * (7.0 / 6.0), 0.0)
    aref.store(C, (pm, pn), y.to(C.dtype))
    aref.store(RS, (pm * 2 + pn,), y.sum(1))
    aref.store(CS, (pm, pn), y.sum(0))


@aref_kernel
def row_normalized(A, B, C, CS, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """Rows divided by their sum across the columns: every chunk would need the sum before the last chunk."""
    pm, pn = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ch = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ch.put(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (pn, k), (BN, BK)))
        a, b = ch.get()
        acc = aref.mma(a, b.T, acc)
        ch.consumed()
    rows = pm * BM + aref.arange(BM)
    cols = pn * BN + aref.arange(BN)
    y = aref.where((rows[:, None] * 31 + cols[None, :] * 17) % 7 != 0, aref.exp(acc), 0.0)
    aref.store(C, (pm, pn), (y / y.sum(1)[:, None]).to(C.dtype))
    aref.store(CS, (pm, pn), y.sum(0))


@aref_kernel
def slot_scales(A, B, SC, SR, C, CS, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """A (1, BN) column scale and a (BM, 1) row scale loaded after the loop (shared-memory slots): the chunks
    read the scale row's columns at their offset, the row scale whole."""
    pm, pn = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ch = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ch.put(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (pn, k), (BN, BK)))
        a, b = ch.get()
        acc = aref.mma(a, b.T, acc)
        ch.consumed()
    sc = aref.load(SC, (0, pn), (1, BN))
    sr = aref.load(SR, (pm, 0), (BM, 1))
    rows = pm * BM + aref.arange(BM)
    cols = pn * BN + aref.arange(BN)
    y = aref.where((rows[:, None] * 31 + cols[None, :] * 17) % 7 != 0, acc * sc * sr, 0.0)
    aref.store(C, (pm, pn), y.to(C.dtype))
    aref.store(CS, (pm, pn), y.sum(0))


@aref_kernel
def pre_loop_columns(A, B, C, CS, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """The (1, BN) index row made before the loop: held in registers whole, not sliced per chunk."""
    pm, pn = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ch = aref.channel(depth=2)
    rows = pm * BM + aref.arange(BM)
    cols = ((pn * BN + aref.arange(BN)) * 17)[None, :]
    for k in aref.range(A.shape[1] // BK):
        ch.put(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (pn, k), (BN, BK)))
        a, b = ch.get()
        acc = aref.mma(a, b.T, acc)
        ch.consumed()
    y = aref.where((rows[:, None] * 31 + cols) % 7 != 0, acc * (7.0 / 6.0), 0.0)
    aref.store(C, (pm, pn), y.to(C.dtype))
    aref.store(CS, (pm, pn), y.sum(0))


@aref_kernel
def both_axes(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """One index vector read along the rows and along the columns (a triangular mask)."""
    pm, pn = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ch = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ch.put(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (pn, k), (BN, BK)))
        a, b = ch.get()
        acc = aref.mma(a, b.T, acc)
        ch.consumed()
    r = aref.arange(BM)
    y = aref.where(r[:, None] >= r[None, :], acc * 3.0, acc * 0.5)
    aref.store(C, (pm, pn), y.to(C.dtype))


@aref_kernel
def beta_c(A, B, Cin, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """cuBLAS's alpha·A·Bᵀ + beta·C at 128 × 128: the (BM, BN) C tile loaded after the loop is a shared-memory
    slot, read in column chunks beside the accumulator's (whole, its 128 fp32 registers and the
    accumulator's 128 exceed a warp group's 256)."""
    pm, pn = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    for k in aref.range(A.shape[1] // BK):
        acc = aref.mma(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (pn, k), (BN, BK)).T, acc)
    c0 = aref.load(Cin, (pm, pn), (BM, BN)).to(aref.float32)
    aref.store(C, (pm, pn), acc * 0.5 + c0 * 2.0)


def _args(**outs):
    g = torch.Generator().manual_seed(0)
    return dict(A=(torch.randn(256, 128, generator=g) * 0.3).half(), B=(torch.randn(256, 128, generator=g) * 0.3).half(),
                C=torch.zeros(256, 256, dtype=torch.float16), **outs)


def _epilogue(ws):
    return next(gp for gp in ws.groups if gp.group.warps == 4 and any(op.kind is OpKind.STORE for op in gp.post.ops))


def test_column_vectors_and_row_reductions_are_separable():
    """(C,) vectors (broadcast, or the result of a reduction over rows) are column values; the (R,) row index
    vector and its (R, 1) column are not, and stay whole in the chunked block."""
    args = _args(MX=torch.zeros(2, 256))
    ws = lower_to(bias_colmax.specialize(**args), "partitioned", CompileOptions(arch="sm_100a"))
    ops = _epilogue(ws).post.ops
    shape, cols, after = _columns(ops)
    assert shape == (128, 128) and not after                          # nothing waits for the last chunk
    vectors = {op.attrs.axis: op.operands[0] for op in ops if op.kind is OpKind.EXPAND_DIMS}
    assert id(vectors[1]) not in cols                                  # rows[:, None]: a row vector
    reduced = next(op.result for op in ops if op.kind is OpKind.REDUCE)
    bias = next(op.operands[1] for op in ops if op.kind is OpKind.BINARY
                and getattr(op.operands[0].type, "shape", None) == (128, 128)
                and len(getattr(op.operands[1].type, "shape", ())) == 1)
    assert id(reduced) in cols and id(bias) in cols


def test_chunked_column_max_matches_the_interpreter():
    """The subtiled block (per-chunk aranges, column maxima and (C/k,) boxes) computes what the program does."""
    args = _args(MX=torch.zeros(2, 256))
    tile_ir = bias_colmax.specialize(**args)
    ws = lower_to(tile_ir, "barrier", CompileOptions(arch="sm_100a"))
    ops = _epilogue(ws).post.ops
    aranges = [op.attrs.n for op in ops if op.kind is OpKind.ARANGE]
    boxes = [tuple(op.attrs.tile_shape) for op in ops if op.kind is OpKind.STORE]
    width = boxes[0][-1]
    assert width < 128 and sorted(aranges) == [width] * (128 // width) + [128]      # bias chunked, rows whole
    assert sorted(boxes) == [(width,)] * (128 // width) + [(128, width)] * (128 // width)
    want = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    run_kernel(tile_ir, want)
    got = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    assert not simulate(ws, got, seed=2).violations
    assert torch.equal(got["C"], want["C"]) and torch.equal(got["MX"], want["MX"])
    ref = (args["A"].float() @ args["B"].float().T) * 2.0 + torch.arange(256) * 0.01 + \
        torch.arange(256)[:, None] * 0.001
    assert torch.allclose(want["MX"], ref.reshape(2, 128, 256).amax(1), atol=1e-3)


def test_row_sums_are_combined_over_the_chunks():
    """A sum across the columns: each chunk reduces its columns, the partials are added in chunk order, and the
    row sums are stored once, after the last chunk (the float sum is rounded in that order: within 1e-5 of the
    interpreter's one sum over all columns; everything else is equal)."""
    args = _args(RS=torch.zeros(512), CS=torch.zeros(2, 256))
    tile_ir = row_sums.specialize(**args)
    ws = lower_to(tile_ir, "barrier", CompileOptions(arch="sm_100a"))
    ops = _epilogue(ws).post.ops
    partials = [i for i, op in enumerate(ops) if op.kind is OpKind.REDUCE and op.attrs.axis == 1]
    adds = [op for op in ops if op.kind is OpKind.BINARY and op.attrs.fn == "add"
            and any(op.operands[1] is ops[i].result for i in partials)]
    store = next(i for i, op in enumerate(ops) if op.kind is OpKind.STORE and op.attrs.tile_shape == (128,))
    assert len(partials) > 1 and len(adds) == len(partials) - 1 and store > max(partials)
    assert ops[store].operands[-1] is adds[-1].result
    want = {k: v.clone() for k, v in args.items()}
    run_kernel(tile_ir, want)
    got = {k: v.clone() for k, v in args.items()}
    assert not simulate(ws, got, seed=1).violations
    assert torch.equal(got["C"], want["C"]) and torch.equal(got["CS"], want["CS"])
    assert torch.allclose(got["RS"], want["RS"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel, outs", [(row_normalized, {"CS": torch.zeros(2, 256)}), (both_axes, {}),
                                          (pre_loop_columns, {"CS": torch.zeros(2, 256)})])
def test_not_separable_blocks_are_refused_by_the_register_rule(kernel, outs):
    """A row sum read by the column math, a vector read along both axes, or an index row made before the loop
    (a chunk would slice a register row, which the row layout cannot): no chunking, and the block's 128
    fp32 registers of y beside the mask (and the column sums) exceed the 256 a warp group can be given, refused
    at the user's line."""
    args = _args(**outs)
    ws = lower_to(kernel.specialize(**args), "partitioned", CompileOptions(arch="sm_100a"))
    assert _columns(_epilogue(ws).post.ops) is None
    from aref.backend.cute import generate_source
    ws = lower_to(kernel.specialize(**args), "barrier", CompileOptions(arch="sm_100a"))
    with pytest.raises(ResourceError, match=r"\(at line \d+\).*more than the 256") as err:
        generate_source(ws)
    # the error points at the line where the tiles peak (the one its text names), not at the kernel's def
    line = int(re.search(r"\(at line (\d+)\)", str(err.value)).group(1))
    assert err.value.loc.line == line != ws.loc.line and "halve the rows" in err.value.hint


def _scales():
    g = torch.Generator().manual_seed(1)
    return dict(SC=torch.rand(1, 256, generator=g) + 0.5, SR=torch.rand(256, 1, generator=g) + 0.5,
                CS=torch.zeros(2, 256))


def test_slot_scale_row_is_read_by_column_blocks():
    """The (1, C) scale taken from its slot is sliced per chunk, the (R, 1) one is not; the result is the
    interpreter's."""
    args = _args(**_scales())
    tile_ir = slot_scales.specialize(**args)
    ws = lower_to(tile_ir, "barrier", CompileOptions(arch="sm_100a"))
    ops = _epilogue(ws).post.ops
    sliced = [op.operands[0].type.shape for op in ops if op.kind is OpKind.SLICE]
    assert (1, 128) in sliced and (128, 1) not in sliced
    want = {k: v.clone() for k, v in args.items()}
    run_kernel(tile_ir, want)
    got = {k: v.clone() for k, v in args.items()}
    assert not simulate(ws, got, seed=1).violations
    assert torch.equal(got["C"], want["C"]) and torch.equal(got["CS"], want["CS"])


@pytest.mark.parametrize("kernel, outs", [(row_sums, dict(RS=torch.zeros(512), CS=torch.zeros(2, 256))),
                                          (slot_scales, None)])
def test_chunked_blocks_compile_for_sm100a(tmp_path, kernel, outs):
    """The chunked blocks through the CuTe DSL (PTX, no GPU needed): no spills, each chunk's column sums meet
    across the warps by shuffles and shared memory; the row sums' partials are added in registers and stored
    once; the second chunk reads the scale row from column 64 of its slot."""
    from aref.backend.cute import compile_barrier
    args = _args(**(outs or _scales()))
    ws = lower_to(kernel.specialize(**args), "barrier", CompileOptions(arch="sm_100a"))
    result = compile_barrier(ws, cache_dir=tmp_path)
    assert result.spill_bytes == 0, result.ptxas_log
    src = result.source_path.read_text()
    assert src.count("sm100.cols_to_smem(") > 1
    if kernel is row_sums:
        assert src.count("sm100.row_to_smem(") == 1
    else:
        assert re.search(r"s_\w*SC\[0, sm100\.col_index\(128, 64, tidx, c\) \+ 64, 0\]", src)


def _beta_c_args():
    g = torch.Generator().manual_seed(2)
    return dict(_args(), Cin=torch.randn(256, 256, generator=g).half(), C=torch.zeros(256, 256))


def test_shared_memory_tile_is_read_by_column_chunks(tmp_path):
    """beta·C: the C tile's slot is sliced per chunk (a (128, width) tile of the slot, released after the last
    chunk), the result is the interpreter's, and it compiles without spills: the chunk's columns of the slot
    are a `cute.local_tile` of it."""
    from aref.backend.cute import compile_barrier
    args = _beta_c_args()
    tile_ir = beta_c.specialize(**args)
    ws = lower_to(tile_ir, "barrier", CompileOptions(arch="sm_100a"))
    ops = _epilogue(ws).post.ops
    sliced = [(op.operands[0].type.space.value, op.operands[0].type.shape) for op in ops if op.kind is OpKind.SLICE]
    assert ("smem", (128, 128)) in sliced and ("tmem", (128, 128)) in sliced
    want = {k: v.clone() for k, v in args.items()}
    run_kernel(tile_ir, want)
    got = {k: v.clone() for k, v in args.items()}
    assert not simulate(ws, got, seed=1).violations
    assert torch.equal(got["C"], want["C"])
    result = compile_barrier(ws, cache_dir=tmp_path)
    assert result.spill_bytes == 0, result.ptxas_log
    src = result.source_path.read_text()
    assert re.search(r"sm100\.smem_rows\(cute\.local_tile\(s_\w*Cin\[None, None, 0\], \(128, (\d+)\), "
                     r"\(0, 1\)\), 128, \1, tidx\)", src), src
