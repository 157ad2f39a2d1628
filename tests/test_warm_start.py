"""Warm starts: a process that finds a specialization's compiled function in the disk cache loads it and does
not run the CuTe DSL compiler (counted: `cute.compile` calls), on a machine without a GPU."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(cache) -> dict:
    proc = subprocess.run([sys.executable, os.path.join(HERE, "warm_start_check.py"), str(cache)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_instead_of_compiling(tmp_path):
    cold = _run(tmp_path)
    assert cold["cute_compile_calls"] == 1 and cold["compiler_runs"] == 1 and cold["loads"] == 0
    objects = list(tmp_path.rglob("*.sm_90a.launch.o"))
    assert len(objects) == 1 and objects[0].stat().st_size > 0
    warm = _run(tmp_path)
    assert warm["cute_compile_calls"] == 0 and warm["compiler_runs"] == 0 and warm["loads"] == 1
    assert warm["compiled"] == cold["compiled"]
    objects[0].write_bytes(b"not an object file")           # unreadable: compiled again and replaced
    from aref.backend.cute import binary_cache
    source = next(tmp_path.rglob("gemm_*.py"))
    runs = binary_cache.compiler_runs()
    binary_cache.compiled_function(source, "sm_90a")
    assert binary_cache.compiler_runs() == runs + 1
    assert objects[0].read_bytes()[:4] == b"\x7fELF"


def test_the_size_limit_removes_least_recently_used_entries(tmp_path):
    import time

    from aref.backend.cute.binary_cache import enforce_size_limit
    for i, name in enumerate(("old", "mid", "new")):
        d = tmp_path / name
        d.mkdir()
        (d / "blob").write_bytes(b"x" * 1000)
        os.utime(d / "blob", (time.time() - 100 + i * 10,) * 2)
    removed = enforce_size_limit(tmp_path, 2500)
    assert [p.name for p in removed] == ["old"] and sorted(p.name for p in tmp_path.iterdir()) == ["mid", "new"]
    assert enforce_size_limit(tmp_path, 0) == []              # 0: no limit
