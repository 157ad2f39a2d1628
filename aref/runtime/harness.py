"""Loading example files (`FILE[:KERNEL]`) and checking a backend's outputs against `reference(...)`.

The example convention (README): a module defines one or more `@aref_kernel` functions,
`example_inputs(size="small", **overrides) -> dict` of kernel arguments (tensors, outputs included, and
compile-time constants), and `reference(**inputs) -> dict` of expected outputs by argument name. A file with
several kernels may define `example_inputs_<kernel>` / `reference_<kernel>` for each. An `example_inputs` with
a parameter named `arch` is told the target the command compiles for (`Example.inputs`), so the constants it
returns can fit that target (a block size that fits a B200's shared memory as well as an H100's).
"""
from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import torch

from aref import examples
from aref.errors import UNKNOWN_LOC, ArefError, ExampleError, SrcInfo
from aref.guard import as_aref_error, guarded
from aref.outputs import ALL_OUTPUTS, RunReport, compare
from aref.runtime.kernel import KernelFunction
from aref.tune.calibrate import Sample

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

    def inputs(self, size: str = "small", arch: str | None = None, **overrides) -> dict:
        """`example_inputs(size, **overrides)`, checked: a dict holding every tensor argument of the kernel.
        An exception raised inside it is an `ArefError` at the example's line that raised it. `arch`: the
        target the inputs are for (the commands pass their `--arch`), given to an `example_inputs` that has
        a parameter of that name (its constants may depend on the target); None: the example's defaults."""
        if self.inputs_fn is None:
            raise ExampleError(f"{self.path} defines no example_inputs() for @{self.name}",
                               SrcInfo(self.path, self.kernel.fn.__code__.co_firstlineno),
                               hint="define example_inputs(size='small', **overrides) returning the kernel's "
                                    "arguments by name (see the README's example convention)")
        if arch is not None and self.takes_arch:
            overrides = {**overrides, "arch": arch}
        call = ", ".join([f"size={size!r}"] + [f"{k}={v!r}" for k, v in overrides.items()])
        hint = (f"example_inputs({call}) raised it: check the --set values" if overrides else None)
        _check_signature(self.inputs_fn, {"size": size, **overrides}, "example_inputs(size='small', **overrides)")
        with guarded("example_inputs", hint=hint):
            out = self.inputs_fn(size=size, **overrides)
        fn_name = getattr(self.inputs_fn, "__name__", "example_inputs")
        if not isinstance(out, dict):
            raise ExampleError(f"{fn_name}() returned a {type(out).__name__}; it must return a dict of "
                               f"@{self.name}'s arguments by name", _return_loc(self.inputs_fn),
                               hint=f"return {{{', '.join(repr(p) for p in self.kernel.parsed.tensor_params)}"
                                    f": tensor, ...}}")
        missing = [p for p in self.kernel.parsed.tensor_params if p not in out]
        if missing:
            raise ExampleError(f"{fn_name}() returned no {', '.join(repr(m) for m in missing)}, "
                               f"{'an argument' if len(missing) == 1 else 'arguments'} of @{self.name}",
                               _return_loc(self.inputs_fn),
                               hint=f"return every tensor argument: {', '.join(self.kernel.parsed.tensor_params)}")
        return out

    @property
    def takes_arch(self) -> bool:
        """Does `example_inputs` name a parameter `arch` (the target its constants are chosen for)?"""
        import inspect
        try:
            return "arch" in inspect.signature(self.inputs_fn).parameters
        except (TypeError, ValueError):
            return False

    def reference(self, **inputs) -> dict:
        """`reference(**inputs)`, checked: a dict from output argument names to tensors of their shapes."""
        import torch
        if self.reference_fn is None:
            raise ExampleError(f"{self.path} defines no reference() for @{self.name}",
                               SrcInfo(self.path, self.kernel.fn.__code__.co_firstlineno),
                               hint="define reference(**inputs) returning the expected outputs by argument name")
        _check_signature(self.reference_fn, inputs, "reference(**inputs)")
        with guarded("reference"):
            out = self.reference_fn(**inputs)
        fn_name = getattr(self.reference_fn, "__name__", "reference")
        where = _return_loc(self.reference_fn)
        params = self.kernel.parsed.tensor_params
        if not isinstance(out, dict):
            raise ExampleError(f"{fn_name}() returned a {type(out).__name__}; it must return a dict of "
                               f"expected outputs by argument name", where,
                               hint=f"return e.g. {{{params[-1]!r}: tensor}}" if params else None)
        if not out:
            raise ExampleError(f"{fn_name}() returned no outputs, so nothing would be checked", where,
                               hint=f"return the expected outputs, e.g. {{{params[-1]!r}: tensor}}"
                               if params else None)
        for name, ref in out.items():
            if name not in params:
                raise ExampleError(f"{fn_name}() returned {name!r}, which is not an argument of @{self.name} "
                                   f"({', '.join(params)})", where,
                                   hint="key each expected output by the name of the kernel argument it is "
                                        "written to")
            if not isinstance(ref, torch.Tensor):
                raise ExampleError(f"{fn_name}()[{name!r}] is a {type(ref).__name__}, not a tensor", where,
                                   hint="return torch tensors (torch.from_numpy(x) converts a NumPy array)")
            actual = inputs[name]
            if tuple(ref.shape) != tuple(actual.shape):
                raise ExampleError(f"{fn_name}()[{name!r}] has shape {tuple(ref.shape)}, but the kernel writes "
                                   f"{name} of shape {tuple(actual.shape)}", where,
                                   hint=f"return a tensor shaped like the argument {name}")
        return out

    def tolerance(self, inputs: dict) -> dict | None:
        """Allowed error per output, {name: (atol, rtol)}: the module's `tolerance(**inputs)` (error bounds
        that depend on the problem, e.g. the accumulation length), else its `TOLERANCE` dict, else None
        (by output dtype, see `aref.outputs.TOLERANCE`)."""
        fn = getattr(self.module, f"tolerance_{self.name}", None) or getattr(self.module, "tolerance", None)
        if callable(fn):
            code = getattr(fn, "__code__", None)
            where = SrcInfo(code.co_filename, code.co_firstlineno) if code else UNKNOWN_LOC
            return _tolerances(fn(**inputs), f"{fn.__name__}()", where)
        table = getattr(self.module, "TOLERANCE", None)
        return None if table is None else _tolerances(table, "TOLERANCE", SrcInfo(str(self.path), 1))


def _tolerances(table, what: str, where) -> dict | None:
    """{output: (atol, rtol[, scaled])} from what an example gives: per output a tuple of 2 or 3 numbers, or
    one number standing for both atol and rtol (as `torch.testing.assert_close(atol=x, rtol=x)`); a bare tuple
    or number is every output's (key `ALL_OUTPUTS`); None keeps the defaults by output dtype."""
    shape = ("{output name: (atol, rtol)}, (atol, rtol, scaled) or one number for both per output, or one "
             "tolerance for every output")
    if table is None:                       # the defaults by output dtype
        return None
    if isinstance(table, (int, float, tuple, list)) and not isinstance(table, bool):
        table = {ALL_OUTPUTS: table}        # one tolerance for every output
    if not isinstance(table, dict):
        raise ExampleError(f"{what} gives a {type(table).__name__}, not a dict of tolerances", where,
                           hint=f"return {shape}")
    out = {}
    for name, tol in table.items():
        if isinstance(tol, (int, float)) and not isinstance(tol, bool):
            tol = (float(tol), float(tol))
        ok = isinstance(tol, (tuple, list)) and len(tol) in (2, 3) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in tol)
        if not ok:
            raise ExampleError(f"{what}[{name!r}] is {tol!r}, not a tolerance", where,
                               hint=f"give {shape}, all ≥ 0")
        out[name] = tuple(float(x) for x in tol)
    return out


def _check_signature(fn, kwargs: dict, convention: str) -> None:
    """`fn` accepts these keyword arguments, or an ExampleError at its `def` line naming what it lacks."""
    import inspect
    try:
        inspect.signature(fn).bind(**kwargs)
    except TypeError as exc:
        code = getattr(fn, "__code__", None)
        loc = SrcInfo(code.co_filename, code.co_firstlineno) if code else UNKNOWN_LOC
        raise ExampleError(f"{getattr(fn, '__name__', 'the function')}() cannot take the arguments aref passes "
                           f"({', '.join(kwargs)}): {exc}", loc,
                           hint=f"follow the example convention: {convention}; add **_ to ignore extra "
                                f"arguments") from None


def _return_loc(fn) -> SrcInfo:
    """The line of `fn`'s (last) return statement, else its `def` line."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return UNKNOWN_LOC
    line = code.co_firstlineno
    try:
        import ast
        import inspect
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        rets = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Return)]
        if rets:
            line = first - 1 + max(rets)
    except (OSError, SyntaxError, TypeError):
        pass
    return SrcInfo(code.co_filename, line)


def load_module(path: str):
    """Import a user's example file; a syntax error or an exception at import names the file's line."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise ExampleError(f"no such file: {path}", hint="give the path of a Python file defining an "
                                                        "@aref_kernel function, or a built-in example's name: "
                                                        + ", ".join(examples.names()))
    name = "aref_user_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ExampleError(f"{path} is not a Python file", hint="give a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.append(folder)           # as for a script: the file may import modules beside it
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise ExampleError(f"syntax error in {os.path.basename(path)}: {exc.msg}",
                           SrcInfo(exc.filename or path, exc.lineno or 0, max(0, (exc.offset or 1) - 1)),
                           hint="fix the Python syntax at this line") from None
    except ArefError as err:
        sys.modules.pop(name, None)
        raise err.with_traceback(None) from None
    except Exception as exc:  # noqa: BLE001 - the user's module raised while importing
        sys.modules.pop(name, None)
        raise as_aref_error(exc, "import of the example file").with_traceback(None) from None
    return module


def kernels_of(module) -> dict[str, KernelFunction]:
    return {k: v for k, v in vars(module).items() if isinstance(v, KernelFunction)}


def load_example(target: str) -> Example:
    """`path/to/file.py` or `path/to/file.py:kernel_name`; a built-in example by name (`gemm`,
    `attention_fwd:attention_fwd`) where no such file exists."""
    path, _, kname = target.rpartition(":") if ":" in target and not os.path.exists(target) else (target, "", "")
    if not os.path.exists(path) and examples.path(path) is not None:
        path = examples.path(path)
    module = load_module(path)
    kernels = kernels_of(module)
    if not kernels:
        raise ExampleError(f"{path} defines no @aref_kernel function",
                           hint="decorate the kernel with @aref.aref_kernel (see the README)")
    if kname:
        if kname not in kernels:
            raise ExampleError(f"{path} has no kernel '{kname}'; it defines: {', '.join(kernels)}",
                               hint=f"use {path}:{next(iter(kernels))}")
        kernel = kernels[kname]
    else:
        kernel = next(iter(kernels.values()))
    inputs_fn = getattr(module, f"example_inputs_{kernel.__name__}", None) or getattr(module, "example_inputs",
                                                                                      None)
    reference_fn = getattr(module, f"reference_{kernel.__name__}", None) or getattr(module, "reference", None)
    for what, fn in (("example_inputs", inputs_fn), ("reference", reference_fn)):
        if fn is not None and not callable(fn):
            raise ExampleError(f"{what} in {path} is a {type(fn).__name__}, not a function",
                               hint=f"define `def {what}(...)` (see the README's example convention)")
    return Example(path, module, kernel, inputs_fn, reference_fn)


def run_interpreter(example: Example, inputs: dict) -> RunReport:
    """Run the kernel on the interpreter (in place on copies of the inputs) and compare with reference."""
    args = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    example.kernel(**args)
    expected = example.reference(**{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                    for k, v in inputs.items()})
    return compare(args, expected, example.tolerance(inputs))


# ------------------------------------------------------------------------------ measured configurations
EXAMPLES_DIR = Path(examples.DIR)            # the built-in examples (they ship in the package)
# record options that steer the launch, not the compiler (the timing model does not price a cluster's multicast)
BACKEND_OPTIONS = ("persistent", "ctas", "raster", "epilogue_overlap", "cluster")


def rebuild(record: dict, examples_dir: str | os.PathLike = EXAMPLES_DIR) -> Sample:
    """The Barrier IR of a measured configuration (raises `ArefError` when it no longer compiles)."""
    import torch

    from aref.compiler import CompileOptions
    from aref.search import lower_to
    from aref.tune.perf import kernel_flops
    example = load_example(os.path.join(str(examples_dir), f"{record['example']}.py"))
    with torch.device("meta"):                  # shapes and dtypes only: no data is allocated
        inputs = example.inputs(record.get("size", "large"), **record.get("overrides", {}))
    kernel = example.kernel.specialize(**inputs)
    opts = dict(record.get("options", {}))
    launch = {k: opts.pop(k) for k in BACKEND_OPTIONS if k in opts}
    ws = lower_to(kernel, "barrier", CompileOptions(**opts))
    consts = example.kernel.parsed.constexpr_params
    shape = " ".join(f"{k}={v}" for k, v in sorted(record.get("overrides", {}).items()) if k not in consts)
    problem = f"{record['example']} {record.get('size', 'large')} {shape}".strip()
    return Sample(record, ws, kernel_flops(kernel), bool(launch.get("persistent", False)), launch.get("ctas"),
                  problem, int(launch.get("raster", 0)), bool(launch.get("epilogue_overlap", False)))


def measured_samples(records: list[dict], examples_dir=EXAMPLES_DIR) -> tuple[list[Sample], list[str]]:
    """Samples of the records that ran (`ok` with a time), and why others were left out."""
    from aref.errors import ArefError
    samples, skipped = [], []
    for r in records:
        if not r.get("ok") or not r.get("ms"):
            skipped.append(f"{r.get('example')} {r.get('overrides')}: not measured ({(r.get('error') or '')[:60]})")
            continue
        try:
            samples.append(rebuild(r, examples_dir))
        except ArefError as err:
            skipped.append(f"{r.get('example')} {r.get('overrides')}: no longer compiles ({err.message})")
    return samples, skipped
