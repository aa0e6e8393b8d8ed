#!/usr/bin/env python3
"""How right the CPU cost model is on this host.

For every suite model (bench/models/cache/<model>/model.onnx), side by side:
the latency `tessera cost` predicts with detection only (--no-calibrate, an
empty profile cache) and after the first-use quick calibration, against the
latency measured through the runtime at 1 and 2 threads (cost_validation,
strict thread counts, fastest or median run); per kernel class, predicted
over measured kernel time; the Spearman rank correlation over the suite; the
share of cost_validation's pairs (fused against unfused plans, rewrites)
ordered as measured; the quick and full calibrations' wall times; and,
before each phase and at the end, how steadily the host ran its cores
(bench/cost/core_speed.cc: on a guest whose vCPUs slow down when both run,
the two-thread figures are measured on a slower machine than the one-thread
ones, which the model, calibrated on the same guest, prices only in part).

Nothing here is asserted: it prints ratios. The profile cache it calibrates
into is a scratch folder (--cache), never the user's.

Usage: bench/cost/bench_host.py [--build build] [--models DIR] [--seconds S]
                                [--stat min|median] [--only a,b] [--full] [--rounds N]
                                [--pair-rounds N] [--wait-fast S]
"""
import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

# The model suite (bench/models/generate.py); --only picks others.
SUITE = ["gpt2", "bert_base", "llama_small", "llama_deep", "llama_wide", "resnet18", "resnet50", "mobilenet_v2",
         "inception_v3", "csrnet"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def host_name():
    fields = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if ":" in line:
                k, v = line.split(":", 1)
                fields.setdefault(k.strip(), v.strip())
    return "%s (%s, family %s model %s stepping %s), %d logical CPUs" % (
        fields.get("model name", "?"), fields.get("vendor_id", fields.get("CPU implementer", "?")),
        fields.get("cpu family", "?"), fields.get("model", fields.get("CPU part", "?")),
        fields.get("stepping", "?"), os.cpu_count())


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# The fastest cache-line round trip between two CPUs seen in this run (ns).
FASTEST_ROUND_TRIP = [float("inf")]


def core_speed_json(build, seconds):
    """bench/cost/core_speed.cc's samples (per CPU and all at once), their
    fastest window (us), and the hand-over's round trip (ns) and read rate
    (GB/s); nan where there is one CPU."""
    out = subprocess.run([os.path.join(build, "bin", "core_speed"), "--seconds", str(seconds)], check=True,
                         capture_output=True, text=True).stdout
    j = json.loads(out)
    handoff = j.pop("handoff", {})
    rt = min((h["round_trip_ns"] for h in handoff.values()), default=float("nan"))
    gbps = min((h["read_gbps"] for h in handoff.values()), default=float("nan"))
    if not math.isnan(rt):
        FASTEST_ROUND_TRIP[0] = min(FASTEST_ROUND_TRIP[0], rt)
    best = min(min(v) for v in j.values() if v)
    return j, best, rt, gbps


def core_speed(build, seconds=1.5):
    """One line on how steadily the host ran its cores just now
    (bench/cost/core_speed.cc): per CPU alone, the share of 5 ms windows
    within 15% of the fastest window seen on any CPU, and all CPUs at once,
    the median window (the slowest thread's) over that fastest one; and the
    cost of handing data between two CPUs (a cache line's round trip, the
    rate of reading 1 MB the other CPU wrote)."""
    j, best, rt, gbps = core_speed_json(build, seconds)
    parts = []
    for name, v in j.items():
        if not v:
            continue
        if name == "all":
            parts.append("all at once: median x%.2f of the fastest" % (median(v) / best))
        else:
            parts.append("%s fast in %d%%" % (name, round(100 * sum(x <= 1.15 * best for x in v) / len(v))))
    if not math.isnan(rt):
        parts.append("hand-over: round trip %.0f ns, read %.0f GB/s" % (rt, gbps))
    return "core speed (L2 loop, %.1f us at best): %s" % (best, ", ".join(parts))


def all_at_once(build, seconds=0.6):
    """The core-speed check's all-at-once figure: the median window with
    every CPU busy over the fastest window (1.0: the cores run at full
    speed together; about 1.5-2 in the slow state of a guest whose vCPUs
    share their cores with another tenant), and the hand-over round trip
    over the fastest one seen in this run (1.0: the vCPUs on cores that
    share a last cache; 4-6 on the Zen 5 guest when they are not)."""
    j, best, rt, _ = core_speed_json(build, seconds)
    return (median(j["all"]) / best if j.get("all") else 1.0,
            1.0 if math.isnan(rt) else rt / FASTEST_ROUND_TRIP[0])


def wait_fast(build, limit_s, log):
    """With --wait-fast S: before each measuring process, wait up to S
    seconds for the cores to run at full speed together (all at once within
    1.25 of the fastest) and close (a hand-over round trip within 2x of the
    fastest seen in this run), checking every 10 s (a check takes under a
    second). The state can change within a round of ten models, so every
    process waits. The model describes the machine undisturbed (the
    calibration fits its fastest runs); a process measured in the slow state
    measures the other tenant, or the hypervisor's placement, too. Returns
    the figures the process started at; every wait is logged."""
    t0 = time.time()
    r, h = all_at_once(build)
    while (r > 1.25 or h > 2.0) and time.time() - t0 < limit_s:
        time.sleep(10)
        r, h = all_at_once(build)
    log.append((time.time() - t0, r, h))
    return r, h


def predicted_ms(tessera, model, cache, threads, calibrate):
    args = [tessera, "cost", model, "--json", "--top", "0", "--profile-cache", cache, "--threads", str(threads)]
    if not calibrate:
        args.append("--no-calibrate")
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    j = json.loads(out.stdout)
    return j["total_us"] / 1e3, j["device"]["description"], out.stderr


def kernel_class(op):
    root = op.split("+")[0]
    if root in ("MatMul", "Gemm"):
        return "gemm"
    if root in ("Conv", "ConvTranspose"):
        return "conv"
    if root in ("Softmax", "LayerNormalization", "ReduceMean", "ReduceSum", "ReduceMax", "GlobalAveragePool",
                "MaxPool", "AveragePool", "BatchNormalization"):
        return "reduce/pool"
    if root in ("Transpose", "Concat", "Slice", "Gather", "Split", "Pad", "Expand", "Resize", "Where", "Tile"):
        return "movement"
    return "elementwise"


def spearman(a, b):
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    return cov / math.sqrt(va * vb) if va and vb else float("nan")


def validation(build, models, profile, threads, seconds, stat, only, clock, extra=()):
    out = tempfile.mktemp(suffix=".json")
    args = [os.path.join(build, "bin", "cost_validation"), "--profile", profile, "--threads", str(threads),
            "--seconds", str(seconds), "--stat", stat, "--models", models, "--json", out, "--clock", clock, *extra]
    if only:
        args += ["--only", ",".join(only)]
    subprocess.run(args, check=True, capture_output=True, text=True)
    with open(out) as f:
        j = json.load(f)
    os.remove(out)
    return j


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def measured_rounds(build, models_dir, profile, threads, seconds, stat, models, clock, rounds, pair_rounds,
                    wait_s=0, waits=None):
    """cost_validation in one process per model, `rounds` times, the models'
    order rotated each round, and in one process for the rewrite pairs,
    `pair_rounds` times; the median over rounds of every figure (a model's
    latency and kernel sum, each kernel, each pair's two programs). A pair
    is decided by the median over rounds of its two programs' ratio within
    one process (their runs alternate there): a process the guest runs
    slower falls on both programs of the ratio alike."""
    per_model = {m: [] for m in models}
    rewrite_runs = []
    def wait():
        if wait_s > 0:
            wait_fast(build, wait_s, waits)

    for r in range(max(rounds, pair_rounds)):
        if r < rounds:
            order = models[r % len(models):] + models[:r % len(models)]
            for m in order:
                wait()
                per_model[m].append(validation(build, models_dir, profile, threads, seconds, stat, [m], clock,
                                               ["--no-rewrites"]))
        if r < pair_rounds:
            wait()
            rewrite_runs.append(validation(build, models_dir, profile, threads, seconds, stat, [], clock,
                                           ["--rewrites-only"]))
    out = {"models": {}, "kernels": [], "pair_rows": []}
    for m, runs in per_model.items():
        out["models"][m] = {k: median([j["models"][m][k] for j in runs])
                            for k in ("predicted_ms", "measured_ms", "kernel_sum_ms")}
        kernels = {}
        for j in runs:
            for k in j.get("kernels", []):
                kernels.setdefault(k["node"], dict(k, runs=[]))["runs"].append(k["measured_us"])
        for k in kernels.values():
            k["measured_us"] = median(k.pop("runs"))
            out["kernels"].append(k)
    pair_runs = {}
    for j in [j for runs in per_model.values() for j in runs] + rewrite_runs:
        for p in j.get("pair_rows", []):
            pair_runs.setdefault(p["name"], [p["predicted_ms"], []])[1].append(p["measured_ms"])
    agree = decided = 0
    for name, (pred, meas) in pair_runs.items():
        mb, ma = median([x[0] for x in meas]), median([x[1] for x in meas])
        ratio = median([x[1] / x[0] for x in meas])  # after / before, within each process
        tie = abs(ratio - 1) < 0.03 * min(ratio, 1)
        ok = (pred[1] < pred[0]) == (ratio < 1)
        out["pair_rows"].append({"name": name, "predicted_ms": pred, "measured_ms": [mb, ma], "ratio": ratio, "tie": tie,
                                 "agree": ok})
        if not tie:
            decided += 1
            agree += ok
    out["pairs"] = {"agree": agree, "decided": decided, "total": len(pair_runs)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--models", default=os.path.join(REPO, "bench", "models", "cache"))
    ap.add_argument("--seconds", type=float, default=2.0, help="measuring time per model and plan")
    ap.add_argument("--stat", default="min", choices=["min", "median"],
                    help="run statistic (min: the fastest run, for a machine shared with other work)")
    ap.add_argument("--only", default="", help="comma-separated models")
    ap.add_argument("--measure", default="runs", choices=["runs", "kernels"],
                    help="measured latency: whole runs, or the sum of each kernel's runs (a busy machine)")
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="cpu: one-thread runs timed by their time on the core (a busy machine)")
    ap.add_argument("--full", action="store_true", help="also time the full calibration and price with it")
    ap.add_argument("--cache", default="", help="scratch profile cache (default: a new temporary folder)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="measuring rounds (each model in its own process each round; medians over rounds)")
    ap.add_argument("--pair-rounds", type=int, default=5,
                    help="processes that measure the rewrite pairs (medians over them)")
    ap.add_argument("--wait-fast", type=float, default=0,
                    help="before each measuring process, wait up to S seconds for the cores to run at full speed "
                         "together (a guest whose vCPUs share cores with another tenant); 0: never wait")
    a = ap.parse_args()
    tessera = os.path.join(a.build, "bin", "tessera")
    only = [m for m in a.only.split(",") if m] or SUITE
    models = sorted(d for d in os.listdir(a.models) if os.path.exists(os.path.join(a.models, d, "model.onnx"))
                    and (not only or d in only))
    cache = a.cache or tempfile.mkdtemp(prefix="tessera-bench-cache-")
    empty = tempfile.mkdtemp(prefix="tessera-bench-empty-")
    loads = [load()]
    speeds = [core_speed(a.build)]
    print("host: " + host_name())
    first = os.path.join(a.models, models[0], "model.onnx")
    _, detected, _ = predicted_ms(tessera, first, empty, 0, False)
    print("detected: " + detected)

    # The first-use quick calibration, as the first `tessera cost` on a host
    # without a profile runs it (less the cost command itself).
    for f in glob.glob(os.path.join(cache, "cpu-*.json")):
        os.remove(f)
    t0 = time.time()
    _, calibrated, err = predicted_ms(tessera, first, cache, 0, True)
    quick_s = time.time() - t0
    t0 = time.time()
    predicted_ms(tessera, first, cache, 0, True)
    quick_s -= time.time() - t0
    print("quick calibration: %.1f s (%s)" % (quick_s, " ".join(l for l in err.splitlines() if "calibrat" in l)[:200]))
    profile = glob.glob(os.path.join(cache, "cpu-*.json"))[0]
    with open(profile) as f:
        print("calibrated: " + json.load(f)["source"][:300])

    full_cache = None
    if a.full:
        full_cache = tempfile.mkdtemp(prefix="tessera-bench-full-")
        t0 = time.time()
        r = subprocess.run([tessera, "cost", "--calibrate", "--profile-cache", full_cache], capture_output=True,
                           text=True, check=True)
        print("full calibration: %.1f s" % (time.time() - t0))
        print("\n".join("  " + l for l in r.stderr.splitlines() if "x" in l and "kernels" in l))

    rows = {}
    for m in models:
        path = os.path.join(a.models, m, "model.onnx")
        rows[m] = {}
        for t in (1, 2):
            rows[m]["det%d" % t] = predicted_ms(tessera, path, empty, t, False)[0]
            rows[m]["cal%d" % t] = predicted_ms(tessera, path, cache, t, True)[0]
            if full_cache:
                rows[m]["full%d" % t] = predicted_ms(tessera, path, full_cache, t, True)[0]
    # Measured, strict thread counts; kernels priced on the calibrated profile.
    meas = {}
    waits = {1: [], 2: []}
    for t in (1, 2):
        loads.append(load())
        speeds.append(core_speed(a.build))
        meas[t] = measured_rounds(a.build, a.models, profile, t, a.seconds, a.stat, models, a.clock, a.rounds,
                                  a.pair_rounds, a.wait_fast, waits[t])
        loads.append(load())
        for m in models:
            # Measured latency: the fastest whole run, or (--measure kernels)
            # the sum of each kernel's fastest run, what the model takes when
            # no kernel is descheduled (a machine shared with other work).
            rows[m]["run%d" % t] = meas[t]["models"][m]["measured_ms"]
            rows[m]["ksum%d" % t] = meas[t]["models"][m]["kernel_sum_ms"]
            rows[m]["meas%d" % t] = rows[m]["ksum%d" % t] if a.measure == "kernels" else rows[m]["run%d" % t]

    print("\nper model (ms; measured: median over %d rounds, one process each, of the %s of %s runs; "
          "ratio = predicted / measured)" % (a.rounds, a.stat, {"runs": "whole", "kernels": "each kernel's (summed)"}[a.measure]))
    head = "%-13s %8s %8s %8s %8s | %8s %8s %8s %8s | %5s %5s %5s %5s" % (
        "model", "det 1t", "quick 1t", "meas 1t", "(other)", "det 2t", "quick 2t", "meas 2t", "(other)", "det1",
        "quik1", "det2", "quik2")
    print(head)
    other = "ksum" if a.measure == "runs" else "run"
    for m in models:
        r = rows[m]
        print("%-13s %8.2f %8.2f %8.2f %8.2f | %8.2f %8.2f %8.2f %8.2f | %5.2f %5.2f %5.2f %5.2f" % (
            m, r["det1"], r["cal1"], r["meas1"], r[other + "1"], r["det2"], r["cal2"], r["meas2"], r[other + "2"],
            r["det1"] / r["meas1"], r["cal1"] / r["meas1"], r["det2"] / r["meas2"], r["cal2"] / r["meas2"]))
    for key, label in (("det", "detection only"), ("cal", "quick calibration")) + (
            (("full", "full calibration"),) if full_cache else ()):
        worst = [max(abs(rows[m][key + str(t)] / rows[m]["meas" + str(t)] - 1) for m in models) for t in (1, 2)]
        rho = [spearman([rows[m][key + str(t)] for m in models], [rows[m]["meas" + str(t)] for m in models])
               for t in (1, 2)]
        print("%-18s worst |ratio - 1| 1t %.0f%%, 2t %.0f%%; spearman 1t %.3f, 2t %.3f" % (
            label, 100 * worst[0], 100 * worst[1], rho[0], rho[1]))

    print("\nper kernel class (quick-calibrated profile; sum predicted / sum measured, geo-mean of ratios)")
    for t in (1, 2):
        by = {}
        for k in meas[t]["kernels"]:
            c = by.setdefault(kernel_class(k["op"]), [0.0, 0.0, 0.0, 0])
            c[0] += k["predicted_us"]
            c[1] += k["measured_us"]
            c[2] += math.log(k["predicted_us"] / k["measured_us"])
            c[3] += 1
        for c, v in sorted(by.items(), key=lambda kv: -kv[1][1]):
            print("  %dt %-12s %4d kernels  %9.2f ms measured  sum x%.2f  geo x%.2f" % (
                t, c, v[3], v[1] / 1e3, v[0] / v[1], math.exp(v[2] / v[3])))
    for t in (1, 2):
        for p in meas[t]["pair_rows"]:
            print("  %dt %-52s %8.3f -> %8.3f | %8.3f -> %8.3f (x%.3f)  %s" % (
                t, p["name"], p["predicted_ms"][0], p["predicted_ms"][1], p["measured_ms"][0], p["measured_ms"][1],
                p["ratio"], "tie" if p["tie"] else ("agree" if p["agree"] else "DISAGREE")))
    for t in (1, 2):
        p = meas[t]["pairs"]
        print("pairs ordered as measured (%dt): %d of %d decided (%d in all)" % (t, p["agree"], p["decided"],
                                                                               p["total"]))
    speeds.append(core_speed(a.build))
    for t in (1, 2):
        if waits[t]:
            w = waits[t]
            print("%dt processes (--wait-fast %g): %d checks, %.0f s waited in all (%d waits, the longest %.0f s); "
                  "at their start all at once x%.2f-%.2f, hand-over round trip x%.2f-%.2f of the fastest (%.0f ns)"
                  % (t, a.wait_fast, len(w), sum(x for x, _, _ in w), sum(x > 5 for x, _, _ in w),
                     max(x for x, _, _ in w), min(r for _, r, _ in w), max(r for _, r, _ in w),
                     min(h for _, _, h in w), max(h for _, _, h in w), FASTEST_ROUND_TRIP[0]))
    print("load average while measuring: " + " ".join("%.1f" % l for l in loads))
    print("before calibrating, before the one-thread runs, before the two-thread runs, at the end:")
    print("\n".join("  " + l for l in speeds))


if __name__ == "__main__":
    sys.exit(main())
