#!/usr/bin/env python3
"""Checks Tessera on the model suite: every model imports, `tessera inspect`
describes it, and `tessera run` (reference interpreter) reproduces the
framework's reference output.

Error metric per output: max |tessera - framework| / max(|framework|, 1e-6)
(maximum error relative to the output's scale); the target is <= 1e-4.
It also exports each imported model back to ONNX (build/bin/export_roundtrip),
checks it with onnx.checker, runs both in ONNX Runtime and compares (target
<= 1e-5).

Usage: bench/models/check_suite.py [--cache bench/models/cache] [--only a,b]
       [--tessera build/bin/tessera]
Models come from bench/models/generate.py.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def ort_outputs(path, feeds):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_roundtrip(exporter, folder, manifest):
    """Import -> export, then ONNX Runtime on both: max error relative to scale."""
    model = os.path.join(folder, "model.onnx")
    feeds = {i["name"]: load_pb(os.path.join(folder, i["file"])) for i in manifest["inputs"] if i.get("in_graph", True)}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "exported.onnx")
        r = subprocess.run([exporter, model, out], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("export: " + r.stderr.strip())
        onnx.checker.check_model(out, full_check=True)
        a, b = ort_outputs(model, feeds), ort_outputs(out, feeds)
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        worst = max(worst, float(np.abs(x - y).max() / max(np.abs(x).max(), 1e-6)))
    return worst


def check_model(tessera, folder):
    manifest = json.load(open(os.path.join(folder, "manifest.json")))
    model = os.path.join(folder, "model.onnx")
    row = {"model": manifest["name"]}
    t0 = time.time()
    insp = subprocess.run([tessera, "inspect", "--json", model], capture_output=True, text=True)
    if insp.returncode != 0:
        row["error"] = "inspect: " + insp.stderr.strip()
        return row
    info = json.loads(insp.stdout)
    row.update(nodes=info["nodes"], params=info["parameters"], gflops=info["flops"] / 1e9)
    args = [tessera, "run", model]
    for inp in manifest["inputs"]:
        if inp.get("in_graph", True):
            args += ["--input", "%s=%s" % (inp["name"], os.path.join(folder, inp["file"]))]
    with tempfile.TemporaryDirectory() as out:
        args += ["--output-dir", out]
        t1 = time.time()
        run = subprocess.run(args, capture_output=True, text=True)
        row["run_s"] = time.time() - t1
        if run.returncode != 0:
            row["error"] = "run: " + run.stderr.strip()
            return row
        worst = 0.0
        for i, o in enumerate(manifest["outputs"]):
            want = load_pb(os.path.join(folder, o["file"])).astype(np.float64)
            got = load_pb(os.path.join(out, "output_%d.pb" % i)).astype(np.float64)
            if got.shape != want.shape:
                row["error"] = "output %d shape %s != %s" % (i, got.shape, want.shape)
                return row
            scale = max(np.abs(want).max(), 1e-6)
            worst = max(worst, float(np.abs(got - want).max() / scale))
        row["max_rel_err"] = worst
    exporter = os.path.join(os.path.dirname(tessera), "export_roundtrip")
    try:
        row["roundtrip_err"] = check_roundtrip(exporter, folder, manifest)
    except Exception as e:  # reported in the table, not raised
        row["error"] = "roundtrip: %s" % e
    row["total_s"] = time.time() - t0
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=os.path.join(HERE, "cache"))
    ap.add_argument("--only", default="")
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    a = ap.parse_args()
    names = sorted(d for d in os.listdir(a.cache) if os.path.exists(os.path.join(a.cache, d, "manifest.json")))
    if a.only:
        wanted = a.only.split(",")
        names = [n for n in names if n in wanted]
    failed = 0
    print("%-18s %6s %12s %9s %9s %12s %12s  %s" % ("model", "nodes", "params", "GFLOP", "run s", "max rel err",
                                                  "export err", "status"))
    for n in names:
        r = check_model(a.tessera, os.path.join(a.cache, n))
        ok = "error" not in r and r["max_rel_err"] <= 1e-4 and r["roundtrip_err"] <= 1e-5
        failed += not ok
        if "error" in r:
            print("%-18s %s" % (n, "FAIL " + r["error"]))
        else:
            print("%-18s %6d %12d %9.2f %9.1f %12.2e %12.2e  %s" % (n, r["nodes"], r["params"], r["gflops"], r["run_s"],
                                                                 r["max_rel_err"], r["roundtrip_err"],
                                                                 "ok" if ok else "FAIL"))
        sys.stdout.flush()
    print("%d models, %d passed, %d failed" % (len(names), len(names) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
