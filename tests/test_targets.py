"""One `Target` per arch (issue 26): the arch lists derive from the registry of targets, the compiler asks
targets about features rather than comparing arch names, and the devices of an arch are machine models of
their own, each with its own calibration file."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import os
import re

import pytest

from aref.target import ARCHS, DEFAULT_ARCH, SM_90A, SM_100A, TARGETS, arch_of_capability, target_of
from aref.target.machine import CALIBRATION_DIR, DATASHEETS, DEVICES, H100, H200, B200, machine_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("aref", "partition", "pipeline", "solve")
ARCH_NAME = re.compile(r"^sm_\d+[a-z]?$")

# Where an arch name may be written: the registry itself and the arch-specific lowering and backend modules
# (those a target names, and the modules only they use).
ARCH_SPECIFIC = (
    "aref/target/",
    "aref/lower/hopper.py", "aref/lower/sm100.py", "aref/lower/subtile_sm100.py", "aref/lower/tmem.py",
    "aref/backend/cute/hopper.py", "aref/backend/cute/sm100/",
)
# The few other places that may name an arch in code, each with how many times and why: none today.
# (Docstrings, error messages and help texts that mention an arch in their prose are not comparisons and are not
# counted; the command line's `--arch` choices and defaults come from `aref.target.ARCHS` / `DEFAULT_ARCH`; the
# attention example picks its Blackwell K/V block by `target_of(arch).mma`.)
ALLOWED: dict[str, tuple[int, str]] = {}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def arch_questions(source: str) -> list[tuple[int, str]]:
    """(line, what) for every place `source` asks about an arch by its name or by a figure: a string constant
    that is an arch name (a comparison, a default, a list of archs), and a truth test of `.tmem_columns`."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and ARCH_NAME.match(node.value):
            out.append((node.lineno, f"arch name {node.value!r}"))
        tests = []
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            tests.append(node.test)
        elif isinstance(node, ast.BoolOp):
            tests.extend(node.values)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            tests.append(node.operand)
        elif isinstance(node, ast.comprehension):
            tests.extend(node.ifs)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "bool":
            tests.extend(node.args)
        out += [(t.lineno, "truth test of .tmem_columns") for t in tests
                if isinstance(t, ast.Attribute) and t.attr == "tmem_columns"]
    return sorted(out)


def _modules():
    for package in PACKAGES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, package)):
            for f in sorted(files):
                if f.endswith(".py"):
                    path = os.path.relpath(os.path.join(dirpath, f), ROOT).replace(os.sep, "/")
                    yield path, open(os.path.join(ROOT, path), encoding="utf-8").read()


def test_no_arch_name_compared_outside_the_arch_specific_modules():
    found = {}
    for path, source in _modules():
        if path.startswith(ARCH_SPECIFIC):
            continue
        hits = arch_questions(source)
        if hits and len(hits) != ALLOWED.get(path, (0, ""))[0]:
            found[path] = hits
    assert not found, "ask the target (`aref.target.target_of(arch).has_tensor_memory`, `.mma`, ...) instead:\n" \
        + "\n".join(f"{p}:{line}: {what}" for p, hits in found.items() for line, what in hits)


def test_the_scan_finds_each_way_of_asking():
    """The check above can fail: each of the ways the compiler used to ask is found, prose is not."""
    source = '''"""Docstring naming sm_90a and "sm_100a"."""
def f(ws, m, arch="sm_90a"):
    """For "sm_100a"."""
    if ws.arch == "sm_100a" or ws.arch != "sm_90a":
        pass
    x = 1 if m.tmem_columns else 2
    if not m.tmem_columns and arch in ("sm_90a",):
        raise ValueError(f"not for {arch}: compile for sm_90a")
    return {"sm_100a": 512}, m.tmem_columns * 2, bool(m.tmem_columns)
'''
    hits = arch_questions(source)
    assert [line for line, _ in hits] == [2, 4, 4, 6, 7, 7, 9, 9]


def test_the_registry_is_every_arch_list():
    from aref.backend.cute.toolchain import SUPPORTED_ARCHS
    from aref.cli.common import ArgumentParser, add_target
    from aref.compiler import CompileOptions
    assert ARCHS == tuple(TARGETS) == SUPPORTED_ARCHS == ("sm_90a", "sm_100a")
    assert DEFAULT_ARCH == "sm_90a" and CompileOptions().arch == DEFAULT_ARCH
    assert CompileOptions(arch="sm_100a").target is SM_100A
    p = ArgumentParser()
    add_target(p)
    arch = next(a for a in p._actions if a.dest == "arch")
    assert tuple(arch.choices) == ARCHS and arch.default == DEFAULT_ARCH
    assert [arch_of_capability(c) for c in ((9, 0), (10, 0), (8, 0))] == ["sm_90a", "sm_100a", None]
    from aref.errors import ArefError
    with pytest.raises(ArefError, match="unsupported arch 'sm_80'.*") as info:
        target_of("sm_80")
    assert "sm_90a, sm_100a" in info.value.hint


def test_features_of_each_target():
    assert (SM_90A.mma, SM_90A.has_tensor_memory, SM_90A.cluster_multicast, SM_90A.reduced_fp8_accumulator) \
        == ("wgmma", False, True, True)
    assert (SM_100A.mma, SM_100A.has_tensor_memory, SM_100A.cluster_multicast, SM_100A.reduced_fp8_accumulator) \
        == ("tcgen05", True, False, False)
    assert (SM_100A.tmem_lanes, SM_100A.tmem_columns, SM_100A.tmem_min_alloc) == (128, 512, 32)
    # tcgen05.alloc: powers of two from 32 columns; nothing to allocate where there is no tensor memory
    assert [SM_100A.tmem_allocation(n) for n in (1, 32, 33, 96, 129, 512)] == [32, 32, 64, 128, 256, 512]
    assert SM_90A.tmem_allocation(128) == 0
    for t in TARGETS.values():
        assert (t.registers_per_sm, t.max_regs_per_thread, t.smem_per_cta) == (65536, 255, 227 * 1024)
        assert (t.setmaxnreg_min, t.setmaxnreg_max, t.setmaxnreg_step) == (24, 256, 8) and t.tma and t.setmaxnreg


def test_each_target_names_its_lowering_and_backend():
    for t in TARGETS.values():
        lowering, backend = importlib.import_module(t.lowering), importlib.import_module(t.backend)
        assert callable(lowering.lower_kernel)
        assert all(callable(getattr(backend, f)) for f in ("generate_source", "plan", "register_budgets"))
        for module in (t.lowering, t.backend):
            path = module.replace(".", "/")
            assert any(f"{path}.py".startswith(a) or f"{path}/".startswith(a) for a in ARCH_SPECIFIC), module


def test_the_limits_are_read_from_the_target():
    from aref import resources
    assert (resources.REGISTERS_PER_SM, resources.MIN_REGS, resources.MAX_REGS, resources.REG_STEP) == \
        (SM_90A.registers_per_sm, SM_90A.setmaxnreg_min, SM_90A.setmaxnreg_max, SM_90A.setmaxnreg_step)
    for m in DEVICES.values():
        t = m.target
        assert (m.registers, m.max_regs_per_thread, m.smem_per_block, m.tmem_lanes, m.tmem_columns) == \
            (t.registers_per_sm, t.max_regs_per_thread, t.smem_per_cta, t.tmem_lanes, t.tmem_columns)
        assert (m.setmaxnreg_min, m.setmaxnreg_max, m.setmaxnreg_step) == \
            (t.setmaxnreg_min, t.setmaxnreg_max, t.setmaxnreg_step)


def test_devices_under_their_arch():
    assert SM_90A.devices == ("H100", "H200") and SM_100A.devices == ("B200",)
    assert machine_for("sm_90a") is H100 and machine_for("sm_90a", "H200") is H200 and machine_for("sm_100a") is B200
    with pytest.raises(ValueError):
        machine_for("sm_100a", "H100")
    # the H200 is the H100's die (SMs, clocks, tensor rates, L2) with HBM3e at 4.8 TB/s (datasheets)
    h100, h200 = DATASHEETS["H100"], DATASHEETS["H200"]
    differ = {f for f in vars(h100) if getattr(h100, f) != getattr(h200, f)}
    assert differ == {"name", "memory_bytes_per_s"}
    assert (h100.memory_bytes_per_s, h200.memory_bytes_per_s, B200.memory_bytes_per_s) == (3.35e12, 4.8e12, 8e12)


def test_each_device_has_its_own_calibration_file():
    files = sorted(p.stem for p in CALIBRATION_DIR.glob("*.json"))
    assert files and set(files) <= set(DEVICES)
    for name in files:
        data = json.loads((CALIBRATION_DIR / f"{name}.json").read_text())
        assert data["machine"] == name and data["arch"] == DEVICES[name].arch
        assert DEVICES[name].calibration.startswith(f"{name}.json")
    # a device without a file has its datasheet figures: the H200 is not given the H100's fit
    assert "H200" not in files and H200 is DATASHEETS["H200"] and H100 is not DATASHEETS["H100"]


def _barrier_and_source(name: str, arch: str, partition: str) -> tuple[str, str, str]:
    from aref.backend.cute import generate_source
    from aref.compiler import CompileOptions, print_stage
    from aref.runtime.harness import load_example
    from aref.search import lower_to
    from example_paths import example_path
    ex = load_example(example_path(name))
    kernel = ex.kernel.specialize(**ex.inputs("small", arch=arch))
    ws = lower_to(kernel, "barrier", CompileOptions(arch=arch, partition=partition))
    return ws.arch, print_stage(ws, "barrier").replace(arch, "ARCH"), generate_source(ws).replace(arch, "ARCH")


@pytest.mark.parametrize("base, example, partition", [
    (SM_90A, "gemm", "optimal"), (SM_90A, "attention_fwd", "heuristic"), (SM_100A, "attention_fwd", "heuristic"),
])
def test_a_third_target_with_the_same_features_compiles_the_same_way(monkeypatch, base, example, partition):
    """A target the compiler has never heard of, registered with Hopper's (Blackwell's) features, limits,
    lowering and backend, is compiled exactly as sm_90a (sm_100a) is: the same Barrier IR and CuTe DSL source
    up to the arch's name. Were any pass still to compare arch names, the new arch would fall to one side of
    that test and the program would change."""
    fake = dataclasses.replace(base, name=base.name[:-1] + "x", compute_capability=(base.compute_capability[0], 9))
    monkeypatch.setitem(TARGETS, fake.name, fake)
    got_arch, got_ir, got_source = _barrier_and_source(example, fake.name, partition)
    want_arch, want_ir, want_source = _barrier_and_source(example, base.name, partition)
    assert (got_arch, want_arch) == (fake.name, base.name)
    assert got_ir == want_ir
    assert got_source == want_source
