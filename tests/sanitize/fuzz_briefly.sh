#!/usr/bin/env bash
# A fuzz target for SECONDS from its committed seeds (fuzz/corpus/NAME) and
# the inputs of the findings fixed so far (fuzz/regressions/NAME, run first:
# each must pass), as CI runs it. Fails on any crash, leak, timeout (-timeout per input) or
# out-of-memory input; libFuzzer writes the input to ARTIFACTS/ and prints
# its name. Always ends: the run is capped at SECONDS by libFuzzer and,
# should that fail, by timeout(1).
#   fuzz_briefly.sh FUZZER SEEDS REGRESSIONS WORK_DIR SECONDS
set -uo pipefail
fuzzer=$1 seeds=$2 regressions=$3 work=$4 seconds=$5
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
export SAN_LOGS=$work/logs
source "$(dirname "$0")/sanitizer_env.sh"
# libFuzzer reports crashes itself, on stderr: no log_path for it.
export ASAN_OPTIONS=${ASAN_OPTIONS/log_path=$SAN_LOGS\/report:/}
export UBSAN_OPTIONS=${UBSAN_OPTIONS/log_path=$SAN_LOGS\/report:/}
# fuzz/NAME.dict, where there is one: the format's keywords.
dict=$(dirname "$0")/../../fuzz/$(basename "$fuzzer" _fuzz).dict
dict_flag=()
[ -f "$dict" ] && dict_flag=(-dict="$dict")
timeout -k 10 $((seconds + 120)) "$fuzzer" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 ${dict_flag[@]+"${dict_flag[@]}"} "$work/corpus" "$seeds" \
  $( [ -d "$regressions" ] && echo "$regressions") >"$work/fuzz.log" 2>&1
rc=$?
grep -E "^#[0-9]+.*(INITED|DONE)|stat::number_of_executed_units|stat::average_exec_per_sec|ERROR|SUMMARY|Test unit written" \
  "$work/fuzz.log" | tail -n 20
if [ "$rc" -ne 0 ]; then
  tail -n 60 "$work/fuzz.log"
  echo "fuzz_briefly: $(basename "$fuzzer") exited $rc"
fi
exit "$rc"
