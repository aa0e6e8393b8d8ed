#!/usr/bin/env python3
"""Suite transformers partitioned by `tessera optimize --mesh`, run from the
CLI under `mpirun -np N` and as threads (`tessera run PLAN_DIR`), against
the single-device run of the same model on the same inputs: the largest
error relative to each output's scale.

    python3 bench/sharding/check_ranks_cli.py [--tessera build/bin/tessera]

Cases: the search's own GPT-2 plan for --device h100 --mesh tp=4 (run on
this machine's CPUs), and BERT's Megatron annotations on --device cpu at
tp=4 and tp=2. Needs the model suite (bench/models/generate.py) and mpirun.
"""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_ranks import inputs_of, mpirun, outputs_in, run, scaled_error  # noqa: E402

CASES = [
    ("gpt2", ["--device", "h100", "--mesh", "tp=4"], 4),
    ("bert_base", ["--device", "cpu", "--mesh", "tp=4", "--shard-file", os.path.join(HERE, "megatron_bert.json")], 4),
    ("bert_base", ["--device", "cpu", "--mesh", "tp=2", "--shard-file", os.path.join(HERE, "megatron_bert.json")], 2),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tessera-ranks-")
    for i, (model, flags, ranks) in enumerate(CASES):
        folder = os.path.join(ROOT, "bench", "models", "cache", model)
        feeds = inputs_of(folder)
        ref = os.path.join(work, f"ref{i}")
        run([args.tessera, "run", os.path.join(folder, "model.onnx"), *feeds, "--output-dir", ref])
        plan = os.path.join(work, f"plan{i}")
        run([args.tessera, "optimize", os.path.join(folder, "model.onnx"), "-o", plan, "--no-measure", *flags])
        for mode in ("mpirun", "threads"):
            out = os.path.join(work, f"out{i}-{mode}")
            cmd = [args.tessera, "run", plan, *feeds, "--output-dir", out, "--threads", "1"]
            if mode == "mpirun":
                cmd = [*mpirun(), "-np", str(ranks), *cmd]
            run(cmd)
            print(f"{model} {' '.join(flags)}: {mode} ({ranks} ranks) max scaled error "
                  f"{scaled_error(outputs_in(out), outputs_in(ref)):.2e}", flush=True)


if __name__ == "__main__":
    main()
