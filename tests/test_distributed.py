"""aref.nn inside torch.distributed: two CPU processes (gloo) train one step of an attention block built on
aref.nn under DistributedDataParallel and FSDP2 (fully_shard); the gradients and updated weights equal a
single-process torch reference (torch's linear and SDPA in float32 on the whole batch) within fp16 tolerances."""
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import distributed_check as dc  # noqa: E402


def _reference():
    model = dc.Block(use_aref=False).float()
    x, target = dc.batch()
    dc.loss_of(model, x.float(), target).backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    return grads, {n: (p.detach() - 0.1 * p.grad) for n, p in model.named_parameters()}


def test_ddp_and_fsdp_two_processes_match_single_process_torch(tmp_path):
    out = str(tmp_path / "result.pt")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "distributed_check.py"), out, "ddp", "fsdp"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = torch.load(out)
    assert set(results) == {"ddp", "fsdp"}
    for mode, got in results.items():
        _check(mode, got)


def _check(mode, got):
    grads, weights = _reference()
    assert set(got["grads"]) == set(grads) == {"qkv", "qkv_bias", "out"}
    for name, want in grads.items():
        g = got["grads"][name].float()
        err = float((g - want).abs().max())
        assert err <= 2e-2 * float(want.abs().max()) + 1e-4, (mode, name, err, float(want.abs().max()))
    for name, want in weights.items():       # fp16 weights after the step: one fp16 rounding apart
        assert torch.allclose(got["weights"][name].float(), want, atol=2e-3, rtol=2e-3), (mode, name)
