"""The GPU launch of a kernel operator, with the Python work per call after the first kept small.

The first call of a specialization (operator constants, and per tensor dtype, shape, strides, device) does
everything `aref.backend.cute.launch.launch` does: tune if the kernel has configurations, lower, compile or
load the compiled function (`binary_cache`), check every argument (`check_arguments`). It leaves a `Prepared`
launch behind, keyed by that signature, so a later call with tensors of the same signature only

- checks each tensor's start address against the alignment the kernel assumes (16 bytes for TMA),
- looks up each tensor's DLPack memref descriptor by (argument, address) — a descriptor of a static layout
  holds the address and nothing of the tensor, so it is reused for any tensor at that address with the
  signature's layout, while the tensor itself is not kept alive — and builds it once per address,
- reads torch's current stream handle (`torch._C._cuda_getCurrentRawStream`, as Inductor does),
- concatenates the descriptors' C pointers and the stream's (marshalled by the DSL once per stream handle:
  what `generate_execution_args` would make of them every call) and runs the compiled program.

`Prepared.marshal(tensors, stream)` is that work up to the launch; `bench/launch_overhead.py` times it on the
CPU and checks it against the DSL's own marshalling (`dsl_marshal`).
"""
from __future__ import annotations

import torch

from aref.errors import ArefTypeError, UNKNOWN_LOC

_MAX_DESCRIPTORS = 256          # per argument: addresses remembered (a training loop reuses a handful)


class _Descriptor:
    """A DLPack memref descriptor the compiled function takes in place of a `cute.Tensor`."""

    __slots__ = ("_pointers", "_capsule")

    def __init__(self, pointers, capsule):
        self._pointers, self._capsule = pointers, capsule

    def __c_pointers__(self):
        return self._pointers


def descriptor(x: torch.Tensor, perm: list | None, align: int) -> _Descriptor:
    """The memref descriptor of `x` (permuted to the kernel's mode order) as `from_dlpack` builds it."""
    from cutlass.cute.runtime import from_dlpack
    view = from_dlpack(x.permute(*perm) if perm else x, assumed_align=align)
    pointers = view.__c_pointers__()
    return _Descriptor(pointers, view._memref_desc)


class Prepared:
    """A launch-ready specialization: the compiled function and, per tensor it takes, how to pass it."""

    def __init__(self, launcher, params: tuple, device: torch.device):
        self.compiled = launcher.compiled
        self.device = device
        # (position among the operator's tensors, mode permutation or None, alignment) per kernel argument
        self.slots = []
        for t in launcher.plan.tensors:
            if t.empty:
                continue
            lead = len(t.shape) - t.tiled
            perm = list(range(lead, len(t.shape))) + list(range(lead))
            self.slots.append((params.index(t.name), perm if perm != sorted(perm) else None, t.align, t.name))
        self.cache = [dict() for _ in self.slots]
        self.streams: dict = {}                  # raw stream handle -> its marshalled C arguments

    def descriptors(self, tensors) -> list:
        """The DLPack descriptors of `tensors` (the operator's, in order) the compiled function takes."""
        out = []
        for (i, perm, align, name), cache in zip(self.slots, self.cache):
            x = tensors[i]
            ptr = x.data_ptr()
            d = cache.get(ptr)
            if d is None:
                if ptr % align:
                    raise ArefTypeError(f"argument '{name}' starts at an address that is not {align}-byte aligned "
                                        f"({ptr:#x})", UNKNOWN_LOC,
                                        hint="pass a freshly allocated tensor or a clone")
                if len(cache) >= _MAX_DESCRIPTORS:
                    cache.clear()
                d = cache[ptr] = descriptor(x, perm, align)
            out.append(d)
        return out

    def marshal(self, tensors, stream: int) -> list:
        """The compiled function's C arguments for `tensors` on `stream` (a raw stream handle): what the DSL's
        `generate_execution_args` makes of the descriptors and the stream, with the stream's part made once
        per stream (`dsl_marshal` is the DSL's own, for checking)."""
        descs = self.descriptors(tensors)
        exe = [p for d in descs for p in d._pointers]
        chunk = self.streams.get(stream)
        if chunk is None:
            full, adapted = self._dsl_arguments(descs, stream)
            chunk = self.streams[stream] = (full[len(exe):], adapted)
        exe += chunk[0]
        return exe

    def _dsl_arguments(self, descs, stream: int):
        from cuda.bindings.driver import CUstream
        cu = CUstream(stream)
        exe, adapted = self.compiled.execution_args.generate_execution_args([*descs, cu], {})
        return exe, (adapted, cu)                # keeps what the stream's pointers point into alive

    def dsl_marshal(self, tensors, stream: int) -> tuple:
        """The DSL's marshalling of the same call: (C arguments, what they point into: keep it alive)."""
        return self._dsl_arguments(self.descriptors(tensors), stream)

    def __call__(self, tensors) -> None:
        index = self.device.index
        exe = self.marshal(tensors, torch._C._cuda_getCurrentRawStream(index))
        if torch._C._cuda_getDevice() == index:
            self.compiled.run_compiled_program(exe)
        else:
            with torch.cuda.device(self.device):   # the launch uses the current device's context
                self.compiled.run_compiled_program(exe)


def _nothing(tensors) -> None:
    return None


def prepare(kop, tensors, constants: str):
    """Everything the first call of a signature does (see the module docstring)."""
    from aref.backend.cute.launch import check_arguments, device_arch, launcher_for
    from aref.runtime.op_args import _with_defaults, decode_constants
    kfn = kop.kernel
    named = dict(zip(kop.params, tensors))
    arch = device_arch(named)
    given = decode_constants(constants)
    if kfn.configs is None:
        kernel, options, launch_kw = kop.specialization(tensors, constants), None, {}
    else:
        cfg = kfn._tuned_config(named, given)
        kernel = kfn._specialize(named, {**_with_defaults(kfn, given), **cfg.consts, **given})
        options, launch_kw = cfg.compile_options(arch), cfg.launch_kwargs(arch)
    if any(g == 0 for g in kernel.grid):
        return _nothing                        # an empty grid: no CTA has anything to do
    launcher = launcher_for(kernel, arch, options, **launch_kw)
    check_arguments(launcher.ws, named, kfn.def_loc, plan=launcher.plan)
    if launcher.compiled is None:
        launcher.compile()
    return Prepared(launcher, kop.params, tensors[0].device)


def launch_op(kop, tensors, constants: str) -> None:
    """Launch operator `kop` on CUDA `tensors` (its implementation on the CUDA dispatch key)."""
    from aref.runtime.op_args import _launch_key
    key = _launch_key(tensors, constants)
    prepared = kop.launches.get(key)
    if prepared is None:
        prepared = kop.launches[key] = prepare(kop, tensors, constants)
    prepared(tensors)
