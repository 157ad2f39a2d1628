# expect: example error
import aref
from _shared import example_inputs, reference  # noqa: F401
from aref import aref_kernel

def gemm(A, B, C):
    pass
