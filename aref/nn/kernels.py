"""The aref kernels behind `aref.nn`: attention forward with the log-sum-exp, its backward (FlashAttention's
Delta pre-pass, the single-pass backward with dQ accumulated in float32 by reduce-add, the dQ conversion), and
the three GEMMs of a linear layer. Causal masking is a compile-time constant (`CAUSAL`): one kernel each,
the causal variant skipping the blocks the mask empties (as `examples/attention_causal.py`).

They are ordinary `@aref_kernel`s (so each is a PyTorch operator of its own, see `aref.runtime`), shipped in
the package so that `aref.nn` works wherever aref is installed; `examples/attention_train.py` and
`examples/linear_layer.py` give them example inputs, references and baselines for the command line.

Tensors are (batch·heads, sequence, head dim); LSE2 is the row log-sum-exp of the scaled scores in log2 units
(log2 Σⱼ exp2(sᵢⱼ·scale·log2e)), the form the backward's exp2 takes.
"""
import math

import aref
from aref import aref_kernel

LOG2E = math.log2(math.e)


@aref_kernel(grid=lambda Q, BM, **_: (-(-Q.shape[1] // BM), Q.shape[0]))
def attention_fwd_lse(Q, K, V, O, LSE2, *, CAUSAL: bool = False, BM: int = 128, BN: int = 0,
                      sm_scale: float = 0.0, STAGES: int | None = None):
    """O = softmax(Q·Kᵀ·scale)·V and LSE2 per query row; with CAUSAL query i sees keys j ≤ i."""
    pid_m, bh = aref.program_id(0), aref.program_id(1)
    D, Sk = Q.shape[2], K.shape[1]
    # K/V block: 128 keys; 64 for the causal kernel at head dim 128, whose mask (an index tile and a select
    # per score) does not fit beside 128-key score tiles in the consumer's registers (ptxas spilled 16 bytes)
    BN = BN or (64 if CAUSAL and D > 64 else 128)
    qk_scale = (sm_scale or 1.0 / math.sqrt(D)) * LOG2E
    q = aref.load(Q, (bh, pid_m, 0), (BM, D))
    o = aref.zeros((BM, D), aref.float32)
    m = aref.full((BM,), -math.inf, aref.float32)
    l = aref.zeros((BM,), aref.float32)
    # K and V rings: up to 3 slots each beside the resident Q tile and the O / LSE2 store staging in 224 KB
    stages = STAGES or max(2, min(3, (224 * 1024 - 2 * BM * D * Q.dtype.nbytes - 4 * BM)
                                  // (2 * BN * D * Q.dtype.nbytes)))
    kc = aref.channel(depth=stages)
    vc = aref.channel(depth=stages)
    if CAUSAL:   # a row's last visible key: its own index, or the last key of a shorter key sequence
        last = aref.minimum(aref.arange(BM) + pid_m * BM, Sk - 1)
        blocks = aref.minimum(((pid_m + 1) * BM + BN - 1) // BN, (Sk + BN - 1) // BN)
    else:
        last = None
        blocks = aref.cdiv(Sk, BN)
    for j in aref.range(blocks):
        kc.put(aref.load(K, (bh, j, 0), (BN, D)))
        vc.put(aref.load(V, (bh, j, 0), (BN, D)))
        k = kc.get()
        v = vc.get()
        s = aref.mma(q, k.T) * qk_scale
        if CAUSAL:
            s = aref.where(last[:, None] >= (aref.arange(BN) + j * BN)[None, :], s, -math.inf)
        elif Sk % BN:   # keys past the end of K load as zeros: mask their scores
            s = aref.where(aref.arange(BN)[None, :] < Sk - j * BN, s, -math.inf)
        m_new = aref.maximum(m, aref.rowmax(s))
        p = aref.exp2(s - m_new[:, None])
        alpha = aref.exp2(m - m_new)
        l = l * alpha + aref.rowsum(p)
        o = aref.mma(p.to(Q.dtype), v, o * alpha[:, None])
        m = m_new
        kc.consumed()
        vc.consumed()
    l_safe = aref.where(l == 0.0, 1.0, l)                 # rows that saw no keys give 0, not NaN
    aref.store(O, (bh, pid_m, 0), (o / l_safe[:, None]).to(O.dtype))
    aref.store(LSE2, (bh, pid_m), m + aref.log2(l_safe))


@aref_kernel(grid=lambda O, ROWS, **_: (-(-O.shape[1] // ROWS), O.shape[0]))
def attention_delta(O, dO, Delta, *, BM: int = 64, ROWS: int = 256):
    """FlashAttention's pre-pass: Delta = rowsum(dO ⊙ O) in float32, ROWS rows per CTA, BM at a time."""
    pid, bh = aref.program_id(0), aref.program_id(1)
    D = O.shape[2]
    per = ROWS // BM
    rows = aref.channel(depth=2)
    for i in aref.range(aref.minimum(per, -(-O.shape[1] // BM) - pid * per)):
        rows.put(aref.load(O, (bh, pid * per + i, 0), (BM, D)), aref.load(dO, (bh, pid * per + i, 0), (BM, D)))
        o, do = rows.get()
        delta = aref.rowsum(o.to(aref.float32) * do.to(aref.float32))
        rows.consumed()
        aref.store(Delta, (bh, pid * per + i), delta)


@aref_kernel(grid=lambda K, BN, **_: (-(-K.shape[1] // BN), K.shape[0]))
def attention_bwd_lse(Q, K, V, dO, LSE2, Delta, dQ, dK, dV, *, CAUSAL: bool = False, BM: int = 64, BN: int = 64,
                      sm_scale: float = 0.0, STAGES: int | None = None):
    """dQ (float32, reduce-add), dK, dV of attention from the forward's LSE2 and the pre-pass's Delta, one
    block of BN keys per CTA (as `examples/attention_bwd.py`); with CAUSAL a key block starts at the first
    query block that sees it, and scores above the diagonal are masked."""
    pid_n, bh = aref.program_id(0), aref.program_id(1)
    D = Q.shape[2]
    scale = sm_scale or 1.0 / math.sqrt(D)
    k = aref.load(K, (bh, pid_n, 0), (BN, D))
    v = aref.load(V, (bh, pid_n, 0), (BN, D))
    dk = aref.zeros((BN, D), aref.float32)
    dv = aref.zeros((BN, D), aref.float32)
    qdo = aref.channel(depth=STAGES or (3 if D * BN <= 64 * 128 else 2))
    first = (pid_n * BN) // BM if CAUSAL else 0
    for i in aref.range(aref.maximum(-(-Q.shape[1] // BM) - first, 0)):
        qdo.put(aref.load(Q, (bh, first + i, 0), (BM, D)), aref.load(dO, (bh, first + i, 0), (BM, D)),
                aref.load(LSE2, (bh, first + i), (BM,)), aref.load(Delta, (bh, first + i), (BM,)))
        q, do, lse2, delta = qdo.get()
        s = aref.mma(q, k.T)
        p = aref.exp2(s * (scale * LOG2E) - lse2[:, None])
        if CAUSAL:
            rows = aref.arange(BM) + (first + i) * BM
            p = aref.where(rows[:, None] >= (aref.arange(BN) + pid_n * BN)[None, :], p, 0.0)
        dv = aref.mma(p.to(Q.dtype).T, do, dv)
        dp = aref.mma(do, v.T)
        ds = p * (dp - delta[:, None])
        dk = aref.mma(ds.to(Q.dtype).T, q, dk)
        dq = aref.mma(ds.to(Q.dtype), k)
        aref.store(dQ, (bh, first + i, 0), dq * scale, reduce="add")
        qdo.consumed()
    aref.store(dK, (bh, pid_n, 0), (dk * scale).to(dK.dtype))
    aref.store(dV, (bh, pid_n, 0), dv.to(dV.dtype))


@aref_kernel(grid=lambda X, ROWS, **_: (-(-X.shape[1] // ROWS), X.shape[0]))
def convert_rows(X, Y, *, BM: int = 64, ROWS: int = 256):
    """Y = X in Y's dtype (the float32 dQ accumulator to the inputs' dtype), ROWS rows per CTA."""
    pid, bh = aref.program_id(0), aref.program_id(1)
    D = X.shape[2]
    per = ROWS // BM
    rows = aref.channel(depth=2)
    for i in aref.range(aref.minimum(per, -(-X.shape[1] // BM) - pid * per)):
        rows.put(aref.load(X, (bh, pid * per + i, 0), (BM, D)))
        y = rows.get().to(Y.dtype)
        rows.consumed()
        aref.store(Y, (bh, pid * per + i, 0), y)


# ------------------------------------------------------------------------------------------------ linear
def _ring(BM, BN, BK, dtype):
    return aref.channel(depth=max(2, min(5, 160 * 1024 // ((BM + BN) * BK * dtype.nbytes))))


@aref_kernel(grid=lambda X, W, BM, BN, **_: (-(-X.shape[0] // BM), -(-W.shape[0] // BN)))
def linear_fwd(X, W, Bias, Y, *, HAS_BIAS: bool = False, BM: int = 128, BN: int = 128, BK: int = 64):
    """Y = X·Wᵀ (+ Bias): X is M×K, W is N×K (torch's weight layout), Bias N (read only with HAS_BIAS)."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = _ring(BM, BN, BK, X.dtype)
    for k in aref.range(aref.cdiv(X.shape[1], BK)):
        ab.put(aref.load(X, (pid_m, k), (BM, BK)), aref.load(W, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)
        ab.consumed()
    if HAS_BIAS:
        acc = acc + aref.load(Bias, (pid_n,), (BN,)).to(aref.float32)[None, :]
    aref.store(Y, (pid_m, pid_n), acc.to(Y.dtype))


@aref_kernel(grid=lambda dY, W, BM, BN, **_: (-(-dY.shape[0] // BM), -(-W.shape[1] // BN)))
def linear_grad_input(dY, W, dX, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """dX = dY·W: dY is M×N, W is N×K (read K-contiguous: the MMA's B operand is N-major)."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = _ring(BM, BN, BK, dY.dtype)
    for k in aref.range(aref.cdiv(dY.shape[1], BK)):
        ab.put(aref.load(dY, (pid_m, k), (BM, BK)), aref.load(W, (k, pid_n), (BK, BN)))
        a, b = ab.get()
        acc = aref.mma(a, b, acc)
        ab.consumed()
    aref.store(dX, (pid_m, pid_n), acc.to(dX.dtype))


@aref_kernel(grid=lambda dY, X, BM, BN, **_: (-(-dY.shape[1] // BM), -(-X.shape[1] // BN)))
def linear_grad_weight(dY, X, dW, *, BM: int = 128, BN: int = 128, BK: int = 64):
    """dW = dYᵀ·X: dY is M×N, X is M×K; both are read along M (the reduction), so A is the transpose of a
    loaded dY block and B a loaded X block."""
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = _ring(BM, BN, BK, dY.dtype)
    for k in aref.range(aref.cdiv(dY.shape[0], BK)):
        ab.put(aref.load(dY, (k, pid_m), (BK, BM)), aref.load(X, (k, pid_n), (BK, BN)))
        a, b = ab.get()
        acc = aref.mma(a.T, b, acc)
        ab.consumed()
    aref.store(dW, (pid_m, pid_n), acc.to(dW.dtype))
