"""Aref lowering: the pipelined level → Barrier IR (explicit mbarriers with phase parity).

Per channel: a ring of `depth` slots, each with a buffer per payload tile (`rings`) and two mbarriers,
`full[slot]` and `empty[slot]`. Item k uses slot k mod depth; a waiter passes the phase bit
(k div depth) mod 2, and producers wait on `empty` with the opposite bit so the first pass does not block.

  put(k)       wait empty[slot] (parity ^ 1), then
                 TMA payload:      arrive.expect_tx(full[slot], bytes) and the TMA loads into the slot
                                   (they complete the transaction bytes);
                 register payload: store the tiles into the slot, fence.proxy.async when an async-proxy
                                   reader (an MMA) consumes it, arrive on full[slot] with every producer thread
                 (tensor-memory rings on Blackwell complete their stores with tmem_store_fence first)
  get(k)       wait full[slot] (parity), read the slot's tiles
  consumed(k)  arrive on empty[slot] (one elected thread per consumer group)

MMAs become asynchronous (`mma_async`); `mma_wait(n)` is placed before any read of an MMA result by other
work and before releasing a slot an MMA still reads, with n the exact number of later MMAs in the steady
state (0 in prologue and epilogue). Ping-pong consumers take turns on the tensor core through named
barriers; each group's register budget is set with setmaxnreg at its start.
"""
from __future__ import annotations

import copy
from importlib import import_module

from aref.ir.ws import WSKernel
from aref.lower.common import _registers, _resources, _shared_memory, launch_registers, launch_threads
from aref.target import target_of


def lower(kernel: WSKernel) -> WSKernel:
    """The Barrier IR of a pipelined kernel (a new kernel; the input is left as it was)."""
    out = copy.deepcopy(kernel)
    for ch in out.channels:
        _resources(ch, out)
    # the arch's own steps (waits, tensor memory, register budgets): the module its target names
    import_module(target_of(out.arch).lowering).lower_kernel(out)
    _registers(out)
    _shared_memory(out)
    out.level = "barrier"
    return out


__all__ = ["lower", "launch_registers", "launch_threads"]
