"""Shared test fixtures: the golden-file flag and example loading."""
import os

import pytest

from example_paths import GOLDEN


def pytest_addoption(parser):
    parser.addoption("--update-goldens", action="store_true", default=False,
                     help="rewrite tests/golden/** from the current output instead of comparing")


@pytest.fixture
def golden(request):
    """`golden(relpath, text)`: compare `text` with tests/golden/relpath (or rewrite it with --update-goldens)."""
    update = request.config.getoption("--update-goldens")

    def check(relpath: str, text: str) -> None:
        path = os.path.join(GOLDEN, relpath)
        if update or not os.path.exists(path):
            if not update:
                pytest.fail(f"missing golden file {relpath}; run pytest --update-goldens to create it")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            return
        with open(path) as f:
            expected = f.read()
        assert text == expected, f"{relpath} differs from the golden text (rerun with --update-goldens if the " \
                                 f"change is intended)"
    return check

