#!/usr/bin/env bash
# Installs what is missing (Debian and PyPI packages), then configures and
# builds Tessera into build/ (the CLI lands at build/bin/tessera). Idempotent:
# on a machine that has everything it only (re)builds.
set -euo pipefail
cd "$(dirname "$0")/.."

deb_packages=(cmake make g++ libonnx-dev libprotobuf-dev protobuf-compiler libz3-dev libdnnl-dev
              libopenmpi-dev openmpi-bin libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
              nlohmann-json3-dev pybind11-dev
              # The sanitizer and fuzz tests (tests/sanitize): clang with
              # libFuzzer and the sanitizer runtimes, its OpenMP (libomp,
              # with the archer TSan tool), llvm-symbolizer for the stacks.
              clang libomp-dev llvm
              # The report test (tests/tools/report_html_test.py) renders
              # report.html in headless Chromium and looks at the picture.
              chromium)
command -v python3 >/dev/null 2>&1 || deb_packages+=(python3 python3-pip)
# The package tests make a virtual environment (python3 -m venv, with pip).
command -v python3 >/dev/null 2>&1 && ! python3 -c "import venv, ensurepip" >/dev/null 2>&1 &&
  deb_packages+=(python3-venv)
missing=()
for p in "${deb_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# PyPI packages by the module they provide: the tests' (onnx, onnxruntime,
# numpy, pytest) and what `pip install .` builds with, offline
# (--no-build-isolation): scikit-build-core and pybind11.
py_packages=()
for pair in onnx:onnx onnxruntime:onnxruntime numpy:numpy pytest:pytest scikit_build_core:scikit-build-core \
            pybind11:pybind11; do
  python3 -c "import ${pair%%:*}" >/dev/null 2>&1 || py_packages+=("${pair#*:}")
done
if [ ${#py_packages[@]} -gt 0 ]; then
  echo "setup: installing ${py_packages[*]}"
  python3 -m pip install -q "${py_packages[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${py_packages[@]}"
fi

# The sanitizer and fuzz tests (tests/sanitize/) are part of the suite CI runs.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTESSERA_SANITIZER_TESTS=ON >/dev/null
cmake --build build -j2
