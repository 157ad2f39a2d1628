# expect: unsupported
import aref
from _shared import example_inputs, reference  # noqa: F401
from aref import aref_kernel


@aref_kernel(grid=(1,))
def empty_kernel(A, B, C):  # <-
    pass
