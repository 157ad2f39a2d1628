"""Static resource limits of a barrier-level kernel on a machine: what the functional simulation cannot see.

A schedule can be functionally correct and still not launch: its buffers may not fit in shared memory, its
groups may ask for more threads or registers than a block has. `check_resources` lists each such problem
as a sentence; `check` and the timing model report them as warnings (they do not change `ok`, which is
about the schedule's behaviour). The figures come from the resource model (`aref.resources`), the one the
partitioners, the lowering and the CuTe backend use.
"""
from __future__ import annotations

from aref.target.machine import Machine, machine_for
from aref.resources.memory import smem_plan, tmem_columns

MAX_THREADS_PER_BLOCK = 1024   # CUDA programming guide, compute capability 9.0 and 10.0
NAMED_BARRIER_IDS = range(1, 16)   # 16 hardware barriers per CTA; 0 is __syncthreads


def _in_tmem(ch) -> bool:
    return any(t.space.value == "tmem" for t in ch.payload)


def shared_memory_bytes(kernel) -> int:
    """Bytes of shared memory the kernel takes: barriers, rings, scratch and store staging, as laid out."""
    return smem_plan(kernel).total


def tensor_memory_columns(kernel) -> int:
    """32-bit tensor-memory columns the kernel allocates: its plan's (`aref.lower.tmem`, with tiles rewritten in place
    and aliased) once lowered; before that, what its tensor-memory rings would take side by side (the resource
    model's `aref.resources.memory.tmem_columns`)."""
    if getattr(kernel, "tmem", None) is not None:
        return kernel.tmem.columns
    return tmem_columns(kernel)


def check_resources(kernel, machine: Machine | None = None) -> list[str]:
    """Problems that keep `kernel` from launching on `machine` (default: the kernel's arch)."""
    m = machine or machine_for(kernel.arch)
    out = []
    plan = smem_plan(kernel)
    if plan.total > m.smem_per_block:
        biggest = sorted((c for c in kernel.channels if not _in_tmem(c)), key=lambda c: -c.depth * c.slot_bytes)[:3]
        names = ", ".join(f"{c.name} ({c.depth} x {c.slot_bytes} B)" for c in biggest)
        out.append(f"shared memory: the kernel needs {plan.total} B but {m.name} gives a block {m.smem_per_block} B "
                   f"(largest rings: {names})")
    cols = tensor_memory_columns(kernel)
    if cols > m.tmem_columns:
        out.append(f"tensor memory: the channels need {cols} columns but {m.name} has {m.tmem_columns}")
    threads = sum(g.group.threads for g in kernel.groups)
    if threads > MAX_THREADS_PER_BLOCK:
        out.append(f"threads: the groups have {threads} threads, a block at most {MAX_THREADS_PER_BLOCK}")
    regs = sum(g.group.regs * g.group.threads for g in kernel.groups)
    if regs > m.registers:
        out.append(f"registers: the groups' budgets (regs x threads) add up to {regs}, the SM has {m.registers}")
    for g in kernel.groups:
        if g.group.regs > m.setmaxnreg_max:
            out.append(f"registers: group {g.group.name} asks for {g.group.regs} per thread, at most "
                       f"{m.setmaxnreg_max}")
    for nb in kernel.named_barriers:
        if nb.id not in NAMED_BARRIER_IDS:
            out.append(f"named barrier id {nb.id} is outside 1..15")
    return out
