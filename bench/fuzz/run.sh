#!/usr/bin/env bash
# The long fuzz runs (issue 15): every libFuzzer target of fuzz/ for RUNS
# executions (default 1,000,000) from the gathered seed corpora
# (fuzz/gather_corpus.sh), one target at a time, or JOBS at a time. Prints
# per target the executions, exec/s, the corpus it ended with, and whether
# it found anything (a crash, leak, timeout or out-of-memory input is
# written to OUT/<target>/artifacts/ and fails the run).
#   bench/fuzz/run.sh [RUNS] [JOBS] [TARGET...]
# (TARGET: onnx_import text_form tensor_proto plan_folder, all by default;
# the runs land in build/fuzz-runs/<target>/.)
# Builds the targets into build/sanitize-asan/ (clang, ASan + UBSan, -O1: the
# build the CTest test sanitize.asan_ubsan_build makes, shared with it) and
# gathers seeds with build/bin/tessera when there is one (else that build's).
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
runs=${1:-1000000} jobs=${2:-1}
shift 2 2>/dev/null || shift $#
out=$src/build/fuzz-runs
build=$src/build/sanitize-asan
targets=(onnx_import text_form tensor_proto plan_folder)
[ $# -gt 0 ] && targets=("$@")

bash "$src/tests/sanitize/sanitizer_build.sh" "$src" "$build" address,undefined ON "$(command -v ccache || true)" \
  tessera "${targets[@]/%/_fuzz}" || exit 1
cli=$src/build/bin/tessera
[ -x "$cli" ] || cli=$build/bin/tessera
node_tests=$src/build/node_tests
seeds=$out/seeds
[ -d "$seeds" ] || bash "$src/fuzz/gather_corpus.sh" "$cli" "$node_tests" "$seeds" || exit 1

export SAN_LOGS=$out/logs
source "$src/tests/sanitize/sanitizer_env.sh"
export ASAN_OPTIONS=${ASAN_OPTIONS/log_path=$SAN_LOGS\/report:/}
export UBSAN_OPTIONS=${UBSAN_OPTIONS/log_path=$SAN_LOGS\/report:/}

run_one() {
  local t=$1 w=$out/$1
  mkdir -p "$w/corpus" "$w/artifacts"
  local dict=()
  [ -f "$src/fuzz/$t.dict" ] && dict=(-dict="$src/fuzz/$t.dict")
  local start=$(date +%s)
  "$build/bin/${t}_fuzz" -runs="$runs" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 ${dict[@]+"${dict[@]}"} \
    -artifact_prefix="$w/artifacts/" "$w/corpus" "$seeds/$t" \
    $( [ -d "$src/fuzz/regressions/$t" ] && echo "$src/fuzz/regressions/$t") >"$w/fuzz.log" 2>&1
  echo $? >"$w/rc"
  echo $(( $(date +%s) - start )) >"$w/seconds"
}
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
wait

status=0
printf '%-14s %12s %9s %9s %14s %s\n' target executions exec/s seconds "corpus files" found
for t in "${targets[@]}"; do
  w=$out/$t
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$w/fuzz.log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$w/fuzz.log" | tail -n 1)
  found=$(ls "$w/artifacts" | wc -l)
  what="nothing"
  if [ "$(cat "$w/rc")" -ne 0 ] || [ "$found" -gt 0 ]; then
    what="rc $(cat "$w/rc"), $found artifacts: $(ls "$w/artifacts" | tr '\n' ' ')"
    status=1
  fi
  printf '%-14s %12s %9s %9s %14s %s\n' "$t" "${execs:-?}" "${rate:-?}" "$(cat "$w/seconds")" \
    "$(ls "$w/corpus" | wc -l)" "$what"
done
exit $status
