"""Every way the compiler can partition one program, and the simulator's verdict on each.

`partitions(kernel, arch, rng)` lists the configurations: on Hopper the heuristic with each consumer
organisation (plain, cooperative, ping-pong), on Blackwell the heuristic's FA4 roles, the optimal (solver)
partition and random partitions of the ops over 1–4 groups. `run_matrix` compiles a random program under
each, runs the Barrier IR in the simulator over seeded interleavings against the interpreter, and explores
every interleaving of one CTA at the trip counts 0, 1, D and D+1 (D: the deepest channel).

A configuration may be *refused* with an `ArefError` that is not a `CompilerBugError` (a consumer mode that
does not apply, a random partition whose schedules cannot fit together); everything else — an internal
error, a crash, a violation, a wrong value — is a *failure*.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from aref import sim
from aref.compiler import CompileOptions
from aref.search import lower_to
from aref.errors import ArefError, CompilerBugError, UserCodeError
from aref.guard import compiler_pass
from aref.interp.tile import run_kernel

HOPPER_MODES = ("plain", "cooperative", "pingpong")
# refusals that say a configuration does not apply to the program (not that the compiler gave up on it)
NOT_APPLICABLE = ("cannot be split", "do not split", "no tensor-core work", "disagree on the row count",
                  "two independent sub-tiles", "mixes the rows")


@dataclass
class Outcome:
    """One configuration's result: `status` is "ok", "refused", "not-applicable" or "failed"."""

    config: str
    status: str
    detail: str = ""
    groups: int = 0
    seconds: float = 0.0
    warnings: list = field(default_factory=list)      # static resource problems the simulator reports
    explored: dict = field(default_factory=dict)      # trip count -> (states, completed)
    ir: object = field(default=None, repr=False)       # the Barrier IR (when lowering succeeded)


@dataclass
class MatrixResult:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


def configs(arch: str, rng: random.Random, random_partitions: int = 1) -> list[tuple[str, dict]]:
    """(name, how to compile) for each configuration of `arch`."""
    out = [(f"heuristic-{m}", {"options": CompileOptions(arch=arch, consumers=m)}) for m in HOPPER_MODES] \
        if arch == "sm_90a" else [("heuristic", {"options": CompileOptions(arch=arch)})]
    out.append(("optimal", {"options": CompileOptions(arch=arch, partition="optimal", solver_time_limit=5.0)}))
    for j in range(random_partitions):
        out.append((f"random{j}", {"arch": arch, "groups": rng.randint(1, 4), "seed": rng.randrange(1 << 30)}))
    return out


def compile_config(kernel, how: dict):
    """The Barrier IR of `kernel` under one configuration (every stage verified)."""
    if "options" in how:
        return lower_to(kernel, "barrier", how["options"])
    from aref.lower import lower
    from aref.verify.ws import verify_ws
    from partition.custom import assignable_ops, custom_partition
    from partition.distribute import distribute
    from pipeline import pipeline_kernel
    rnd = random.Random(how["seed"])
    part = custom_partition(kernel, [rnd.randrange(how["groups"]) for _ in assignable_ops(kernel)])
    ir = kernel
    for name, step in (("loop distribution", lambda k: distribute(k, part, how["arch"])),
                       ("pipelining", pipeline_kernel), ("aref lowering", lower)):
        with compiler_pass(name, kernel.loc):
            ir = step(ir)
        with compiler_pass(name, kernel.loc, verifying=True):
            verify_ws(ir)
    return ir


def interpret(kernel, inputs: dict) -> dict:
    out = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    run_kernel(kernel, out)
    return out


def _classify(err: Exception) -> tuple[str, str]:
    if isinstance(err, ArefError) and not isinstance(err, (CompilerBugError, UserCodeError)):
        text = err.message
        return ("not-applicable" if any(s in text for s in NOT_APPLICABLE) else "refused"), text
    return "failed", f"{type(err).__name__}: {err}"


def check_config(program, name: str, how: dict, *, seeds: int = 2, exhaustive: bool = True,
                 max_states: int = 20_000, tolerance: float | None = None) -> Outcome:
    """Compile `program` under one configuration and run it in the simulator (see the module docstring).
    Outputs must equal the interpreter's up to `tolerance` (default: 1e-5, as the simulator evaluates every op
    with the interpreter's numerics; 2e-2 for cooperative consumers, whose row halves round their own MMAs)."""
    import time
    t0 = time.perf_counter()
    inputs = program.inputs
    kernel = program.kernel.specialize(**inputs)
    try:
        barrier = compile_config(kernel, how)
    except Exception as err:  # noqa: BLE001 - classified: a refusal or a failure
        status, detail = _classify(err)
        return Outcome(name, status, detail, seconds=time.perf_counter() - t0)
    expected = interpret(kernel, inputs)
    outs = {k: expected[k] for k in expected if k in ("C", "R", "CS", "P", "RA")}
    if tolerance is None:
        tolerance = 2e-2 if name.endswith("cooperative") else 1e-5
    report = sim.check(barrier, inputs, lambda **_: outs, seeds=seeds,
                       tolerance={k: (tolerance, tolerance) for k in outs})
    out = Outcome(name, "ok", "", len(barrier.groups), warnings=list(report.warnings), ir=barrier)
    if not report.ok:
        out.status, out.detail = "failed", str(report.to_json())
    elif exhaustive:
        _explore(program, how, out, max((c.depth for c in barrier.channels), default=1), max_states)
    out.seconds = time.perf_counter() - t0
    return out


def _explore(program, how: dict, out: Outcome, depth: int, max_states: int) -> None:
    """Every interleaving of one CTA at the critical trip counts 0, 1, D and D+1 (up to `max_states`
    states each; `out.explored` records how far each got)."""
    for trips in sorted({0, 1, depth, depth + 1}):
        small = program.with_shape(trips=trips, one_cta=True)
        try:
            b2 = compile_config(program.kernel.specialize(**small), how)
        except Exception as err:  # noqa: BLE001 - classified: a refusal or a failure
            status, detail = _classify(err)
            if status == "failed":
                out.status, out.detail = "failed", f"trips={trips}: {detail}"
                return
            continue
        res = sim.explore(b2, {p.name: small[p.name] for p in b2.params}, max_states=max_states)
        out.explored[trips] = (res.states, res.completed)
        if res.violations:
            out.status = "failed"
            out.detail = f"trips={trips}: " + "; ".join(str(v) for v in res.violations[:2])
            return


def run_matrix(program, arch: str, rng: random.Random, *, random_partitions: int = 1, **kw) -> MatrixResult:
    result = MatrixResult()
    for name, how in configs(arch, rng, random_partitions):
        result.outcomes.append(check_config(program, name, how, **kw))
    return result


# ------------------------------------------------------------------------------------- the sm_90a compile
def refusal_rule(err: Exception) -> str:
    """A refusal's rule: its error class and its message with the program-specific parts (numbers, names,
    tile types, parenthesised lists) blanked, so refusals of one rule group together."""
    return f"{type(err).__name__}: {normalize_message(getattr(err, 'message', None) or str(err))}"


def normalize_message(text: str) -> str:
    """`text`'s first line with numbers, quoted names, tile types and parenthesised lists blanked."""
    import re
    text = text.splitlines()[0] if text else ""
    text = re.sub(r"tile<[^>]*>", "tile<…>", text)
    text = re.sub(r"\([^()]*\)", "(…)", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    return re.sub(r"\b\d+\b", "N", text)[:140]


@dataclass
class CompileOutcome:
    """The sm_90a compile of one Barrier IR: `status` is "compiled", "refused" (an `ArefError` that is not a
    compiler bug; `rule` groups it) or "bug" (a `CompilerBugError` or any other exception)."""

    status: str
    rule: str = ""
    detail: str = ""
    seconds: float = 0.0
    registers: int | None = None
    spill_bytes: int | None = None
    cached: bool = False
    error: Exception | None = field(default=None, repr=False)


def compile_sm90(barrier, *, emit: str = "ptx", cache_dir=None) -> CompileOutcome:
    """`aref.backend.cute.compile_barrier(barrier)` (no GPU needed), classified."""
    import time
    from aref.backend.cute import compile_barrier
    t0 = time.perf_counter()
    try:
        res = compile_barrier(barrier, emit=emit, cache_dir=cache_dir)
    except Exception as err:  # noqa: BLE001 - classified: a refusal or a bug
        status = "refused" if isinstance(err, ArefError) and not isinstance(err, CompilerBugError) else "bug"
        return CompileOutcome(status, refusal_rule(err), str(err)[:2000], time.perf_counter() - t0, error=err)
    return CompileOutcome("compiled", seconds=time.perf_counter() - t0, registers=res.registers,
                          spill_bytes=res.spill_bytes, cached=res.cached)
