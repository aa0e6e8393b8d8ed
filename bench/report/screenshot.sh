#!/usr/bin/env bash
# Renders a plan's report.html to PNG in headless Chromium, as a person
# would see it.
#
#   bench/report/screenshot.sh [--tessera BIN] [--size WxH] MODEL.onnx|PLAN_DIR OUT.png [OPTIMIZE FLAGS...]
#
# With a model, `tessera optimize MODEL -o TMP OPTIMIZE FLAGS` writes the plan
# first (e.g. `bench/models/cache/gpt2/model.onnx gpt2.png --mesh tp=2
# --device h100`). Exit 0 with the PNG written; 1 when a step fails; 2 for
# bad usage or when Chromium is not installed.
set -euo pipefail

tessera="$(dirname "$0")/../../build/bin/tessera"
size="1400,2000"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tessera) tessera="$2"; shift 2 ;;
    --size) size="${2/x/,}"; shift 2 ;;
    *) break ;;
  esac
done
if [[ $# -lt 2 ]]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
src="$1" out="$2"
shift 2
browser="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$browser" ]]; then
  echo "screenshot.sh: chromium is not installed (apt-get install chromium)" >&2
  exit 2
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [[ -d "$src" ]]; then
  plan="$src"
else
  plan="$tmp/plan"
  "$tessera" optimize "$src" -o "$plan" "$@" >"$tmp/optimize.log" 2>&1 || {
    cat "$tmp/optimize.log" >&2
    exit 1
  }
fi
[[ -f "$plan/report.html" ]] || { echo "screenshot.sh: $plan has no report.html" >&2; exit 1; }
report="$(cd "$plan" && pwd)/report.html"
out_abs="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
# Its own profile folder, so that runs never share browser state.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile" \
  --window-size="$size" --screenshot="$out_abs" "file://$report" >"$tmp/chromium.log" 2>&1 || {
  cat "$tmp/chromium.log" >&2
  exit 1
}
[[ -s "$out_abs" ]] || { echo "screenshot.sh: chromium wrote no $out" >&2; cat "$tmp/chromium.log" >&2; exit 1; }
echo "$out"
