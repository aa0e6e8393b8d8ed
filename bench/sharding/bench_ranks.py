#!/usr/bin/env python3
"""Tensor parallelism on CPU ranks, side by side in one run.

For each suite transformer (GPT-2, BERT-base, the Llama-style decoder) with
the Megatron annotations of bench/sharding/megatron_<model>.json:

  1. `tessera optimize --mesh tp=N --shard-file ...` for N = 2 and 4;
  2. correctness: the plan's outputs under `mpirun -np N` and as threads
     (`tessera run PLAN`) against the single-device `tessera run` of the
     model, relative to the output's scale (target: 1e-4);
  3. timing, in rotated order each round: 1 rank x 1 thread, 1 rank x 2
     threads, 2 ranks x 1 thread under mpirun (and the time rank 0 spends in
     collectives); each `--repeat R` gives a median, the table the medians
     over rounds, and the ratios.

Needs the model suite (python3 bench/models/generate.py) and mpirun.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODELS = {"gpt2": "gpt2", "bert": "bert_base", "llama": "llama_small"}


def mpirun():
    exe = shutil.which("mpirun") or shutil.which("mpiexec")
    if not exe:
        sys.exit("bench_ranks: mpirun not found (Debian: openmpi-bin)")
    extra = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [exe, *extra, "--oversubscribe", "--bind-to", "none"]


def run(cmd, timeout=1800):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"bench_ranks: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def suite_model(folder, tool):
    """A suite model's file and its --input flags; exits naming the generator
    when bench/models/generate.py has not written it."""
    model_dir = os.path.join(ROOT, "bench", "models", "cache", folder)
    model = os.path.join(model_dir, "model.onnx")
    if not os.path.exists(model):
        sys.exit(f"{tool}: {model} is missing: python3 bench/models/generate.py --only {folder}")
    return model, inputs_of(model_dir)


def inputs_of(model_dir):
    manifest = json.load(open(os.path.join(model_dir, "manifest.json")))
    args = []
    for i in manifest["inputs"]:
        if i.get("in_graph", True):
            args += ["--input", f"{i['name']}={os.path.join(model_dir, i['file'])}"]
    return args


def outputs_in(folder):
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".pb"):
            t = onnx.TensorProto()
            t.ParseFromString(open(os.path.join(folder, f), "rb").read())
            out[f] = numpy_helper.to_array(t).astype(np.float64)
    return out


def scaled_error(got, want):
    err = 0.0
    for k, w in want.items():
        g = got[k]
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        err = max(err, float(np.max(np.abs(g - w))) / scale if w.size else 0.0)
    return err


def rotated_outputs(programs, rounds):
    """Each program's stdout, `rounds` times, the order rotated each round
    (so that none always runs first or after the same one)."""
    keys = list(programs)
    texts = {k: [] for k in keys}
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            texts[k].append(run(programs[k]))
    return texts


def median_ms(text):
    m = re.search(r"median latency: ([0-9.]+) ms", text)
    return float(m.group(1)) if m else float("nan")


def collective_ms(text):
    m = re.search(r"collectives: ([0-9.]+) ms per run", text)
    return float(m.group(1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--models", default="gpt2,bert,llama")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--ranks", default="2,4", help="mesh sizes to build and check (timing uses 2)")
    args = ap.parse_args()
    mpi = mpirun()
    work = tempfile.mkdtemp(prefix="tessera-ranks-")
    rows = []
    for name in args.models.split(","):
        model, feeds = suite_model(MODELS[name], "bench_ranks")
        ref_dir = os.path.join(work, name, "single")
        run([args.tessera, "run", model, *feeds, "--output-dir", ref_dir])
        want = outputs_in(ref_dir)
        row = {"model": name}
        for n in [int(x) for x in args.ranks.split(",")]:
            plan = os.path.join(work, name, f"tp{n}")
            # The annotations alone (the hand-written plan); bench_search.py
            # compares what the sharding search adds or finds instead.
            run([args.tessera, "optimize", model, "-o", plan, "--mesh", f"tp={n}", "--shard-file",
                 os.path.join(HERE, f"megatron_{name}.json"), "--no-shard-search"])
            for mode, prefix in (("mpi", [*mpi, "-np", str(n)]), ("threads", [])):
                out = os.path.join(work, name, f"tp{n}-{mode}")
                run([*prefix, args.tessera, "run", plan, *feeds, "--output-dir", out, "--threads", "1"])
                row[f"err_tp{n}_{mode}"] = scaled_error(outputs_in(out), want)
        plan2 = os.path.join(work, name, "tp2")
        programs = {
            "1x1": [args.tessera, "run", model, *feeds, "--threads", "1", "--repeat", str(args.repeat)],
            "1x2": [args.tessera, "run", model, *feeds, "--threads", "2", "--repeat", str(args.repeat)],
            "2x1": [*mpi, "-np", "2", args.tessera, "run", plan2, *feeds, "--threads", "1", "--repeat",
                    str(args.repeat), "--profile"],
        }
        texts = rotated_outputs(programs, args.rounds)
        for k, outs in texts.items():
            row[k] = float(np.median([median_ms(t) for t in outs]))
        row["comm_2x1"] = float(np.median([collective_ms(t) for t in texts["2x1"]]))
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print("| model | 1 rank x 1 thread ms | 1 rank x 2 threads ms | 2 ranks x 1 thread ms | collectives ms |"
          " 2x1 vs 1x1 | 2x1 vs 1x2 | max error tp2 mpi/threads | tp4 mpi/threads |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['1x1']:.2f} | {r['1x2']:.2f} | {r['2x1']:.2f} | {r['comm_2x1']:.2f} | "
              f"{r['1x1'] / r['2x1']:.2f}x | {r['1x2'] / r['2x1']:.2f}x | "
              f"{r.get('err_tp2_mpi', float('nan')):.1e} / {r.get('err_tp2_threads', float('nan')):.1e} | "
              f"{r.get('err_tp4_mpi', float('nan')):.1e} / {r.get('err_tp4_threads', float('nan')):.1e} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
