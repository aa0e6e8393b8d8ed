#!/usr/bin/env python3
"""Spatial splits (bands of rows and their halo) of the high-resolution CNNs
on CPU ranks, the whole matrix in one run.

For each model (CSRNet 768, ResNet-50 896, FCN-ResNet50 1024) and each mesh
tp=N of --ranks:

  1. the plan: `tessera optimize MODEL --mesh tp=N --shard 'input=[S(2)]'
     --disable-rule conv-winograd --device cpu` (the image's rows forced in
     bands: on this host's profile the ranks share its cores and the search
     keeps one device; Winograd's batched products cannot read a band). The
     plan's end-to-end check must pass (its max abs error is printed), and
     the plan's collectives are counted from plan.json;
  2. bytes: halo_bytes.py, the rank files' HaloExchange rows against the
     halo formula (they must be equal);
  3. outputs: `mpirun -np N tessera run PLAN --threads 1` against the
     single-device `tessera run MODEL` on the model's own input, as the
     largest difference relative to the output's largest value;
  4. time (tp=2 and, with --time-all, every N): 1 rank x 1 thread, 1 rank x 2
     threads and N ranks x 1 thread under mpirun, each in its own process,
     the order rotated each round; each run's `--repeat R` median, then the
     median and min-max of the rounds.

With --lock FILE the checks hold FILE shared and each model's timing holds
it exclusive (flock), so builds sharing the host stay out of the timings.
--h100 adds the predicted degree curve on H100s: `tessera optimize MODEL
--mesh tp=8 --device h100` (unforced), its sharding search's curve.

    python3 bench/models/generate.py --only csrnet_768,resnet50_896,fcn_resnet50_1024
    python3 bench/sharding/bench_spatial.py --lock /tmp/cpu.lock --h100
"""
import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ranks import ROOT, median_ms, mpirun, outputs_in, run, scaled_error, suite_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {"csrnet": "csrnet_768", "resnet50": "resnet50_896", "fcn": "fcn_resnet50_1024"}
FORCED = ["--shard", "input=[S(2)]", "--disable-rule", "conv-winograd", "--device", "cpu"]


@contextlib.contextmanager
def held(path, exclusive):
    """FILE flock'ed shared or exclusive for the block (nothing without a path)."""
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def load_average():
    return os.getloadavg()[0]


def collective_counts(plan_json):
    counts = {}
    for c in plan_json["collectives"]:
        counts[c["kind"]] = counts.get(c["kind"], 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def halo_bytes(plan):
    p = subprocess.run([sys.executable, os.path.join(HERE, "halo_bytes.py"), plan], capture_output=True, text=True)
    m = re.search(r"rank files (\d+) B, formula (\d+) B", p.stdout)
    if not m:
        sys.exit(f"bench_spatial: halo_bytes.py {plan} said:\n{p.stdout}{p.stderr}")
    return int(m.group(1)), int(m.group(2))


def plan_row(args, mpi, name, model, feeds, want, n, work):
    plan = os.path.join(work, f"{name}-tp{n}")
    if not (args.keep and os.path.exists(os.path.join(plan, "plan.json"))):  # a kept plan is reused
        with held(args.lock, False):
            run([args.tessera, "optimize", model, "-o", plan, "--mesh", f"tp={n}", *FORCED, "--budget",
                 str(args.budget)], timeout=3600)
    seconds = json.load(open(os.path.join(plan, "plan.json")))["total_seconds"]
    j = json.load(open(os.path.join(plan, "plan.json")))
    if j.get("mesh") != f"tp={n}":
        sys.exit(f"bench_spatial: {name} tp={n}: the plan runs on {j.get('mesh', 'one device')}")
    moved, formula = halo_bytes(plan)
    out = os.path.join(work, f"{name}-tp{n}-mpi")
    with held(args.lock, False):
        run([*mpi, "-np", str(n), args.tessera, "run", plan, *feeds, "--threads", "1", "--output-dir", out])
    got = outputs_in(out)
    bit_equal = all((got[k] == w).all() for k, w in want.items())
    row = {"model": name, "mesh": f"tp={n}", "collectives": collective_counts(j),
           "check_passed": j["end_to_end_check"]["passed"],
           "check_max_abs_error": j["end_to_end_check"]["max_abs_error"],
           "optimize_s": round(seconds), "halo_bytes_rank_files": moved, "halo_bytes_formula": formula,
           "mpirun_vs_one_device": 0.0 if bit_equal else scaled_error(got, want), "bit_equal": bit_equal}
    print(json.dumps(row), flush=True)
    return row, plan


def timing_rows(args, mpi, name, model, feeds, plans):
    programs = {
        "1x1": [args.tessera, "run", model, *feeds, "--threads", "1", "--repeat", str(args.repeat)],
        "1x2": [args.tessera, "run", model, *feeds, "--threads", "2", "--repeat", str(args.repeat)],
    }
    for n, plan in plans.items():
        programs[f"{n}x1"] = [*mpi, "-np", str(n), args.tessera, "run", plan, *feeds, "--threads", "1", "--repeat",
                              str(args.repeat)]
    times = {k: [] for k in programs}
    loads = []
    with held(args.lock, True):
        loads.append(load_average())
        keys = list(programs)
        for r in range(args.rounds):
            for k in keys[r % len(keys):] + keys[:r % len(keys)]:
                times[k].append(median_ms(run(programs[k])))
        loads.append(load_average())
    row = {"model": name, "load_1min": [round(x, 2) for x in loads]}
    for k, ts in times.items():
        row[k] = {"median_ms": round(statistics.median(ts), 1), "min_ms": round(min(ts), 1),
                  "max_ms": round(max(ts), 1), "rounds": [round(t, 1) for t in ts]}
    print(json.dumps(row), flush=True)
    return row


def h100_curve(args, name, model, work):
    plan = os.path.join(work, f"{name}-h100")
    budget = args.h100_budget.get(name, args.budget)
    with held(args.lock, False):
        if not (args.keep and os.path.exists(os.path.join(plan, "plan.json"))):
                run([args.tessera, "optimize", model, "-o", plan, "--mesh", "tp=8", "--device", "h100", "--budget",
                 str(budget)], timeout=3600)
    j = json.load(open(os.path.join(plan, "plan.json")))
    s = j["sharding_search"]
    row = {"model": name, "budget_s": budget, "chosen": s["chosen_mesh"],
           "curve_ms": {p["mesh"]: round(p["predicted_s"] * 1e3, 3) for p in s["degree_curve"]},
           "collectives": collective_counts(j) if "collectives" in j else "none (one device)",
           "check_passed": j["end_to_end_check"]["passed"],
           "check_max_abs_error": j["end_to_end_check"]["max_abs_error"]}
    print(json.dumps(row), flush=True)
    return row


def fmt_ms(t):
    return f"{t['median_ms']:.0f} ms ({t['min_ms']:.0f}-{t['max_ms']:.0f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessera", default=os.path.join(ROOT, "build", "bin", "tessera"))
    ap.add_argument("--models", default="csrnet,resnet50,fcn")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--budget", type=int, default=30, help="optimize's budget for the forced CPU plans")
    ap.add_argument("--time-all", action="store_true", help="time every mesh of --ranks, not tp=2 alone")
    ap.add_argument("--no-time", action="store_true", help="plans, checks and outputs only")
    ap.add_argument("--no-plans", action="store_true", help="with --h100: the H100 curves only")
    ap.add_argument("--lock", help="flock FILE: shared for the checks, exclusive for the timings")
    ap.add_argument("--h100", action="store_true", help="also the predicted H100 degree curve (tp=8, unforced)")
    ap.add_argument("--h100-budget", default="fcn=120", help="per-model budgets for --h100: name=S,...")
    ap.add_argument("--keep", help="write the plans here and reuse those already there (default: a temporary "
                    "folder, removed)")
    args = ap.parse_args()
    args.h100_budget = {k: int(v) for k, v in (kv.split("=") for kv in args.h100_budget.split(",") if kv)}
    mpi = mpirun()
    work = args.keep or tempfile.mkdtemp(prefix="tessera-spatial-")
    os.makedirs(work, exist_ok=True)
    plans_rows, time_rows, curve_rows = [], [], []
    for name in args.models.split(","):
        model, feeds = suite_model(MODELS[name], "bench_spatial")
        if args.no_plans:
            if args.h100:
                curve_rows.append(h100_curve(args, name, model, work))
            continue
        single = os.path.join(work, f"{name}-single")
        with held(args.lock, False):
            run([args.tessera, "run", model, *feeds, "--output-dir", single])
        want = outputs_in(single)
        plans = {}
        for n in [int(x) for x in args.ranks.split(",")]:
            row, plan = plan_row(args, mpi, name, model, feeds, want, n, work)
            plans_rows.append(row)
            if n == 2 or args.time_all:
                plans[n] = plan
        if not args.no_time:
            time_rows.append(timing_rows(args, mpi, name, model, feeds, plans))
        if args.h100:
            curve_rows.append(h100_curve(args, name, model, work))
    print("\n| model | mesh | collectives (rank 0) | halo bytes: rank files / formula | check (max abs error) |"
          " mpirun vs one device |")
    print("|---|---|---|---|---|---|")
    for r in plans_rows:
        same = "bit-equal" if r["bit_equal"] else f"{r['mpirun_vs_one_device']:.1e} of the largest output"
        print(f"| {r['model']} | {r['mesh']} | {r['collectives']} | {r['halo_bytes_rank_files']:,} / "
              f"{r['halo_bytes_formula']:,} B | {'passed' if r['check_passed'] else 'FAILED'} "
              f"({r['check_max_abs_error']:.2g}) | {same} |")
    if time_rows:
        meshes = [k for k in time_rows[0] if re.fullmatch(r"\d+x1", k) and k != "1x1"]
        print("\n| model | 1 rank x 1 thread | 1 rank x 2 threads | " +
              " | ".join(f"{k[:-2]} ranks x 1 thread (mpirun)" for k in meshes) + " | load |")
        print("|---|---|---|" + "---|" * len(meshes) + "---|")
        for r in time_rows:
            print(f"| {r['model']} | {fmt_ms(r['1x1'])} | {fmt_ms(r['1x2'])} | " +
                  " | ".join(fmt_ms(r[k]) for k in meshes) + f" | {r['load_1min'][0]}-{r['load_1min'][1]} |")
    if curve_rows:
        print("\n| model | " + " | ".join(curve_rows[0]["curve_ms"]) + " | chosen | collectives |")
        print("|---|" + "---|" * len(curve_rows[0]["curve_ms"]) + "---|---|")
        for r in curve_rows:
            print(f"| {r['model']} | " + " | ".join(f"{v:.2f} ms" for v in r["curve_ms"].values()) +
                  f" | {r['chosen']} | {r['collectives']} |")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    bad = [r for r in plans_rows if not r["check_passed"] or r["halo_bytes_rank_files"] != r["halo_bytes_formula"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
