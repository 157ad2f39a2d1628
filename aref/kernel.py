"""`@aref_kernel`: the decorator that turns a tile program into a compilable, runnable kernel."""
from __future__ import annotations

import functools
import inspect

from aref.errors import ArefError, ArefTypeError
from aref.ir import DType, Kernel
from aref.trace import user_loc


def user_facing(method):
    """Re-raise ArefErrors without the compiler's frames: the message already points at the user's line."""
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except ArefError as err:
            raise err.with_traceback(None) from None
    return wrapper


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

    def bind(self, args, kwargs):
        """Split call arguments into tensors (by parameter name) and constexprs (with defaults)."""
        import torch
        loc = user_loc()
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
                    raise ArefTypeError(f"{self.__name__} got argument '{k}' twice", loc)
                tensors[k] = v
            elif k in p.constexpr_params:
                constexprs[k] = v
            else:
                raise ArefTypeError(f"{self.__name__} has no parameter '{k}'", loc)
        for name in p.tensor_params:
            if name not in tensors:
                raise ArefTypeError(f"{self.__name__} is missing tensor argument '{name}'", loc)
            if not isinstance(tensors[name], torch.Tensor):
                raise ArefTypeError(
                    f"argument '{name}' must be a torch tensor, got {type(tensors[name]).__name__}", loc,
                    hint="scalars are compile-time constants: make them keyword-only parameters")
        for name, default in p.constexpr_params.items():
            if name not in constexprs:
                if default is inspect.Parameter.empty:
                    raise ArefTypeError(f"{self.__name__} needs compile-time constant '{name}'", loc)
                constexprs[name] = default
            v = constexprs[name]
            if not isinstance(v, (int, float, bool, str, DType, type(None))):
                raise ArefTypeError(f"compile-time constant '{name}' must be a number, bool, string or aref "
                                    f"dtype, got {type(v).__name__}", loc)
        return tensors, constexprs

    def _specialize(self, tensors, constexprs) -> Kernel:
        from aref.frontend import tensor_type, trace
        loc = user_loc()
        types = {n: tensor_type(n, t, loc) for n, t in tensors.items()}
        key = (tuple(sorted((n, t) for n, t in types.items())), tuple(sorted(constexprs.items(), key=str)))
        kernel = self._cache.get(key)
        if kernel is None:
            grid = self.grid(**tensors, **constexprs) if callable(self.grid) else self.grid
            kernel = trace(self.fn, self.parsed, types, constexprs, grid)
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
