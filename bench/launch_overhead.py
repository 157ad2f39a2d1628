"""Python work per kernel call after the first, on the CPU path up to the launch (no GPU needed).

A GPU call `kernel(*cuda_tensors)` after the first goes: the call signature's lookup (argument binding cached
per call structure; dtype, shape, strides, device per tensor) → the launch prepared by the first call (through
the operator's CUDA key, or directly when nothing intercepts torch's dispatch: `aref.runtime.torch_library`) →
per tensor its DLPack descriptor (cached per address, alignment checked once) → the stream handle → the DSL's
argument marshalling → the launch. This script runs all of it but the launch on CPU tensors, with the
specialization compiled for sm_90a (or loaded from the disk cache); the target is ≤ 20 µs per call. For
comparison it also times the path before this fast path existed (bind with a frame walk, specialize, launcher
lookup, full argument checks, `from_dlpack` per tensor).

    python bench/launch_overhead.py [--calls N]
"""
import argparse
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from aref.runtime.harness import load_example  # noqa: E402
from aref.runtime import fast_launch, torch_library  # noqa: E402


def per_call_us(fn, calls: int) -> float:
    for _ in range(min(200, calls)):
        fn()
    best = float("inf")
    for _ in range(5):                          # best of 5: the machine is shared
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def ctypes_value(p):
    """A marshalled C argument (a pointer to the argument's value) as the 8 bytes it points to: the stream's
    pointer differs per CUstream object, the handle it points to does not."""
    import ctypes
    return ctypes.c_uint64.from_address(getattr(p, "value", p)).value


def measure(example: str, overrides: dict, calls: int) -> dict:
    from cuda.bindings.driver import CUstream

    from aref.backend.cute.launch import check_arguments, launcher_for

    ex = load_example(os.path.join(ROOT, "examples", f"{example}.py"))
    ex.kernel.configs = None                    # the signature's constants: no tuning run on the CPU
    inputs = ex.inputs("small", **overrides)
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    consts = {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)}
    overload, args = torch_library.operator_call(ex.kernel, **tensors, **consts)
    kop = torch_library.registered_ops()[overload._schema.name.split("::")[1]]
    kernel = kop.specialization(args[:-1], args[-1])
    launcher = launcher_for(kernel, "sm_90a")
    if launcher.compiled is None:
        launcher.compile()                      # compiled for sm_90a without a GPU (or loaded from the cache)
    class UpToTheLaunch(fast_launch.Prepared):
        """The prepared GPU launch minus the launch: on the CPU the DSL only marshals the arguments."""

        def __call__(self, ts):
            self.marshal(ts, 0)

    prepared = UpToTheLaunch(launcher, kop.params, torch.device("cpu"))
    ours = [ctypes_value(p) for p in prepared.marshal(args[:-1], 0)]
    exe, keep = prepared.dsl_marshal(args[:-1], 0)
    dsl = [ctypes_value(p) for p in exe]
    assert ours == dsl, f"the fast marshalling differs from the DSL's: {ours} vs {dsl}"
    ex.kernel(**tensors, **consts)                       # the first call: binds, plans (interprets once)
    plans = [p for b in ex.kernel._torch_binders.values() for p in b.plans.values()]
    for plan in plans:
        plan.direct = prepared                           # as the first CUDA call leaves it
    now = per_call_us(lambda: ex.kernel(**tensors, **consts), calls)
    for plan in plans:
        plan.direct = None

    def via_operator(*op_args):                          # the CUDA implementation (launch_op) minus the launch
        *ts, constants = op_args
        key = torch_library._launch_key(ts, constants)
        (kop.launches.get(key) or prepared)(ts)

    run, kop.run = kop.run, via_operator
    try:
        dispatched = per_call_us(lambda: ex.kernel(**tensors, **consts), calls)
    finally:
        kop.run = run

    def before():                                # the path without the fast path (for comparison)
        t, c = ex.kernel.bind((), {**tensors, **consts})
        k = ex.kernel._specialize(t, c)
        lau = launcher_for(k, "sm_90a")
        check_arguments(lau.ws, t, require_cuda=False, plan=lau.plan)
        lau.compiled.execution_args.generate_execution_args([*lau.arguments(t), CUstream(0)], {})
    return {"example": example, "tensors": len(tensors), "now_us": round(now, 1),
            "dispatched_us": round(dispatched, 1),
            "before_us": round(per_call_us(before, max(calls // 10, 50)), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'example':<16}{'tensors':>8}{'per call (µs)':>15}{'via dispatcher':>16}{'before (µs)':>13}")
    for example, overrides in (("gemm", {}), ("attention_fwd", {}), ("attention_bwd", {})):
        r = measure(example, overrides, args.calls)
        print(f"{r['example']:<16}{r['tensors']:>8}{r['now_us']:>15}{r['dispatched_us']:>16}{r['before_us']:>13}")
    print("target: <= 20 µs per call (CPU work up to the launch; a GPU adds the launch's own cost)")


if __name__ == "__main__":
    main()
