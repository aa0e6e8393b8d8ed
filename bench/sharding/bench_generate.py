"""Greedy decoding of a GQA KV-cache decoder on 1 and 2 CPU ranks, side by
side in one run: tokens/s of `tessera generate` for one rank with 1 and 2
threads, 2 ranks as threads and 2 MPI ranks (1 thread each), whether their
ids agree, and what a decode step moves and holds per rank (from the rank
files): collective bytes against the formula (2 AllReduces of the hidden
size per layer, plus the (max, index) sampling pairs), KV bytes moved
(none when the caches stay split by heads), per-rank KV and weight bytes.

Two decoders, each a fixed-length cache written in place at
cache_position, planned for tp=2 with Megatron's split, the caches carried
and split by KV heads and the LM head split by vocabulary columns:

- by default bench/models/generate.py's llama_static_step (torch export)
  at the shape given;
- with --large SHAPE, bench/models/generate_large.py's decoder in the
  shape of a public checkpoint (tinyllama-1.1b: 1.1 B parameters, 4.4 GB
  in f32, 2.2 GB in bf16) with random weights and --static-cache
  positions: weights dominate every step, and the tokens/s are set
  against this host's DRAM read bandwidth (--bandwidth: measured with
  numpy, see dram_read_gbs) as the bound bytes-per-token / bandwidth.

Timings on a shared host are disturbed: --rounds N runs the rows in turn N
times (alternating, never one row's runs back to back) and reports each
row's median and its spread (min-max).

--h100-curve asks the sharding search for the model's degree curve on the
H100 profile (tessera optimize --device h100 --mesh tp=8: the best plan on
1, 2, 4 and 8 devices, plan.json sharding_search.degree_curve) and prints
the predicted tokens/s at each degree.

--before BIN runs the same loop with another tessera binary beside this
one (alternating), e.g. a build without the in-place carried caches.

    python3 bench/sharding/bench_generate.py --tessera build/bin/tessera
    python3 bench/sharding/bench_generate.py --large tinyllama-1.1b --dtype bf16 --static-cache 256 \\
        --steps 12 --rounds 3 --bandwidth --h100-curve
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))

# Megatron's split, by the torch export's node names and by the checkpoint
# names generate_large.py writes.
MEGATRON = ["*/q/MatMul:in1=[S(1)]", "*/k/MatMul:in1=[S(1)]", "*/v/MatMul:in1=[S(1)]", "*/o/MatMul:in1=[S(0)]",
            "*/gate/MatMul:in1=[S(1)]", "*/up/MatMul:in1=[S(1)]", "*/down/MatMul:in1=[S(0)]",
            "*/head/MatMul:in1=[S(1)]", "logits=[S(2)]", "past_key_values.*=[S(1)]"]
MEGATRON_LARGE = ["model.layers.*.self_attn.q_proj.weight=[S(1)]", "model.layers.*.self_attn.k_proj.weight=[S(1)]",
                  "model.layers.*.self_attn.v_proj.weight=[S(1)]", "model.layers.*.self_attn.o_proj.weight=[S(0)]",
                  "model.layers.*.mlp.gate_proj.weight=[S(1)]", "model.layers.*.mlp.up_proj.weight=[S(1)]",
                  "model.layers.*.mlp.down_proj.weight=[S(0)]", "lm_head.weight=[S(1)]", "logits=[S(2)]",
                  "past_key_values.*=[S(1)]"]
CARRY = "present.*=past_key_values.*"
ELEM = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.BFLOAT16: 2, onnx.TensorProto.FLOAT16: 2}


def run(args, timeout=3600):
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(" ".join(args) + "\n" + r.stderr)
    return r.stdout


def decode(out):
    ids = re.search(r"^generated: (.*)$", out, re.M).group(1).split()
    tps = float(re.search(r"\(([0-9.]+) tokens/s\)", out).group(1))
    return [int(i) for i in ids], tps


def dims_of(v):
    return [d.dim_value for d in v.type.tensor_type.shape.dim]


def shapes_of(model):
    model = onnx.shape_inference.infer_shapes(model)
    return {v.name: (dims_of(v), v.type.tensor_type.elem_type)
            for v in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output)}


def dram_read_gbs(threads, gib=1.0, repeat=5):
    """This host's DRAM read bandwidth in GB/s: the best of `repeat` sums of
    a `gib` GiB f32 array (far above the caches) split among `threads`
    threads (numpy's sum releases the GIL), bytes read / wall time."""
    from concurrent.futures import ThreadPoolExecutor
    a = np.ones(int(gib * 2**30) // 4, np.float32)
    parts = np.array_split(a, threads)
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeat):
            t0 = time.perf_counter()
            list(pool.map(np.sum, parts))
            best = min(best, time.perf_counter() - t0)
    return a.nbytes / best / 1e9


def export_small(a, out):
    import generate
    dims = dict(layers=a.layers, hidden=a.hidden, intermediate=a.intermediate, heads=a.heads, kv_heads=a.kv_heads,
                vocab=a.vocab, max_len=a.max_len, position=0)
    generate.MODELS["llama_static_step"] = (lambda: generate.build_llama_static_step(**dims), "bench shape")
    generate.export_model("llama_static_step", out, False, 1e-3)
    return os.path.join(out, "llama_static_step", "model.onnx")


def export_large(a, out):
    folder = os.path.join(out, "model")
    run([sys.executable, os.path.join(ROOT, "bench", "models", "generate_large.py"), "--shape", a.large, "--dtype",
         a.dtype, "--static-cache", str(a.static_cache), "--out", folder])
    return os.path.join(folder, "model.onnx")


def timed_rows(rows, rounds):
    """Each row's (ids, [tokens/s per round]); rows run in turn every round."""
    results = {name: [] for name, _ in rows}
    ids = {}
    for _ in range(rounds):
        for name, c in rows:
            got, tps = decode(run(c))
            ids.setdefault(name, got)
            results[name].append(tps)
    return ids, results


def weight_bytes_of(path):
    m = onnx.load(path, load_external_data=False)
    total = 0
    for t in m.graph.initializer:
        n = int(np.prod(t.dims)) if t.dims else 1
        total += n * ELEM.get(t.data_type, 8 if t.data_type == onnx.TensorProto.INT64 else 4)
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    p.add_argument("--before", default=None, help="another tessera binary, run beside --tessera")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--intermediate", type=int, default=1376)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--large", default=None, help="a generate_large.py shape, e.g. tinyllama-1.1b")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    p.add_argument("--static-cache", type=int, default=256)
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--rows", default="1x1,1x2,2t,2mpi", help="which runs: 1x1,1x2,2t,2mpi")
    p.add_argument("--bandwidth", action="store_true")
    p.add_argument("--h100-curve", action="store_true")
    p.add_argument("--h100-budget", type=float, default=60)
    p.add_argument("--no-runs", action="store_true", help="only the H100 curve: no CPU plan, runs or counts")
    p.add_argument("--out", default=None)
    p.add_argument("--keep", action="store_true", help="keep the models and plans (deleted by default)")
    a = p.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="tessera-bench-generate-")
    try:
        report(a, out)
    finally:
        if not a.keep:
            shutil.rmtree(out, ignore_errors=True)


def report(a, out):
    model = export_large(a, out) if a.large else export_small(a, out)
    if not a.no_runs:
        measure(a, model, out)
    if a.h100_curve:
        h100_curve(a, model, out)


def measure(a, model, out):
    whole = onnx.load(model, load_external_data=False)
    cache_in = [i for i in whole.graph.input if i.name.startswith("past_key_values")]
    layers = len(cache_in) // 2
    elem = ELEM[cache_in[0].type.tensor_type.elem_type]
    # Each binary plans with itself (a plan folder is read by the build that
    # wrote it or a later one).
    plans = {}
    for k, binary in enumerate([a.tessera] + ([a.before] if a.before else [])):
        plans[binary] = os.path.join(out, f"plan{k}")
        cmd = [binary, "optimize", model, "-o", plans[binary], "--mesh", "tp=2", "--no-calibrate",
               "--no-shard-search", "--no-measure", "--budget", "30", "--carry", CARRY]
        for s in (MEGATRON_LARGE if a.large else MEGATRON):
            cmd += ["--shard", s]
        t0 = time.time()
        run(cmd)
        if k == 0:
            plan_s = time.time() - t0
    plan = plans[a.tessera]

    prompt = "1,2,3,4"
    wanted = a.rows.split(",")

    def gen(binary, path, *extra):
        return [binary, "generate", path, "--input-ids", prompt, "--steps", str(a.steps), *extra]

    mpi = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"]
    rows = []
    for binary, tag in [(a.tessera, "")] + ([(a.before, " [before]")] if a.before else []):
        all_rows = {"1x1": ("1 rank x 1 thread", gen(binary, model, "--carry", CARRY, "--threads", "1")),
                    "1x2": ("1 rank x 2 threads", gen(binary, model, "--carry", CARRY, "--threads", "2")),
                    "2t": ("2 ranks (threads) x 1 thread", gen(binary, plans[binary], "--threads", "1")),
                    "2mpi": ("2 ranks (mpirun) x 1 thread", mpi + gen(binary, plans[binary], "--threads", "1"))}
        rows += [(all_rows[k][0] + tag, all_rows[k][1]) for k in wanted]
    name = a.large or "llama_static_step"
    shape = f"{a.dtype}, a {a.static_cache}-position cache" if a.large else \
        f"layers={a.layers} hidden={a.hidden} heads={a.heads} kv_heads={a.kv_heads} vocab={a.vocab} max_len={a.max_len}"
    print(f"{name} ({shape}); prompt {prompt}, {a.steps} tokens; {a.rounds} round(s), rows alternating; "
          f"tp=2 plan written in {plan_s:.0f} s")

    # What a step reads and moves, from the files.
    weights = weight_bytes_of(model)
    kv_whole = sum(elem * int(np.prod(dims_of(i))) for i in cache_in)
    r0 = onnx.load(os.path.join(plan, "rank0.onnx"), load_external_data=False)
    shapes = shapes_of(r0)
    coll = [n for n in r0.graph.node if n.domain == "tessera"]
    moved = [(n.op_type, ELEM.get(shapes[n.input[0]][1], 4) * int(np.prod(shapes[n.input[0]][0]))) for n in coll]
    cache_len = dims_of(cache_in[0])[2]
    kv_moved = sum(b for (k, b), n in zip(moved, coll) if len(shapes[n.input[0]][0]) == 4
                   and shapes[n.input[0]][0][2] == cache_len)
    o_proj = [t for t in whole.graph.initializer if t.name.endswith("o_proj.weight")]
    hidden = o_proj[0].dims[1] if o_proj else a.hidden
    formula = 2 * layers * hidden * elem
    kv_rank = sum(elem * int(np.prod(dims_of(i))) for i in r0.graph.input if i.name.startswith("past_key_values"))
    with open(os.path.join(plan, "plan.json")) as f:
        pj = json.load(f)
    rank_weights = [r.get("weight_bytes") for r in pj["ranks"]]
    per_token = weights + kv_whole  # every weight and the whole fixed-length cache are read each step

    ids, results = timed_rows(rows, a.rounds)
    reference = ids[rows[0][0]]
    print()
    print("| run | tokens/s median | spread (min-max) | ids |")
    print("|---|---|---|---|")
    for row, _ in rows:
        v = results[row]
        print(f"| {row} | {statistics.median(v):.3g} | {min(v):.3g}-{max(v):.3g} | "
              f"{'the reference' if row == rows[0][0] else ('equal' if ids[row] == reference else 'DIFFER')} |")
    print()
    print(f"bytes read per token (one device): weights {weights / 1e9:.3f} GB + KV cache {kv_whole / 1e6:.2f} MB")
    if a.bandwidth:
        for t in (1, 2):
            gbs = statistics.median([dram_read_gbs(t) for _ in range(3)])
            print(f"DRAM read bandwidth, {t} thread(s) (numpy sum of 1 GiB, best of 5, median of 3): {gbs:.1f} GB/s "
                  f"-> bound {gbs * 1e9 / per_token:.3g} tokens/s on one rank; 2 ranks read {per_token / 2e9:.3f} "
                  f"GB each per token")
    print(f"collectives per step (rank 0): {len(moved)} ({', '.join(sorted(set(k for k, _ in moved)))}), "
          f"{sum(b for _, b in moved)} B; formula 2 x layers x hidden x {elem} B = {formula} B; "
          f"sampling pairs 16 B per rank")
    print(f"KV bytes moved per step: {kv_moved}")
    print(f"KV cache: {kv_whole} B whole, {kv_rank} B per rank; weights: {weights} B whole, per rank {rank_weights} B")



def h100_curve(a, model, out):
    h100 = os.path.join(out, "h100")
    # The caches' boundary left to the search: 8 ranks cannot split
    # fewer KV heads (tinyllama has 4).
    run([a.tessera, "optimize", model, "-o", h100, "--device", "h100", "--mesh", "tp=8", "--budget",
         str(a.h100_budget), "--carry", CARRY])
    with open(os.path.join(h100, "plan.json")) as f:
        hj = json.load(f)
    print()
    print("| devices | predicted ms per token | comm ms | predicted tokens/s |")
    print("|---|---|---|---|")
    for pt in hj["sharding_search"]["degree_curve"]:
        print(f"| {pt['devices']} | {pt['predicted_s'] * 1e3:.4g} | {pt['comm_s'] * 1e3:.3g} | "
              f"{1 / pt['predicted_s']:.4g} |")
    print(f"chosen: {len(hj['ranks'])} device(s), {hj['predicted_cost']['after_s'] * 1e3:.4g} ms")
    shutil.rmtree(h100, ignore_errors=True)


if __name__ == "__main__":
    main()
