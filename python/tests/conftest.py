"""Shared fixtures of the tessera package's tests. They run against the
package installed in the current environment (`pip install .`), never the
source tree's python/ or a build folder: tests/python_package.sh installs it
into a fresh virtual environment and runs them there."""
import os
import shutil
import sys

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def rel_err(got, want):
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-6))


@pytest.fixture
def tiny_cnn():
    """(path, input, ONNX Runtime's output) of the bundled CNN."""
    d = os.path.join(EXAMPLES, "tiny_cnn")
    return (os.path.join(EXAMPLES, "tiny_cnn.onnx"), load_pb(os.path.join(d, "input_0.pb")),
            load_pb(os.path.join(d, "output_0.pb")))


@pytest.fixture
def tiny_transformer():
    """(path, input, [ONNX Runtime's outputs]) of the bundled transformer block."""
    d = os.path.join(EXAMPLES, "tiny_transformer")
    return (os.path.join(EXAMPLES, "tiny_transformer.onnx"), load_pb(os.path.join(d, "input_0.pb")),
            [load_pb(os.path.join(d, "output_%d.pb" % i)) for i in range(2)])


@pytest.fixture
def cli():
    """The `tessera` command the package installed beside this Python."""
    path = shutil.which("tessera", path=os.path.dirname(sys.executable))
    assert path, "no tessera command in " + os.path.dirname(sys.executable)
    return path
