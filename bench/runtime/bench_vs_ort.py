#!/usr/bin/env python3
"""Tessera CPU runtime vs ONNX Runtime on the model suite, side by side.

For each model of bench/models/cache (written by bench/models/generate.py) and
each thread count, starts ONNX Runtime (ORT_ENABLE_ALL, intra_op threads = N)
and Tessera's bench_runtime (--threads N) as two processes, warms both up, then
alternates single runs between them (ORT, Tessera, ORT, ...) so that both see
the same machine load, and prints the median latency of each, their ratio
(Tessera / ORT; <= 1.0 is the target), the median of the per-round ratios
(robust to load that changes during the run), the ratio of the fastest runs
(robust to load that only ever slows a run down), and peak memory (process max
RSS; Tessera also reports its planned peak), and the largest difference of
Tessera's outputs from ONNX Runtime's relative to the largest ORT output
magnitude (the suite's bar is 1e-4).

With --zoo, the torchvision families of bench/models/zoo_sweep.py (models
nobody tuned for: EfficientNet, MobileNetV3, DenseNet, ShuffleNet, RegNet,
ConvNeXt, Swin, ViT, GoogLeNet, MNASNet, DeepLabV3, R3D-18, ...) are exported
into CACHE/zoo_<name> when missing (torch and torchvision needed) and join the
list. Each (model, threads) row ends with the geometric mean of the ratios
per thread count.

Usage: bench_vs_ort.py --bench-bin PATH [--models a,b] [--zoo all|a,b] [--cache DIR]
                       [--threads 1,2] [--repeat N] [--json FILE]
"""
import argparse
import json
import math
import os
import subprocess
import tempfile
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, "..", "models", "cache")

ORT_CHILD = r"""
import sys, json, time, os, resource
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
d, threads, warmup, out_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
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
outs = s.run(None, feeds)
for _ in range(warmup - 1): s.run(None, feeds)
for i, o in enumerate(outs):  # the reference Tessera's outputs are compared with
    open(os.path.join(out_dir, f"output_{i}.pb"), "wb").write(numpy_helper.from_array(o).SerializeToString())
ms = []
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() != "run": break
    t0 = time.perf_counter(); s.run(None, feeds); ms.append((time.perf_counter() - t0) * 1e3)
    print(f"{ms[-1]:.4f}", flush=True)
ms.sort()
print(json.dumps({"median_ms": ms[len(ms) // 2], "min_ms": ms[0],
                  "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


class Child:
    """A benchmark process that times one run per "run" line on its stdin."""

    def __init__(self, cmd):
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.error = None
        if self.p.stdout.readline().strip() != "ready":
            self.error = self._fail()

    def _fail(self):
        self.p.kill()
        err = self.p.stderr.read().strip().splitlines()
        return err[-1] if err else "failed"

    def run_once(self):
        self.p.stdin.write("run\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            self.error = self._fail()
            return None
        return float(line)

    def finish(self):
        out, err = self.p.communicate("end\n")
        if self.p.returncode != 0:
            return {"error": (err.strip().splitlines() or ["failed"])[-1]}
        return json.loads(out.strip().splitlines()[-1])


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def measure(model_dir, threads, repeat, warmup, bench_bin):
    with tempfile.TemporaryDirectory() as ort_out:
        return measure_in(model_dir, threads, repeat, warmup, bench_bin, ort_out)


def measure_in(model_dir, threads, repeat, warmup, bench_bin, ort_out):
    # ORT writes its outputs before it reports ready; Tessera starts after
    # and reports its largest error relative to them.
    ort_c = Child([sys.executable, "-c", ORT_CHILD, model_dir, str(threads), str(warmup), ort_out])
    tes_c = Child([bench_bin, model_dir, "--threads", str(threads), "--warmup", str(warmup), "--serve",
                   "--expect", ort_out])
    for c in (ort_c, tes_c):
        if c.error:
            for o in (ort_c, tes_c):
                if o.p.poll() is None:
                    o.p.kill()
            return {"error": c.error}
    ort_ms, tes_ms = [], []
    for _ in range(repeat):
        # The pauses let each runtime's idle threads stop spinning (ONNX
        # Runtime's pool spins after a run) before the other one runs.
        time.sleep(0.05)
        a = ort_c.run_once()
        time.sleep(0.05)
        b = tes_c.run_once()
        if a is None or b is None:
            break
        ort_ms.append(a)
        tes_ms.append(b)
    ort_r, tes_r = ort_c.finish(), tes_c.finish()
    if "error" in ort_r or "error" in tes_r or not ort_ms:
        return {"error": tes_r.get("error") or ort_r.get("error") or tes_c.error or ort_c.error}
    return {"ort": ort_r, "tes": tes_r, "ort_median": median(ort_ms), "tes_median": median(tes_ms),
            "paired_ratio": median([b / a for a, b in zip(ort_ms, tes_ms)]),
            "min_ratio": min(tes_ms) / min(ort_ms)}


def mib(b):
    return f"{b / 2**20:.0f}" if b else "-"


def zoo_dirs(names, cache):
    """The zoo sweep's vision models as benchmark folders CACHE/zoo_<name>,
    exported where missing."""
    sys.path.insert(0, os.path.join(HERE, "..", "models"))
    import zoo_sweep
    if names == "all":
        names = ",".join(zoo_sweep.vision_models())
    dirs = []
    for n in names.split(","):
        d = "zoo_" + n
        if not os.path.exists(os.path.join(cache, d, "input_0.pb")):
            print(f"# exporting {n} into {os.path.join(cache, d)}", flush=True)
            zoo_sweep.export_bench_dir(n, os.path.join(cache, d))
        dirs.append(d)
    return dirs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-bin", required=True)
    ap.add_argument("--models", default="", help="folders of --cache (default: all of them)")
    ap.add_argument("--zoo", default="", help="'all' or names of zoo_sweep.py's vision models")
    ap.add_argument("--cache", default=CACHE)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default="", help="also write the rows to this file")
    a = ap.parse_args()
    models = a.models.split(",") if a.models else ([] if a.zoo else sorted(os.listdir(a.cache)))
    if a.zoo:
        models += [m for m in zoo_dirs(a.zoo, a.cache) if m not in models]
    rows = []
    load = os.getloadavg()
    print(f"# {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{a.repeat} alternating runs per row after {a.warmup} warm-up runs")
    print(f"{'model':16} {'thr':>3} {'tessera ms':>11} {'ort ms':>9} {'ratio':>6} {'paired':>6} {'min':>6} "
          f"{'tessera RSS MiB':>15} {'(planned)':>9} {'ort RSS MiB':>11} {'rel err vs ORT':>14}")
    for m in models:
        d = os.path.join(a.cache, m)
        for t in [int(x) for x in a.threads.split(",")]:
            r = measure(d, t, a.repeat, a.warmup, a.bench_bin)
            if "error" in r:
                print(f"{m:16} {t:>3} error: {r['error']}", flush=True)
                continue
            tes = r["tes"]
            ratio = r["tes_median"] / r["ort_median"]
            rows.append({"model": m, "threads": t, "tessera_ms": r["tes_median"], "ort_ms": r["ort_median"],
                         "ratio": ratio, "paired_ratio": r["paired_ratio"], "min_ratio": r["min_ratio"],
                         "max_rel_err": tes["max_rel_err"]})
            print(f"{m:16} {t:>3} {r['tes_median']:11.2f} {r['ort_median']:9.2f} {ratio:6.2f} "
                  f"{r['paired_ratio']:6.2f} {r['min_ratio']:6.2f} {mib(tes['max_rss_bytes']):>15} {mib(tes['peak_bytes']):>9} "
                  f"{mib(r['ort']['max_rss_bytes']):>11} {tes['max_rel_err']:14.2g}", flush=True)
    for t in sorted({r["threads"] for r in rows}):
        rs = [r["ratio"] for r in rows if r["threads"] == t]
        print(f"# {t} thread(s): geomean ratio {math.exp(sum(map(math.log, rs)) / len(rs)):.3f} over {len(rs)} "
              f"models, {sum(x > 1.03 for x in rs)} slower than ORT by more than 3 %")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
