"""Loading example files (`FILE[:KERNEL]`) and checking a backend's outputs against `reference(...)`.

The example convention (README): a module defines one or more `@aref_kernel` functions,
`example_inputs(size="small", **overrides) -> dict` of kernel arguments (tensors, outputs included, and
compile-time constants), and `reference(**inputs) -> dict` of expected outputs by argument name. A file with
several kernels may define `example_inputs_<kernel>` / `reference_<kernel>` for each.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field

import torch

from aref.errors import ArefError
from aref.kernel import KernelFunction

# Allowed error of a backend's output vs the fp32 torch reference, by output dtype: (atol, rtol).
TOLERANCE = {
    torch.float32: (2e-3, 2e-3),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (4e-2, 4e-2),
    torch.float8_e4m3fn: (1.25e-1, 1.25e-1),
    torch.float8_e5m2: (2.5e-1, 2.5e-1),
}


@dataclass
class Example:
    path: str
    module: object
    kernel: KernelFunction
    inputs_fn: object
    reference_fn: object

    @property
    def name(self) -> str:
        return self.kernel.__name__

    def inputs(self, size: str = "small", **overrides) -> dict:
        return self.inputs_fn(size=size, **overrides)

    def tolerance(self, inputs: dict) -> dict | None:
        """Allowed error per output, {name: (atol, rtol)}: the module's `tolerance(**inputs)` (error bounds
        that depend on the problem, e.g. the accumulation length), else its `TOLERANCE` dict, else None
        (by output dtype, see `TOLERANCE` here)."""
        fn = getattr(self.module, f"tolerance_{self.name}", None) or getattr(self.module, "tolerance", None)
        if callable(fn):
            return fn(**inputs)
        return getattr(self.module, "TOLERANCE", None)


def load_module(path: str):
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise ArefError(f"no such file: {path}")
    name = "aref_user_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def kernels_of(module) -> dict[str, KernelFunction]:
    return {k: v for k, v in vars(module).items() if isinstance(v, KernelFunction)}


def load_example(target: str) -> Example:
    """`path/to/file.py` or `path/to/file.py:kernel_name`."""
    path, _, kname = target.partition(":") if not os.path.exists(target) else (target, "", "")
    module = load_module(path)
    kernels = kernels_of(module)
    if not kernels:
        raise ArefError(f"{path} defines no @aref_kernel function")
    if kname:
        if kname not in kernels:
            raise ArefError(f"{path} has no kernel '{kname}'; it defines: {', '.join(kernels)}")
        kernel = kernels[kname]
    else:
        kernel = next(iter(kernels.values()))
    inputs_fn = getattr(module, f"example_inputs_{kernel.__name__}", None) or getattr(module, "example_inputs",
                                                                                      None)
    reference_fn = getattr(module, f"reference_{kernel.__name__}", None) or getattr(module, "reference", None)
    return Example(path, module, kernel, inputs_fn, reference_fn)


@dataclass
class OutputCheck:
    name: str
    shape: tuple
    dtype: str
    max_abs_err: float
    atol: float
    rtol: float
    ok: bool


@dataclass
class RunReport:
    ok: bool
    max_abs_err: float
    outputs: list[OutputCheck] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"ok": self.ok, "max_abs_err": self.max_abs_err,
                "outputs": [vars(o) for o in self.outputs]}


def compare(actual: dict, expected: dict, tolerance: dict | None = None) -> RunReport:
    """Check each expected output: |actual − expected| ≤ atol + rtol·|expected| everywhere. A tolerance may
    be (atol, rtol) or (atol, rtol, scaled): `scaled`·max|expected| adds to atol, for errors that scale with
    the output's magnitude rather than each element's (accumulation in a tensor core)."""
    checks = []
    for name, ref in expected.items():
        out = actual[name]
        tol = (tolerance or {}).get(name) or TOLERANCE.get(ref.dtype, (1e-2, 1e-2))
        atol, rtol = tol[0], tol[1]
        a, r = out.float(), ref.float()
        if len(tol) > 2 and r.numel():
            atol = atol + tol[2] * float(r.abs().nan_to_num(0.0).max())
        err = (a - r).abs()
        bad = ~(err <= atol + rtol * r.abs())  # NaN counts as a failure
        max_err = float(err.nan_to_num(float("inf")).max()) if err.numel() else 0.0
        checks.append(OutputCheck(name, tuple(out.shape), str(out.dtype).replace("torch.", ""), max_err, atol,
                                  rtol, not bool(bad.any())))
    return RunReport(all(c.ok for c in checks), max((c.max_abs_err for c in checks), default=0.0), checks)


def run_interpreter(example: Example, inputs: dict) -> RunReport:
    """Run the kernel on the interpreter (in place on copies of the inputs) and compare with reference."""
    args = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    example.kernel(**args)
    expected = example.reference_fn(**{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                       for k, v in inputs.items()})
    return compare(args, expected, example.tolerance(inputs))
