"""aref: a Python DSL and compiler for asynchronous, warp-specialized GPU kernels (Hopper, Blackwell).

Write one CTA's work as a sequential tile program with explicit aref channels::

    import aref
    from aref import aref_kernel

    @aref_kernel
    def gemm(A, B, C, *, BM: int = 128, BN: int = 128, BK: int = 64):
        pid_m, pid_n = aref.program_id(0), aref.program_id(1)
        acc = aref.zeros((BM, BN), aref.float32)
        ab = aref.channel(depth=3)
        for k in aref.range(aref.cdiv(A.shape[1], BK)):
            ab.put(aref.load(A, (pid_m, k), (BM, BK)), aref.load(B, (pid_n, k), (BN, BK)))
            a, b = ab.get()
            acc = aref.mma(a, b.T, acc)
            ab.consumed()
        aref.store(C, (pid_m, pid_n), acc.to(aref.float16))
"""
from aref.errors import ArefError, ArefSyntaxError, ArefTypeError, ChannelError, VerifyError
from aref.ir import DType
from aref.tune.space import Config, configs
from aref.runtime.kernel import KernelFunction, aref_kernel, autotune
from aref.settings import RuntimeConfig, config
from aref.lang import (Channel, Scalar, TensorArg, Tile, abs, arange, bfloat16, cast, cdiv, ceil, channel, clamp,
                       cos, erf, exp, exp2, float8_e4m3, float8_e5m2, float16, float32, floor, full, int32, load, log,
                       log2, maximum, minimum, mma, pow, program_id, range, rowmax, rowmin, rowsum, rsqrt, sigmoid,
                       sin, sqrt, store, tanh, where, zeros)

__version__ = "0.1.0"

__all__ = [
    "ArefError", "ArefSyntaxError", "ArefTypeError", "ChannelError", "VerifyError", "DType", "KernelFunction",
    "aref_kernel", "autotune", "Config", "configs", "RuntimeConfig", "config", "Channel", "Scalar", "TensorArg",
    "Tile", "abs", "arange", "bfloat16", "cast", "cdiv", "ceil", "channel", "clamp", "cos", "erf", "exp", "exp2",
    "float8_e4m3", "float8_e5m2", "float16", "float32", "floor", "full", "int32", "load", "log", "log2", "maximum",
    "minimum", "mma", "pow", "program_id", "range", "rowmax", "rowmin", "rowsum", "rsqrt", "sigmoid", "sin", "sqrt",
    "store", "tanh", "where", "zeros",
]
