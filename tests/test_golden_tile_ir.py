"""Golden Tile IR text of every example (rewrite with `pytest --update-goldens`)."""
import pytest

from aref.runtime.harness import load_example
from aref.ir.printer import print_kernel
from aref.verify import verify
from example_paths import EXAMPLE_NAMES, example_path


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_tile_ir_golden(name, golden):
    ex = load_example(example_path(name))
    kernel = ex.kernel.specialize(**ex.inputs())
    verify(kernel)
    golden(f"tile/{name}.txt", print_kernel(kernel))
