"""Greedy decoding of a GQA KV-cache decoder on 1 and 2 CPU ranks, side by
side in one run: tokens/s of `tessera generate` for one rank with 1 and 2
threads, 2 ranks as threads and 2 MPI ranks (1 thread each), whether their
ids agree, and what a decode step moves and holds per rank (from the rank
files): collective bytes against the formula (2 AllReduces of the hidden
size per layer, plus the (max, index) sampling pairs), KV bytes moved
(none when the caches stay split by heads), per-rank KV and weight bytes.

The decoder is bench/models/generate.py's llama_static_step at the shape
given (a fixed-length cache written in place at cache_position), planned
for tp=2 with Megatron's split, the caches carried and split by KV heads,
and the LM head split by vocabulary columns.

    python3 bench/sharding/bench_generate.py --tessera build/bin/tessera
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))
import generate  # noqa: E402

MEGATRON = ["*/q/MatMul:in1=[S(1)]", "*/k/MatMul:in1=[S(1)]", "*/v/MatMul:in1=[S(1)]", "*/o/MatMul:in1=[S(0)]",
            "*/gate/MatMul:in1=[S(1)]", "*/up/MatMul:in1=[S(1)]", "*/down/MatMul:in1=[S(0)]",
            "*/head/MatMul:in1=[S(1)]", "logits=[S(2)]", "past_key_values.*=[S(1)]"]
CARRY = "present.*=past_key_values.*"


def run(args, timeout=600):
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(" ".join(args) + "\n" + r.stderr)
    return r.stdout


def decode(out):
    ids = re.search(r"^generated: (.*)$", out, re.M).group(1).split()
    tps = float(re.search(r"\(([0-9.]+) tokens/s\)", out).group(1))
    return [int(i) for i in ids], tps


def shapes_of(model):
    model = onnx.shape_inference.infer_shapes(model)
    return {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--intermediate", type=int, default=1376)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="tessera-bench-generate-")
    dims = dict(layers=a.layers, hidden=a.hidden, intermediate=a.intermediate, heads=a.heads, kv_heads=a.kv_heads,
                vocab=a.vocab, max_len=a.max_len, position=0)
    generate.MODELS["llama_static_step"] = (lambda: generate.build_llama_static_step(**dims), "bench shape")
    generate.export_model("llama_static_step", out, False, 1e-3)
    model = os.path.join(out, "llama_static_step", "model.onnx")
    plan = os.path.join(out, "plan")
    cmd = [a.tessera, "optimize", model, "-o", plan, "--mesh", "tp=2", "--no-calibrate", "--no-shard-search",
           "--no-measure", "--budget", "30", "--carry", CARRY]
    for s in MEGATRON:
        cmd += ["--shard", s]
    run(cmd)

    prompt = "1,2,3,4"
    gen = [a.tessera, "generate", "--input-ids", prompt, "--steps", str(a.steps)]
    rows = [("1 rank x 1 thread", gen[:2] + [model] + gen[2:] + ["--carry", CARRY, "--threads", "1"]),
            ("1 rank x 2 threads", gen[:2] + [model] + gen[2:] + ["--carry", CARRY, "--threads", "2"]),
            ("2 ranks (threads) x 1 thread", gen[:2] + [plan] + gen[2:] + ["--threads", "1"]),
            ("2 ranks (mpirun) x 1 thread", [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"] +
             gen[:2] + [plan] + gen[2:] + ["--threads", "1"])]
    print(f"llama_static_step layers={a.layers} hidden={a.hidden} heads={a.heads} kv_heads={a.kv_heads} "
          f"vocab={a.vocab} max_len={a.max_len}; prompt {prompt}, {a.steps} tokens")
    reference = None
    for name, c in rows:
        ids, tps = decode(run(c))
        reference = reference or ids
        print(f"  {name:30s} {tps:9.1f} tokens/s  ids {'equal' if ids == reference else 'DIFFER'}")

    with open(os.path.join(plan, "plan.json")) as f:
        pj = json.load(f)
    r0 = onnx.load(os.path.join(plan, "rank0.onnx"))
    shapes = shapes_of(r0)
    moved = [(n.op_type, 4 * int(np.prod(shapes[n.input[0]]))) for n in r0.graph.node if n.domain == "tessera"]
    kv_moved = sum(b for (k, b), n in zip(moved, [n for n in r0.graph.node if n.domain == "tessera"])
                   if a.max_len in shapes[n.input[0]])
    formula = 2 * a.layers * a.hidden * 4
    whole = onnx.load(model, load_external_data=False)
    kv = lambda g: sum(4 * int(np.prod([d.dim_value for d in i.type.tensor_type.shape.dim]))
                       for i in g.graph.input if i.name.startswith("past_key_values"))
    print(f"  collectives per step (rank 0): {len(moved)} ({', '.join(sorted(set(k for k, _ in moved)))}), "
          f"{sum(b for _, b in moved)} B; formula 2 x layers x hidden x 4 B = {formula} B; "
          f"sampling pairs 16 B per rank")
    print(f"  KV bytes moved per step: {kv_moved}")
    print(f"  KV cache: {kv(whole)} B whole, {kv(r0)} B per rank; weights per rank: "
          f"{[r['weight_bytes'] for r in pj['ranks']]} B")


if __name__ == "__main__":
    main()
