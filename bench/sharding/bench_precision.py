#!/usr/bin/env python3
"""The sharding search on a decoder in f32 and in bf16, predicted on H100.

For llama_step (one decode step after 127 cached tokens) and llama_prefill
(64 tokens after 64 cached), each in f32 and bf16 (bench/models/generate.py),
at --device h100 --mesh tp=2/4/8: the search's degree curve (plan.json
sharding_search.degree_curve: the best plan found on each sub-mesh, one
device included) and the hand-written Megatron plan
(megatron_llama_step.json: column-split Q, K, V, gate and up, row-split o and
down) on the same cost model. Prints one table per model with the curve's
points in ms, the chosen point, and the Megatron plan's time.

Usage: bench_precision.py [--tessera build/bin/tessera] [--models-dir DIR] [--budget 30]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = ["llama_step", "llama_step_bf16", "llama_prefill", "llama_prefill_bf16"]


def optimize(a, model, out, mesh, megatron):
    cmd = [a.tessera, "optimize", model, "-o", out, "--device", "h100", "--mesh", mesh, "--budget", str(a.budget),
           "--seed", "0", "--no-measure"]
    if megatron:
        cmd += ["--shard-file", os.path.join(HERE, "megatron_llama_step.json")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip()[-300:])
    return json.load(open(os.path.join(out, "plan.json")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "bench", "models", "cache"))
    ap.add_argument("--budget", type=float, default=30)
    a = ap.parse_args()
    print("| model | offered | degree curve: devices -> predicted ms (comm ms) | chosen | search ms | Megatron ms |"
          " search / Megatron |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="tessera-precision-") as work:
        for name in MODELS:
            model = os.path.join(a.models_dir, name, "model.onnx")
            if not os.path.exists(model):
                print(f"| {name} | missing: generate.py --only {name} | | | | | |")
                continue
            for tp in (2, 4, 8):
                mesh = f"tp={tp}"
                try:
                    s = optimize(a, model, os.path.join(work, f"{name}-{tp}"), mesh, False)
                    m = optimize(a, model, os.path.join(work, f"{name}-{tp}-meg"), mesh, True)
                except RuntimeError as e:
                    print(f"| {name} | {mesh} | failed: {e} | | | | |")
                    continue
                curve = s["sharding_search"]["degree_curve"]
                pts = ", ".join(f"{p['devices']} -> {p['predicted_s'] * 1e3:.4g} ({p['comm_s'] * 1e3:.3g})"
                                for p in curve if p["graph"] == "as given" or p["chosen"])
                chosen = next((p for p in curve if p["chosen"]), None)
                ms, meg = s["predicted_cost"]["after_s"] * 1e3, m["predicted_cost"]["after_s"] * 1e3
                print(f"| {name} | {mesh} | {pts} | {chosen['devices'] if chosen else '-'} | {ms:.4g} | {meg:.4g} |"
                      f" {ms / meg:.3f} |", flush=True)


if __name__ == "__main__":
    main()
