#!/usr/bin/env python3
"""Runs examples/torch_optimize.py's module through PyTorch, the exported
model and Tessera's plan, side by side in one run, and prints the times and
ratios (median of --repeat runs each, after a warm-up) and the error.

    python3 bench/python/bench_torch_example.py [--budget S] [--repeat N] [--threads N]

Needs torch and the installed tessera package (pip install .).
"""
import argparse
import importlib.util
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torch_optimize.py")


def median_ms(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="the device the plan is for (default: this CPU, where it runs)")
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--threads", type=int, default=0, help="Tessera and torch threads (0: their defaults)")
    args = ap.parse_args()
    import torch
    import tessera

    spec = importlib.util.spec_from_file_location("torch_optimize", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    if args.threads:
        torch.set_num_threads(args.threads)
    net = example.build_module(torch)
    x = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(0))
    model = example.export(torch, net, x)
    t0 = time.perf_counter()
    plan = tessera.optimize(model, device=args.device, budget=args.budget, measure=False, threads=args.threads)
    optimize_s = time.perf_counter() - t0
    original = tessera.load(model)
    feeds = {"x": x.numpy()}
    with torch.no_grad():
        want = net(x).numpy()
        torch_ms = median_ms(lambda: net(x), args.repeat)
    orig_ms = median_ms(lambda: original.run(feeds, threads=args.threads), args.repeat)
    plan_ms = median_ms(lambda: plan.run(feeds, threads=args.threads), args.repeat)
    got = plan.run(feeds, threads=args.threads)["y"]
    err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-6))
    print("tessera.optimize (device %s): %.2f s, %d mutations: %s" % (
        args.device, optimize_s, len(plan.mutations), ", ".join(m["rule"] for m in plan.mutations) or "none"))
    print("%-34s %10s %10s" % ("", "median ms", "vs torch"))
    for name, ms in (("torch (eager)", torch_ms), ("tessera run, exported model", orig_ms),
                     ("tessera run, optimized plan", plan_ms)):
        print("%-34s %10.3f %9.2fx" % (name, ms, torch_ms / ms))
    print("plan vs exported model: %.2fx" % (orig_ms / plan_ms))
    print("max relative error against PyTorch: %.3g" % err)
    return 0 if err <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
