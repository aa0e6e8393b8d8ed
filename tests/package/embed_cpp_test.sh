#!/usr/bin/env bash
# examples/embed_cpp as an outside project: configured against the installed
# package only (find_package(Tessera) in PREFIX), built, and run on the
# bundled CNN; it exits 1 unless the optimized model matches the original.
# Then the plan it saved runs in the installed CLI.
#   embed_cpp_test.sh SOURCE_DIR PREFIX WORK_DIR CXX_COMPILER [LAUNCHER]
set -euo pipefail
src=$1 prefix=$2 work=$3 cxx=$4 launcher=${5:-}
rm -rf "$work"
args=(-S "$src/examples/embed_cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx"
      -DCMAKE_PREFIX_PATH="$prefix")
[ -n "$launcher" ] && args+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher")
cmake "${args[@]}" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/embed_tessera" "$src/examples/tiny_cnn.onnx" "$work/plan"
"$prefix/bin/tessera" run "$work/plan" --input "$src/examples/tiny_cnn/input_0.pb"
