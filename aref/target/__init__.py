"""What aref knows about the hardware it compiles for: one `Target` per arch (`targets`: name, compute
capability, limits, feature flags, its lowering and backend modules) and the machine models of its devices
(`machine`: units, latencies, bandwidths, fitted figures from `calibration/<device>.json`)."""
from aref.target.targets import (ARCHS, DEFAULT_ARCH, SM_90A, SM_100A, TARGETS, Target, arch_of_capability,
                                 target_of, uniform)

__all__ = ["ARCHS", "DEFAULT_ARCH", "SM_90A", "SM_100A", "TARGETS", "Target", "arch_of_capability", "target_of",
           "uniform"]
