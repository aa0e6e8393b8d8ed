#!/usr/bin/env bash
# GPU check, for a machine that has an NVIDIA GPU: configures
# and builds only what the CUDA backend needs (-j16), runs the CUDA tests,
# then for each model (the suite cache when present, else the bundled
# examples) runs the CLI on the CUDA and CPU backends, compares their outputs
# and prints the median latencies. Between the two, fits the cost model's GPU
# profile (tessera cost --calibrate --device a100|h100|h200). Then mesh plans
# (tessera optimize --mesh tp=2 of the tiny transformer) on several ranks: on
# the CPU as threads and under mpirun, and on the GPUs over NCCL, one GPU per
# rank, where there are two (with one, it says so and skips: NCCL refuses two
# ranks on one device). Prints a summary; exit 1 if anything failed.
# Usage: bench/gpu_check.sh [BUILD_DIR]   (default build-gpu)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
jobs=$(nproc 2>/dev/null || echo 16)
summary=()
status=0
note() { summary+=("$1"); echo "gpu_check: $1"; }
fail() { note "FAIL $1"; status=1; }

# Debian packages (the set tools/setup.sh installs, without its full build).
deb=(cmake make g++ libonnx-dev libprotobuf-dev protobuf-compiler libz3-dev libdnnl-dev libopenmpi-dev openmpi-bin
     libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev)
missing=()
for p in "${deb[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "gpu_check: installing ${missing[*]}"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null \
    || fail "apt-get install ${missing[*]}"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu_check: device: /'

t0=$(date +%s)
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >"$build.configure.log" 2>&1; then
  tail -20 "$build.configure.log"; fail "configure (log: $build.configure.log)"; printf '%s\n' "${summary[@]}"; exit 1
fi
grep -q "CUDA backend enabled" "$build.configure.log" && note "CUDA backend enabled" || fail "CUDA backend not enabled (see $build.configure.log)"
if ! cmake --build "$build" -j"$jobs" --target runtime_tests tessera >"$build.build.log" 2>&1; then
  grep -E "error" "$build.build.log" | head -20; fail "build (log: $build.build.log)"; printf '%s\n' "${summary[@]}"; exit 1
fi
note "built in $(( $(date +%s) - t0 ))s"

# CUDA tests: the lowering tests and the GPU tests (which must not skip here).
log=$(timeout 240 "$build/bin/runtime_tests" --gtest_filter='Cuda*' 2>&1); rc=$?
echo "$log" | grep -E "^\[  (FAILED|SKIPPED) |Failure|Skipped" -A2 | head -40
passed=$(echo "$log" | grep -c "^\[       OK \]")
skipped=$(echo "$log" | grep -c "^\[  SKIPPED \] Cuda")
[ "$rc" -eq 0 ] && note "CUDA tests: $passed passed, $skipped skipped" || fail "CUDA tests (rc $rc)"
[ "$skipped" -gt 0 ] && fail "GPU tests skipped on a GPU machine"

# Cost model calibration (prepared; not yet run on a GPU): microbenchmarks
# through the CUDA backend fit the matching builtin profile's launch overhead,
# L2/HBM efficiencies, GEMM efficiency and transcendental cost; the fitted
# profile is printed and written next to the build (usable as
# `tessera cost MODEL --device FILE.json`).
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$gpu_name" in *A100*) prof=a100 ;; *H100*) prof=h100 ;; *H200*) prof=h200 ;; *) prof="" ;; esac
if [ -n "$prof" ]; then
  out="$build/gpu_profile_$prof.json"
  if timeout 180 "$build/bin/tessera" cost --calibrate --device "$prof" --seconds 30 --output "$out"; then
    cat "$out"; note "cost calibration ($prof): $out"
  else
    fail "cost calibration ($prof)"
  fi
else
  note "cost calibration skipped: no builtin profile for '${gpu_name:-no GPU}'"
fi

# Compares the output_*.pb of two folders: prints "max rel err E OK|MISMATCH".
compare() {
  python3 - "$1" "$2" <<'PY' 2>&1
import glob, os, sys
import numpy as np
from onnx import TensorProto, numpy_helper
worst = 0.0
files = sorted(glob.glob(os.path.join(sys.argv[1], "output_*.pb")))
for f in files:
    a, b = (numpy_helper.to_array(TensorProto.FromString(open(p, "rb").read())).astype(np.float64)
            for p in (f, os.path.join(sys.argv[2], os.path.basename(f))))
    worst = max(worst, float(np.max(np.abs(a - b) / (np.abs(b) + 1.0))) if a.size else 0.0)
print(f"max rel err {worst:.2e}" + (" OK" if files and worst <= 1e-3 else " MISMATCH"))
PY
}
median() { echo "$1" | grep -oiE "median[^0-9]*[0-9.]+" | grep -oE "[0-9.]+$" | head -1; }

# Models: the suite cache is not shipped to the GPU machine; the examples are.
models=()
for m in bench/models/cache/*/model.onnx; do [ -f "$m" ] && models+=("$m"); done
[ ${#models[@]} -eq 0 ] && models=(examples/*.onnx)
tmp=$(mktemp -d)
printf '%-40s %12s %12s %10s  %s\n' model cuda_ms cpu_ms speedup outputs
for m in "${models[@]}"; do
  name=$(basename "$(dirname "$m")")/$(basename "$m")
  cu=$(timeout 120 "$build/bin/tessera" run "$m" --backend cuda --repeat 50 --output-dir "$tmp/cuda" 2>&1); rc1=$?
  cp=$(timeout 120 "$build/bin/tessera" run "$m" --backend cpu --repeat 10 --output-dir "$tmp/cpu" 2>&1); rc2=$?
  if [ $rc1 -ne 0 ]; then fail "$name on cuda: $(echo "$cu" | tail -1)"; continue; fi
  ms_cu=$(median "$cu")
  ms_cp=$(median "$cp")
  cmp=$(compare "$tmp/cuda" "$tmp/cpu")
  [ $rc2 -ne 0 ] && cmp="cpu run failed"
  echo "$cmp" | grep -q "OK" || fail "$name: cuda vs cpu: $cmp"
  speed=$(python3 -c "print(f'{float(\"${ms_cp:-nan}\")/float(\"${ms_cu:-nan}\"):.2f}x')" 2>/dev/null || echo "?")
  printf '%-40s %12s %12s %10s  %s\n' "$name" "${ms_cu:-?}" "${ms_cp:-?}" "$speed" "$cmp"
  note "$name: cuda ${ms_cu:-?} ms, cpu ${ms_cp:-?} ms, $cmp"
  rm -rf "$tmp/cuda" "$tmp/cpu"
done

# Mesh plans: the tiny transformer split Megatron-style over tp=2, against
# its single-device CPU run on the same inputs.
mpi="mpirun --allow-run-as-root --oversubscribe -np 2"
plan="$tmp/tt_tp2"
if ! timeout 120 "$build/bin/tessera" optimize examples/tiny_transformer.onnx -o "$plan" --mesh tp=2 \
     --shard 'qkv_w_5=[S(1)]' --shard 'fc1_w_131=[S(1)]' --shard 'fc2_w_150=[S(0)]' --shard 'proj_w_101=[S(0)]' \
     >"$tmp/optimize.log" 2>&1; then
  fail "tessera optimize --mesh tp=2: $(tail -1 "$tmp/optimize.log")"
else
  one=$(timeout 120 "$build/bin/tessera" run examples/tiny_transformer.onnx --repeat 50 --output-dir "$tmp/single" 2>&1)
  note "tiny_transformer, 1 rank on the CPU: $(median "$one") ms"
  mesh_run() {  # label, launcher ("" or mpirun), flags
    local label=$1 launcher=$2; shift 2
    local out; out=$(timeout 180 $launcher "$build/bin/tessera" run "$plan" --repeat 50 --output-dir "$tmp/mesh" "$@" 2>&1)
    local rc=$?
    if [ $rc -ne 0 ]; then fail "$label (rc $rc): $(echo "$out" | grep -m1 error)"; return; fi
    local c; c=$(compare "$tmp/mesh" "$tmp/single")
    echo "$c" | grep -q OK || fail "$label: against 1 rank: $c"
    note "$label: $(median "$out") ms, $c"
    rm -rf "$tmp/mesh"
  }
  mesh_run "tiny_transformer tp=2 on the CPU, threads" ""
  if command -v mpirun >/dev/null; then
    mesh_run "tiny_transformer tp=2 on the CPU, mpirun" "$mpi"
  else
    note "mpirun not found: the MPI runs are skipped"
  fi
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  # NcclMultiGpu.*: the collectives' mesh plans and HaloExchange (pack, one
  # NCCL group of send/recv with both neighbours, unpack) against interpret_ranks.
  log=$(timeout 240 "$build/bin/runtime_tests" --gtest_filter='NcclMultiGpu*' 2>&1); rc=$?
  if echo "$log" | grep -q "^\[  SKIPPED \]"; then
    note "NCCL multi-GPU test skipped: $(echo "$log" | grep -A1 "Skipped" | tail -1)"
  elif [ $rc -eq 0 ]; then note "NCCL multi-GPU test passed"; else fail "NCCL multi-GPU test (rc $rc)"; fi
  if [ "$gpus" -ge 2 ]; then
    mesh_run "tiny_transformer tp=2 on 2 GPUs (NCCL), threads" "" --backend cuda
    if command -v mpirun >/dev/null; then mesh_run "tiny_transformer tp=2 on 2 GPUs (NCCL), mpirun" "$mpi" --backend cuda; fi
  else
    # One GPU: tessera must say that NCCL wants one per rank, not hang.
    out=$(timeout 120 "$build/bin/tessera" run "$plan" --backend cuda 2>&1); rc=$?
    if [ $rc -ne 0 ] && echo "$out" | grep -q "one GPU per rank"; then
      note "multi-rank CUDA skipped: $gpus GPU, and NCCL needs one per rank ($(echo "$out" | grep -m1 error))"
    else
      fail "tp=2 plan on $gpus GPU: expected the one-GPU-per-rank error, got rc $rc: $(echo "$out" | tail -1)"
    fi
  fi
fi
rm -rf "$tmp"

echo "==== gpu_check summary ($(( $(date +%s) - t0 ))s) ===="
printf '  %s\n' "${summary[@]}"
exit $status
