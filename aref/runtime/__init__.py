"""The user's entry points: the kernel object behind `@aref_kernel` (`kernel`: trace, interpret, tune,
launch) and the example harness the command line runs (`harness`)."""
