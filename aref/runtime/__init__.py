"""The user's entry points at run time: every `@aref_kernel` as a PyTorch operator (`torch_library`), the
fast GPU launch path (`fast_launch`) and the on-disk cache of compiled kernels that makes warm starts cheap
(`binary_cache`, configured through `aref.config`)."""
