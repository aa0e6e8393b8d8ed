"""examples/torch_optimize.py: a PyTorch module exported, optimized in memory,
run, and compared with PyTorch. Skipped where torch is not installed (CI
does not require it). It runs in its own interpreter."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import EXAMPLES

CHECK = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("torch_optimize", sys.argv[1])
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
model, plan, err = example.main(device="h100", budget=10, seed=0, verbose=False)
print(json.dumps({"err": err, "rules": [m["rule"] for m in plan.mutations],
                  "matmuls_before": sum(n.op_type == "MatMul" for n in model.graph.node),
                  "matmuls_after": sum(n.op_type == "MatMul" for n in plan.model.graph.node)}))
"""


def test_torch_module_through_tessera_matches_pytorch():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: the PyTorch example is not run")
    r = subprocess.run([sys.executable, "-c", CHECK, os.path.join(EXAMPLES, "torch_optimize.py")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["err"] <= 1e-4, out
    # The three projections of x are one MatMul in the plan.
    assert "merge-matmuls-sharing-input" in out["rules"], out
    assert out["matmuls_after"] == out["matmuls_before"] - 2, out
