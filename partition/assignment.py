"""The solver's answer as warp groups: every Tile IR op of the kernel placed in a group, with provisional
register budgets.

`partition_from_schedule` turns the assignment of the solver's graph nodes (`partition.optimal`) into a
`Partition`: the TMA group first, roles named from what each group runs, the ops outside the graph placed
beside the work they feed or read, and on Blackwell the one-warp load and MMA warps kept to what one warp can
do (tcgen05 reads its A operand from shared or tensor memory, and a warp holds no tile rows).
"""
from __future__ import annotations

from aref import resources
from aref.errors import SolverError
from aref.ir import DType, Kernel, Op, OpKind, TileType
from aref.ops import VIEWS
from aref.ir.ws import WarpGroup
from aref.target import target_of
from partition.model import Partition, check_registers, one_producer_per_channel, replicated_ops, split_budget, \
    value_owner



def partition_from_schedule(kernel: Kernel, ex, result, arch: str) -> Partition:
    """Groups of the solver's assignment (`ex`: the `partition.optimal.Extraction` it solved; the TMA group
    first), and every Tile IR op placed."""
    blackwell = target_of(arch).mma == "tcgen05"     # one-warp load and MMA-issue roles, no tensor-core turns
    by_group: dict[int, list[str]] = {}
    for n, grp in result.assignment.items():
        by_group.setdefault(grp, []).append(n)
    order = sorted(by_group, key=lambda grp: (not all(ex.kind[n] == "tma" for n in by_group[grp]), grp))
    remap = {grp: i for i, grp in enumerate(order)}
    specs = []
    for grp in order:
        kinds = {ex.kind[n] for n in by_group[grp]}
        role = ("producer" if kinds == {"tma"} else "mma" if kinds == {"gemm"} and blackwell
                else "consumer" if "gemm" in kinds else "softmax" if kinds & {"exp", "max"}
                else "correction" if kinds <= {"rescale"} else "compute")
        warps = 1 if blackwell and role in ("producer", "mma") else 4
        specs.append((f"{role}{remap[grp]}", role, warps))
    assign: dict[Op, int] = {}
    for n, ops in ex.members.items():
        for o in ops:
            assign[o] = remap[result.assignment[n]]
    if not any(r == "producer" for _, r, _ in specs) and any(
            op.kind is OpKind.LOAD and op not in assign for op in kernel.all_ops()):
        # a loop without loads of its own (its operands loaded before it, or its loads dead) has no TMA
        # group in the schedule, but the loads around it need one: the backend keeps TMA issue out of the
        # groups that compute
        specs.insert(0, ("producer", "producer", 1 if blackwell else 4))
        assign = {o: g + 1 for o, g in assign.items()}
        order = [None] + order
    _place_rest(kernel, assign, [WarpGroup(i, n, r, w, 0) for i, (n, r, w) in enumerate(specs)])
    if blackwell:
        _mma_warp_for_register_operands(kernel, assign, specs)
        _blackwell_one_warp_groups(kernel, assign, specs)
    one_producer_per_channel(kernel, assign)
    groups = _budgets(specs, result, order)
    return Partition(groups, assign, "optimal", () if blackwell else _tensor_core_turns(ex, result, assign))


def _tensor_core_turns(ex, result, assign: dict[Op, int]) -> tuple[int, ...]:
    """Hopper groups that issue MMAs and, in the solver's schedule, each hold the tensor core for one run of
    their MMAs per II: the order of those runs in the II (FA3's ping-pong consumers, taken from the schedule).
    The lowering has them take turns in that order (`aref.lower._pingpong`); without it, two in-order groups
    that share the tensor core can settle into another order, each waiting on the other's data (the row-split
    causal attention: 2365 cycles per iteration for II 2048, 2074 in turns). Empty where fewer than two groups
    issue MMAs or one group's MMAs are interleaved with another's."""
    runs = sorted((result.schedule[n] % result.ii, assign[op]) for n, ops in ex.members.items()
                  if ex.kind[n] == "gemm" for op in ops[:1] if op.kind is OpKind.MMA and op in assign)
    labels = [g for _, g in runs]
    groups = set(labels)
    starts = {labels[i]: runs[i][0] for i in range(len(runs)) if labels[i] != labels[i - 1]}
    if len(groups) < 2 or len(starts) != len(groups) or \
            sum(labels[i] != labels[i - 1] for i in range(len(runs))) != len(groups):
        return ()
    return tuple(sorted(groups, key=lambda g: starts[g]))


# what a one-warp group (Blackwell's load and MMA warps) can do: TMA loads and their puts, MMA issue
ONE_WARP = frozenset({OpKind.LOAD, OpKind.PUT, OpKind.MMA})


def _mma_warp_for_register_operands(kernel: Kernel, assign: dict[Op, int], specs: list) -> None:
    """tcgen05 reads its A operand from shared or tensor memory only: an MMA whose A is a tile its own group
    computes in registers (a masked or rescaled operand) is issued by an MMA warp of its own instead (FA4's
    structure), so the tile crosses to it through a channel, as the heuristic's Blackwell partitions do."""
    prod = {id(r): op for op in kernel.all_ops() for r in op.results}
    mma_warp = None
    for op in kernel.all_ops():
        if op.kind is not OpKind.MMA or op not in assign:
            continue
        src = prod.get(id(op.operands[0]))
        while src is not None and src.kind in VIEWS:
            src = prod.get(id(src.operands[0]))
        if src is None or src.kind in (OpKind.GET, OpKind.LOAD) or assign.get(src) != assign[op]:
            continue
        if specs[assign[op]][2] == 1:
            continue
        if mma_warp is None:
            mma_warp = len(specs)
            specs.append((f"mma{mma_warp}", "mma", 1))
        assign[op] = mma_warp


def _blackwell_one_warp_groups(kernel: Kernel, assign: dict[Op, int], specs: list) -> None:
    """On Blackwell one warp reaches only 32 of tensor memory's 128 lanes and holds no tile rows: work placed
    in a one-warp group outside the solver's graph (pre-loop index math, the epilogue) goes to the four-warp
    group that reads its result, else to an epilogue warp group added for it (FA4 / CUTLASS epilogue warps)."""
    one_warp = {i for i, (_, _, w) in enumerate(specs) if w == 1}
    users: dict[int, list[Op]] = {}
    for op in kernel.all_ops():
        for v in op.operands:
            users.setdefault(id(v), []).append(op)
    epilogue = None
    for op in reversed(list(kernel.all_ops())):      # users first, so a chain follows its last consumer
        if assign.get(op) not in one_warp or op.kind in ONE_WARP:
            continue
        targets = [assign[u] for r in op.results for u in users.get(id(r), [])
                   if assign.get(u) is not None and assign[u] not in one_warp]
        if targets:
            assign[op] = min(targets)
            continue
        if epilogue is None:
            epilogue = len(specs)
            specs.append((f"epilogue{epilogue}", "epilogue", 4))
        assign[op] = epilogue


def _budgets(specs, result, order) -> list[WarpGroup]:
    """Provisional register budgets: the TMA group and single-warp groups keep little (24 / 40 / 48 per thread,
    as FA3, CUTLASS and FA4 do); the compute groups share the rest of the register file evenly. The lowering
    replaces them with the resource model's liveness-based budgets (Hopper). A share below the solver's
    figure for a group that holds tiles is an error."""
    compute = [n for n, r, w in specs if r != "producer" and w > 1]
    fixed = [(n, r, w, (24 if len(compute) > 1 else 40) if r == "producer" else 48)
             for n, r, w in specs if r == "producer" or w == 1]
    flexible = [(n, r, w) for n, r, w in specs if not (r == "producer" or w == 1)]
    made = {g.name: g for g in split_budget(fixed, flexible)}
    groups = [WarpGroup(i, n, r, w, made[n].regs) for i, (n, r, w) in enumerate(specs)]
    needs = result.registers if isinstance(result.registers, dict) else {}
    need_of = {groups[i].name: needs.get(grp, 0) for i, grp in enumerate(order) if groups[i].role != "producer"}
    groups = _give_needs(groups, need_of, {n for n, _, _ in flexible})
    for i, grp in enumerate(order):
        need = needs.get(grp, 0)
        if need > groups[i].regs and groups[i].role != "producer":    # a TMA group holds no tiles
            raise SolverError(f"the schedule needs {need} registers per thread in group {groups[i].name}, but "
                              f"only {groups[i].regs} fit beside the other groups",
                              hint="allow fewer warp groups or smaller tiles")
    check_registers(groups)
    return groups


def _give_needs(groups: list[WarpGroup], need_of: dict[str, int], flexible: set[str]) -> list[WarpGroup]:
    """When an even share is below a group's need, give the needy groups their need (the solver kept the
    register file's total) and share what is left among the other flexible groups; unchanged if that does not
    fit (the caller then names the group that is short)."""
    short = {g.name for g in groups if need_of.get(g.name, 0) > g.regs}
    if not short:
        return groups
    step = resources.REG_STEP
    want = {n: -(-need_of[n] // step) * step for n in short}
    others = [g for g in groups if g.name not in short and g.name in flexible]
    fixed = [g for g in groups if g.name not in short and g.name not in flexible]
    left = resources.REGISTERS_PER_SM - sum(g.regs * g.threads for g in fixed) \
        - sum(want[g.name] * g.threads for g in groups if g.name in short)
    share = min(resources.BUDGET_CAP, left // max(1, sum(g.threads for g in others)) // step * step) if others else 0
    if left < 0 or others and share < max([resources.MIN_REGS] + [need_of.get(g.name, 0) for g in others]):
        return groups
    return [WarpGroup(g.id, g.name, g.role, g.warps, want[g.name] if g.name in short else share if g in others
                      else g.regs) for g in groups]


def _place_rest(kernel: Kernel, assign: dict[Op, int], groups: list[WarpGroup]) -> None:
    """Ops outside the graph: puts go with the loads they publish; pre-loop loads with the TMA group;
    other pre/post-loop work with the group that computes what it reads (the epilogue with its data)."""
    prod = {id(r): op for op in kernel.all_ops() for r in op.results}
    tma = 0 if groups and groups[0].role == "producer" else None
    rep = replicated_ops(kernel)
    owner = value_owner(kernel, assign)

    fallback = next((g.id for g in groups if g.role in ("consumer", "mma")), len(groups) - 1)
    masks = []       # boolean tiles are not handed between groups: a mask is made where it is used
    for op in kernel.all_ops():
        if op in rep or op in assign:
            continue
        if any(isinstance(r.type, TileType) and r.type.dtype is DType.bool_ for r in op.results):
            masks.append(op)
        elif op.kind is OpKind.LOAD:
            assign[op] = tma if tma is not None else fallback
        elif op.kind is OpKind.PUT:
            loads = [prod.get(id(v)) for v in op.operands[1:]]
            assign[op] = next((assign[o] for o in loads if o in assign), fallback)
        else:
            data = op.operands[1:] if op.kind is OpKind.STORE else op.operands
            assign[op] = next((g for g in (owner(v) for v in reversed(data)) if g is not None), fallback)
    users: dict[int, list[Op]] = {}
    for op in kernel.all_ops():
        for v in op.operands:
            users.setdefault(id(v), []).append(op)
    for op in reversed(masks):          # users first: a mask of a mask (`a & b`) follows its user too
        placed = [assign[u] for r in op.results for u in users.get(id(r), []) if u in assign]
        assign[op] = placed[0] if placed else next(
            (g for g in (owner(v) for v in reversed(op.operands)) if g is not None), fallback)
