"""`@aref_kernel`: the decorator that turns a tile program into a compilable, runnable kernel."""
from __future__ import annotations

import inspect

from aref.errors import ArefError, ArefSyntaxError, ArefTypeError, SrcInfo
from aref.guard import as_aref_error, user_facing
from aref.ir import DType, Kernel
from aref.trace import active, user_loc

SUPPORTED_DEVICES = ("cpu", "cuda")


class KernelFunction:
    """A decorated tile program. Call it with torch tensors (positional) and compile-time constants
    (keyword-only parameters): on CPU tensors it runs the reference interpreter.

    `specialize(*tensors, **constexprs)` returns the verified Tile IR for those argument shapes and dtypes.
    """

    def __init__(self, fn, grid=None):
        if not inspect.isfunction(fn):
            raise TypeError("@aref_kernel decorates a function")
        self.fn = fn
        self.grid = grid
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._parsed = None
        self._cache: dict = {}

    @property
    def parsed(self):
        if self._parsed is None:
            from aref.frontend import parse
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
                                  hint=f"move the shared code into a plain Python function (no decorator) and "
                                       f"call that: it is traced inline")

    def bind(self, args, kwargs):
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
        self._check_devices(tensors, loc)
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

    def _check_devices(self, tensors: dict, loc) -> None:
        devices = {t.device.type for t in tensors.values()}
        bad = sorted(devices - set(SUPPORTED_DEVICES))
        if bad:
            names = [n for n, t in tensors.items() if t.device.type in bad]
            raise ArefTypeError(f"tensor {names[0]} is on device '{bad[0]}'; aref runs kernels on 'cpu' tensors "
                                f"(the reference interpreter) or 'cuda' tensors (a GPU)", loc,
                                hint=f"move the tensors with .to('cpu') or .to('cuda')")
        if len(devices) > 1:
            where = ", ".join(f"{n} on {t.device}" for n, t in tensors.items())
            raise ArefTypeError(f"the tensors are on different devices ({where})", loc,
                                hint="put every tensor argument on the same device")

    def _specialize(self, tensors, constexprs) -> Kernel:
        from aref.frontend import tensor_type, trace
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
        """Tile IR of this kernel for the given arguments (cached per shapes, dtypes and constants)."""
        tensors, constexprs = self.bind(args, kwargs)
        return self._specialize(tensors, constexprs)

    @user_facing
    def __call__(self, *args, **kwargs):
        """Run on the given tensors. CPU tensors run the reference interpreter; outputs are written in place."""
        tensors, constexprs = self.bind(args, kwargs)
        kernel = self._specialize(tensors, constexprs)
        if any(t.is_cuda for t in tensors.values()):
            # GPU: compile this specialization once through the CuTe DSL backend (cached), check the
            # arguments (device, dtype, shape, contiguity, alignment) and launch it on the tensors' device
            from aref.backend.cute.launch import launch
            launch(kernel, tensors, user_loc())
            return
        from aref.interpret import run_kernel
        run_kernel(kernel, tensors)

    def __repr__(self) -> str:
        return f"<aref kernel {self.__name__}>"


def aref_kernel(fn=None, *, grid=None):
    """Decorate a tile program: `@aref_kernel` or `@aref_kernel(grid=lambda A, C, BM, **_: (...))`.

    Positional parameters are torch tensors; keyword-only parameters are compile-time constants. The grid
    is inferred from stores at `program_id` coordinates unless `grid` (a tuple, or a function of the
    arguments) is given.
    """
    if fn is None:
        return lambda f: KernelFunction(f, grid)
    return KernelFunction(fn, grid)
