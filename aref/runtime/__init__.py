"""The user's entry points: the kernel object behind `@aref_kernel` (`kernel`: trace, interpret, tune,
launch) and the example harness (`harness`: load an example and run it as the command line does, and
rebuild a measured configuration of one for the calibration)."""
