#!/usr/bin/env python3
"""Where a model's time goes in Tessera's CPU runtime and in ONNX Runtime,
grouped by op kind, side by side: the tool behind the runtime's speed notes.

Tessera's per-kernel times come from `tessera run --profile --repeat N` (a
fused kernel counts under its first op, e.g. Conv+Add+Relu under Conv); ONNX
Runtime's from its own profiler (ORT_ENABLE_ALL, same thread count; fused
nodes count under the op ORT names them by). Times are ms per run.

Usage: compare_kernels.py MODEL_DIR [--threads N] [--repeat N] [--tessera build/bin/tessera]
"""
import argparse
import collections
import glob
import json
import os
import re
import subprocess
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def tessera_profile(tessera, model_dir, threads, repeat):
    args = [tessera, "run", os.path.join(model_dir, "model.onnx"), "--profile", "--repeat", str(repeat),
            "--threads", str(threads)]
    for f in sorted(glob.glob(os.path.join(model_dir, "input_*.pb"))):
        args += ["--input", f]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    by_op = collections.Counter()
    total = None
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)\s+[\d.]+\s+[\d.]+%\s+(\S+)\s+(\S+)\s+(.*)$", line)  # mean, median, share
        if m:
            by_op[m.group(2).split("+")[0]] += float(m.group(1))
        m = re.match(r"median latency: ([\d.]+) ms", line)
        if m:
            total = float(m.group(1))
    return by_op, total


def ort_profile(model_dir, threads, repeat):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = os.path.join(tmp, "ort")
        s = ort.InferenceSession(os.path.join(model_dir, "model.onnx"), so, providers=["CPUExecutionProvider"])
        feeds = {}
        for i, inp in enumerate(s.get_inputs()):
            t = onnx.TensorProto()
            with open(os.path.join(model_dir, "input_%d.pb" % i), "rb") as f:
                t.ParseFromString(f.read())
            feeds[inp.name] = numpy_helper.to_array(t)
        s.run(None, feeds)  # warm-up
        for _ in range(repeat):
            s.run(None, feeds)
        events = json.load(open(s.end_profiling()))
    by_op = collections.Counter()
    runs = [e["dur"] for e in events if e.get("name") == "model_run"]
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"] / 1000.0 / (repeat + 1)
    total = float(np.median(runs[1:] or runs)) / 1000.0
    return by_op, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    a = ap.parse_args()
    t_ops, t_total = tessera_profile(a.tessera, a.model_dir, a.threads, a.repeat)
    o_ops, o_total = ort_profile(a.model_dir, a.threads, a.repeat)
    print("%s, %d thread(s): Tessera %.2f ms, ORT %.2f ms (ratio %.2f)" %
          (os.path.basename(os.path.normpath(a.model_dir)), a.threads, t_total, o_total, t_total / o_total))
    print("%-22s %10s %10s %8s" % ("op", "Tessera ms", "ORT ms", "diff"))
    for op in sorted(set(t_ops) | set(o_ops), key=lambda k: -(t_ops[k] - o_ops[k])):
        print("%-22s %10.3f %10.3f %+8.3f" % (op, t_ops[op], o_ops[op], t_ops[op] - o_ops[op]))


if __name__ == "__main__":
    main()
