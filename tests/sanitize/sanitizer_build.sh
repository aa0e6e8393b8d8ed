#!/usr/bin/env bash
# CTest fixture: a sanitizer build of this source tree with clang (the
# configuration of cmake/sanitize.cmake, host-only, no Python module), of
# the given targets only. The build's output goes to BUILD_DIR/build.log;
# its tail is printed when it fails.
#   sanitizer_build.sh SOURCE_DIR BUILD_DIR SANITIZE FUZZ LAUNCHER TARGET...
# SANITIZE: address,undefined | thread. FUZZ: ON | OFF. LAUNCHER: the outer
# build's compiler launcher (ccache) or "".
set -euo pipefail
src=$1 build=$2 sanitize=$3 fuzz=$4 launcher=$5
shift 5
mkdir -p "$build"
args=(-S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
      # -O1 keeps the tests' run time close to a release build's while the
      # stacks stay readable; line tables are enough for the symbolizer.
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only"
      -DCMAKE_CXX_COMPILER=clang++ -DTESSERA_SANITIZE="$sanitize" -DTESSERA_FUZZ="$fuzz"
      -DCMAKE_DISABLE_FIND_PACKAGE_pybind11=ON)
[ -n "$launcher" ] && args+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher")
if ! cmake "${args[@]}" >"$build/configure.log" 2>&1; then
  tail -n 40 "$build/configure.log"
  exit 1
fi
TIMEFORMAT="sanitizer_build: $sanitize (fuzz $fuzz): $# targets built in %R s (CPU %U s user, %S s system)"
fail=0
time cmake --build "$build" -j2 --target "$@" >"$build/build.log" 2>&1 || fail=1
if [ "$fail" -ne 0 ]; then
  grep -E "error|Error" "$build/build.log" | head -n 40
  tail -n 20 "$build/build.log"
  exit 1
fi
