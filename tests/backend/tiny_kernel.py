"""A minimal CuTe DSL kernel for toolchain tests (the DSL needs functions defined in a source file)."""
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor


@cute.kernel
def scale_kernel(x: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    x[tidx] = x[tidx] * 2.0


@cute.jit
def host(x: cute.Tensor):
    scale_kernel(x).launch(grid=(1, 1, 1), block=(128, 1, 1))


def make_fake_args():
    return [make_fake_compact_tensor(cutlass.Float32, (128,), assumed_align=16)]
