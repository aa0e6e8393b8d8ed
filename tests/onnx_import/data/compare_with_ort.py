"""Checks an exported model against its original in ONNX Runtime.

Usage: compare_with_ort.py ORIGINAL.onnx EXPORTED.onnx

Runs onnx.checker (full_check) on the exported model, feeds both the same
random inputs (fixed seed) and compares every output by position:
|a - b| <= 1e-5 * max(|a|, 1) element-wise. Exit status 0 when they match.
"""
import sys

import numpy as np
import onnx
import onnxruntime as ort


def inputs_for(model_path):
    rng = np.random.default_rng(7)
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        if "float" in i.type:
            feeds[i.name] = rng.standard_normal(i.shape).astype(np.float32)
        elif "bool" in i.type:
            feeds[i.name] = rng.integers(0, 2, i.shape).astype(bool)
        else:
            feeds[i.name] = rng.integers(0, 3, i.shape).astype(np.int64)
    return sess, feeds


def main():
    original, exported = sys.argv[1], sys.argv[2]
    onnx.checker.check_model(onnx.load(exported), full_check=True)
    sess_a, feeds = inputs_for(original)
    sess_b = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
    out_a = sess_a.run(None, feeds)
    out_b = sess_b.run(None, feeds)
    if len(out_a) != len(out_b):
        print(f"output count differs: {len(out_a)} vs {len(out_b)}")
        return 1
    worst = 0.0
    for k, (a, b) in enumerate(zip(out_a, out_b)):
        if a.shape != b.shape or a.dtype != b.dtype:
            print(f"output {k}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
            return 1
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        err = np.max(np.abs(a64 - b64) / np.maximum(np.abs(a64), 1.0)) if a.size else 0.0
        worst = max(worst, err)
    print(f"max relative error {worst:.3g}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
