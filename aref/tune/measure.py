"""The autotuner's GPU step: compile the model's best candidates, check their outputs, time them.

Each candidate is compiled and launched once on fresh copies of the tensors; its outputs must match the
reference (or, without one, the first candidate's outputs: every configuration computes the same function)
before it is timed with `aref.tune.gpu.time_cuda`. A candidate that fails to compile, launch or match is
recorded as "failed" with the reason, never silently dropped.
"""
from __future__ import annotations

from dataclasses import replace

from aref.errors import ArefError
from aref.ir import OpKind


def output_names(ws) -> list[str]:
    """Tensor parameters a Barrier IR kernel stores into."""
    params = {id(p.value): p.name for p in ws.params}
    names = []
    for gp in ws.groups:
        for op in gp.all_ops():
            if op.kind is OpKind.STORE:
                n = params.get(id(op.operands[0]))
                if n is not None and n not in names:
                    names.append(n)
    return names


def fresh(tensors: dict) -> dict:
    """Copies of the tensors (outputs start as given: a reduce-add store accumulates into them)."""
    return {n: t.clone() for n, t in tensors.items()}


def measure_candidates(cands: list, tensors: dict, arch: str, options, reference=None, tolerance=None,
                       progress=None) -> list:
    """`cands` (best first by the model) with `measured` set, or `status="failed"` and a reason."""
    expected = reference(fresh(tensors)) if reference is not None else None
    out = []
    for i, c in enumerate(cands):
        done = _measure_one(c, tensors, arch, options, expected, tolerance)
        if expected is None and done.status == "ok":
            expected = done.outputs               # the first good candidate is the yardstick of the rest
        out.append(replace(done, outputs=None))
        if progress is not None:
            progress(i + 1, len(cands), f"timed {c.config.label()}")
    return out


def _measure_one(c, tensors: dict, arch: str, options, expected, tolerance):
    import torch

    from aref.backend.cute.launch import check_arguments, launcher_for
    from aref.outputs import compare
    from aref.tune.gpu import time_cuda
    cfg = c.config
    try:
        launcher = launcher_for(c.kernel, arch, cfg.compile_options(arch), **cfg.launch_kwargs(arch))
        args = fresh(tensors)
        check_arguments(launcher.ws, args)
        launcher(args)
        torch.cuda.synchronize()
        got = {n: args[n].clone() for n in output_names(launcher.ws)}
        if expected is not None:
            report = compare(got, {n: expected[n] for n in got if n in expected}, tolerance)
            if not report.ok:
                return replace(c, status="failed", stage="gpu",
                               reason=f"output differs from the reference (max |err| {report.max_abs_err:.3g})")
        timing = time_cuda(launcher.bound(args), warmup=options.warmup, reps=options.reps,
                           flush_l2=options.flush_l2)
        return replace(c, measured=timing, outputs=got)
    except (ArefError, RuntimeError, ValueError) as err:
        return replace(c, status="failed", stage="gpu", reason=f"{type(err).__name__}: {err}")
