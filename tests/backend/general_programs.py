"""Small tile programs outside the examples, each written the way a user would, that the Hopper backend
used to refuse (issue 8): causal attention with an `arange`/`program_id` mask, chunked linear attention
(a loop-carried state read from registers as the B operand), an epilogue mixing constants, column
reductions, `rowmin`, casts both ways and integer index math, a CUDA-core row-wise kernel, a transposed
output, register slices (the view cooperative consumers take), MMA operands computed in registers , ALiBi
attention (a one-element load, two tensor-memory tiles into one MMA on Blackwell), a streamed row-wise
logsumexp with rank-1 outputs and no MMA, a triangular product (run-time trip count, A masked in
registers), a GEMM + residual + LayerNorm over whole rows (ragged M and K, rank-1 loads after the
loop), fp8 GEMMs scaled per block by (R, 1), (1, 1) and (1, C) tiles in the operands' channel (plain,
unswizzled shared layouts), attention keeping its softmax state as (rows, 1) columns and a (rows, 1) row
max stored from registers, sliding-window attention (a mask of two conditions joined with `&`, windows
that start before the sequence), and a GEMM with a hashed dropout mask and column sums (subtiled by columns
on Blackwell). Each has inputs and a plain torch reference."""
import torch

import aref
from aref import aref_kernel
from aref.ir import OpKind, SliceAttrs


def online_softmax_step(s, m, lsum, acc, v, exp=aref.exp):
    """One key block of attention's online softmax, as the user programs below write it (called while their
    kernels trace): the new row max, the block's probabilities, the old state's rescale, and P·V added into
    the rescaled accumulator. Returns (m, lsum, acc)."""
    m_new = aref.maximum(m, aref.rowmax(s))
    p = exp(s - m_new[:, None])
    alpha = exp(m - m_new)
    lsum = lsum * alpha + aref.rowsum(p)
    return m_new, lsum, aref.mma(p.to(v.dtype), v, acc * alpha[:, None])


@aref_kernel
def causal_attention(Q, K, V, O, *, BM: int = 128, BN: int = 64, scale: float = 0.125):
    pid = aref.program_id(0)
    q = aref.load(Q, (pid, 0), (BM, Q.shape[1]))
    m = aref.full((BM,), -float("inf"))
    lsum = aref.zeros((BM,), aref.float32)
    acc = aref.zeros((BM, Q.shape[1]), aref.float32)
    rows = pid * BM + aref.arange(BM)
    kv = aref.channel(depth=2)
    for j in aref.range(K.shape[0] // BN):
        kv.put(aref.load(K, (j, 0), (BN, K.shape[1])), aref.load(V, (j, 0), (BN, V.shape[1])))
        k, v = kv.get()
        s = aref.mma(q, k.T) * scale
        cols = j * BN + aref.arange(BN)
        s = aref.where(rows[:, None] >= cols[None, :], s, -float("inf"))
        m, lsum, acc = online_softmax_step(s, m, lsum, acc, v)
        kv.consumed()
    aref.store(O, (pid, 0), (acc / lsum[:, None]).to(O.dtype))


def causal_attention_reference(Q, K, V, O, scale=0.125, **_):
    s = Q.float() @ K.float().T * scale
    mask = torch.arange(Q.shape[0])[:, None] >= torch.arange(K.shape[0])[None, :]
    p = torch.softmax(s.masked_fill(~mask, -float("inf")), dim=-1)
    return {"O": (p @ V.float()).to(O.dtype)}


@aref_kernel
def linear_attention(Q, K, V, O, *, BM: int = 64, D: int = 64):
    """Chunked linear attention: S = S + kᵀ·v carried in registers, read as the B operand of q·S."""
    state = aref.zeros((D, D), aref.float32)
    ch = aref.channel(depth=2)
    for j in aref.range(Q.shape[0] // BM):
        ch.put(aref.load(Q, (j, 0), (BM, D)), aref.load(K, (j, 0), (BM, D)), aref.load(V, (j, 0), (BM, D)))
        q, k, v = ch.get()
        o = aref.mma(q, state.to(aref.float16))
        state = aref.mma(k.T, v, state)
        aref.store(O, (j, 0), o.to(O.dtype))
        ch.consumed()


def linear_attention_reference(Q, K, V, O, BM=64, **_):
    out, state = [], torch.zeros(Q.shape[1], V.shape[1])
    for j in range(Q.shape[0] // BM):
        q, k, v = (t[j * BM:(j + 1) * BM].float() for t in (Q, K, V))
        out.append(q @ state.half().float())
        state = state + k.T @ v
    return {"O": torch.cat(out).to(O.dtype)}


@aref_kernel
def gemm_epilogue_mix(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """Constants, column max/sum, row min, f16 and int32 round trips and integer index math after the loop."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    y = (acc - acc.max(0)[None, :]) + acc.sum(0) * 0.001 + aref.rowmin(acc)[:, None] + aref.full((BM, BN), 0.5)
    y = y.to(aref.float16).to(aref.float32) + acc.to(aref.int32).to(aref.float32) * 0.25
    col = (pid_n * BN + aref.arange(BN)) % 7
    y = aref.where((col == 3)[None, :], y, aref.minimum(y, 1.0))
    aref.store(C, (pid_m, pid_n), y.to(C.dtype))


def gemm_epilogue_mix_reference(A, B, C, BM=128, BN=128, **_):
    out = torch.empty(C.shape)
    for i in range(C.shape[0] // BM):
        for j in range(C.shape[1] // BN):
            acc = A[i * BM:(i + 1) * BM].float() @ B[j * BN:(j + 1) * BN].float().T
            y = (acc - acc.amax(0)[None, :]) + acc.sum(0) * 0.001 + acc.amin(1)[:, None] + 0.5
            y = y.half().float() + acc.to(torch.int32).float() * 0.25
            col = (j * BN + torch.arange(BN)) % 7
            out[i * BM:(i + 1) * BM, j * BN:(j + 1) * BN] = torch.where((col == 3)[None, :], y, y.clamp(max=1.0))
    return {"C": out.to(C.dtype)}


@aref_kernel
def rowwise_softmax(X, Y, *, BM: int = 64, BN: int = 128):
    """No MMA: softmax over each row of a tile, minus each column's minimum, in a CUDA-core group."""
    pid = aref.program_id(0)
    ch = aref.channel(depth=2)
    for j in aref.range(X.shape[1] // BN):
        ch.put(aref.load(X, (pid, j), (BM, BN)))
        x = ch.get().to(aref.float32)
        e = aref.exp2(x - aref.rowmax(x)[:, None])
        p = e / aref.rowsum(e)[:, None]
        q = p - p.min(0)[None, :] + aref.abs(-x) * aref.sqrt(aref.abs(x) + 1.0)
        aref.store(Y, (pid, j), q.to(Y.dtype))
        ch.consumed()


def rowwise_softmax_reference(X, Y, BN=128, **_):
    out = []
    for j in range(X.shape[1] // BN):
        x = X[:, j * BN:(j + 1) * BN].float().reshape(-1, 64, BN)
        p = torch.softmax(x * torch.log(torch.tensor(2.0)), dim=-1)
        out.append((p - p.amin(1, keepdim=True) + x.abs() * (x.abs() + 1).sqrt()).reshape(-1, BN))
    return {"Y": torch.cat(out, dim=1).to(Y.dtype)}


@aref_kernel
def transposed_output(A, B, CT, *, BM: int = 128, BN: int = 64, BK: int = 64):
    """Cᵀ = (A·Bᵀ)ᵀ / sum(A·Bᵀ): a register transpose, and a reduction to one value."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    total = acc.sum(1).sum(0)
    aref.store(CT, (pid_n, pid_m), (acc.T / total).to(CT.dtype))


def transposed_output_reference(A, B, CT, BM=128, BN=64, **_):
    out = torch.empty(CT.shape)
    for i in range(A.shape[0] // BM):
        for j in range(B.shape[0] // BN):
            acc = A[i * BM:(i + 1) * BM].float() @ B[j * BN:(j + 1) * BN].float().T
            out[j * BN:(j + 1) * BN, i * BM:(i + 1) * BM] = acc.T / acc.sum()
    return {"CT": out.to(CT.dtype)}


def register_slice(x, axis: int, start: int, size: int):
    """The register-tile view the row-split pass gives cooperative consumers (no public spelling)."""
    from aref.lang.tiles import _build
    from aref.lang.trace import user_loc
    return _build(OpKind.SLICE, None, [x.value], SliceAttrs(axis, start, size), user_loc())


@aref_kernel
def sliced_halves(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """The bottom row block plus the top one, and the right column half (slices of register tiles)."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    rows = register_slice(pid_m * BM + aref.arange(BM), 0, 64, 64)          # a slice of index math
    half = register_slice(acc, 0, 0, 64) + register_slice(acc, 0, 64, 64) + rows[:, None]
    cols = register_slice(half, 1, 64, 64) - register_slice(acc.max(0), 0, 8, 64)[None, :]
    aref.store(C, (pid_m, pid_n), cols.to(C.dtype))


def sliced_halves_reference(A, B, C, BM=128, BN=128, **_):
    out = torch.empty(C.shape)
    for i in range(A.shape[0] // BM):
        for j in range(B.shape[0] // BN):
            acc = A[i * BM:(i + 1) * BM].float() @ B[j * BN:(j + 1) * BN].float().T
            rows = (i * BM + torch.arange(BM))[64:128]
            half = acc[:64] + acc[64:] + rows[:, None]
            out[i * 64:(i + 1) * 64, j * 64:(j + 1) * 64] = half[:, 64:] - acc.amax(0)[8:72][None, :]
    return {"C": out.to(C.dtype)}


@aref_kernel
def operand_placements(A, B, C, *, BM: int = 64, BN: int = 64, BK: int = 64):
    """MMA operands computed in registers: A read from registers (RS) or staged transposed, B staged as is
    (MN-major) or transposed (K-major), and fp8 operands staged K-major."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        p, q = a * 0.5, b * 2.0                          # float16 register tiles
        acc = aref.mma(p, q.T, acc)
        acc = aref.mma(p.T, q, acc)
        acc = aref.mma(p.to(aref.float8_e4m3), q.to(aref.float8_e4m3).T, acc)
        ab.consumed()
    aref.store(C, (pid_m, pid_n), acc.to(C.dtype))


def operand_placements_reference(A, B, C, BM=64, BN=64, BK=64, **_):
    out = torch.empty(C.shape)
    for i in range(A.shape[0] // BM):
        for j in range(B.shape[0] // BN):
            acc = torch.zeros(BM, BN)
            for k in range(A.shape[1] // BK):
                p = (A[i * BM:(i + 1) * BM, k * BK:(k + 1) * BK].float() * 0.5).half().float()
                q = (B[j * BN:(j + 1) * BN, k * BK:(k + 1) * BK].float() * 2.0).half().float()
                p8, q8 = (t.to(torch.float8_e4m3fn).float() for t in (p, q))
                acc = acc + p @ q.T + p.T @ q + p8 @ q8.T
            out[i * BM:(i + 1) * BM, j * BN:(j + 1) * BN] = acc
    return {"C": out.to(C.dtype)}


@aref_kernel(grid=lambda Q, BM, **_: (-(-Q.shape[1] // BM), Q.shape[0]))
def alibi_attention(Q, K, V, slopes, O, *, BM: int = 128, BN: int = 64):
    """ALiBi: s = q·kᵀ·scale + slope[h]·(j - i). The head's slope is a one-element tile (below a TMA box: an
    ordinary load), the bias is built from index tiles, and P and the rescaled O both feed the P·V MMA."""
    pid_m, bh = aref.program_id(0), aref.program_id(1)
    D, Sk = Q.shape[2], K.shape[1]
    q = aref.load(Q, (bh, pid_m, 0), (BM, D))
    sl = aref.load(slopes, (bh,), (1,)).to(aref.float32) * 1.4426950408889634
    rows = aref.arange(BM) + pid_m * BM
    o = aref.zeros((BM, D), aref.float32)
    m = aref.full((BM,), -1e30, aref.float32)
    l = aref.zeros((BM,), aref.float32)
    kc = aref.channel(depth=2)
    vc = aref.channel(depth=2)
    for j in aref.range((Sk + BN - 1) // BN):
        kc.put(aref.load(K, (bh, j, 0), (BN, D)))
        vc.put(aref.load(V, (bh, j, 0), (BN, D)))
        k = kc.get()
        v = vc.get()
        cols = aref.arange(BN) + j * BN
        bias = (cols[None, :] - rows[:, None]).to(aref.float32) * sl[None, :]
        s = aref.mma(q, k.T) * (0.125 * 1.4426950408889634) + bias
        m, l, o = online_softmax_step(s, m, l, o, v, exp=aref.exp2)
        kc.consumed()
        vc.consumed()
    aref.store(O, (bh, pid_m, 0), (o / l[:, None]).to(O.dtype))


def alibi_attention_reference(Q, K, V, slopes, O, **_):
    s = Q.float() @ K.float().transpose(1, 2) * 0.125
    bias = torch.arange(K.shape[1])[None, :] - torch.arange(Q.shape[1])[:, None]
    s = s + slopes.float()[:, None, None] * bias[None]
    return {"O": (torch.softmax(s, -1) @ V.float()).to(O.dtype)}


@aref_kernel(grid=lambda X, BM, **_: (-(-X.shape[0] // BM),))
def streamed_logsumexp(X, out_lse, out_max, *, BM: int = 64, BN: int = 128):
    """Row-wise logsumexp of long rows streamed in BN-wide chunks (online max and sum), with no MMA: rank-1
    float32 outputs, a ragged last chunk masked by its column indices."""
    pid = aref.program_id(0)
    m = aref.full((BM,), -float("inf"), aref.float32)
    s = aref.zeros((BM,), aref.float32)
    xc = aref.channel(depth=3)
    for j in aref.range(-(-X.shape[1] // BN)):
        xc.put(aref.load(X, (pid, j), (BM, BN)))
        x = xc.get().to(aref.float32)
        cols = aref.arange(BN) + j * BN
        x = aref.where(cols[None, :] < X.shape[1], x, -float("inf"))
        m_new = aref.maximum(m, aref.rowmax(x))
        s = s * aref.exp(m - m_new) + aref.rowsum(aref.exp(x - m_new[:, None]))
        m = m_new
        xc.consumed()
    aref.store(out_lse, (pid,), m + aref.log(s))
    aref.store(out_max, (pid,), m)


def streamed_logsumexp_reference(X, out_lse, out_max, **_):
    return {"out_lse": torch.logsumexp(X.float(), 1), "out_max": X.float().max(1).values}


@aref_kernel(grid=lambda L, B, BM, **_: (L.shape[0] // BM, B.shape[0] // BM))
def triangular_product(L, B, C, *, BM: int = 128):
    """C = tril(L)·Bᵀ, visiting only the blocks of L on or below the diagonal (a run-time trip count pid_m + 1),
    the A operand masked in registers before its MMA."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BM), aref.float32)
    rows = aref.arange(BM) + pid_m * BM
    ch = aref.channel(depth=2)
    for k in aref.range(pid_m + 1):
        ch.put(aref.load(L, (pid_m, k), (BM, BM)), aref.load(B, (pid_n, k), (BM, BM)))
        a, b = ch.get()
        cols = aref.arange(BM) + k * BM
        am = aref.where(rows[:, None] >= cols[None, :], a, 0.0)
        acc = aref.mma(am.to(L.dtype), b.T, acc)
        ch.consumed()
    aref.store(C, (pid_m, pid_n), acc.to(C.dtype))


def triangular_product_reference(L, B, C, **_):
    return {"C": (torch.tril(L.float()) @ B.float().T).to(C.dtype)}


@aref_kernel(grid=lambda A, BM, **_: (-(-A.shape[0] // BM),))
def gemm_layernorm(A, B, R, gamma, beta, C, rstd_out, *, BM: int = 64, BK: int = 64, eps: float = 1e-5):
    """GEMM + residual + LayerNorm over the whole row (the tile spans N), rank-1 gamma / beta loaded after the
    loop, the row's 1/σ stored as a rank-1 fp32 output."""
    pid = aref.program_id(0)
    N = B.shape[0]
    acc = aref.zeros((BM, N), aref.float32)
    ab = aref.channel(depth=3)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        ab.put(aref.load(A, (pid, k), (BM, BK)), aref.load(B, (0, k), (N, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    x = acc + aref.load(R, (pid, 0), (BM, N)).to(aref.float32)
    mean = aref.rowsum(x) * (1.0 / N)
    d = x - mean[:, None]
    rstd = 1.0 / aref.sqrt(aref.rowsum(d * d) * (1.0 / N) + eps)
    g = aref.load(gamma, (0,), (N,)).to(aref.float32)
    bt = aref.load(beta, (0,), (N,)).to(aref.float32)
    aref.store(C, (pid, 0), (d * rstd[:, None] * g[None, :] + bt[None, :]).to(C.dtype))
    aref.store(rstd_out, (pid,), rstd)


def gemm_layernorm_reference(A, B, R, gamma, beta, C, rstd_out, eps=1e-5, **_):
    x = A.float() @ B.float().T + R.float()
    mean = x.mean(1, keepdim=True)
    rstd = 1 / torch.sqrt(((x - mean) ** 2).mean(1, keepdim=True) + eps)
    return {"C": ((x - mean) * rstd * gamma.float() + beta.float()).to(C.dtype), "rstd_out": rstd[:, 0]}


@aref_kernel
def blockscale_gemm(A, B, SA, SB, C, *, BM: int = 128, BN: int = 128, BK: int = 128):
    """DeepSeek-style block-scaled fp8 GEMM: the (row, K block) scales of A as a (BM, 1) column and the (N block,
    K block) scale of B as a (1, 1) tile ride in the channel beside A and B (plain shared layouts, filled with
    ordinary loads: TMA boxes need 16-byte rows) and scale each K block's partial product in registers. Scale
    blocks span 128 columns of N and K (BK = 128, BN divides 128)."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ch = aref.channel(depth=3)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        ch.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)),
               aref.load(SA, (pid_m, k), (BM, 1)), aref.load(SB, (pid_n * BN // 128, k), (1, 1)))
        a, b, sa, sb = ch.get()
        part = aref.mma(a, b.T)
        acc = acc + part * (sa * sb)
        ch.consumed()
    aref.store(C, (pid_m, pid_n), acc.to(C.dtype))


def blockscale_gemm_reference(A, B, SA, SB, C, **_):
    N = B.shape[0]
    acc = torch.zeros(A.shape[0], N)
    for k in range(SA.shape[1]):
        p = A[:, k * 128:(k + 1) * 128].float() @ B[:, k * 128:(k + 1) * 128].float().T
        acc += p * SA[:, k][:, None] * SB[:, k].repeat_interleave(128)[:N][None, :]
    return {"C": acc.to(C.dtype)}


@aref_kernel
def colscale_gemm(A, B, SA, SBc, C, *, BM: int = 128, BN: int = 64, BK: int = 128):
    """fp8 GEMM with (row, K block) scales of A as a (BM, 1) column (ordinary loads) and (K block, column) scales
    of B as a (1, BN) row: 16-byte rows that TMA copies into a plain, unswizzled slot tile."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ch = aref.channel(depth=2)
    for k in aref.range(aref.cdiv(A.shape[1], BK)):
        ch.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)),
               aref.load(SA, (pid_m, k), (BM, 1)), aref.load(SBc, (k, pid_n), (1, BN)))
        a, b, sa, sb = ch.get()
        acc = acc + aref.mma(a, b.T) * sa * sb
        ch.consumed()
    aref.store(C, (pid_m, pid_n), acc.to(C.dtype))


def colscale_gemm_reference(A, B, SA, SBc, C, **_):
    acc = torch.zeros(A.shape[0], B.shape[0])
    for k in range(SA.shape[1]):
        p = A[:, k * 128:(k + 1) * 128].float() @ B[:, k * 128:(k + 1) * 128].float().T
        acc += p * SA[:, k][:, None] * SBc[k][None, :]
    return {"C": acc.to(C.dtype)}


@aref_kernel(grid=lambda Q, BM, **_: (Q.shape[0] // BM,))
def column_state_attention(Q, K, V, O, *, BM: int = 128, BN: int = 64, qk_scale: float = 0.125 * 1.4426950408889634):
    """Attention over two 64-row query sub-tiles whose softmax state (max m, sum l, rescale alpha) is kept as
    (rows, 1) columns, as `keepdim=True` code keeps it: on sm_100a the FA4 partition hands alpha and l between
    warp groups in plain (64, 1) shared rings."""
    pid = aref.program_id(0)
    D, SUB = Q.shape[1], BM // 2
    q = [aref.load(Q, (2 * pid + i, 0), (SUB, D)) for i in range(2)]
    o = [aref.zeros((SUB, D), aref.float32) for _ in range(2)]
    m = [aref.full((SUB, 1), -float("inf"), aref.float32) for _ in range(2)]
    l = [aref.zeros((SUB, 1), aref.float32) for _ in range(2)]
    kc, vc = aref.channel(depth=2), aref.channel(depth=2)
    for j in aref.range(K.shape[0] // BN):
        kc.put(aref.load(K, (j, 0), (BN, D)))
        vc.put(aref.load(V, (j, 0), (BN, D)))
        k, v = kc.get(), vc.get()
        for i in range(2):
            s = aref.mma(q[i], k.T)
            m_new = aref.maximum(m[i], aref.rowmax(s)[:, None] * qk_scale)
            p = aref.exp2(s * qk_scale - m_new)
            alpha = aref.exp2(m[i] - m_new)
            l[i] = l[i] * alpha + aref.rowsum(p)[:, None]
            o[i] = aref.mma(p.to(Q.dtype), v, o[i] * alpha)
            m[i] = m_new
        kc.consumed()
        vc.consumed()
    for i in range(2):
        aref.store(O, (2 * pid + i, 0), (o[i] / l[i]).to(O.dtype))


def column_state_attention_reference(Q, K, V, O, **_):
    return {"O": torch.softmax(Q.float() @ K.float().T * 0.125, dim=1) @ V.float()}


@aref_kernel(grid=lambda X, BM, **_: (-(-X.shape[0] // BM),))
def row_stats_columns(X, Y, Mx, *, BM: int = 64):
    """The row max kept as a (BM, 1) column, stored from registers into an (M, 1) fp32 tensor (masked at the
    ragged edge: TMA cannot write 4-byte rows) beside X − max."""
    pid = aref.program_id(0)
    x = aref.load(X, (pid, 0), (BM, X.shape[1])).to(aref.float32)
    m = aref.rowmax(x)[:, None]
    aref.store(Mx, (pid, 0), m)
    aref.store(Y, (pid, 0), (x - m).to(Y.dtype))


def row_stats_columns_reference(X, Y, Mx, **_):
    m = X.float().amax(1, keepdim=True)
    return {"Mx": m, "Y": (X.float() - m).to(Y.dtype)}


def _fp8(g, *shape):
    return torch.randn(*shape, generator=g).to(torch.float8_e4m3fn)


@aref_kernel(grid=lambda Q, BM, **_: (Q.shape[0] // BM,))
def window_attention(Q, K, V, O, *, BM: int = 128, WB: int = 3, scale: float = 0.125):
    """Sliding-window causal attention: each query block attends to the WB key blocks ending at its own; the
    first blocks' windows start before the sequence (negative block coordinates: loads read zeros there), and
    the mask combines two conditions with `&`."""
    pid = aref.program_id(0)
    D = Q.shape[1]
    q = aref.load(Q, (pid, 0), (BM, D))
    m = aref.full((BM,), -float("inf"))
    lsum = aref.zeros((BM,), aref.float32)
    acc = aref.zeros((BM, D), aref.float32)
    rows = pid * BM + aref.arange(BM)
    kv = aref.channel(depth=2)
    for j in aref.range(WB):
        blk = pid - (WB - 1) + j
        kv.put(aref.load(K, (blk, 0), (BM, D)), aref.load(V, (blk, 0), (BM, D)))
        k, v = kv.get()
        cols = blk * BM + aref.arange(BM)
        keep = (rows[:, None] >= cols[None, :]) & (cols[None, :] >= 0)
        s = aref.where(keep, aref.mma(q, k.T) * scale, -1e30)
        m, lsum, acc = online_softmax_step(s, m, lsum, acc, v)
        kv.consumed()
    aref.store(O, (pid, 0), (acc / lsum[:, None]).to(O.dtype))


def window_attention_reference(Q, K, V, O, BM=128, WB=3, scale=0.125, **_):
    i, j = torch.arange(Q.shape[0])[:, None], torch.arange(K.shape[0])[None, :]
    keep = (i >= j) & (j >= (i // BM - (WB - 1)) * BM)
    p = torch.softmax((Q.float() @ K.float().T * scale).masked_fill(~keep, -float("inf")), dim=-1)
    return {"O": (p @ V.float()).to(O.dtype)}


@aref_kernel
def gemm_dropout_colsum(A, B, C, CS, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """A GEMM, a hashed dropout-style mask from row and column index tiles, and the column sums of each
    128-row block of the result (a (BN,) vector store). On Blackwell the epilogue is subtiled by columns: the
    (1, BN) index row and the column sums go chunk by chunk, the (BM, 1) row indices stay whole."""
    pm, pn = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ch = aref.channel(depth=4)
    for k in aref.range(A.shape[1] // BK):
        ch.put(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (pn, k), (BN, BK)))
        a, b = ch.get()
        acc = aref.mma(a, b.T, acc)
        ch.consumed()
    rows = pm * BM + aref.arange(BM)
    cols = pn * BN + aref.arange(BN)
    keep = (rows[:, None] * 31 + cols[None, :] * 17) % 7 != 0
    y = aref.where(keep, acc * (7.0 / 6.0), 0.0)
    aref.store(C, (pm, pn), y.to(C.dtype))
    aref.store(CS, (pm, pn), y.sum(0))


def gemm_dropout_colsum_reference(A, B, C, CS, BM=128, **_):
    acc = A.float() @ B.float().T
    m, n = acc.shape
    keep = (torch.arange(m)[:, None] * 31 + torch.arange(n)[None, :] * 17) % 7 != 0
    y = torch.where(keep, acc * (7.0 / 6.0), torch.zeros(()))
    return {"C": y.to(C.dtype), "CS": y.reshape(m // BM, BM, n).sum(1)}


def _r(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).half()


def inputs(name: str, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    h = torch.float16
    return {
        # 64-query blocks: the tests' plain consumer holds S, P and O of one block (128 rows would not fit)
        "window_attention": lambda: dict(Q=_r(g, 512, 64), K=_r(g, 512, 64), V=_r(g, 512, 64),
                                         O=torch.zeros(512, 64, dtype=h), BM=64),
        "row_stats_columns": lambda: dict(X=_r(g, 200, 128), Y=torch.zeros(200, 128, dtype=h), Mx=torch.zeros(200, 1)),
        "column_state_attention": lambda: dict(Q=_r(g, 256, 64), K=_r(g, 256, 64), V=_r(g, 256, 64),
                                               O=torch.zeros(256, 64, dtype=h)),
        # ragged: 200 rows (the last (128, 1) box of SA is partly outside), K = 448 (the last K block is half)
        "blockscale_gemm": lambda: dict(A=_fp8(g, 200, 448), B=_fp8(g, 256, 448),
                                        SA=torch.rand(200, 4, generator=g) + 0.5,
                                        SB=torch.rand(2, 4, generator=g) + 0.5,
                                        C=torch.zeros(200, 256, dtype=torch.bfloat16),
                                        # one consumer group (the tests' plain partition) holds acc and part:
                                        # 2 × BN fp32 registers per thread fit setmaxnreg's 256 at BN = 64
                                        BN=64),
        "colscale_gemm": lambda: dict(A=_fp8(g, 256, 384), B=_fp8(g, 128, 384),
                                      SA=torch.rand(256, 3, generator=g) + 0.5,
                                      SBc=torch.rand(3, 128, generator=g) + 0.5,
                                      C=torch.zeros(256, 128, dtype=torch.bfloat16)),
        # ragged: 200 rows (the last block of 64 is short), K = 72 (the last K step of 64 is short)
        "gemm_layernorm": lambda: dict(A=_r(g, 200, 72, scale=0.3), B=_r(g, 128, 72, scale=0.3), R=_r(g, 200, 128),
                                       gamma=(1 + 0.1 * torch.randn(128, generator=g)).half(),
                                       beta=_r(g, 128, scale=0.1), C=torch.zeros(200, 128, dtype=h),
                                       rstd_out=torch.zeros(200)),
        "alibi_attention": lambda: dict(Q=_r(g, 2, 256, 64), K=_r(g, 2, 256, 64), V=_r(g, 2, 256, 64),
                                        slopes=torch.tensor([0.5, 0.25]).half(),
                                        O=torch.zeros(2, 256, 64, dtype=h)),
        "streamed_logsumexp": lambda: dict(X=torch.randn(100, 1000, generator=g).to(torch.bfloat16),
                                           out_lse=torch.zeros(100), out_max=torch.zeros(100)),
        "triangular_product": lambda: dict(L=_r(g, 256, 256, scale=0.1), B=_r(g, 256, 256, scale=0.1),
                                           C=torch.zeros(256, 256, dtype=h)),
        "causal_attention": lambda: dict(Q=_r(g, 256, 64), K=_r(g, 256, 64), V=_r(g, 256, 64),
                                         O=torch.zeros(256, 64, dtype=h)),
        "linear_attention": lambda: dict(Q=_r(g, 256, 64, scale=0.2), K=_r(g, 256, 64, scale=0.2),
                                         V=_r(g, 256, 64, scale=0.2), O=torch.zeros(256, 64, dtype=h)),
        "gemm_dropout_colsum": lambda: dict(A=_r(g, 256, 256, scale=0.3), B=_r(g, 256, 256, scale=0.3),
                                            C=torch.zeros(256, 256, dtype=h), CS=torch.zeros(2, 256)),
        "gemm_epilogue_mix": lambda: dict(A=_r(g, 256, 128, scale=0.3), B=_r(g, 256, 128, scale=0.3),
                                          C=torch.zeros(256, 256, dtype=h)),
        "rowwise_softmax": lambda: dict(X=_r(g, 128, 256), Y=torch.zeros(128, 256, dtype=h)),
        "transposed_output": lambda: dict(A=torch.rand(256, 128, generator=g).half(),
                                          B=torch.rand(128, 128, generator=g).half(),
                                          CT=torch.zeros(128, 256, dtype=h)),
        "operand_placements": lambda: dict(A=_r(g, 128, 128, scale=0.3), B=_r(g, 128, 128, scale=0.3),
                                           C=torch.zeros(128, 128, dtype=h)),
        "sliced_halves": lambda: dict(A=_r(g, 256, 128, scale=0.3), B=_r(g, 256, 128, scale=0.3),
                                      C=torch.zeros(128, 128, dtype=h)),
    }[name]()


PROGRAMS = {
    "window_attention": (window_attention, window_attention_reference),
    "blockscale_gemm": (blockscale_gemm, blockscale_gemm_reference),
    "colscale_gemm": (colscale_gemm, colscale_gemm_reference),
    "column_state_attention": (column_state_attention, column_state_attention_reference),
    "row_stats_columns": (row_stats_columns, row_stats_columns_reference),
    "gemm_layernorm": (gemm_layernorm, gemm_layernorm_reference),
    "triangular_product": (triangular_product, triangular_product_reference),
    "streamed_logsumexp": (streamed_logsumexp, streamed_logsumexp_reference),
    "alibi_attention": (alibi_attention, alibi_attention_reference),
    "causal_attention": (causal_attention, causal_attention_reference),
    "linear_attention": (linear_attention, linear_attention_reference),
    "gemm_epilogue_mix": (gemm_epilogue_mix, gemm_epilogue_mix_reference),
    "gemm_dropout_colsum": (gemm_dropout_colsum, gemm_dropout_colsum_reference),
    "rowwise_softmax": (rowwise_softmax, rowwise_softmax_reference),
    "transposed_output": (transposed_output, transposed_output_reference),
    "sliced_halves": (sliced_halves, sliced_halves_reference),
    "operand_placements": (operand_placements, operand_placements_reference),
}
