"""Timing kernels on a GPU the way the autotuner and `bench/` need it.

`time_cuda(fn)` runs `fn` a few times to warm up (compilation, caches, clocks), then times each repetition
with CUDA events, writing a buffer larger than the L2 cache before every repetition so that no run finds its
inputs already on chip; it reports the median (robust to clock noise) and the spread. `gpu_arch()` says which
arch the present GPU is, or None without one — the tuner then ranks by the model alone.
"""
from __future__ import annotations

from dataclasses import dataclass

L2_FLUSH_BYTES = 256 << 20      # larger than any current L2 (H100 50 MB, B200 126 MB)


def gpu_arch() -> str | None:
    """The aref arch of CUDA device 0 ("sm_90a", "sm_100a"), or None without a usable GPU."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if not torch.cuda.is_available():
        return None
    from aref.target import arch_of_capability
    return arch_of_capability(tuple(torch.cuda.get_device_capability(0)))


def device_name() -> str:
    """The GPU's name (e.g. "NVIDIA H100 80GB HBM3"), or "cpu"."""
    import torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class Timing:
    """Milliseconds per call: median, minimum and maximum over `reps` repetitions."""

    median_ms: float
    min_ms: float
    max_ms: float
    reps: int

    def to_json(self) -> dict:
        return dict(vars(self))


def time_cuda(fn, *, warmup: int = 10, reps: int = 50, flush_l2: bool = True, budget_ms: float = 2000.0) -> Timing:
    """Time `fn()` (which launches GPU work on the current stream): `warmup` untimed calls, then up to `reps`
    timed ones (fewer when they would exceed `budget_ms`), each after an L2 flush when `flush_l2`."""
    import torch
    stream = torch.cuda.current_stream()
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda") if flush_l2 else None
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    # one timed call to size the run
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    fn()
    end.record(stream)
    torch.cuda.synchronize()
    once = max(start.elapsed_time(end), 1e-3)
    n = max(3, min(reps, int(budget_ms / once)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        if flush is not None:
            flush.zero_()           # evicts the inputs from L2; not inside the timed window
        starts[i].record(stream)
        fn()
        ends[i].record(stream)
    torch.cuda.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return Timing(ms[len(ms) // 2], ms[0], ms[-1], n)
