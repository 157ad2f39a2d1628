"""Hypothesis: random tile programs interpret equal to the same computation written directly in torch."""
import torch
from hypothesis import HealthCheck, given, settings

from aref.harness import load_module
from random_programs import make_inputs, programs, write_module


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_program_interprets_like_torch(tmp_path_factory, p):
    path = write_module(p, str(tmp_path_factory.getbasetemp()))
    mod = load_module(path)
    A, B, C, R = make_inputs(p)
    mod.prog(A, B, C, R)
    acc, r = mod.ref(A, B)
    torch.testing.assert_close(C, acc, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(R, r, atol=1e-4, rtol=1e-4)
