"""Register budgets (setmaxnreg) from the groups' needs: the launch split, the CTA's pool, the liveness-based
budgets the lowering gives (`assign_budgets`), the launch rule (`check_budgets`) and the partitioners'
provisional shares (`split_budget`). The needs come from `aref.resources.demand`."""
from __future__ import annotations

from aref.errors import ArefError
from aref.resources.demand import RegisterDemand
from aref.resources.registers import (BUDGET_CAP, LAUNCH_CAP, MAX_REGS, MIN_REGS, PRODUCER_FLOOR, PRODUCER_MAX,
                                      PTXAS_HEADROOM, REG_STEP, REGISTERS_PER_SM, ResourceError)


def launch_registers(total_threads: int) -> int:
    """Registers per thread at launch (before setmaxnreg): the file split evenly, a multiple of 8."""
    return min(LAUNCH_CAP, REGISTERS_PER_SM // max(1, total_threads) // REG_STEP * REG_STEP)


def register_pool(total_threads: int) -> int:
    """The registers a CTA owns and setmaxnreg redistributes: launch registers × threads."""
    return launch_registers(total_threads) * total_threads


def assign_budgets(groups, demands: dict[int, RegisterDemand], where=None) -> dict[int, int]:
    """setmaxnreg budgets: every computing group gets its need, a pure TMA producer keeps its small budget,
    and the rest of the CTA's register pool is shared evenly among the computing groups (capped at
    `BUDGET_CAP`; a group that needs more than that gets its need, up to setmaxnreg's `MAX_REGS`). Raises
    `ResourceError` when the needs do not fit."""
    from aref.errors import UNKNOWN_LOC
    loc = where or UNKNOWN_LOC
    total = sum(g.threads for g in groups)
    pool = register_pool(total)
    computing = [g for g in groups if demands[g.id].computes]
    budget: dict[int, int] = {}
    for g in groups:
        d = demands[g.id]
        # a pure data-movement group keeps the small budget its partition gave it (24..48: a TMA issue loop)
        budget[g.id] = d.need if d.computes else max(MIN_REGS, min(g.regs, PRODUCER_MAX))
    for g in computing:
        # the budgets given out stay within BUDGET_CAP (ptxas headroom), but a group that needs more may take
        # up to setmaxnreg's limit when the pool has it
        if budget[g.id] > MAX_REGS:
            d = demands[g.id]
            raise ResourceError(f"{d.describe()}: {d.need} registers per thread, more than the {MAX_REGS} a warp "
                                f"group can be given (setmaxnreg)", getattr(d.at, "loc", None) or loc,
                                hint=f"split the work over more consumer groups or use smaller tiles: {d.remedy()}",
                                excess=d.need - MAX_REGS)
    used = sum(budget[g.id] * g.threads for g in groups)
    for g in groups:                 # a producer gives back what it can (down to 24) before anything is refused
        if used > pool and not demands[g.id].computes:
            give = min(budget[g.id] - MIN_REGS, -(-(used - pool) // g.threads // REG_STEP) * REG_STEP)
            budget[g.id] -= give
            used -= give * g.threads
    if used > pool:
        detail = " + ".join(f"{g.name} {g.threads}×{budget[g.id]}" for g in groups)
        raise ResourceError(f"register budgets need {used} registers ({detail}) but the CTA's pool is {pool} "
                            f"({launch_registers(total)} per thread × {total} threads)", loc,
                            hint="use fewer or smaller warp groups, or smaller tiles",
                            excess=-(-(used - pool) // max(1, sum(g.threads for g in computing))))
    used = _share_rest(budget, computing, used, pool)
    # The need is an estimate (tiles at their peak plus ROLE_OVERHEAD) and ptxas may take more: a computing
    # group left less than PTXAS_HEADROOM above its need takes registers from the pure producers (down to
    # PRODUCER_FLOOR, what a TMA issue loop with its index math holds) when that raises its budget.
    tight = [g for g in computing if budget[g.id] < BUDGET_CAP and demands[g.id].need + PTXAS_HEADROOM > budget[g.id]]
    if tight:
        trial = dict(budget)
        freed = 0
        for g in groups:
            if not demands[g.id].computes and trial[g.id] > PRODUCER_FLOOR:
                freed += (trial[g.id] - PRODUCER_FLOOR) * g.threads
                trial[g.id] = PRODUCER_FLOOR
        trial_used = _share_rest(trial, computing, used - freed, pool)
        if any(trial[g.id] > budget[g.id] for g in tight):
            budget, used = trial, trial_used
    return budget


def _share_rest(budget: dict[int, int], computing, used: int, pool: int) -> int:
    """Share what is left of the pool among the computing groups evenly, a step of 8 at a time, never above
    the cap (updates `budget`; returns the registers used)."""
    changed = True
    while changed and computing:
        changed = False
        for g in sorted(computing, key=lambda g: (budget[g.id], g.id)):
            if budget[g.id] + REG_STEP <= BUDGET_CAP and used + REG_STEP * g.threads <= pool:
                budget[g.id] += REG_STEP
                used += REG_STEP * g.threads
                changed = True
    return used


def check_budgets(groups) -> None:
    """The launch rule: every budget a multiple of 8 in 24..256, all of them within the register file."""
    total = 0
    for g in groups:
        if g.regs % REG_STEP or not MIN_REGS <= g.regs <= MAX_REGS:
            raise ArefError(f"group {g.name}: {g.regs} registers per thread; setmaxnreg takes multiples of 8 in "
                            f"{MIN_REGS}..{MAX_REGS}")
        total += g.regs * g.threads
    if total > REGISTERS_PER_SM:
        detail = " + ".join(f"{g.name} {g.threads}×{g.regs}" for g in groups)
        raise ArefError(f"register budgets need {total} registers ({detail}) but an SM has {REGISTERS_PER_SM}",
                        hint="use fewer or smaller warp groups, or lower a group's budget")


def split_budget(fixed, flexible, cap: int = BUDGET_CAP):
    """Provisional budgets for a partition (final ones follow liveness, see `assign_budgets`): `fixed`
    (name, role, warps, regs) keep theirs; `flexible` (name, role, warps) share the rest of the register file
    evenly, rounded down to a multiple of 8 and capped at `cap`."""
    from aref.ir.ws import WarpGroup
    used = sum(w * 32 * r for _, _, w, r in fixed)
    threads = sum(w * 32 for _, _, w in flexible)
    share = cap if not threads else min(cap, (REGISTERS_PER_SM - used) // threads // REG_STEP * REG_STEP)
    groups = [WarpGroup(i, n, role, w, r) for i, (n, role, w, r) in enumerate(fixed)]
    for n, role, w in flexible:
        groups.append(WarpGroup(len(groups), n, role, w, max(MIN_REGS, share)))
    return groups
