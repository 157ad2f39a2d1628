"""FlashAttention forward with online softmax: O = softmax(Q·Kᵀ·scale)·V per (batch·head).

Q: (BH, Sq, D), K and V: (BH, Sk, D), O like Q. Each CTA owns BM query rows and streams K and V blocks of
BN rows through two arefs (separate rings, so Q·Kᵀ can start before V lands, as in FA3).

`SUBTILE` (default 2) splits the CTA's BM query rows into independent sub-tiles, each with its own softmax
state. The FA3 ping-pong schedule (Hopper) and the FA4 schedule (Blackwell) overlap one sub-tile's softmax
with the other's matrix multiplies; with SUBTILE=1 there is nothing to overlap within a CTA.
"""
import math

import torch

import aref
from aref import aref_kernel

LOG2E = math.log2(math.e)


def online_softmax_step(q, k, v, o, m, l, qk_scale, dtype, keys_left=None):
    """One K/V block for one query sub-tile: rescale the running output and add this block's part.
    `keys_left`: keys of this block at or past the end of K are masked out (a ragged last block)."""
    s = aref.mma(q, k.T)                                    # scores, float32
    if keys_left is not None:
        s = aref.where(aref.arange(k.shape[0])[None, :] < keys_left, s, -math.inf)
    m_new = aref.maximum(m, aref.rowmax(s) * qk_scale)      # running row max (log2 domain)
    p = aref.exp2(s * qk_scale - m_new[:, None])
    alpha = aref.exp2(m - m_new)                            # rescale factor of the old state
    l = l * alpha + aref.rowsum(p)
    o = aref.mma(p.to(dtype), v, o * alpha[:, None])
    return o, m_new, l


@aref_kernel(grid=lambda Q, BM, **_: (-(-Q.shape[1] // BM), Q.shape[0]))
def attention_fwd(Q, K, V, O, *, BM: int = 128, BN: int = 128, SUBTILE: int = 2, sm_scale: float = 0.0,
                  STAGES: int | None = None):
    pid_m, bh = aref.program_id(0), aref.program_id(1)
    D = Q.shape[2]
    SUB = BM // SUBTILE
    qk_scale = (sm_scale or 1.0 / math.sqrt(D)) * LOG2E
    q = [aref.load(Q, (bh, pid_m * SUBTILE + i, 0), (SUB, D)) for i in range(SUBTILE)]
    o = [aref.zeros((SUB, D), aref.float32) for _ in range(SUBTILE)]
    m = [aref.full((SUB,), -math.inf, aref.float32) for _ in range(SUBTILE)]
    l = [aref.zeros((SUB,), aref.float32) for _ in range(SUBTILE)]
    # K and V rings: up to 3 slots each beside the resident Q tile in 224 KB (copies in flight cover latency)
    stages = STAGES or max(2, min(3, (224 * 1024 - BM * D * Q.dtype.nbytes) // (2 * BN * D * Q.dtype.nbytes)))
    kc = aref.channel(depth=stages)
    vc = aref.channel(depth=stages)
    for j in aref.range(aref.cdiv(K.shape[1], BN)):
        kc.put(aref.load(K, (bh, j, 0), (BN, D)))
        vc.put(aref.load(V, (bh, j, 0), (BN, D)))
        k = kc.get()
        v = vc.get()
        # keys past the end of K (a last block that the tile does not fill) load as zeros: mask their scores
        left = K.shape[1] - j * BN if K.shape[1] % BN else None
        for i in range(SUBTILE):
            o[i], m[i], l[i] = online_softmax_step(q[i], k, v, o[i], m[i], l[i], qk_scale, Q.dtype, left)
        kc.consumed()
        vc.consumed()
    for i in range(SUBTILE):
        l_safe = aref.where(l[i] == 0.0, 1.0, l[i])         # rows that saw no keys give 0, not NaN
        aref.store(O, (bh, pid_m * SUBTILE + i, 0), (o[i] / l_safe[:, None]).to(O.dtype))


def example_inputs(size: str = "small", BH: int | None = None, Sq: int | None = None, Sk: int | None = None,
                   D: int | None = None, dtype: str = "float16", seed: int = 0, arch: str | None = None,
                   **constexprs):
    """Small: 2 heads × 256 queries × 256 keys × 64; large: 16 × 4096 × 4096 × 128. `arch`: the target the
    commands compile for (`--arch`); where its MMAs are tcgen05 (sm_100a) the K/V block is the largest that fits
    a B200 block (`blackwell_block`) unless BN is given."""
    from aref.target import target_of      # imported here: the kernel above keeps the source lines its golden IR names
    dims = {"small": (2, 256, 256, 64), "large": (16, 4096, 4096, 128)}[size]
    BH, Sq = BH or dims[0], Sq or dims[1]
    Sk, D = dims[2] if Sk is None else Sk, D or dims[3]
    g = torch.Generator().manual_seed(seed)
    t = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    Q, K, V = (torch.randn(BH, n, D, generator=g).to(t) for n in (Sq, Sk, Sk))
    if arch is not None and target_of(arch).mma == "tcgen05" and "BN" not in constexprs:
        constexprs["BN"] = blackwell_block(D, t.itemsize, constexprs.get("BM", 128))
    return {"Q": Q, "K": K, "V": V, "O": torch.zeros(BH, Sq, D, dtype=t), **constexprs}


def blackwell_block(D: int, nbytes: int, BM: int = 128) -> int:
    """The K/V block (keys) for Blackwell: the largest of 128 and 64 whose K and V rings of two slots fit in
    224 KB beside the resident Q tile, the output's store staging (BM×D each) and P (BM×BN, two slots):
    tcgen05 reads the 64-row sub-tiles' P from shared memory, so on a B200 it takes the room the kernel's
    ring sizing (for Hopper, where P stays in registers) gives K and V. At head dim 128 that is 64 keys (at
    128 the rings fit only with one slot each); at 64, 128 keys."""
    return next((bn for bn in (128, 64) if (2 * BM * D + 2 * 2 * bn * D + 2 * BM * bn) * nbytes <= 224 * 1024), 64)


def reference(Q, K, V, O, sm_scale: float = 0.0, **_):
    scale = sm_scale or 1.0 / math.sqrt(Q.shape[2])
    if K.shape[1] == 0:
        return {"O": torch.zeros_like(O)}
    p = torch.softmax(Q.float() @ K.float().transpose(1, 2) * scale, dim=-1)
    return {"O": (p @ V.float()).to(O.dtype)}


def tolerance(Q, V, O, **_):
    """What the hardware guarantees. P is rounded to the input dtype for the P·V tensor-core product (as
    FlashAttention does) while the reference keeps it in fp32: each weight's relative rounding error u (2⁻¹¹
    for fp16, 2⁻⁸ for bf16) moves an output row, a convex combination of V's rows, by at most u·max|V|; exp2
    on the MUFU (2⁻²² relative) and the fp32 accumulations are far below that; O's own rounding adds 2u."""
    from aref.precision import rounded_operand_tolerance
    bound = float(V.float().abs().max()) if V.numel() else 0.0
    return {"O": rounded_operand_tolerance(Q.dtype, O.dtype, bound)}


def baseline(Q, K, V, O, sm_scale: float = 0.0, **_):
    """torch's fused attention (SDPA, its default backend choice) on the same (BH, S, D) tensors, as a
    function that runs it once (what `aref bench` times)."""
    scale = sm_scale or 1.0 / math.sqrt(Q.shape[2])
    return lambda: {"O": torch.nn.functional.scaled_dot_product_attention(Q, K, V, scale=scale)}


# The autotuner's search space (K/V block, sub-tiles, ring depth); the last entry turns off the intra-warpgroup
# overlap of softmax with the next block's MMA (FA3's; on by default), to see what it gains.
CONFIGS = aref.configs({"BN": [64, 128], "SUBTILE": [1, 2], "STAGES": [2, 3]}) + [
    aref.Config.of({"BN": 128, "SUBTILE": 1, "STAGES": 2}, softmax_overlap=False),
]
aref.autotune(configs=CONFIGS)(attention_fwd)
