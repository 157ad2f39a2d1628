"""Time FlashAttention-4's CuTe kernels in their own environment (`bench/gpu.py --fa4-python PY`).

FA4 (the `fa4` package, `flash_attn.cute`) 4.0.0b3 is built against an older CuTe DSL than aref's, so it
cannot share aref's process. `bench/gpu.py` runs this script with that environment's python, one problem per
call: a JSON request on stdin ({"bh", "seq", "d", "causal", "backward", "dtype"}), a JSON answer on the last
line of stdout: {"ms": median, "check": {"ok", "max_abs_err"}} or {"error": "..."}. The output is checked
against the same blockwise fp32 reference (`attn_ref`) before it is timed, with the same timing method
(CUDA events, L2 flushed) as aref's kernels; this script imports torch and FA4 only, never aref.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    req = json.loads(sys.stdin.read())
    try:
        import torch
        from flash_attn.cute.interface import flash_attn_func

        import attn_ref
    except ImportError as exc:
        print(json.dumps({"error": f"FA4 not importable here: {exc}"}))
        return 0
    dtype = getattr(torch, req.get("dtype", "float16"))
    t = attn_ref.inputs(req["bh"], req["seq"], req["d"], dtype, grad=req["backward"])
    q, k, v = (t[n].transpose(0, 1)[None].contiguous() for n in ("Q", "K", "V"))     # (1, seq, heads, d)

    def first(x):
        return x[0] if isinstance(x, tuple) else x

    if req["backward"]:
        ref = attn_ref.backward(t["Q"], t["K"], t["V"], t["dO"], req["causal"])
        q, k, v = (x.requires_grad_() for x in (q, k, v))
        o = first(flash_attn_func(q, k, v, causal=req["causal"]))
        do = t["dO"].transpose(0, 1)[None].contiguous()

        def run():
            return torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        got = run()
        pairs = [(got[0][0].transpose(0, 1).float(), ref["dQ"]), (got[1][0].transpose(0, 1), ref["dK"]),
                 (got[2][0].transpose(0, 1), ref["dV"])]
    else:
        ref_o = attn_ref.forward(t["Q"], t["K"], t["V"], req["causal"])[0]

        def run():
            return first(flash_attn_func(q, k, v, causal=req["causal"]))
        pairs = [(run()[0].transpose(0, 1), ref_o)]
    ok, err = True, 0.0
    for a, r in pairs:
        e = (a.float() - r.float()).abs()
        err = max(err, float(e.max()))
        ok = ok and bool((e <= 1e-2 + 1e-2 * r.float().abs()).all())
    if not ok:
        print(json.dumps({"check": {"ok": False, "max_abs_err": err}, "ms": None}))
        return 0
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(10):
        run()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(30)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(30)]
    for s, e in zip(starts, ends):
        flush.zero_()
        s.record()
        run()
        e.record()
    torch.cuda.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    print(json.dumps({"ms": ms[len(ms) // 2], "check": {"ok": True, "max_abs_err": err}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
