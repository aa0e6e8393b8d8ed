#!/usr/bin/env bash
# Runs a sanitizer build's own CTest tests (those matching INCLUDE, without
# those matching EXCLUDE) under the options of sanitizer_env.sh. Fails when
# a test fails or when any sanitizer report was written, by any process.
#   sanitized_ctest.sh BUILD_DIR INCLUDE_REGEX EXCLUDE_REGEX
set -uo pipefail
build=$1 include=$2 exclude=$3
export SAN_LOGS=$build/sanitizer-logs
rm -rf "$SAN_LOGS"
source "$(dirname "$0")/sanitizer_env.sh"
if grep -q "^TESSERA_SANITIZE:STRING=thread" "$build/CMakeCache.txt"; then
  [ -n "$archer" ] && export OMP_TOOL_LIBRARIES=$archer
fi
args=(--test-dir "$build" -j2 --output-on-failure --timeout 900)
[ -n "$include" ] && args+=(-R "$include")
[ -n "$exclude" ] && args+=(-E "$exclude")
ctest "${args[@]}" >"$build/ctest.log" 2>&1
rc=$?
grep -E "tests passed|tests failed|Total Test time|\*\*\*|Failed|Timeout" "$build/ctest.log" | tail -n 40
if [ "$rc" -ne 0 ]; then
  grep -B2 -A40 "The following tests FAILED" "$build/ctest.log" | head -n 60
fi
san_reports || rc=1
exit "$rc"
