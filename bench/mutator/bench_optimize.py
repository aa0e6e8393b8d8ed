#!/usr/bin/env python3
"""tessera optimize on the model suite: original vs optimized, side by side.

For each model of bench/models/cache (written by bench/models/generate.py):
runs `tessera optimize --device cpu` (which measures the original and the
optimized graph in Tessera's CPU runtime, median of --runs runs each, and
reports search time and candidates generated / verified / applied), then times
both models in ONNX Runtime (ORT_ENABLE_ALL, intra-op threads = --threads,
alternating runs so both see the same load), checks that the optimized model's
ONNX Runtime outputs match the original within rtol 1e-3 / atol 1e-4, and runs
`tessera optimize --device h100` for the predicted H100 speedup. Prints one
table and the geomean ratios. Not a test: nothing here asserts a timing.

Usage: bench_optimize.py --tessera build/bin/tessera [--models a,b] [--threads 2]
                         [--budget 30] [--runs 5]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, "..", "models", "cache")
SUITE = ["resnet18", "resnet50", "resnext50_32x4d", "mobilenet_v2", "inception_v3", "vgg16", "csrnet",
         "bert_base", "gpt2", "llama_small"]


def ort_compare(original, optimized, threads, runs):
    import numpy as np
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    a = ort.InferenceSession(original, so, providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(optimized, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in a.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = (rng.uniform(-1, 1, shape).astype(np.float32) if "float" in i.type
                         else rng.integers(0, 2, shape).astype(np.int64))
    ya, yb = a.run(None, feeds), b.run(None, feeds)  # also the warm-up
    match = all(np.allclose(x, y, rtol=1e-3, atol=1e-4) for x, y in zip(ya, yb))
    ta, tb = [], []
    for _ in range(runs):
        for sess, times in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            sess.run(None, feeds)
            times.append((time.perf_counter() - t0) * 1e3)
    return sorted(ta)[runs // 2], sorted(tb)[runs // 2], match


def optimize(tessera, model, out, device, budget, threads, measure):
    cmd = [tessera, "optimize", model, "-o", out, "--device", device, "--budget", str(budget),
           "--threads", str(threads)]
    if not measure:
        cmd.append("--no-measure")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip() or p.stdout.strip())
    with open(os.path.join(out, "report.json")) as f:
        return json.load(f), wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--models", default=",".join(SUITE))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=float, default=30)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    rows = []
    header = ("model", "tsr orig ms", "tsr opt ms", "tsr x", "ort orig ms", "ort opt ms", "ort x", "match",
              "search s", "total s", "gen/ver/applied", "partial", "pred x h100", "rules")
    # Other processes share this machine: the load puts the timings in context.
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg())
    print(" | ".join(header))
    for name in args.models.split(","):
        model = os.path.join(CACHE, name, "model.onnx")
        if not os.path.exists(model):
            print(f"{name} | missing (run bench/models/generate.py)")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            try:
                cpu, wall = optimize(args.tessera, model, os.path.join(tmp, "cpu"), "cpu", args.budget,
                                     args.threads, True)
                h100, _ = optimize(args.tessera, model, os.path.join(tmp, "h100"), "h100", args.budget,
                                   args.threads, False)
                oa, ob, match = ort_compare(model, os.path.join(tmp, "cpu", "model.onnx"), args.threads, args.runs)
            except Exception as e:  # one model's failure must not hide the others
                print(f"{name} | error: {e}")
                continue
        m, s = cpu.get("measured", {}), cpu["search"]
        rules = sorted({x["rule"] for x in cpu["mutations"]})
        row = (name, m.get("before_ms", 0), m.get("after_ms", 0), m.get("speedup", 1), oa, ob, oa / ob, match,
               s.get("seconds", 0), wall, f'{s["generated"]}/{s["verified"]}/{s["applied"]}', s["partial_used"],
               h100["predicted_cost"]["speedup"], ",".join(rules) or "-")
        rows.append(row)
        print(" | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row), flush=True)
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())
    if rows:
        geo = lambda i: math.exp(sum(math.log(max(r[i], 1e-9)) for r in rows) / len(rows))
        print(f"geomean speedup: tessera runtime {geo(3):.3f}x, onnx runtime {geo(6):.3f}x, "
              f"predicted h100 {geo(12):.3f}x; outputs match: {sum(r[7] for r in rows)}/{len(rows)}")


if __name__ == "__main__":
    sys.exit(main())
