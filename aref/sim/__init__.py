"""`aref.sim`: executes Barrier IR with every warp group as its own execution context.

* `simulate(kernel, tensors, seed=..., launch=...)` — every CTA under one seeded random interleaving, real numbers.
* `explore(kernel, tensors, cta=..., max_states=..., launch=..., trips=...)` — every interleaving of the control
  state (DFS with state hashing and partial-order reduction: `aref.sim.reduction`), for small trip counts.
* `check(kernel, inputs, reference_fn, seeds=50, exhaustive=False, launch=None)` — outputs vs reference over
  many interleavings, plus the protocol runs (`aref.sim.schedules`: adversarial schedules at trip counts that
  wrap every ring, a persistent launch); `SimReport.to_json()` has `ok`, `max_abs_err`, `deadlocks`,
  `interleavings`, `protocol_runs`, `violations`.
* `Launch(persistent=..., ctas=..., epilogue_overlap=..., cluster=...)` — a launch as the backend runs it
  (`aref.sim.launch`).
* `equivalent(kernel, tensors)` — every schedule of every launch `check` simulates explored without a
  violation (mutation testing: `aref.sim.mutants`, `aref.sim.implied`, `bench/mutation.py`).
* `aref.sim.timing.simulate_timing(kernel, tensors, machine)` — discrete-event timing on `aref.target.machine`.
* `check_resources(kernel, machine)` — shared memory, threads and registers a launch needs (warnings).

mbarriers, slots, TMA and MMA follow the contract in `aref.ir.ws`'s docstring; violations name the op, the
user's source line, the warp group and the CTA (see `aref.sim.values.KINDS`).
"""
from aref.sim.launch import Launch
from aref.sim.program import LaunchError, MalformedIR
from aref.sim.resources import check_resources, shared_memory_bytes
from aref.sim.run import Equivalence, ExploreResult, SimReport, SimResult, check, equivalent, explore, simulate
from aref.sim.values import KINDS, Violation

__all__ = ["simulate", "explore", "check", "SimResult", "ExploreResult", "SimReport", "Violation", "KINDS",
           "MalformedIR", "Launch", "LaunchError", "equivalent", "Equivalence", "check_resources", "shared_memory_bytes"]
