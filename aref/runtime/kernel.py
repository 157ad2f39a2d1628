"""`@aref_kernel`: the decorator that turns a tile program into a compilable, runnable kernel."""
from __future__ import annotations

import inspect

from aref.errors import ArefError, ArefSyntaxError, ArefTypeError, SrcInfo
from aref.guard import as_aref_error, user_facing
from aref.ir import DType, Kernel
from aref.lang.trace import active, user_loc
from aref.tune.space import SHAPE_DEVICES, SUPPORTED_DEVICES


class KernelFunction:
    """A decorated tile program. Call it with torch tensors (positional) and compile-time constants
    (keyword-only parameters): on CPU tensors it runs the reference interpreter.

    `specialize(*tensors, **constexprs)` returns the verified Tile IR for those argument shapes and dtypes.

    With `configs` (a list of `aref.Config`, as Triton's `@triton.autotune`), launches on a GPU choose the
    constants the caller did not pass and the compiler / launch options by autotuning (`aref.tune`), once
    per `key` (the names of the tensors whose shapes and dtypes, and constants whose values, select a
    tuning; None: all of them); `tune(...)` runs the tuner explicitly. The CPU interpreter uses the
    signature's defaults (any configuration computes the same function).
    """

    def __init__(self, fn, grid=None, configs=None, key=None, tune_options=None):
        if not inspect.isfunction(fn):
            raise TypeError("@aref_kernel decorates a function")
        self.fn = fn
        self.grid = grid
        self.configs = list(configs) if configs is not None else None
        self.key = list(key) if key is not None else None
        self.tune_options = tune_options
        self._tuned: dict = {}
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._parsed = None
        self._cache: dict = {}

    @property
    def parsed(self):
        if self._parsed is None:
            from aref.lang.frontend import parse
            self._parsed = parse(self.fn)
        return self._parsed

    @property
    def def_loc(self) -> SrcInfo:
        """The kernel's `def` line."""
        return SrcInfo(self.parsed.filename, self.parsed.def_line or self.fn.__code__.co_firstlineno)

    def _not_inside_a_kernel(self, loc) -> None:
        tracer = active()
        if tracer is not None:
            what = "itself" if tracer.kernel_name == self.__name__ else f"another @aref_kernel ({self.__name__})"
            raise ArefSyntaxError(f"kernel @{tracer.kernel_name} calls {what}: kernels cannot call kernels", loc,
                                  hint="move the shared code into a plain Python function (no decorator) and "
                                       "call that: it is traced inline")

    def bind(self, args, kwargs, devices=SUPPORTED_DEVICES):
        """Split call arguments into tensors (by parameter name) and constexprs (with defaults)."""
        import torch
        loc = user_loc()
        self._not_inside_a_kernel(loc)
        if loc.line == 0:          # called from aref itself (the command line): name the kernel's definition
            loc = self.def_loc
        p = self.parsed
        if len(args) > len(p.tensor_params):
            raise ArefTypeError(f"{self.__name__} takes {len(p.tensor_params)} tensor arguments "
                                f"({', '.join(p.tensor_params)}) but got {len(args)}", loc,
                                hint="pass compile-time constants by keyword")
        tensors = dict(zip(p.tensor_params, args))
        constexprs = {}
        for k, v in kwargs.items():
            if k in p.tensor_params:
                if k in tensors:
                    raise ArefTypeError(f"{self.__name__} got argument '{k}' twice", loc,
                                        hint="pass each tensor once, by position or by name")
                tensors[k] = v
            elif k in p.constexpr_params:
                constexprs[k] = v
            else:
                raise ArefTypeError(f"{self.__name__} has no parameter '{k}'", loc,
                                    hint=f"its parameters: tensors {', '.join(p.tensor_params) or '(none)'}; "
                                         f"compile-time constants {', '.join(p.constexpr_params) or '(none)'}")
        for name in p.tensor_params:
            if name not in tensors:
                raise ArefTypeError(f"{self.__name__} is missing tensor argument '{name}'", loc,
                                    hint=f"pass every tensor: {self.__name__}({', '.join(p.tensor_params)})")
            if not isinstance(tensors[name], torch.Tensor):
                raise ArefTypeError(
                    f"argument '{name}' must be a torch tensor, got {type(tensors[name]).__name__}", loc,
                    hint="scalars are compile-time constants: make them keyword-only parameters")
        for name, default in p.constexpr_params.items():
            if name not in constexprs:
                if default is inspect.Parameter.empty:
                    raise ArefTypeError(f"{self.__name__} needs compile-time constant '{name}'", loc,
                                        hint=f"pass it by keyword: {self.__name__}(..., {name}=...)")
                constexprs[name] = default
            v = constexprs[name]
            if not isinstance(v, (int, float, bool, str, DType, type(None))):
                raise ArefTypeError(f"compile-time constant '{name}' must be a number, bool, string or aref "
                                    f"dtype, got {type(v).__name__}", loc,
                                    hint="tensors are positional parameters; keyword-only ones are constants")
            self._check_declared_type(name, v, loc)
        self._check_devices(tensors, loc, devices)
        return tensors, constexprs

    def _check_declared_type(self, name: str, value, loc) -> None:
        """A constant declared `NAME: int` must be an integer (a float tile size would make fractional
        tiles and float loop bounds); `NAME: float` takes any number."""
        if value is None:
            return
        ann = inspect.signature(self.fn).parameters[name].annotation
        ann = {"int": int, "float": float, "bool": bool}.get(ann, ann) if isinstance(ann, str) else ann
        decl = f"line {self.def_loc.line}"
        if ann is int and (not isinstance(value, int) or isinstance(value, bool)):
            raise ArefTypeError(f"compile-time constant {name} is declared `{name}: int` (@{self.__name__}, "
                                f"{decl}) but got {value!r}", loc,
                                hint=f"pass an integer, e.g. {name}={int(value) if isinstance(value, float) else 64}")
        if ann is float and not isinstance(value, (int, float)) or ann is bool and not isinstance(value, bool):
            raise ArefTypeError(f"compile-time constant {name} is declared `{name}: {ann.__name__}` "
                                f"(@{self.__name__}, {decl}) but got {value!r}", loc,
                                hint=f"pass a {ann.__name__}")

    def _check_devices(self, tensors: dict, loc, allowed=SUPPORTED_DEVICES) -> None:
        devices = {t.device.type for t in tensors.values()}
        bad = sorted(devices - set(allowed))
        if bad:
            names = [n for n, t in tensors.items() if t.device.type in bad]
            raise ArefTypeError(f"tensor {names[0]} is on device '{bad[0]}'; aref runs kernels on 'cpu' tensors "
                                f"(the reference interpreter) or 'cuda' tensors (a GPU)", loc,
                                hint="move the tensors with .to('cpu') or .to('cuda')")
        if len(devices) > 1:
            where = ", ".join(f"{n} on {t.device}" for n, t in tensors.items())
            raise ArefTypeError(f"the tensors are on different devices ({where})", loc,
                                hint="put every tensor argument on the same device")

    def _specialize(self, tensors, constexprs) -> Kernel:
        from aref.lang.frontend import tensor_type, trace
        loc = user_loc()
        if loc.line == 0:
            loc = self.def_loc
        types = {n: tensor_type(n, t, loc) for n, t in tensors.items()}
        key = (tuple(sorted((n, t) for n, t in types.items())), tuple(sorted(constexprs.items(), key=str)))
        kernel = self._cache.get(key)
        if kernel is None:
            try:
                grid = self.grid(**tensors, **constexprs) if callable(self.grid) else self.grid
                kernel = trace(self.fn, self.parsed, types, constexprs, grid)
            except ArefError:
                raise
            except Exception as exc:  # noqa: BLE001 - the user's kernel code (or aref) raised while tracing
                zero = [k for k, v in constexprs.items() if isinstance(v, (int, float)) and v == 0
                        and not isinstance(v, bool)]
                hint = None
                if isinstance(exc, ZeroDivisionError) and zero:
                    hint = (f"compile-time constant{'s' if len(zero) > 1 else ''} "
                            f"{', '.join(f'{k}=0' for k in zero)}: a tile size or divisor must be positive")
                raise as_aref_error(exc, "the frontend (tracing)", self.def_loc, hint) from None
            self._cache[key] = kernel
        return kernel

    @user_facing
    def specialize(self, *args, **kwargs) -> Kernel:
        """Tile IR of this kernel for the given arguments (cached per shapes, dtypes and constants; meta
        tensors do)."""
        tensors, constexprs = self.bind(args, kwargs, SHAPE_DEVICES)
        return self._specialize(tensors, constexprs)

    def __call__(self, *args, **kwargs):
        """Run on the given tensors, through the kernel's PyTorch operator (`aref.runtime.torch_library`):
        CPU tensors run the reference interpreter, CUDA tensors the compiled kernel, meta and fake tensors
        only check the arguments; outputs are written in place. Under `torch.compile` the call is one
        operator of the graph."""
        from aref.runtime.torch_library import call
        call(self, args, kwargs)

    def search_space(self) -> list:
        """The tuning candidates: `configs`, or one derived from the constants' defaults."""
        from aref.tune.space import default_space
        return self.configs if self.configs is not None else default_space(
            {k: v for k, v in self.parsed.constexpr_params.items() if v is not inspect.Parameter.empty})

    @user_facing
    def tune(self, *args, options=None, reference=None, tolerance=None, progress=None, **kwargs):
        """Autotune for these arguments (tensors; constants passed here are held fixed) and return the
        `aref.tune.TuneResult`. Without a GPU (or with meta / CPU tensors) the timing model ranks."""
        from aref.tune import tune
        tensors, _ = self.bind(args, kwargs, SHAPE_DEVICES)
        given = {k: v for k, v in kwargs.items() if k in self.parsed.constexpr_params}
        return tune(self, tensors, given, self.search_space(), options or self.tune_options, reference=reference,
                    tolerance=tolerance, progress=progress)

    def _tuned_config(self, tensors: dict, given: dict):
        """The tuned configuration for a launch, from memory, the disk cache or a tuning run."""
        names = self.key
        memo = (tuple(sorted((n, tuple(t.shape), str(t.dtype)) for n, t in tensors.items()
                             if names is None or n in names)),
                tuple(sorted((n, repr(v)) for n, v in given.items() if names is None or n in names)))
        cfg = self._tuned.get(memo)
        if cfg is None:
            from aref.tune import tune
            result = tune(self, tensors, given, self.search_space(), self.tune_options)
            if result.best is None:
                reasons = "; ".join(sorted({c.reason for c in result.candidates if c.reason}))[:600]
                raise ArefError(f"no tuning configuration of {self.__name__} compiles for these shapes: {reasons}",
                                SrcInfo(self.fn.__code__.co_filename, self.fn.__code__.co_firstlineno),
                                hint="add configurations that fit (smaller tiles or depths)")
            cfg = self._tuned[memo] = result.best
        return cfg

    def __repr__(self) -> str:
        return f"<aref kernel {self.__name__}>"


def aref_kernel(fn=None, *, grid=None, configs=None, key=None, tune_options=None):
    """Decorate a tile program: `@aref_kernel`, `@aref_kernel(grid=lambda A, C, BM, **_: (...))`, or with
    autotuning `@aref_kernel(configs=[aref.Config.of({"BN": 256}), ...], key=["A", "B"])`.

    Positional parameters are torch tensors; keyword-only parameters are compile-time constants. The grid
    is inferred from stores at `program_id` coordinates unless `grid` (a tuple, or a function of the
    arguments) is given. `configs` / `key` / `tune_options` (an `aref.tune.TuneOptions`): see
    `KernelFunction`.
    """
    def make(f):
        return KernelFunction(f, grid, configs, key, tune_options)
    return make if fn is None else make(fn)


def autotune(configs=None, key=None, **options):
    """`@aref.autotune(configs=[...], key=[...])` above `@aref_kernel`: the same as passing `configs` and
    `key` to `aref_kernel`; keyword `options` are `aref.tune.TuneOptions` fields (top_k, reps, …)."""
    def wrap(k):
        kfn = k if isinstance(k, KernelFunction) else KernelFunction(k)
        kfn.configs = list(configs) if configs is not None else None
        kfn.key = list(key) if key is not None else None
        if options:
            from aref.tune import TuneOptions
            kfn.tune_options = TuneOptions(**options)
        return kfn
    return wrap
