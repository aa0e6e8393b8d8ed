#!/usr/bin/env python3
"""The sharding search against the hand-written Megatron plans, side by side.

  A. Predicted, --device h100, --mesh tp=2/4/8, for each suite transformer
     (GPT-2, BERT-base, the Llama-style decoder): `tessera optimize --mesh`
     with no annotations (the search) against the Megatron annotations of
     bench/sharding/megatron_<model>.json (on GPT-2's merged QKV weight with
     --shard-rewrite permute-merged-projection, so that the column split
     gives whole heads as Megatron-LM's interleaved layout does), on the same
     cost model (plan.json's predicted mesh time: the ranks' critical path
     on the partitioned programs). Per plan: the devices it uses, the
     collectives by kind, whether they are Megatron's (one AllReduce per
     attention and per MLP block, nothing else: not possible where the
     heads do not divide by tp), the bytes a rank sends per layer next to
     Megatron's formula (2 AllReduces of batch x seq x hidden per layer),
     and the search's own time (plan.json search.seconds) against its target
     (10 s; 60 s for the 32-layer llama_deep).
  B. Measured on this machine, --device cpu --mesh tp=2: the searched plan
     (on the ranks it chose, the host's cores shared among them) and the
     Megatron plan on 2 ranks x 1 thread under mpirun, against the model on
     1 rank x 1 thread and x 2 threads, in rotated order each round,
     medians; and
     each plan's outputs against the single-device run, relative to the
     output's scale.

Needs the model suite (python3 bench/models/generate.py --only
gpt2,bert_base,llama_small,llama_deep[,llama_wide]) and mpirun.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import shutil

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_ranks import inputs_of, median_ms, mpirun, outputs_in, rotated_outputs, run, scaled_error  # noqa: E402

SUITE = {"gpt2": ("gpt2", 12, 768), "bert": ("bert_base", 12, 768), "llama": ("llama_small", 4, 512)}
# Predicted only, when generated: a Llama-style decoder wide enough for an
# H100 mesh to gain (hidden 2048), with the Llama annotations.
WIDE = {"llama_wide": ("llama_wide", 2, 2048, "llama")}
# Attention heads: Megatron-LM splits whole heads, so it needs heads % tp == 0
# (its argument check); with 12 heads over 8 ranks the annotations give a
# rank 1.5 heads and the partitioner gathers Q, K and V instead.
HEADS = {"gpt2": 12, "bert": 12, "llama": 8, "llama_wide": 16}
TOKENS = 128  # batch 1 x seq 128, as the suite is exported
# Megatron-LM lays a merged QKV weight out per head group, so that a column
# split gives each rank whole heads: the permuted projection.
MEGATRON_ARGS = {"gpt2": ["--shard-rewrite", "permute-merged-projection"]}


def plan_facts(plan):
    j = json.load(open(os.path.join(plan, "plan.json")))
    kinds = {}
    sent = 0
    for c in j.get("collectives", []):
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
        sent += c["bytes"]
    s = j.get("sharding_search") or {}
    ranks = j.get("ranks", [])
    return {"mesh": j.get("mesh", "1"), "devices": len(ranks) or 1, "mesh_s": j["predicted_cost"]["after_s"],
            "single_s": j["predicted_cost"]["single_device_s"], "kinds": kinds, "sent": sent,
            "search_s": s.get("seconds", 0.0), "why": s.get("why", ""), "rewrites": len(s.get("rewrites", [])),
            "memory": max((r["weight_bytes"] + r["peak_activation_bytes"] for r in ranks), default=0)}


def megatron_structure(kinds, layers):
    """Whether a plan communicates as Megatron-LM's does in inference: one
    AllReduce (or one ReduceScatter + AllGather) per attention block and per
    MLP block, nothing else."""
    if kinds == {"AllReduce": 2 * layers}:
        return True
    return kinds == {"ReduceScatter": 2 * layers, "AllGather": 2 * layers}


def kinds_str(k):
    return ", ".join(f"{n} {kind}" for kind, n in sorted(k.items())) or "none"


def predicted(args, work):
    rows = []
    models = [(n, f, l, h, n) for n, (f, l, h) in SUITE.items()]
    models += [(n, f, l, h, a) for n, (f, l, h, a) in WIDE.items()
               if os.path.exists(os.path.join(ROOT, "bench", "models", "cache", f, "model.onnx"))]
    for name, folder, layers, hidden, annotations in models:
        model = os.path.join(ROOT, "bench", "models", "cache", folder, "model.onnx")
        for tp in (2, 4, 8):
            auto = os.path.join(work, f"{name}-auto-{tp}")
            meg = os.path.join(work, f"{name}-meg-{tp}")
            run([args.tessera, "optimize", model, "-o", auto, "--mesh", f"tp={tp}", "--device", "h100"])
            run([args.tessera, "optimize", model, "-o", meg, "--mesh", f"tp={tp}", "--device", "h100",
                 "--shard-file", os.path.join(HERE, f"megatron_{annotations}.json"), *MEGATRON_ARGS.get(name, [])])
            a, m = plan_facts(auto), plan_facts(meg)
            formula = 2 * TOKENS * hidden * 4  # bytes per layer: 2 AllReduces of [1, 128, hidden] f32
            row = {"model": name, "tp": tp, "auto": a, "megatron": m, "formula_per_layer": formula,
                   "layers": layers}
            rows.append(row)
            print(json.dumps(row), flush=True)
    deep = os.path.join(ROOT, "bench", "models", "cache", "llama_deep", "model.onnx")
    deep_row = None
    if os.path.exists(deep):
        plan = os.path.join(work, "deep-auto-8")
        run([args.tessera, "optimize", deep, "-o", plan, "--mesh", "tp=8", "--device", "h100"])
        deep_row = plan_facts(plan)
    print()
    print("| model | offered | search: devices used, predicted ms | Megatron ms (tp=N) | search / Megatron |"
          " one device ms | search's collectives | Megatron's collectives | Megatron's structure: search / annotated |"
          " bytes sent per layer: search / Megatron / formula | search s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        a, m = r["auto"], r["megatron"]
        print(f"| {r['model']} | tp={r['tp']} | {a['devices']} ({a['mesh']}), {a['mesh_s'] * 1e3:.4g} | "
              f"{m['mesh_s'] * 1e3:.4g} | {a['mesh_s'] / m['mesh_s']:.3f} | {a['single_s'] * 1e3:.4g} | "
              f"{kinds_str(a['kinds'])} | {kinds_str(m['kinds'])} | "
              f"{'yes' if megatron_structure(a['kinds'], r['layers']) else 'no'} / "
              f"{'yes' if megatron_structure(m['kinds'], r['layers']) else 'no'}"
              f"{'' if HEADS[r['model']] % r['tp'] == 0 else ' (%d heads over %d)' % (HEADS[r['model']], r['tp'])} | "
              f"{a['sent'] / r['layers'] / 1e3:.0f} K / {m['sent'] / r['layers'] / 1e3:.0f} K / "
              f"{r['formula_per_layer'] / 1e3:.0f} K | {a['search_s']:.2f} |")
    if deep_row:
        print(f"\nllama_deep (32 layers), tp=8 offered: search {deep_row['search_s']:.2f} s (target 60 s), "
              f"{deep_row['devices']} devices, {deep_row['mesh_s'] * 1e3:.4g} ms predicted; {deep_row['why']}")
    return rows


def measured(args, work):
    mpi = mpirun()
    rows = []
    for name, (folder, layers, hidden) in SUITE.items():
        model_dir = os.path.join(ROOT, "bench", "models", "cache", folder)
        model = os.path.join(model_dir, "model.onnx")
        feeds = inputs_of(model_dir)
        ref = os.path.join(work, f"{name}-single-out")
        run([args.tessera, "run", model, *feeds, "--output-dir", ref])
        want = outputs_in(ref)
        auto = os.path.join(work, f"{name}-cpu-auto")
        meg = os.path.join(work, f"{name}-cpu-meg")
        run([args.tessera, "optimize", model, "-o", auto, "--mesh", "tp=2", "--device", "cpu"])
        run([args.tessera, "optimize", model, "-o", meg, "--mesh", "tp=2", "--device", "cpu",
             "--shard-file", os.path.join(HERE, f"megatron_{name}.json"), *MEGATRON_ARGS.get(name, [])])
        facts = plan_facts(auto)
        errs = {}
        for label, plan in (("auto", auto), ("megatron", meg)):
            out = os.path.join(work, f"{name}-{label}-out")
            ranks = plan_facts(plan)["devices"]
            run([*mpi, "-np", str(ranks), args.tessera, "run", plan, *feeds, "--output-dir", out, "--threads", "1"])
            errs[label] = scaled_error(outputs_in(out), want)
        # Every program has the host's cores: 2 ranks x 1 thread, or a plan
        # the search kept on one device as 1 rank x 2 threads.
        cores = os.cpu_count() or 2
        rep = ["--repeat", str(args.repeat)]
        auto_threads = str(max(1, cores // facts["devices"]))
        programs = {
            "single": [args.tessera, "run", model, *feeds, "--threads", "1", *rep],
            "single2": [args.tessera, "run", model, *feeds, "--threads", str(cores), *rep],
            "auto": [*mpi, "-np", str(facts["devices"]), args.tessera, "run", auto, *feeds, "--threads", auto_threads,
                     *rep],
            "megatron": [*mpi, "-np", "2", args.tessera, "run", meg, *feeds, "--threads", "1", *rep],
        }
        texts = rotated_outputs(programs, args.rounds)
        row = {"model": name, **{k: float(np.median([median_ms(t) for t in v])) for k, v in texts.items()}, "errors": errs,
               "auto_collectives": kinds_str(facts["kinds"]), "auto_devices": facts["devices"],
               "auto_predicted_ms": facts["mesh_s"] * 1e3, "megatron_predicted_ms": plan_facts(meg)["mesh_s"] * 1e3}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print("| model | 1 rank x 1 thread ms | 1 rank x 2 threads ms | Megatron 2 ranks x 1 thread ms |"
          " search's plan ms (ranks) | search vs Megatron | search vs 1x1 | search vs 1x2 |"
          " predicted search / Megatron ms | search's collectives | max error search / Megatron |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['single']:.2f} | {r['single2']:.2f} | {r['megatron']:.2f} | "
              f"{r['auto']:.2f} ({r['auto_devices']}) | "
              f"{r['megatron'] / r['auto']:.2f}x | {r['single'] / r['auto']:.2f}x | {r['single2'] / r['auto']:.2f}x | "
              f"{r['auto_predicted_ms']:.3g} / {r['megatron_predicted_ms']:.3g} | {r['auto_collectives']} | "
              f"{r['errors']['auto']:.1e} / {r['errors']['megatron']:.1e} |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--part", default="predicted,measured")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    for name, (folder, _, _) in SUITE.items():
        if not os.path.exists(os.path.join(ROOT, "bench", "models", "cache", folder, "model.onnx")):
            sys.exit(f"bench_search: the suite's {folder} is missing: python3 bench/models/generate.py --only {folder}")
    work = tempfile.mkdtemp(prefix="tessera-search-")
    try:
        if "predicted" in args.part:
            predicted(args, work)
        if "measured" in args.part:
            measured(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
