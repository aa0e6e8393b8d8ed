#!/usr/bin/env python3
"""tessera optimize on the model suite: original vs optimized, side by side.

For each model of bench/models/cache (written by bench/models/generate.py):
runs `tessera optimize --device cpu` (search time, candidates generated /
verified / applied, partially equivalent mutants used, the rules that won)
and `tessera optimize --device h100` (the predicted H100 speedup), then starts
four benchmark processes, each serving one program: ONNX Runtime
(ORT_ENABLE_ALL, intra-op threads = --threads) on the original and on the
optimized model.onnx, and Tessera's CPU runtime (bench_runtime) on both. After
warm-up it alternates single runs between the four (a pause before each, so
that no runtime's idle threads still spin while another runs), so all see the
same machine load, and prints medians, the optimized/original speedups, and
the median of the per-round speedups (robust to load that changes during the
run). Correctness: the optimized model's outputs in ONNX Runtime against the
original's, and Tessera's runs of both against ONNX Runtime's original
outputs, as the largest error relative to the largest output (the suite's
bar: 1e-4).
Not a test: nothing here asserts a timing.

Usage: bench_optimize.py --tessera build/bin/tessera --bench-bin build/bin/bench_runtime
                         [--models a,b] [--threads 2] [--budget 30] [--repeat 15]
"""
import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, "..", "models", "cache")
sys.path.insert(0, os.path.join(HERE, "..", "runtime"))
from bench_vs_ort import ORT_CHILD, Child, median  # noqa: E402

SUITE = ["resnet18", "resnet50", "resnext50_32x4d", "mobilenet_v2", "inception_v3", "vgg16", "csrnet",
         "bert_base", "gpt2", "llama_small"]


def optimize(tessera, model, out, device, budget, threads):
    cmd = [tessera, "optimize", model, "-o", out, "--device", device, "--budget", str(budget),
           "--threads", str(threads), "--no-measure"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError((p.stderr.strip() or p.stdout.strip()).splitlines()[-1])
    with open(os.path.join(out, "report.json")) as f:
        return json.load(f), wall


def output_error(dir_a, dir_b):
    """Largest |a - b| over the outputs, relative to the largest |a| (the
    suite's measure: elementwise tolerances fail on values that cancel)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    files = sorted(glob.glob(os.path.join(dir_a, "output_*.pb")))
    if not files:
        return float("inf")
    worst = 0.0
    for fa in files:
        ta, tb = onnx.TensorProto(), onnx.TensorProto()
        with open(fa, "rb") as f:
            ta.ParseFromString(f.read())
        fb = os.path.join(dir_b, os.path.basename(fa))
        if not os.path.exists(fb):
            return float("inf")
        with open(fb, "rb") as f:
            tb.ParseFromString(f.read())
        a, b = numpy_helper.to_array(ta).astype(np.float64), numpy_helper.to_array(tb).astype(np.float64)
        if a.shape != b.shape:
            return float("inf")
        worst = max(worst, float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30)))
    return worst


def measure(orig_dir, opt_dir, threads, repeat, warmup, bench_bin, tmp):
    """Medians of the four programs; alternating single runs."""
    outs = {k: os.path.join(tmp, "out_" + k) for k in ("ort_orig", "ort_opt")}
    for d in outs.values():
        os.makedirs(d, exist_ok=True)
    children = {}
    try:
        children["ort_orig"] = Child([sys.executable, "-c", ORT_CHILD, orig_dir, str(threads), str(warmup),
                                      outs["ort_orig"]])
        children["ort_opt"] = Child([sys.executable, "-c", ORT_CHILD, opt_dir, str(threads), str(warmup),
                                     outs["ort_opt"]])
        for k, d in (("tes_orig", orig_dir), ("tes_opt", opt_dir)):
            children[k] = Child([bench_bin, d, "--threads", str(threads), "--warmup", str(warmup), "--serve",
                                 "--expect", outs["ort_orig"]])
        for k, c in children.items():
            if c.error:
                raise RuntimeError(f"{k}: {c.error}")
        times = {k: [] for k in children}
        order = list(children)
        for i in range(repeat):
            # A rotated order each round: no program always runs right after
            # the same other one (a runtime's threads still winding down, or
            # its cache footprint, would otherwise favour one side).
            for k in order[i % len(order):] + order[:i % len(order)]:
                c = children[k]
                time.sleep(0.05)
                t = c.run_once()
                if t is None:
                    raise RuntimeError(f"{k}: {c.error}")
                times[k].append(t)
        final = {k: c.finish() for k, c in children.items()}
    finally:
        for c in children.values():
            if c.p.poll() is None:
                c.p.kill()
    for k, r in final.items():
        if "error" in r:
            raise RuntimeError(f"{k}: {r['error']}")
    med = {k: median(v) for k, v in times.items()}
    paired = {rt: median([a / b for a, b in zip(times[rt + "_orig"], times[rt + "_opt"])]) for rt in ("tes", "ort")}
    return {"median": med, "paired": paired, "ort_err": output_error(outs["ort_orig"], outs["ort_opt"]),
            "tes_err": max(final["tes_orig"]["max_rel_err"], final["tes_opt"]["max_rel_err"])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--bench-bin", required=True)
    ap.add_argument("--models", default=",".join(SUITE))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--budget", type=float, default=30)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    rows = []
    print("# load average at start: %.2f %.2f %.2f; %d threads, %d alternating runs per program" %
          (*os.getloadavg(), args.threads, args.repeat))
    header = ("model", "tsr orig ms", "tsr opt ms", "tsr x", "(paired)", "ort orig ms", "ort opt ms", "ort x",
              "(paired)", "ort err", "tsr err", "search s", "optimize s", "gen/ver/applied", "partial",
              "pred cpu x", "pred h100 x", "rules")
    print(" | ".join(header))
    for name in args.models.split(","):
        src = os.path.join(CACHE, name)
        if not os.path.exists(os.path.join(src, "model.onnx")):
            print(f"{name} | missing (run bench/models/generate.py)")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            try:
                cpu_dir = os.path.join(tmp, "cpu")
                cpu, wall = optimize(args.tessera, os.path.join(src, "model.onnx"), cpu_dir, "cpu", args.budget,
                                     args.threads)
                h100, _ = optimize(args.tessera, os.path.join(src, "model.onnx"), os.path.join(tmp, "h100"),
                                   "h100", args.budget, args.threads)
                for f in glob.glob(os.path.join(src, "input_*.pb")):
                    shutil.copy(f, cpu_dir)
                r = measure(src, cpu_dir, args.threads, args.repeat, args.warmup, args.bench_bin, tmp)
            except Exception as e:  # one model's failure must not hide the others
                print(f"{name} | error: {e}", flush=True)
                continue
        m, s = r["median"], cpu["search"]
        rules = {}
        for x in cpu["mutations"]:
            rules[x["rule"]] = rules.get(x["rule"], 0) + 1
        row = (name, m["tes_orig"], m["tes_opt"], m["tes_orig"] / m["tes_opt"], r["paired"]["tes"],
               m["ort_orig"], m["ort_opt"], m["ort_orig"] / m["ort_opt"], r["paired"]["ort"], r["ort_err"],
               r["tes_err"], s.get("seconds", 0), wall, f'{s["generated"]}/{s["verified"]}/{s["applied"]}',
               s["partial_used"], cpu["predicted_cost"]["speedup"], h100["predicted_cost"]["speedup"],
               ",".join(f"{k} x{v}" for k, v in sorted(rules.items())) or "-", cpu.get("unchanged", False))
        rows.append(row)
        print(" | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row[:-1]) +
              (" (plan = original graph)" if row[-1] else ""), flush=True)
    print("# load average at end: %.2f %.2f %.2f" % os.getloadavg())
    if rows:
        geo = lambda i: math.exp(sum(math.log(max(r[i], 1e-9)) for r in rows) / len(rows))
        print(f"geomean speedup: tessera runtime {geo(3):.3f}x (paired {geo(4):.3f}x), onnx runtime {geo(7):.3f}x "
              f"(paired {geo(8):.3f}x), predicted cpu {geo(15):.3f}x, h100 {geo(16):.3f}x; "
              f"slowest: tessera {min(r[4] for r in rows):.3f}x, ort {min(r[8] for r in rows):.3f}x; "
              f"outputs within 1e-4 of the original's scale: {sum(max(r[9], r[10]) <= 1e-4 for r in rows)}/{len(rows)}")
        # A plan that is the original graph runs the same program twice: its
        # measured ratio is the noise of the measurement, not an effect.
        same = [r[0] for r in rows if r[-1]]
        if same:
            changed = [r for r in rows if not r[-1]]
            geo1 = lambda i: math.exp(sum(math.log(max(r[i], 1e-9)) for r in changed) / len(rows))
            print(f"plans equal to the original graph ({', '.join(same)}) counted as 1.000x: tessera runtime "
                  f"{geo1(3):.3f}x (paired {geo1(4):.3f}x), onnx runtime {geo1(7):.3f}x (paired {geo1(8):.3f}x); "
                  f"slowest changed plan: tessera {min([r[4] for r in changed] or [1]):.3f}x, "
                  f"ort {min([r[8] for r in changed] or [1]):.3f}x")


if __name__ == "__main__":
    sys.exit(main())
