"""`import tessera` beside PyTorch, in either order. torch brings its own
build of NCCL, and only one NCCL can be loaded into a process (the first
one loaded is everyone's): the package opens NCCL only when a GPU mesh plan
first needs it, so importing it loads none. Each order runs in its own
interpreter. The torch part is skipped where torch is not installed (CI does
not require it)."""
import importlib.util
import subprocess
import sys

import pytest


def python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_importing_tessera_loads_no_nccl():
    r = python("import tessera\n"
               "maps = open('/proc/self/maps').read()\n"
               "print([l.split()[-1] for l in maps.splitlines() if 'libnccl' in l][:1])")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


@pytest.mark.parametrize("order", [("tessera", "torch"), ("torch", "tessera")], ids=["tessera-first", "torch-first"])
def test_tessera_and_torch_import_in_either_order(order):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: the import orders with torch are not tried")
    # torch's own use of its libraries after both imports: a tensor op, and
    # NCCL's presence as torch reports it.
    r = python(f"import {order[0]}, {order[1]}\n"
               "import tessera, torch\n"
               "x = torch.ones(4) * 2\n"
               "assert float(x.sum()) == 8.0\n"
               "print('nccl', torch.distributed.is_available() and torch.distributed.is_nccl_available())\n"
               "print(tessera.list_rules()[0]['name'])")
    assert r.returncode == 0, r.stderr
