# expect: error
# command: compile FILE --arch sm_100a --json
import aref
from aref import aref_kernel
from _shared import example_inputs, reference  # noqa: F401


@aref_kernel
def wide_gemm(A, B, C, *, BM: int = 256, BN: int = 128, BK: int = 64):
    pid_m, pid_n = aref.program_id(0), aref.program_id(1)
    acc = aref.zeros((BM, BN), aref.float32)
    ab = aref.channel(depth=2)
    for k in aref.range(A.shape[1] // BK):
        ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
        a, b = ab.get()
        acc = aref.mma(a, b.T, acc)  # <-
        ab.consumed()
    aref.store(C, (pid_m, pid_n), acc.to(C.dtype))
