"""Planted synchronization bugs: one mutation of a barrier-level kernel at a time (mutation testing of the
simulator, `bench/mutation.py`).

Each `Mutant` names one op of one group and what is done to it:

  delete-wait        an `mbarrier_wait` is removed (the group no longer waits for a slot or a phase)
  flip-parity        an `mbarrier_wait` waits with parity 1 − parity (one phase too early or too late)
  delete-arrive      an `mbarrier_arrive` is removed (a slot is never published or released)
  delete-expect-tx   an `mbarrier_arrive_expect_tx` is removed (nobody arms the transaction bytes)
  delete-commit      an `mma_commit` is removed (tcgen05.commit: an MMA result or a read slot never signalled)
  delete-mma-wait    an `mma_wait` is removed (results read or slots released while the MMA runs)
  raise-pending      an `mma_wait`'s `pending` is one larger (one more MMA left in flight)
  delete-fence       a `fence_proxy_async` / `tmem_store_fence` is removed

`planted(kernel, mutant)` applies a mutation in place and undoes it on exit, so one compiled kernel serves
every mutant. Ops a mutation inserts (the parity flip's `1 − parity`) carry the mutated op's predicate and
location.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

from aref.ir import ConstAttrs, DType, FnAttrs, Op, OpKind, ScalarType, Value

KINDS = ("delete-wait", "flip-parity", "delete-arrive", "delete-expect-tx", "delete-commit", "delete-mma-wait",
         "raise-pending", "delete-fence")
_BY_OP = {
    OpKind.MBAR_WAIT: ("delete-wait", "flip-parity"),
    OpKind.MBAR_ARRIVE: ("delete-arrive",),
    OpKind.MBAR_EXPECT_TX: ("delete-expect-tx",),
    OpKind.MMA_COMMIT: ("delete-commit",),
    OpKind.MMA_WAIT: ("delete-mma-wait", "raise-pending"),
    OpKind.FENCE_PROXY_ASYNC: ("delete-fence",),
    OpKind.TMEM_STORE_FENCE: ("delete-fence",),
}


@dataclass(frozen=True)
class Mutant:
    """Mutation `kind` of op number `index` of `region` (pre, prologue, loop, epilogue, post) of group `group`
    (its index in the kernel's groups)."""

    kind: str
    group: int
    region: str
    index: int

    def describe(self, kernel) -> str:
        gp = kernel.groups[self.group]
        op = _block(gp, self.region).ops[self.index]
        return f"{self.kind} {gp.group.name}/{self.region}#{self.index} ({op.kind.value}, line {op.loc.line})"


def _block(gp, region: str):
    return dict(gp.regions())[region]


def mutants(kernel, kinds=KINDS) -> list[Mutant]:
    """Every mutation of `kinds` that applies to `kernel` (a barrier-level `WSKernel`), in program order."""
    out = []
    for gi, gp in enumerate(kernel.groups):
        for region, block in gp.regions():
            for i, op in enumerate(block.ops):
                out += [Mutant(k, gi, region, i) for k in _BY_OP.get(op.kind, ()) if k in kinds]
    return out


def op_of(kernel, mutant: Mutant) -> Op:
    return _block(kernel.groups[mutant.group], mutant.region).ops[mutant.index]


@contextlib.contextmanager
def planted(kernel, mutant: Mutant):
    """`kernel` with `mutant` applied (in place), restored on exit."""
    ops = _block(kernel.groups[mutant.group], mutant.region).ops
    i = mutant.index
    op = ops[i]
    if op.kind not in _BY_OP or mutant.kind not in _BY_OP[op.kind]:
        raise ValueError(f"mutation {mutant.kind} does not apply to {op.kind.value}")
    saved_ops, saved_operands, saved_attrs = list(ops), op.operands, op.attrs
    try:
        if mutant.kind.startswith("delete"):
            del ops[i]
        elif mutant.kind == "flip-parity":
            i32 = ScalarType(DType.int32)
            one, flipped = Value(i32), Value(i32)
            ops[i:i] = [Op(OpKind.CONST, (), (one,), ConstAttrs(1), op.loc, op.pred),
                        Op(OpKind.SCALAR_BINARY, (one, op.operands[2]), (flipped,), FnAttrs("sub"), op.loc, op.pred)]
            op.operands = (*op.operands[:2], flipped, *op.operands[3:])
        elif mutant.kind == "raise-pending":
            op.attrs = dataclasses.replace(op.attrs, pending=op.attrs.pending + 1)
        yield kernel
    finally:
        ops[:] = saved_ops
        op.operands, op.attrs = saved_operands, saved_attrs
