"""examples/torch_optimize.py: a PyTorch module exported, optimized in memory,
run, and compared with PyTorch. Skipped where torch is not installed (CI
does not require it)."""
import importlib.util
import os

import pytest

from conftest import EXAMPLES


def test_torch_module_through_tessera_matches_pytorch():
    pytest.importorskip("torch", reason="torch is not installed: the PyTorch example is not run")
    spec = importlib.util.spec_from_file_location("torch_optimize", os.path.join(EXAMPLES, "torch_optimize.py"))
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    err, plan = example.main(budget=10, seed=0, verbose=False)
    assert err <= 1e-4, err
    # Both batch norms fold into their convolutions: the plan is not the export.
    assert "BatchNormalization" not in [n.op_type for n in plan.model.graph.node]
    assert any(m["stage"] == "canonicalize" for m in plan.mutations), plan.mutations
