#!/usr/bin/env python3
"""Every 16-bit suite model optimized for one device and for --mesh tp=2,
each plan run (the mesh plan under mpirun -np 2) on the model's own inputs
and compared with the original model run on one device, against the
precision's end-to-end tolerance (docs/checks.md: atol + rtol scaled by
u sqrt(K)/2, printed by the plan's check). Prints one row per model.

Usage: check_low_precision_plans.py [--tessera build/bin/tessera] [--models-dir DIR] [--budget 30]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = ["llama_step_bf16", "llama_prefill_bf16", "resnet50_fp16", "mobilenet_v2_fp16", "convnext_tiny_fp16"]
MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]


def outputs(folder):
    out = []
    for f in sorted(glob.glob(os.path.join(folder, "output_*.pb")), key=lambda p: int(p.split("_")[-1][:-3])):
        t = onnx.TensorProto()
        t.ParseFromString(open(f, "rb").read())
        a = numpy_helper.to_array(t)
        out.append(a.astype(np.float32) if a.dtype != np.float32 and a.dtype.kind == "f" else a)
    return out


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "bench", "models", "cache"))
    ap.add_argument("--budget", type=float, default=30)
    a = ap.parse_args()
    print("| model | plan | check (max abs error / tolerance) | ranks | max abs diff to the model's run | largest |outputs| |")
    print("|---|---|---|---|---|---|")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="tessera-lp-") as work:
        for name in MODELS:
            d = os.path.join(a.models_dir, name)
            if not os.path.isdir(d):
                print(f"| {name} | missing (generate.py --only {name}) | | | | |")
                continue
            feeds = [f"--input={p}" for p in sorted(glob.glob(os.path.join(d, "input_*.pb")))]
            ref = os.path.join(work, name + "-ref")
            run([a.tessera, "run", os.path.join(d, "model.onnx"), *feeds, "--output-dir", ref])
            want = outputs(ref)
            for mesh in (None, "tp=2"):
                plan = os.path.join(work, f"{name}-{mesh or 'one'}")
                cmd = [a.tessera, "optimize", os.path.join(d, "model.onnx"), "-o", plan, "--device", "cpu",
                       "--budget", str(a.budget), "--seed", "0", "--no-measure"]
                if mesh:
                    cmd += ["--mesh", mesh]
                try:
                    run(cmd)
                except RuntimeError as e:
                    failed += 1
                    print(f"| {name} | {mesh or 'one device'} | FAILED: {e} | | | |")
                    continue
                j = json.load(open(os.path.join(plan, "plan.json")))
                ranks = len(j.get("ranks", [])) or 1
                c = j["end_to_end_check"]
                got_dir = plan + "-out"
                runner = MPI if ranks > 1 else []
                run([*runner, a.tessera, "run", plan, *feeds, "--output-dir", got_dir, "--threads", "1"])
                got = outputs(got_dir)
                diff = max(float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) for g, w in zip(got, want))
                big = max(float(np.max(np.abs(w.astype(np.float64)))) for w in want)
                summary = (f"{'passed' if c['passed'] else 'FAILED'}, {c['max_abs_error']:.3g} "
                           f"(atol {c['atol']:.3g} + rtol {c['rtol']:.3g})")
                print(f"| {name} | {mesh or 'one device'} | {summary} | {ranks} | {diff:.3g} | {big:.3g} |",
                      flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
