#!/usr/bin/env bash
# Seed corpora for the fuzz targets, gathered into OUT/<target>/: the
# committed seeds (fuzz/corpus/), the examples, ONNX's backend node tests
# (models and their .pb tensors, written by tests/data/generate_node_tests.py
# when NODE_TESTS has none), text forms and plan folders that the CLI
# writes for a sample of them.
#   gather_corpus.sh TESSERA_CLI NODE_TESTS OUT
# TESSERA_CLI is a normal build's bin/tessera (a sanitizer build's works too,
# slower). Idempotent: OUT is written afresh.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
tessera=$1 node_tests=$2 out=$3
rm -rf "$out"
mkdir -p "$out"/{onnx_import,text_form,tensor_proto,plan_folder}
for t in onnx_import text_form tensor_proto plan_folder; do
  cp "$src/fuzz/corpus/$t/"* "$out/$t/"
done
if [ ! -f "$node_tests/GENERATED_BY_ONNX" ]; then
  python3 "$src/tests/data/generate_node_tests.py" -o "$node_tests" >/dev/null ||
    echo "gather_corpus: no ONNX node tests (onnx not importable); seeds from the repository only" >&2
fi

# The sample of node tests that the CLI turns into text forms and plan
# folders: every 8th, in name order (about 230 of ONNX 1.x's ~1850).
sample=()
if [ -d "$node_tests" ]; then
  i=0
  for d in "$node_tests"/*/; do
    name=$(basename "$d")
    [ -f "$d/model.onnx" ] || continue
    cp "$d/model.onnx" "$out/onnx_import/$name.onnx"
    for pb in "$d"/test_data_set_0/*.pb; do
      [ -f "$pb" ] && [ "$(stat -c %s "$pb")" -le 65536 ] && cp "$pb" "$out/tensor_proto/$name-$(basename "$pb")"
    done
    if [ $((i % 8)) -eq 0 ]; then sample+=("$d/model.onnx"); fi
    i=$((i + 1))
  done
fi
cp "$src"/examples/*.onnx "$out/onnx_import/"
for pb in "$src"/examples/*/*.pb; do cp "$pb" "$out/tensor_proto/$(basename "$(dirname "$pb")")-$(basename "$pb")"; done

# A plan folder as the plan_folder target reads it (fuzz/plan_folder_fuzz.cc):
# plan.json, then each program file, after a separator line.
pack_plan() {
  local dir=$1 dest=$2
  {
    cat "$dir/plan.json"
    if [ -f "$dir/model.onnx" ]; then
      printf '\n--tessera-plan-file--\n'
      cat "$dir/model.onnx"
    fi
    local r=0
    while [ -f "$dir/rank$r.onnx" ]; do
      printf '\n--tessera-plan-file--\n'
      cat "$dir/rank$r.onnx"
      r=$((r + 1))
    done
  } >"$dest"
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
optimize() {  # MODEL DEST_NAME [FLAGS...]: the optimized text form and the packed plan
  local model=$1 name=$2
  shift 2
  if "$tessera" optimize "$model" -o "$work/$name" --budget 0.5 --no-measure --dump "$@" \
      >"$work/$name.out" 2>/dev/null; then
    sed -n '/^graph /,/^}/p' "$work/$name.out" >"$out/text_form/$name.txt"
    pack_plan "$work/$name" "$out/plan_folder/$name"
  fi
}
optimize "$src/examples/tiny_cnn.onnx" tiny_cnn
optimize "$src/examples/tiny_transformer.onnx" tiny_transformer_tp2 --mesh tp=2
[ -f "$node_tests/test_matmul_2d/model.onnx" ] &&
  optimize "$node_tests/test_matmul_2d/model.onnx" matmul_tp2 --mesh tp=2 --shard '*:in1=[S(0)]' --no-shard-search
for m in ${sample[@]+"${sample[@]}"}; do
  optimize "$m" "$(basename "$(dirname "$m")")"
done
find "$out/text_form" -empty -delete
for t in onnx_import text_form tensor_proto plan_folder; do
  echo "gather_corpus: $t: $(ls "$out/$t" | wc -l) files, $(du -sk "$out/$t" | cut -f1) KiB"
done
