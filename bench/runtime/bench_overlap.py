#!/usr/bin/env python3
"""Collectives that overlap independent compute, on and off, side by side.

`tessera run PLAN` starts a collective as soon as its input is written and
finishes it just before the first kernel that reads its result, so that the
kernels in between run while it is in flight (runtime/schedule.h);
`--no-overlap` blocks each rank in every collective. One build, both ways:

  (a) a synthetic model where the plan allows overlap: y = MLP(x) + B(x),
      the MLP Megatron-sharded (fc1 by columns, fc2 by rows: an AllReduce
      of its partial sums) and B a chain of matmuls every rank computes
      (replicated), which does not depend on the AllReduce;
  (b) the suite's Megatron plans (GPT-2, BERT-base, the Llama-style
      decoder, bench/sharding/megatron_<model>.json), where every
      AllReduce's result feeds the next kernel: nothing to overlap, so the
      two runs should take the same time.

For each plan: the outputs with overlap against those without (bit for
bit), then, in rotated order each round, 2 ranks under mpirun and as
threads, overlap on and off, `--threads 1 --repeat R --profile`; the table
gives the medians over rounds of each run's median, rank 0's time in
collective kernels (with overlap: the exposed part, start plus finish), the
collectives' time that plan.json predicts (the device profile's
alpha-beta model), and the model's FLOP per rank over the latency.

Needs mpirun and, for (b), the model suite (bench/models/generate.py; by
default read from ../main/bench/models/cache when this tree has none).
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SUITE = {"gpt2": "gpt2", "bert": "bert_base", "llama": "llama_small"}
sys.path.insert(0, os.path.join(ROOT, "bench", "sharding"))
from bench_ranks import inputs_of, mpirun, rotated_outputs, run  # noqa: E402


def synthetic_model(path, tokens, dim, hidden, branch, seed=0):
    """y = Relu(x W1) W2 + B(x), B = `branch` matmuls by dim x dim weights
    with a Relu between; returns the FLOP per rank of a tp=2 plan."""
    rng = np.random.default_rng(seed)
    def weight(name, rows, cols):
        return numpy_helper.from_array((rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32), name)
    inits = [weight("mlp_w1", dim, hidden), weight("mlp_w2", hidden, dim)]
    nodes = [helper.make_node("MatMul", ["x", "mlp_w1"], ["h"], name="mlp_fc1"),
             helper.make_node("Relu", ["h"], ["hr"], name="mlp_relu"),
             helper.make_node("MatMul", ["hr", "mlp_w2"], ["a"], name="mlp_fc2")]
    b = "x"
    for i in range(branch):
        inits.append(weight(f"branch_w{i}", dim, dim))
        nodes.append(helper.make_node("MatMul", [b, f"branch_w{i}"], [f"b{i}"], name=f"branch_mm{i}"))
        b = f"b{i}"
        if i + 1 < branch:
            nodes.append(helper.make_node("Relu", [b], [f"b{i}r"], name=f"branch_relu{i}"))
            b = f"b{i}r"
    nodes.append(helper.make_node("Add", ["a", b], ["y"], name="join"))
    graph = helper.make_graph(nodes, "overlap_synthetic",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [tokens, dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [tokens, dim])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    mlp = 2 * 2 * tokens * dim * hidden / 2  # fc1 and fc2, half of each per rank
    return mlp + 2 * tokens * dim * dim * branch


def suite_flops(model):
    """Multiply-adds x 2 of the model's MatMul and Gemm nodes (shapes from
    ONNX shape inference), over 2 ranks: what a tp=2 plan's rank computes."""
    m = onnx.shape_inference.infer_shapes(onnx.load(model))
    shapes = {}
    for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if dims and all(d > 0 for d in dims):
            shapes[vi.name] = dims
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)
    flops = 0
    for n in m.graph.node:
        if n.op_type in ("MatMul", "Gemm") and n.input[0] in shapes and n.input[1] in shapes:
            a, w = shapes[n.input[0]], shapes[n.input[1]]
            trans_b = any(at.name == "transB" and at.i for at in n.attribute)
            k, cols = (w[-1], w[-2]) if trans_b else (w[-2], w[-1])
            flops += 2 * int(np.prod(a[:-1])) * k * cols
    return flops / 2


def outputs_in(folder):
    return {f: open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder)) if f.endswith(".pb")}


def number(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else float("nan")


def predicted_collective_ms(plan):
    j = json.load(open(os.path.join(plan, "plan.json")))
    return 1e3 * sum(c.get("predicted_s", 0.0) for c in j.get("collectives", []))


def measure(name, plan, feeds, flops, args, mpi, work):
    """Bit-for-bit check, then the rotated timing rounds of one plan."""
    same = {}
    for mode, prefix in (("mpi", [*mpi, "-np", "2"]), ("threads", [])):
        outs = {}
        for ov in ("on", "off"):
            out = os.path.join(work, f"{name}-{mode}-{ov}")
            run([*prefix, args.tessera, "run", plan, *feeds, "--threads", "1", "--output-dir", out,
                 *([] if ov == "on" else ["--no-overlap"])])
            outs[ov] = outputs_in(out)
        same[mode] = outs["on"] == outs["off"]
    programs = {}
    for mode, prefix in (("mpi", [*mpi, "-np", "2"]), ("threads", [])):
        for ov in ("on", "off"):
            programs[(mode, ov)] = [*prefix, args.tessera, "run", plan, *feeds, "--threads", "1", "--repeat",
                                    str(args.repeat), "--profile", *([] if ov == "on" else ["--no-overlap"])]
    texts = rotated_outputs(programs, args.rounds)
    times = {k: [number(r"median latency: ([0-9.]+) ms", t) for t in outs] for k, outs in texts.items()}
    comm = {k: [number(r"collectives: ([0-9.]+) ms per run", t) for t in outs] for k, outs in texts.items()}
    overlapped = {}
    for k, outs in texts.items():
        m = re.search(r"(\d+) of (\d+) overlap", outs[-1])
        overlapped[k] = f"{m.group(1)}/{m.group(2)}" if m else "?"
    rows = []
    for mode in ("mpi", "threads"):
        row = {"plan": name, "mode": mode, "bitwise_equal": same[mode], "predicted_comm_ms": predicted_collective_ms(plan),
               "overlapped": overlapped[(mode, "on")]}
        for ov in ("on", "off"):
            row[f"range_{ov}"] = [min(times[(mode, ov)]), max(times[(mode, ov)])]
            row[f"ms_{ov}"] = float(np.median(times[(mode, ov)]))
            row[f"comm_{ov}"] = float(np.median(comm[(mode, ov)]))
            row[f"gflops_{ov}"] = flops / row[f"ms_{ov}"] / 1e6
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--models-dir", default=None, help="the suite's cache (default: bench/models/cache, "
                    "else ../main/bench/models/cache)")
    ap.add_argument("--suite", default="gpt2,bert,llama", help="suite models to run ('' for none)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--branch", type=int, default=2, help="matmuls in the branch the AllReduce overlaps")
    args = ap.parse_args()
    mpi = mpirun()
    work = tempfile.mkdtemp(prefix="tessera-overlap-")
    rows = []

    model = os.path.join(work, "synthetic.onnx")
    flops = synthetic_model(model, args.tokens, args.dim, args.hidden, args.branch)
    plan = os.path.join(work, "synthetic-tp2")
    run([args.tessera, "optimize", model, "-o", plan, "--mesh", "tp=2", "--shard", "mlp_w1=[S(1)]",
         "--shard", "mlp_w2=[S(0)]"])
    rows += measure(f"synthetic {args.tokens}x{args.dim}, hidden {args.hidden}, branch {args.branch}", plan, [],
                    flops, args, mpi, work)

    cache = args.models_dir or next((d for d in (os.path.join(ROOT, "bench", "models", "cache"),
                                                  os.path.join(ROOT, "..", "main", "bench", "models", "cache"))
                                     if os.path.isdir(d)), None)
    for name in [s for s in args.suite.split(",") if s]:
        model_dir = os.path.join(cache or "", SUITE[name])
        model = os.path.join(model_dir, "model.onnx")
        if not os.path.exists(model):
            sys.exit(f"bench_overlap: {model} is missing: python3 bench/models/generate.py --only {SUITE[name]}")
        plan = os.path.join(work, f"{name}-tp2")
        run([args.tessera, "optimize", model, "-o", plan, "--mesh", "tp=2", "--shard-file",
             os.path.join(ROOT, "bench", "sharding", f"megatron_{name}.json")])
        rows += measure(name, plan, inputs_of(model_dir), suite_flops(model), args, mpi, work)

    print()
    print("| plan | ranks | overlapped | overlap on ms | off ms | off/on | collectives on ms | off ms |"
          " predicted ms | GFLOP/s per rank on | off | on == off |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['plan']} | {r['mode']} | {r['overlapped']} | {r['ms_on']:.2f} | {r['ms_off']:.2f} | "
              f"{r['ms_off'] / r['ms_on']:.3f}x | {r['comm_on']:.3f} | {r['comm_off']:.3f} | "
              f"{r['predicted_comm_ms']:.3f} | {r['gflops_on']:.1f} | {r['gflops_off']:.1f} | "
              f"{'bitwise' if r['bitwise_equal'] else 'DIFFER'} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
