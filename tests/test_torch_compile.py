"""torch.compile(fullgraph=True) in a fresh process: a function calling an aref kernel, and aref.nn.attention /
aref.nn.linear forward and backward (causal and not), trace without a graph break and give eager's results.
The backend is aot_eager: Dynamo, AOTAutograd's functionalization and the fake implementations are what aref
provides; Inductor's code generation (checked by hand: the same results, 20-40 s of C++ compiles) adds
nothing of aref's."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_compile_fullgraph_matches_eager():
    proc = subprocess.run([sys.executable, os.path.join(HERE, "torch_compile_check.py"), "aot_eager"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["graph_breaks"] == 0
    assert result["kernel_call"] == {"equal": True, "equal_second_shape": True}
    for case in ("attention", "attention_causal"):
        assert result[case] == {"equal_loss": True, "equal_grads": True}, result
