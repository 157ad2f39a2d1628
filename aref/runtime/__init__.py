"""The user's entry points: the kernel object behind `@aref_kernel` (`kernel`: trace, interpret, tune,
launch), every kernel as a PyTorch operator (`torch_library`), the fast GPU launch path (`fast_launch`), the
on-disk cache of compiled kernels that makes warm starts cheap (`aref.backend.cute.binary_cache`, configured through
`aref.config`) and the example harness (`harness`: load an example and run it as the command line does, and
rebuild a measured configuration of one for the calibration)."""
