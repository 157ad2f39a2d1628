"""Warm starts: make a kernel's specialization launch-ready without launching it (generate its CuTe DSL
module, then compile it or load it from the on-disk cache `aref.backend.cute.binary_cache`)."""
from __future__ import annotations

import time

from aref.target import DEFAULT_ARCH


def prepare(kfn, *args, arch: str = DEFAULT_ARCH, options=None, **kwargs):
    """Make the specialization of `kfn` for these arguments (any device: meta tensors will do) launch-ready
    for `arch` without launching it: generate, compile or load from the disk cache. Returns the compiled
    function and the seconds it took (what a warm process pays before its first launch)."""
    from aref.backend.cute.launch import launcher_for
    from aref.tune.space import SHAPE_DEVICES
    start = time.perf_counter()
    tensors, constexprs = kfn.bind(args, kwargs, SHAPE_DEVICES)
    launcher = launcher_for(kfn._specialize(tensors, constexprs), arch, options)
    if launcher.compiled is None:
        launcher.compile()
    return launcher.compiled, time.perf_counter() - start
