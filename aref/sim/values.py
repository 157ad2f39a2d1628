"""Runtime values of the simulator and the violation records it reports.

Besides plain numbers and torch tensors, a group's environment can hold:
  UNDEF        the result of an op whose predicate was false (reading it is a violation),
  OPAQUE       a tile whose data is not computed (`compute_values=False`: exploration and timing),
  SlotView     a tile that lives in a ring slot (from `slot_read`, or a transpose/expand_dims of one), so
               uses can be checked against the slot's state,
  Pending      the result of an `mma_async` that no `mma_wait` has retired yet.
All four are immutable, so states can share them when the explorer copies a state.
"""
from __future__ import annotations

from dataclasses import dataclass, field


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNDEF = _Marker("UNDEF")
OPAQUE = _Marker("OPAQUE")


class SlotView:
    """A view of payload `ring` of `slot` of channel `chan` holding `item`; `tensor` is its data (or OPAQUE)."""

    __slots__ = ("chan", "slot", "item", "ring", "tensor")

    def __init__(self, chan: int, slot: int, item: int, ring: int, tensor):
        self.chan, self.slot, self.item, self.ring, self.tensor = chan, slot, item, ring, tensor

    def derive(self, tensor) -> "SlotView":
        return SlotView(self.chan, self.slot, self.item, self.ring, tensor)


class Pending:
    """The accumulator an `mma_async` will produce: issue number `seq` of its group, value `tensor`."""

    __slots__ = ("seq", "tensor")

    def __init__(self, seq: int, tensor):
        self.seq, self.tensor = seq, tensor


# Violation kinds, with what each means (the report's `kind` field).
KINDS = {
    "deadlock": "no group can make progress and some group has not finished",
    "wait-never-completes": "a blocked wait whose barrier no unfinished group can ever complete",
    "write-to-borrowed-slot": "a TMA or slot_store into a slot whose previous item is not released yet",
    "read-unpublished-slot": "a slot_read of an item the slot does not hold complete and published",
    "read-after-release": "a use of a slot view after the slot was released or overwritten",
    "release-while-reading": "an arrive on `empty` while this group's un-retired mma_async still reads the slot",
    "arrive-overflow": "more arrivals than the phase expects (or a release of an item the slot does not hold)",
    "arrive-underflow": "a phase started but missed arrivals or transaction bytes at the end of the CTA, or "
                        "an item never released",
    "mma-result-not-ready": "a non-MMA use of an mma_async result before an mma_wait retired it",
    "read-running-mma": "a select (merge) of a register accumulator whose mma_async no mma_wait has retired",
    "mma-in-flight-at-exit": "a group finished with mma_async operations no mma_wait retired",
    "undefined-value": "a use of a value that a predicated-off op did not define, or that is not in scope",
    "register-budget": "setmaxnreg outside 24..256 / not a multiple of 8, or registers that never fit",
    "missing-proxy-fence": "a slot_store read through the async proxy was published without fence_proxy_async",
    "malformed": "an op that breaks the Barrier IR contract (wrong operand, slot out of range, ...)",
}


class SimViolation(Exception):
    """Raised inside the engine at the first violation of a run; the runner turns it into a `Violation`."""

    def __init__(self, kind: str, message: str, op=None, group: int | None = None, blocked=()):
        assert kind in KINDS, kind
        super().__init__(message)
        self.kind, self.message, self.op, self.group, self.blocked = kind, message, op, group, list(blocked)


@dataclass
class Violation:
    """One reported error: `kind` (see KINDS), the op as printed by `aref.ir.ws.print_ws`, the user's source
    location of the op, the warp group that executed it and the CTA. Deadlocks list every blocked group."""

    kind: str
    message: str
    op: str
    file: str
    line: int
    group: str
    cta: tuple
    blocked: list = field(default_factory=list)    # [{group, op, line, waiting_for}] for deadlocks
    trace: list = field(default_factory=list)      # schedule that led here (exploration only)
    schedule: str = ""     # the check's adversarial or protocol-size run that found it (`aref.sim.schedules`)

    def to_json(self) -> dict:
        out = {"kind": self.kind, "op": self.op, "line": self.line, "file": self.file, "group": self.group,
               "message": self.message, "cta": list(self.cta)}
        if self.blocked:
            out["blocked"] = self.blocked
        if self.schedule:
            out["schedule"] = self.schedule
        return out

    def __str__(self) -> str:
        where = f"{self.file.rsplit('/', 1)[-1]}:{self.line}" if self.line else "?"
        run = f", schedule: {self.schedule}" if self.schedule else ""
        text = f"{self.kind} at {where} in group {self.group} (CTA {self.cta}{run}): {self.message}\n    {self.op}"
        for b in self.blocked:
            text += f"\n    blocked: {b['group']}: {b['op']}  [line {b['line']}] {b['waiting_for']}"
        return text
