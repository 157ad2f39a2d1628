# expect: solver
# command: run FILE --backend sim --partition optimal --json
import torch

import aref
from aref import aref_kernel


@aref_kernel(grid=lambda X, BM, **_: (-(-X.shape[0] // BM),))
def dead_loop(X, Y, *, BM: int = 64, BN: int = 64):
    pm = aref.program_id(0)
    for j in aref.range(X.shape[1] // BN):  # <-
        x = aref.load(X, (pm, j), (BM, BN)).to(aref.float32) * 2.0      # nothing reads x
    aref.store(Y, (pm, 0), aref.full((BM, BN), 1.0, aref.float32).to(Y.dtype))


def example_inputs(size="small", **kw):
    g = torch.Generator().manual_seed(0)
    return {"X": torch.rand(256, 256, generator=g).half(), "Y": torch.zeros(256, 64).half(), **kw}


def reference(X, Y, **_):
    return {"Y": torch.ones(256, 64).half()}
