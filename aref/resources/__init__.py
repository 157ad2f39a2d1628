"""The resource model: one set of rules for registers, shared memory and tensor memory.

The optimal partitioner's solver inputs, the heuristic partitioner's group sizing, the lowering's register
budgets (setmaxnreg), the simulator's launch checks and the CuTe backend's checks all ask this package, so a
partition that the middle end accepts is one the backend compiles.
"""
from aref.resources.budgets import (assign_budgets, check_budgets, launch_registers, register_pool,
                                    split_budget)
from aref.resources.demand import RegisterDemand, register_demand
from aref.resources.registers import (BUDGET_CAP, LAUNCH_CAP, MAX_REGS, MIN_REGS, PRODUCER_MAX, REG_STEP,
                                      REGISTERS_PER_SM, ROLE_OVERHEAD, Liveness, ResourceError, tile_registers)

__all__ = ["BUDGET_CAP", "LAUNCH_CAP", "MAX_REGS", "MIN_REGS", "PRODUCER_MAX", "REG_STEP", "REGISTERS_PER_SM",
           "ROLE_OVERHEAD", "Liveness", "RegisterDemand", "ResourceError", "assign_budgets", "check_budgets",
           "launch_registers", "register_demand", "register_pool", "split_budget", "tile_registers"]
