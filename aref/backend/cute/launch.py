"""Launching a generated kernel on a GPU: `kernel(*cuda_tensors, **constexprs)`.

The first call of a specialization lowers its Tile IR to Barrier IR for the device's architecture, generates
the CuTe DSL module (cached in memory and on disk by `compile_barrier`) and gets its compiled function — loaded
from the disk cache when any process compiled it before, else compiled and exported there
(`aref.runtime.binary_cache`); later calls only check their arguments and launch (a kernel call's own hot path
is `aref.runtime.fast_launch`). Tensors cross into CuTe through DLPack, in the
mode order the generated kernel expects (tiled modes first, batch modes last); the grid is the kernel's own
(a constant of the generated module). The kernel runs on torch's current stream, like a torch operator: it is
ordered after the work that produced its inputs on that stream, and under `torch.cuda.graph(g)` it is recorded
into the graph (and runs when the graph is replayed) instead of running once.

The launch path compiles without inspecting registers (no external tool such as the system `ptxas` takes part).

Everything that would make a launch wrong is checked before it, with an `ArefError` naming the argument:
device, dtype, shape, row-major contiguity and alignment — 16 bytes for a tensor TMA reads or writes (its
descriptor needs it; which tensors those are is the resource model's TMA rule, `aref.resources.memory`), the
element size for one accessed with ordinary loads and stores. Tensors with no elements are not passed at all.
"""
from __future__ import annotations

from aref.errors import ArefError, ArefTypeError, SrcInfo, UNKNOWN_LOC
from aref.ir import DType
from aref.target import TARGETS, arch_of_capability

TORCH_DTYPE_NAMES = {DType.float16: "float16", DType.bfloat16: "bfloat16", DType.float8_e4m3: "float8_e4m3fn",
                     DType.float8_e5m2: "float8_e5m2", DType.float32: "float32", DType.int32: "int32"}

_LAUNCHERS: dict[tuple, "Launcher"] = {}     # (id(Tile IR kernel), options, launch mode) -> launcher


class Launcher:
    """A compiled specialization and the order / permutation of its tensor arguments."""

    def __init__(self, ws, result, plan):
        self.ws, self.result, self.plan = ws, result, plan
        self.compiled = None

    def arguments(self, tensors: dict) -> list:
        """DLPack views of the torch tensors, tiled modes first (as the generated kernel indexes them)."""
        from cutlass.cute.runtime import from_dlpack

        args = []
        for t in self.plan.tensors:
            if t.empty:
                continue                 # no elements: the kernel does not take it (see TensorPlan.empty)
            x = tensors[t.name]
            lead = len(t.shape) - t.tiled
            perm = list(range(lead, len(t.shape))) + list(range(lead))
            args.append(from_dlpack(x.permute(*perm) if perm != sorted(perm) else x, assumed_align=t.align))
        return args

    def compile(self, args: list | None = None) -> None:
        """Get the compiled function: loaded from the disk cache when any process compiled this specialization
        before, else compiled for `ws.arch` (never from CUTE_DSL_* variables) from the generated module's fake
        arguments and exported there (`aref.runtime.binary_cache`). `args` is not needed (kept for callers)."""
        from aref.backend.cute.binary_cache import compiled_function
        self.compiled = compiled_function(self.result.source_path, self.ws.arch)

    def __call__(self, tensors: dict) -> None:
        self.bound(tensors)()

    def bound(self, tensors: dict):
        """A function that launches on `tensors` (on torch's current stream at this call), their DLPack views
        made once: what a timing loop calls, so that it times the kernel and not the argument conversion."""
        import torch

        args = self.arguments(tensors)
        if self.compiled is None:
            self.compile()
        device = next(iter(tensors.values())).device
        stream = current_stream(device)

        def run() -> None:
            with torch.cuda.device(device):     # the launch uses the current device's context
                self.compiled(*args, stream)
        return run


def current_stream(device=None):
    """torch's current CUDA stream on `device` as the driver handle the generated host function takes."""
    import torch
    from cuda.bindings.driver import CUstream

    return CUstream(torch.cuda.current_stream(device).cuda_stream)


def device_arch(tensors: dict) -> str:
    import torch

    devices = {t.device for t in tensors.values()}
    if len(devices) != 1:
        raise ArefError(f"kernel arguments are on different devices: {sorted(map(str, devices))}",
                        hint="move every tensor to one GPU")
    device = devices.pop()
    if device.type != "cuda":
        raise ArefError("kernel arguments mix CPU and GPU tensors", hint="move every tensor to one GPU")
    cap = torch.cuda.get_device_capability(device)
    arch = arch_of_capability(tuple(cap))
    if arch is None:
        known = " and ".join(f"{t.family} ({t.name}, compute capability {t.compute_capability[0]}."
                             f"{t.compute_capability[1]})" for t in TARGETS.values())
        raise ArefError(f"GPU {torch.cuda.get_device_name(device)} (compute capability {cap[0]}.{cap[1]}) is not "
                        f"a target of aref", hint=f"aref generates kernels for {known}")
    return arch


def check_arguments(ws, tensors: dict, loc: SrcInfo = UNKNOWN_LOC, require_cuda: bool = True, plan=None) -> None:
    """Raise an `ArefError` naming the first argument the generated kernel cannot take as it is. `plan` (the
    kernel's `KernelPlan`, made here if not given) says which tensors TMA reads or writes: those need a
    16-byte aligned start, the others their element size."""
    if plan is None:
        from aref.backend.cute.analysis import plan_kernel
        plan = plan_kernel(ws)
    align = {t.name: t.align for t in plan.tensors}
    for p in ws.params:
        if p.name not in tensors:
            raise ArefTypeError(f"missing tensor argument '{p.name}'", loc)
        x, want = tensors[p.name], p.value.type
        if require_cuda and not x.is_cuda:
            raise ArefError(f"argument '{p.name}' is on {x.device}, the others on a GPU", loc,
                            hint="move every tensor to the same GPU")
        dtype = str(x.dtype).replace("torch.", "")
        if dtype != TORCH_DTYPE_NAMES.get(want.dtype):
            raise ArefTypeError(f"argument '{p.name}' has dtype {dtype}; this specialization takes "
                                f"{TORCH_DTYPE_NAMES.get(want.dtype, want.dtype.value)}", loc)
        if tuple(x.shape) != tuple(want.shape):
            raise ArefTypeError(f"argument '{p.name}' has shape {tuple(x.shape)}; this specialization takes "
                                f"{tuple(want.shape)}", loc)
        if not x.is_contiguous():
            raise ArefTypeError(f"argument '{p.name}' is not contiguous (strides {tuple(x.stride())}); the "
                                f"generated kernel's TMA descriptors assume row-major tensors", loc,
                                hint=f"pass {p.name}.contiguous()")
        need = align.get(p.name, 1)
        if x.numel() and x.data_ptr() % need:
            why = "TMA needs 16-byte aligned global tensors" if need == 16 else "elements must be aligned"
            raise ArefTypeError(f"argument '{p.name}' starts at an address that is not {need}-byte aligned "
                                f"({x.data_ptr():#x}); {why}", loc, hint="pass a freshly allocated tensor or a clone")


def plan_of(ws, persistent: bool = False, ctas: int = 132, raster: int = 0, epilogue_overlap: bool = False,
            cluster=(1, 1)):
    """The backend's plan of a Barrier IR kernel for its arch (the tensors' mode order the launch follows)."""
    from aref.backend.cute import backend_of
    return backend_of(ws).plan(ws, persistent, ctas, raster, epilogue_overlap, cluster)


def launcher_for(kernel, arch: str, options=None, persistent: bool = False, ctas: int = 132,
                 raster: int = 0, epilogue_overlap: bool = False, cluster=(1, 1)) -> Launcher:
    """The launcher of Tile IR `kernel` compiled for `arch` with `options` (a `CompileOptions`; default: the
    compiler's defaults) and launch mode (`epilogue_overlap`, `cluster`: see `aref.backend.cute.generate_source`), made
    once per combination and kept."""
    from aref.compiler import CompileOptions
    options = options or CompileOptions(arch=arch)
    from aref.backend.cute.cluster import normalize
    key = (id(kernel), options, persistent, ctas if persistent else 0, raster, epilogue_overlap, normalize(cluster))
    launcher = _LAUNCHERS.get(key)
    if launcher is None:
        from dataclasses import replace

        from aref.backend.cute import compile_barrier
        from aref.search import lower_to

        ws = lower_to(kernel, "barrier", replace(options, arch=arch))
        result = compile_barrier(ws, emit="cute", persistent=persistent, ctas=ctas, raster=raster,
                                 epilogue_overlap=epilogue_overlap, cluster=cluster)
        launcher = Launcher(ws, result, plan_of(ws, persistent, ctas, raster, epilogue_overlap, cluster))
        _LAUNCHERS[key] = launcher
    return launcher


def launch(kernel, tensors: dict, loc: SrcInfo = UNKNOWN_LOC, options=None, persistent: bool = False,
           ctas: int = 132, raster: int = 0, epilogue_overlap: bool = False, cluster=(1, 1)) -> None:
    """Compile (once per specialization, options and launch mode) and launch Tile IR `kernel` on the GPU
    holding `tensors`; `options` and `persistent`/`ctas`/`raster`/`epilogue_overlap`/`cluster` as chosen by the
    autotuner (default: the compiler's defaults, one CTA per tile)."""
    if any(g == 0 for g in kernel.grid):
        return                               # an empty grid: no CTA has anything to do (as the interpreter)
    launcher = launcher_for(kernel, device_arch(tensors), options, persistent, ctas, raster, epilogue_overlap,
                            cluster)
    check_arguments(launcher.ws, tensors, loc, plan=launcher.plan)
    launcher(tensors)
