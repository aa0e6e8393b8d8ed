#!/usr/bin/env python3
"""16-bit models against their f32 versions and ONNX Runtime, side by side.

Each row starts one process per contender (Tessera's bench_runtime --serve,
and for fp16 rows ONNX Runtime in its own process), warms them up, then
alternates single runs between them in rounds (A, B, [C], A, B, ...) so that
all see the same machine load, and prints each one's median, the ratio of
medians and the median of per-round ratios, with the spread (min-max of the
per-round ratios) that this noisy VM gives.

Rows (models from bench/models/generate.py; --models-dir, default its cache):
  bf16 pairs:  f32 model vs bf16 model in Tessera (speed-up = f32 / bf16);
               the issue's target is >= 1.7x for the decode step, 1.6x prefill.
  fp16 rows:   Tessera fp16 vs ONNX Runtime on the same fp16 model (ratio
               Tessera / ORT, <= 1 is the target), and Tessera's f32 model.

Usage: bench_low_precision.py --bench-bin build/bin/bench_runtime [--models-dir DIR]
                              [--threads 2] [--repeat 15] [--warmup 3]
"""
import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_vs_ort import ORT_CHILD, Child, median  # noqa: E402

CACHE = os.path.join(HERE, "..", "models", "cache")
BF16_PAIRS = [("llama_step", "llama_step_bf16"), ("llama_prefill", "llama_prefill_bf16")]
FP16_ROWS = [("resnet50_fp16", "resnet50"), ("mobilenet_v2_fp16", "mobilenet_v2"),
             ("convnext_tiny_fp16", "convnext_tiny")]


def tessera(bench_bin, d, threads, warmup):
    return Child([bench_bin, d, "--threads", str(threads), "--warmup", str(warmup), "--serve"])


def ort(d, threads, warmup, out):
    return Child([sys.executable, "-c", ORT_CHILD, d, str(threads), str(warmup), out])


def rounds(children, repeat):
    """Alternating single runs; per child its list of ms (None on failure)."""
    for c in children:
        if c.error:
            for o in children:
                if o.p.poll() is None:
                    o.p.kill()
            return None, c.error
    ms = [[] for _ in children]
    for _ in range(repeat):
        for i, c in enumerate(children):
            # A pause lets the previous runtime's idle threads stop spinning.
            time.sleep(0.05)
            t = c.run_once()
            if t is None:
                return None, c.error
            ms[i].append(t)
    for c in children:
        c.finish()
    return ms, None


def spread(a, b):
    r = sorted(x / y for x, y in zip(a, b))
    return median(r), r[0], r[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-bin", required=True)
    ap.add_argument("--models-dir", default=CACHE)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    load = os.getloadavg()
    print(f"# {os.cpu_count()} cores, {a.threads} threads, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f};"
          f" {a.repeat} alternating rounds after {a.warmup} warm-up runs; ms are medians")
    path = lambda m: os.path.join(a.models_dir, m)
    print(f"{'f32 model':18} {'16-bit model':20} {'f32 ms':>9} {'bf16 ms':>9} {'speed-up':>8} "
          f"{'paired (min-max)':>22}")
    for f32, bf16 in BF16_PAIRS:
        if not (os.path.isdir(path(f32)) and os.path.isdir(path(bf16))):
            print(f"{f32:18} {bf16:20} missing (generate.py --only {f32},{bf16})")
            continue
        ms, err = rounds([tessera(a.bench_bin, path(f32), a.threads, a.warmup),
                          tessera(a.bench_bin, path(bf16), a.threads, a.warmup)], a.repeat)
        if err:
            print(f"{f32:18} {bf16:20} error: {err}")
            continue
        p, lo, hi = spread(ms[0], ms[1])
        print(f"{f32:18} {bf16:20} {median(ms[0]):9.2f} {median(ms[1]):9.2f} "
              f"{median(ms[0]) / median(ms[1]):7.2f}x {p:8.2f}x ({lo:.2f}-{hi:.2f})", flush=True)
    print(f"\n{'fp16 model':20} {'tessera ms':>10} {'ort ms':>9} {'tes/ort':>8} {'paired (min-max)':>20} "
          f"{'tessera f32 ms':>14} {'fp16/f32':>8}")
    for fp16, f32 in FP16_ROWS:
        if not os.path.isdir(path(fp16)):
            print(f"{fp16:20} missing (generate.py --only {fp16})")
            continue
        with tempfile.TemporaryDirectory() as out:
            kids = [tessera(a.bench_bin, path(fp16), a.threads, a.warmup), ort(path(fp16), a.threads, a.warmup, out)]
            has_f32 = f32 is not None and os.path.isdir(path(f32))
            if has_f32:
                kids.append(tessera(a.bench_bin, path(f32), a.threads, a.warmup))
            ms, err = rounds(kids, a.repeat)
        if err:
            print(f"{fp16:20} error: {err}")
            continue
        p, lo, hi = spread(ms[0], ms[1])
        f32_text = f"{median(ms[2]):14.2f} {median(ms[0]) / median(ms[2]):8.2f}" if has_f32 else f"{'-':>14} {'-':>8}"
        print(f"{fp16:20} {median(ms[0]):10.2f} {median(ms[1]):9.2f} {median(ms[0]) / median(ms[1]):8.2f} "
              f"{p:6.2f} ({lo:.2f}-{hi:.2f}) {f32_text}", flush=True)


if __name__ == "__main__":
    main()
