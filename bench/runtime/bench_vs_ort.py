#!/usr/bin/env python3
"""Tessera CPU runtime vs ONNX Runtime on the model suite, side by side.

For each model of bench/models/cache (written by bench/models/generate.py) and
each thread count, runs ONNX Runtime (ORT_ENABLE_ALL, intra_op threads = N) and
Tessera's bench_runtime (--threads N) in their own processes, alternating, and
prints median latency, ratio (Tessera / ORT; <= 1.0 is the target), and peak
memory (process max RSS; Tessera also reports its planned peak).

Usage: bench_vs_ort.py --bench-bin PATH [--models a,b] [--threads 1,2] [--repeat N]
"""
import argparse
import json
import os
import resource
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, "..", "models", "cache")

ORT_CHILD = r"""
import sys, json, time, glob, os, resource
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
d, threads, repeat, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
s = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
feeds = {}
for i, inp in enumerate(s.get_inputs()):
    t = onnx.TensorProto()
    t.ParseFromString(open(os.path.join(d, f"input_{i}.pb"), "rb").read())
    feeds[inp.name] = numpy_helper.to_array(t)
for _ in range(warmup): s.run(None, feeds)
ms = []
for _ in range(repeat):
    t0 = time.perf_counter(); s.run(None, feeds); ms.append((time.perf_counter() - t0) * 1e3)
ms.sort()
print(json.dumps({"median_ms": ms[len(ms) // 2],
                  "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def run_json(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def mib(b):
    return f"{b / 2**20:.0f}" if b else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-bin", required=True)
    ap.add_argument("--models", default="")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    models = a.models.split(",") if a.models else sorted(os.listdir(CACHE))
    print(f"{'model':16} {'thr':>3} {'tessera ms':>11} {'ort ms':>9} {'ratio':>6} "
          f"{'tessera RSS MiB':>15} {'(planned)':>9} {'ort RSS MiB':>11} {'max rel err':>11}")
    for m in models:
        d = os.path.join(CACHE, m)
        for t in [int(x) for x in a.threads.split(",")]:
            ort_r = run_json([sys.executable, "-c", ORT_CHILD, d, str(t), str(a.repeat), str(a.warmup)])
            tes = run_json([a.bench_bin, d, "--threads", str(t), "--repeat", str(a.repeat),
                            "--warmup", str(a.warmup)])
            if "error" in tes or "error" in ort_r:
                print(f"{m:16} {t:>3} error: {tes.get('error') or ort_r.get('error')}")
                continue
            ratio = tes["median_ms"] / ort_r["median_ms"]
            print(f"{m:16} {t:>3} {tes['median_ms']:11.2f} {ort_r['median_ms']:9.2f} {ratio:6.2f} "
                  f"{mib(tes['max_rss_bytes']):>15} {mib(tes['peak_bytes']):>9} {mib(ort_r['max_rss_bytes']):>11} "
                  f"{tes['max_rel_err']:11.2g}", flush=True)


if __name__ == "__main__":
    main()
