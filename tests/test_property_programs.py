"""Hypothesis: random tile programs (tests/random_programs.py) interpret equal to the same computation written
directly in eager torch, at wgmma sizes and at small sizes; and the cooperative row split of any program
that splits computes exactly what the program computes."""
import torch
from hypothesis import HealthCheck, given, settings

from aref.runtime.harness import compare
from aref.interp.tile import run_kernel
from partition.rowsplit import can_row_split, row_split
from random_programs import build, programs


def _clone(inputs):
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs("wgmma"))
def test_random_program_interprets_like_torch(tmp_path_factory, spec):
    prog = build(spec, str(tmp_path_factory.getbasetemp()))
    kernel_fn, inputs, reference = prog
    got = _clone(inputs)
    kernel_fn(**got)
    expected = reference(**_clone(inputs))
    report = compare(got, expected, {k: (2e-2, 2e-2) for k in expected})
    assert report.ok, (prog.path, report.to_json())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs("small"))
def test_small_random_program_interprets_like_torch(tmp_path_factory, spec):
    kernel_fn, inputs, reference = build(spec, str(tmp_path_factory.getbasetemp()))
    got = _clone(inputs)
    kernel_fn(**got)
    expected = reference(**_clone(inputs))
    assert compare(got, expected, {k: (2e-2, 2e-2) for k in expected}).ok


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs("wgmma"))
def test_row_split_computes_what_the_program_computes(tmp_path_factory, spec):
    prog = build(spec, str(tmp_path_factory.getbasetemp()))
    kernel = prog.kernel.specialize(**prog.inputs)
    if can_row_split(kernel, 2) is not None:
        return                                      # not splittable: nothing to compare
    split, _ = row_split(kernel, 2)
    expected, got = _clone(prog.inputs), _clone(prog.inputs)
    run_kernel(kernel, expected)
    run_kernel(split, got)
    report = compare(got, {k: expected[k] for k in ("C", "R", "CS", "P", "RA") if k in expected},
                     {k: (1e-3, 1e-3) for k in expected})
    assert report.ok, (prog.path, report.to_json())
