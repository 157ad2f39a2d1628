"""Dead code is not partitioned (aref.passes.cse.drop_dead): a value nothing reads — a cast, an MMA, a load, a whole
user channel whose items nobody reads — takes no warp group, registers or slot, and the program still
computes what it did."""
import torch

import aref
from aref import aref_kernel
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.passes.cse import drop_dead
from aref.interp.tile import run_kernel
from aref.ir import OpKind
from aref.sim import simulate


@aref_kernel
def with_dead_code(A, B, W, C, *, BM: int = 128, BN: int = 64, BK: int = 64):
    pm, pn = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ch = aref.channel(depth=2)
    unread = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ch.put(aref.load(A, (pm, k), (BM, BK)), aref.load(B, (pn, k), (BN, BK)))
        unread.put(aref.load(W, (k, pn), (BK, BN)))
        a, b = ch.get()
        w = unread.get()
        a32 = a.to(aref.float32)                      # read by nothing
        s = aref.mma(a, b.T)
        t = aref.mma(s.to(aref.float16), w) * 0.5     # nor is this chained MMA, so w's channel is unread
        acc = acc + s
        ch.consumed()
        unread.consumed()
    aref.store(C, (pm, pn), acc.to(C.dtype))


def _args():
    g = torch.Generator().manual_seed(0)
    return dict(A=(torch.randn(128, 256, generator=g) * 0.3).half(), B=(torch.randn(128, 256, generator=g) * 0.3).half(),
                W=torch.randn(256, 128, generator=g).half(), C=torch.zeros(128, 128, dtype=torch.float16))


def test_dead_values_and_unread_channels_are_dropped():
    kernel = with_dead_code.specialize(**_args())
    out = drop_dead(kernel)
    kinds = [op.kind for op in out.all_ops()]
    assert kinds.count(OpKind.MMA) == 1 and kinds.count(OpKind.CHANNEL) == 1
    assert kinds.count(OpKind.LOAD) == 2                       # W's load went with its channel
    assert not any(op.kind is OpKind.CAST and op.result.type.dtype.value == "f32" for op in out.all_ops())
    assert kinds.count(OpKind.CAST) == 1                       # the store's
    assert len(list(kernel.all_ops())) > len(kinds)            # the input kernel is left as it was
    assert drop_dead(out) is out                               # nothing left to drop


def test_the_program_computes_what_it_did_on_both_archs():
    args = _args()
    tile_ir = with_dead_code.specialize(**args)
    want = {k: v.clone() for k, v in args.items()}
    run_kernel(tile_ir, want)
    for arch in ("sm_90a", "sm_100a"):
        ws = lower_to(tile_ir, "barrier", CompileOptions(arch=arch))
        assert not any(ch.name.startswith("unread") for ch in ws.channels), [ch.name for ch in ws.channels]
        # (a pipeline's prologue may repeat an op: count the source lines)
        assert len({op.loc.line for gp in ws.groups for op in gp.all_ops() if op.kind is OpKind.MMA_ASYNC}) == 1
        got = {k: v.clone() for k, v in args.items()}
        assert not simulate(ws, got, seed=1).violations
        assert torch.equal(got["C"], want["C"]), arch
