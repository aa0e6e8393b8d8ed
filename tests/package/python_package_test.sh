#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment, then the package's
# pytest suite (python/tests) there, against the installed package. The
# environment sees the system's site-packages (numpy, onnx, pytest,
# scikit-build-core, pybind11: tools/setup.sh installs them), so nothing is
# downloaded (--no-index, --no-build-isolation). The wheel is built over the
# install tree PREFIX (TESSERA_PREBUILT_PREFIX): only the module is
# compiled, the libraries and the CLI are the build's.
#   python_package_test.sh SOURCE_DIR PREFIX WORK_DIR PYTHON
set -euo pipefail
src=$1 prefix=$2 work=$3 python=$4
rm -rf "$work"
mkdir -p "$work"
"$python" -m venv --system-site-packages "$work/venv"
venv_python="$work/venv/bin/python"
t0=$(date +%s)
"$venv_python" -m pip install -q --no-index --no-deps --no-build-isolation \
  -Cbuild-dir="$work/wheel-build" -Ccmake.define.TESSERA_PREBUILT_PREFIX="$prefix" "$src"
t1=$(date +%s)
echo "pip install: $((t1 - t0)) s"
cd "$work"  # not the source tree: `import tessera` must find the installed package
"$venv_python" -m pytest -q -p no:cacheprovider "$src/python/tests"
echo "pytest: $(($(date +%s) - t1)) s"
