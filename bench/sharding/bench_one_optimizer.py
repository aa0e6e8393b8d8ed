#!/usr/bin/env python3
"""One optimizer: the plan on a mesh against the plan without one, side by side.

  A. Predicted (--part predicted): for every suite model, on --device cpu
     and --device h100, `tessera optimize` with no mesh and with --mesh
     tp=2 and tp=4 (same budget and seed). The mesh plan's predicted time
     (plan.json predicted_cost.after_s) must be at most the no-mesh plan's;
     the table gives both, the devices the search chose and its reason.
  B. Measured (--part measured): each --device cpu --mesh tp=2 plan that
     splits, on 2 ranks x 1 thread under mpirun, against the no-mesh plan
     on 1 rank x 2 threads and 1 x 1, in rotated order each round, medians
     of `--repeat R` medians; predicted and measured speedups side by side
     (speedup over the no-mesh plan on 1 rank x 2 threads, which is what
     the host runs without a mesh, and over 1 x 1, which is what the model
     prices a rank on).

Needs the model suite (python3 bench/models/generate.py) and mpirun.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_ranks import inputs_of, median_ms, mpirun, rotated_outputs, run  # noqa: E402

SUITE = ["resnet18", "resnet50", "resnext50_32x4d", "mobilenet_v2", "inception_v3", "vgg16", "csrnet",
         "bert_base", "gpt2", "llama_small", "llama_deep", "llama_wide", "gpt2_token1", "llama_token1"]


def facts(plan):
    j = json.load(open(os.path.join(plan, "plan.json")))
    s = j.get("sharding_search") or {}
    return {"after_s": j["predicted_cost"]["after_s"], "single_s": j["predicted_cost"]["single_device_s"],
            "before_s": j["predicted_cost"]["before_s"], "ranks": len(j.get("ranks", [])) or 1,
            "mesh": j.get("mesh", "1"), "why": s.get("why", ""),
            "rules": sorted({m["rule"] for m in j["mutations"] if m.get("stage") in ("search", "rank-search")})}


def optimize(args, model, out, device, mesh):
    if args.reuse and os.path.exists(os.path.join(out, "plan.json")):
        return facts(out)  # written by the predicted part of this run
    cmd = [args.tessera, "optimize", model, "-o", out, "--device", device, "--budget", str(args.budget),
           "--no-measure", "--seed", "0"]
    if mesh:
        cmd += ["--mesh", mesh]
    run(cmd)
    return facts(out)


def predicted(args, work, models):
    rows = []
    for name in models:
        model = os.path.join(ROOT, "bench", "models", "cache", name, "model.onnx")
        for device in args.devices.split(","):
            base = optimize(args, model, os.path.join(work, f"{name}-{device}-none"), device, None)
            for mesh in ("tp=2", "tp=4"):
                p = optimize(args, model, os.path.join(work, f"{name}-{device}-{mesh}"), device, mesh)
                row = {"model": name, "device": device, "mesh": mesh, "none": base, "plan": p,
                       "never_worse": p["after_s"] <= base["after_s"] * (1 + 1e-9)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print()
    print("| model | device | offered | no mesh ms | mesh plan ms | ranks | mesh / no mesh | never worse |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        n, p = r["none"], r["plan"]
        print(f"| {r['model']} | {r['device']} | {r['mesh']} | {n['after_s'] * 1e3:.4g} | {p['after_s'] * 1e3:.4g} | "
              f"{p['ranks']} | {p['after_s'] / n['after_s']:.3f} | {'yes' if r['never_worse'] else 'NO'} |")
    worse = [r for r in rows if not r["never_worse"]]
    print(f"\n{len(rows) - len(worse)} of {len(rows)} mesh plans at or below the no-mesh plan's prediction")
    return rows


def measured(args, work, models):
    mpi = mpirun()
    rows = []
    for name in models:
        model_dir = os.path.join(ROOT, "bench", "models", "cache", name)
        model = os.path.join(model_dir, "model.onnx")
        none = os.path.join(work, f"{name}-cpu-none")
        mesh = os.path.join(work, f"{name}-cpu-tp=2")
        n = optimize(args, model, none, "cpu", None)
        p = optimize(args, model, mesh, "cpu", "tp=2")
        if p["ranks"] == 1:
            rows.append({"model": name, "split": False, "why": p["why"]})
            print(json.dumps(rows[-1]), flush=True)
            continue
        feeds = inputs_of(model_dir)
        rep = ["--repeat", str(args.repeat)]
        programs = {
            "1x1": [args.tessera, "run", none, *feeds, "--threads", "1", *rep],
            "1x2": [args.tessera, "run", none, *feeds, "--threads", "2", *rep],
            "2x1": [*mpi, "-np", "2", args.tessera, "run", mesh, *feeds, "--threads", "1", *rep],
        }
        texts = rotated_outputs(programs, args.rounds)
        ms = {k: float(np.median([median_ms(t) for t in v])) for k, v in texts.items()}
        spread = {k: [round(median_ms(t), 3) for t in v] for k, v in texts.items()}
        rows.append({"model": name, "split": True, "ms": ms, "spread": spread, "predicted_mesh_ms": p["after_s"] * 1e3,
                     "predicted_single_ms": n["after_s"] * 1e3, "predicted_speedup": n["after_s"] / p["after_s"]})
        print(json.dumps(rows[-1]), flush=True)
    print()
    print("| model | split chosen | 1 rank x 1 thread ms | 1 x 2 threads ms | 2 ranks x 1 thread ms |"
          " predicted speedup | measured over 1x1 | measured over 1x2 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not r["split"]:
            print(f"| {r['model']} | no: {r['why']} | | | | | | |")
            continue
        ms = r["ms"]
        print(f"| {r['model']} | tp=2 | {ms['1x1']:.3f} | {ms['1x2']:.3f} | {ms['2x1']:.3f} | "
              f"{r['predicted_speedup']:.2f}x | {ms['1x1'] / ms['2x1']:.2f}x | {ms['1x2'] / ms['2x1']:.2f}x |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--part", choices=["predicted", "measured", "both"], default="both")
    ap.add_argument("--only", default="", help="comma-separated suite models")
    ap.add_argument("--budget", type=float, default=30)
    ap.add_argument("--devices", default="cpu,h100", help="comma-separated --device values for the predicted part")
    ap.add_argument("--work", default="", help="keep the plans in this folder (default: a temporary one)")
    ap.add_argument("--reuse-plans", action="store_true",
                    help="use the plans already in --work (from an earlier --part predicted) instead of optimizing")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    models = [m for m in args.only.split(",") if m] or SUITE
    models = [m for m in models if os.path.exists(os.path.join(ROOT, "bench", "models", "cache", m, "model.onnx"))]
    args.reuse = args.reuse_plans
    with tempfile.TemporaryDirectory(prefix="tessera-one-optimizer-") as tmp:
        work = args.work or tmp
        os.makedirs(work, exist_ok=True)
        if args.part in ("predicted", "both"):
            predicted(args, work, models)
            args.reuse = True  # the measured part runs the plans just written
        if args.part in ("measured", "both"):
            measured(args, work, models)


if __name__ == "__main__":
    main()
