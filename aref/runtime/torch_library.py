"""Every `@aref_kernel` is a PyTorch operator: `torch.ops.aref.<kernel>_<digest>`.

A kernel call `gemm(A, B, C, BN=128)` goes through the operator, so torch sees it as it sees its own ops:

- the schema lists the kernel's tensor parameters in order, the ones its Tile IR stores to declared mutated
  (`Tensor(a0!) C`), then one string holding the compile-time constants the caller passed (JSON; the
  signature's defaults fill in the rest). Which parameters are stored is read from a specialization; a later
  specialization that stores to a parameter the schema does not declare is refused, never run unannounced;
- the implementation (CPU and CUDA dispatch keys) runs the reference interpreter on CPU tensors and launches
  the compiled kernel on CUDA tensors (`aref.runtime.fast_launch`);
- the fake implementation (meta tensors, `FakeTensorMode`, torch.compile's tracing) checks the arguments
  against the specialization when the shapes are concrete and computes nothing: outputs are written in
  place, so their shapes are the caller's.

Operators are registered lazily, on the first call of a kernel with a given set of stored parameters; the
name's digest hashes the kernel's module, qualified name and source, so a fresh process (or a reloaded module)
registers the same name. Eager calls go through the low-level `torch.library.Library` API (a dispatch costs
~3 µs, `torch.library.custom_op` ~30 µs) and cache the argument binding per call structure.

Under `torch.compile` (Dynamo) the call is plain Python over tensors and constants plus one function that
Dynamo runs at trace time instead of tracing (`_trace_plan`, `torch._dynamo.assume_constant_result`): it
binds and specializes on meta tensors and returns the operator's name, so the graph holds only the operator.
Sizes are made concrete with `operator.index` (a guard per size, as the kernel is compiled per shape).
"""
from __future__ import annotations

import hashlib
import inspect
import operator
from dataclasses import dataclass

import torch

from aref.errors import ArefError
from aref.guard import user_facing
from aref.ir import OpKind
from aref.runtime.op_args import _launch_key, _with_defaults, decode_constants, encode_constants

NAMESPACE = "aref"
CONSTANTS_ARG = "aref_constants"

_LIBRARY: torch.library.Library | None = None
_OPS: dict[str, "KernelOp"] = {}                 # operator name -> its kernel and schema


def library() -> torch.library.Library:
    """The `aref` operator namespace (one fragment per process, shared with `aref.nn`)."""
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")
    return _LIBRARY


# ------------------------------------------------------------------------------------------- operators
def stored_params(kernel) -> frozenset:
    """Names of the tensor parameters a Tile IR kernel stores to (plain or reduce-add)."""
    by_value = {id(p.value): p.name for p in kernel.params}
    return frozenset(by_value[id(op.operands[0])] for op in kernel.all_ops()
                     if op.kind is OpKind.STORE and id(op.operands[0]) in by_value)


def _source_of(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):                 # generated code: its bytecode and constants identify it
        code = getattr(obj, "__code__", None)
        return repr((code.co_code, code.co_consts)) if code is not None else repr(obj)


def _identity(kfn) -> str:
    """What names a kernel across processes: module, qualified name, source (and the grid's)."""
    ident = getattr(kfn, "_torch_identity", None)
    if ident is None:
        fn = kfn.fn
        grid = _source_of(kfn.grid) if callable(kfn.grid) else repr(kfn.grid)
        ident = "\n".join((fn.__module__ or "", fn.__qualname__, _source_of(fn), grid))
        kfn._torch_identity = ident
    return ident


class KernelOp:
    """One registered operator: a kernel with a fixed set of stored (mutated) tensor parameters."""

    def __init__(self, kfn, name: str, params: tuple, mutated: frozenset):
        self.kernel, self.name, self.params, self.mutated = kfn, name, params, mutated
        self.specs: dict = {}                    # (constants, tensor metadata) -> Tile IR
        self.launches: dict = {}                 # the same key -> a prepared GPU launch (fast_launch)
        self.overload = None

    @property
    def qualname(self) -> str:
        return f"{NAMESPACE}::{self.name}"

    def schema(self) -> str:
        args, alias = [], 0
        for p in self.params:
            if p in self.mutated:
                args.append(f"Tensor(a{alias}!) {p}")
                alias += 1
            else:
                args.append(f"Tensor {p}")
        return f"({', '.join(args + [f'str {CONSTANTS_ARG}'])}) -> ()"

    def specialization(self, tensors, constants: str):
        """The Tile IR for these operator arguments (cached); refuses a specialization that stores to a
        parameter the schema does not declare mutated."""
        key = (constants, *((t.dtype, t.shape) for t in tensors))
        kernel = self.specs.get(key)
        if kernel is None:
            kfn = self.kernel
            consts = _with_defaults(kfn, decode_constants(constants))
            kernel = kfn._specialize(dict(zip(self.params, tensors)), consts)
            extra = stored_params(kernel) - self.mutated
            if extra:
                raise ArefError(f"@{kfn.__name__} stores to {', '.join(sorted(extra))} for these shapes and "
                                f"constants but not for those its operator {self.qualname} was registered with",
                                kfn.def_loc, hint="store to the same tensors whatever the shapes and constants "
                                                  "(write a second kernel for the other case)")
            self.specs[key] = kernel
        return kernel

    def run(self, *args) -> None:
        """The implementation (CPU and CUDA keys): interpret on the CPU, launch on a GPU."""
        *tensors, constants = args
        if tensors and tensors[0].is_cuda:
            from aref.runtime.fast_launch import launch_op
            launch_op(self, tensors, constants)
            return
        from aref.interp.tile import run_kernel
        kernel = self.specialization(tensors, constants)
        if any(g == 0 for g in kernel.grid):
            return
        run_kernel(kernel, dict(zip(self.params, tensors)))

    def fake(self, *args) -> None:
        """The fake (meta) implementation: checks concrete shapes against the kernel, computes nothing."""
        *tensors, constants = args
        if not any(isinstance(d, torch.SymInt) for t in tensors for d in (*t.shape, *t.stride())):
            self.specialization(tensors, constants)


def op_for(kfn, mutated: frozenset) -> KernelOp:
    """The operator of kernel `kfn` with `mutated` stored parameters, registered on first use."""
    digest = hashlib.sha256((_identity(kfn) + "\n" + ",".join(sorted(mutated))).encode()).hexdigest()[:10]
    name = f"{kfn.__name__}_{digest}"
    kop = _OPS.get(name)
    if kop is not None:
        if kop.kernel is not kfn:                # the same kernel loaded again (a reloaded module)
            kop.kernel, kop.specs, kop.launches = kfn, {}, {}
        return kop
    kop = KernelOp(kfn, name, tuple(kfn.parsed.tensor_params), frozenset(mutated))
    lib = library()
    lib.define(name + kop.schema(), tags=())
    # the implementation resolves the operator by name, so a reloaded kernel replaces the old object
    lib.impl(name, lambda *a, _n=name: _OPS[_n].run(*a), "CPU")
    lib.impl(name, lambda *a, _n=name: _OPS[_n].run(*a), "CUDA")
    torch.library.register_fake(kop.qualname, lambda *a, _n=name: _OPS[_n].fake(*a), lib=lib)
    kop.overload = getattr(getattr(torch.ops, NAMESPACE), name).default
    _OPS[name] = kop
    return kop


def registered_ops() -> dict[str, KernelOp]:
    """Every kernel operator registered in this process, by name."""
    return dict(_OPS)


# --------------------------------------------------------------------------------------------- calling
@dataclass
class _Binder:
    """How one call structure (number of positional arguments, keyword names) maps onto the kernel."""

    tensor_at: tuple          # per tensor parameter in order: position (int) or keyword name (str)
    const_names: tuple        # keywords that are compile-time constants
    plans: dict               # (constant values, tensor metadata) -> (operator overload, constants string)


def _binder(kfn, nargs: int, kwnames: tuple) -> _Binder | None:
    params = kfn.parsed.tensor_params
    if nargs > len(params):
        return None                             # bind names the mistake
    at = list(range(nargs)) + [p for p in params[nargs:]]
    consts = tuple(k for k in kwnames if k in kfn.parsed.constexpr_params)
    if any(isinstance(a, str) and a not in kwnames for a in at) or len(consts) + len(params) - nargs != len(kwnames):
        return None
    return _Binder(tuple(at), consts, {})


class _Plan:
    """A call signature's operator and constants string, and, once its first call has prepared a GPU launch,
    the launch itself (`direct`): later calls with plain tensors and nothing intercepting torch's dispatch
    (no TorchDispatchMode or TorchFunctionMode, no profiler, no tensor requiring grad or of a subclass —
    all in the signature or checked per call) call it without the dispatcher, which would only route the call
    to the same implementation."""

    __slots__ = ("overload", "constants", "kop", "direct", "plain")

    def __init__(self, overload, constants: str, kop, plain: bool):
        self.overload, self.constants, self.kop, self.plain = overload, constants, kop, plain
        self.direct = None


_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_profiling = torch.autograd._profiler_enabled
_Tensor = torch.Tensor


def call(kfn, args: tuple, kwargs: dict) -> None:
    """`kfn(*args, **kwargs)`: through its operator (see the module docstring)."""
    if torch.compiler.is_compiling():
        return _traced_call(kfn, args, kwargs)
    binders = kfn.__dict__.get("_torch_binders")
    if binders is None:
        binders = kfn.__dict__["_torch_binders"] = {}
    skey = (len(args), *kwargs)
    binder = binders.get(skey)
    if binder is None:
        binder = binders[skey] = _binder(kfn, len(args), tuple(kwargs)) or _Binder((), (), {})
    try:
        tensors = [args[a] if a.__class__ is int else kwargs[a] for a in binder.tensor_at]
        key = (*[kwargs[k] for k in binder.const_names],
               *[(t.__class__, t.dtype, t.shape, t.stride(), t.get_device(), t.requires_grad) for t in tensors])
        plan = binder.plans.get(key) if binder.tensor_at else None
    except (AttributeError, KeyError, TypeError, IndexError):   # not tensors, unhashable constants: bind says
        plan = None
    if plan is None:
        overload, constants, pick, kop = _plan(kfn, args, kwargs)
        tensors = pick(args, kwargs)
        plain = all(t.__class__ is _Tensor and not t.requires_grad and t.is_cuda for t in tensors)
        plan = _Plan(overload, constants, kop, plain)
        if binder.tensor_at:
            binder.plans[key] = plan
    direct = plan.direct
    if direct is not None and not (_dispatch_modes() or _function_modes() or _profiling()):
        direct(tensors)
        return
    plan.overload(*tensors, plan.constants)
    if plan.plain and direct is None:
        plan.direct = plan.kop.launches.get(_launch_key(tensors, plan.constants))


@user_facing
def _plan(kfn, args, kwargs):
    """Bind and specialize (a mistake is an ArefError at the caller's line); register the operator."""
    from aref.tune.space import SHAPE_DEVICES
    tensors, constexprs = kfn.bind(args, kwargs, SHAPE_DEVICES)
    kernel = kfn._specialize(tensors, constexprs)
    given = {k: v for k, v in kwargs.items() if k in kfn.parsed.constexpr_params}
    kop = op_for(kfn, stored_params(kernel))
    order = kfn.parsed.tensor_params

    def pick(a, kw):
        t, _ = kfn.bind(a, kw, SHAPE_DEVICES)
        return [t[p] for p in order]
    return kop.overload, encode_constants(given), pick, kop


def operator_call(kfn, *args, **kwargs) -> tuple:
    """(operator overload, its arguments) of the call `kfn(*args, **kwargs)` without running it: what
    `torch.library.opcheck` and other torch tooling take."""
    overload, constants, pick, _ = _plan(kfn, args, kwargs)
    return overload, (*pick(args, kwargs), constants)


# --------------------------------------------------------------------------------------- torch.compile
@torch._dynamo.assume_constant_result
def _trace_plan(kfn, nargs: int, tensor_kw: tuple, const_items: tuple, metas: tuple) -> tuple:
    """Run by Dynamo at trace time: (operator name, order of the tensors, constants string)."""
    tensors = [torch.empty_strided(shape, stride, dtype=dtype, device="meta") for dtype, shape, stride in metas]
    args, kwargs = tensors[:nargs], dict(zip(tensor_kw, tensors[nargs:]))
    kwargs.update(dict(const_items))
    overload, constants, _, _ = _plan(kfn, args, kwargs)
    bound = {id(t): i for i, t in enumerate(tensors)}
    bt, _ = kfn.bind(args, kwargs, ("meta",))
    order = tuple(bound[id(bt[p])] for p in kfn.parsed.tensor_params)
    return overload._schema.name.split("::")[1], order, constants


def _traced_call(kfn, args, kwargs) -> None:
    """What Dynamo traces: tensors and constants in, one operator call out."""
    tensor_kw = tuple(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))
    const_items = tuple((k, v) for k, v in kwargs.items() if not isinstance(v, torch.Tensor))
    tensors = list(args) + [kwargs[k] for k in tensor_kw]
    metas = tuple((t.dtype, tuple(operator.index(d) for d in t.shape), tuple(operator.index(s) for s in t.stride()))
                  for t in tensors)
    name, order, constants = _trace_plan(kfn, len(args), tensor_kw, const_items, metas)
    op = getattr(getattr(torch.ops, NAMESPACE), name).default
    op(*[tensors[i] for i in order], constants)

