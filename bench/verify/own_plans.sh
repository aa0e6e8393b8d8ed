#!/usr/bin/env bash
# Tessera confirms its own plans: for each model, `tessera optimize` writes a
# plan and `tessera verify ORIGINAL PLAN/model.onnx` must answer equivalent.
# Usage: [OPTIMIZE_ARGS="--device h100"] bench/verify/own_plans.sh [MODEL.onnx ...]
#   (default: the bundled examples and every generated suite model under
#   bench/models/cache; python3 bench/models/generate.py makes them).
# Prints one line per model: the verdict, the exit code and the seconds.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tessera="${TESSERA:-$root/build/bin/tessera}"
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=("$root"/examples/*.onnx)
  for m in "$root"/bench/models/cache/*/model.onnx; do [ -e "$m" ] && models+=("$m"); done
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail=0
for m in "${models[@]}"; do
  name="$(basename "$(dirname "$m")")/$(basename "$m")"
  plan="$work/plan"
  rm -rf "$plan"
  # shellcheck disable=SC2086  # OPTIMIZE_ARGS is a list of flags
  if ! "$tessera" optimize "$m" -o "$plan" --no-measure ${OPTIMIZE_ARGS:-} >"$work/opt.log" 2>&1; then
    echo "$name: optimize failed: $(tail -1 "$work/opt.log")"; fail=1; continue
  fi
  start=$(date +%s.%N)
  verdict="$("$tessera" verify "$m" "$plan/model.onnx" 2>&1)"; rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  applied=$(python3 -c "import json,sys; j=json.load(open('$plan/plan.json')); print(len(j['mutations']))")
  echo "$name: rc=$rc ${secs}s mutations=$applied :: ${verdict:0:300}"
  [ $rc -eq 0 ] || fail=1
done
exit $fail
