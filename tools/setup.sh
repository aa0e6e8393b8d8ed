#!/usr/bin/env bash
# Installs what is missing (Debian and PyPI packages), then configures and
# builds Tessera into build/ (the CLI lands at build/bin/tessera). Idempotent:
# on a machine that has everything it only (re)builds.
set -euo pipefail
cd "$(dirname "$0")/.."

deb_packages=(cmake make g++ libonnx-dev libprotobuf-dev protobuf-compiler libz3-dev libdnnl-dev
              libopenmpi-dev openmpi-bin libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev
              nlohmann-json3-dev pybind11-dev)
command -v python3 >/dev/null 2>&1 || deb_packages+=(python3 python3-pip)
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

if ! python3 -c "import onnx, onnxruntime, numpy" >/dev/null 2>&1; then
  echo "setup: installing onnx onnxruntime numpy"
  python3 -m pip install -q onnx onnxruntime numpy 2>/dev/null ||
    python3 -m pip install -q --break-system-packages onnx onnxruntime numpy
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
