#!/usr/bin/env python3
"""A PyTorch module through Tessera, all in memory: export it with
torch.onnx.export, optimize the ModelProto with tessera.optimize, run the plan
and compare its outputs with PyTorch's.

    python3 examples/torch_optimize.py [--device D] [--budget S] [--seed N]

The plan is for an H100 by default, where merging the three projections of
the input into one MatMul saves two kernel launches (on this CPU the cost
model finds no rewrite worth it: --device cpu keeps the export); it runs
here on the CPU backend either way. Needs torch and the installed tessera
package (pip install .). Exits 1 when the plan's outputs are not PyTorch's
within tolerance.
"""
import argparse
import io
import sys
import warnings

import numpy as np


def build_module(torch, d=64):
    """A self-attention block: query, key and value projections of one input,
    softmax attention, an output projection and a residual add."""
    nn = torch.nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))

        def forward(self, x):
            q, k, v = self.q(x), self.k(x), self.v(x)
            a = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1)
            return self.out(a @ v) + x

    torch.manual_seed(0)
    return Attention().eval()


def export(torch, net, x):
    """The ModelProto torch.onnx.export writes (opset 17), never touching the disk."""
    import onnx
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(net, (x,), buf, input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def main(device="h100", budget=10.0, seed=0, verbose=True):
    """Returns (the exported ModelProto, the plan, max relative error of the plan against PyTorch)."""
    import torch
    import tessera

    net = build_module(torch)
    x = torch.randn(2, 16, 64, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        want = net(x).numpy()
    model = export(torch, net, x)
    plan = tessera.optimize(model, device=device, budget=budget, seed=seed, measure=False)
    got = plan.run({"x": x.numpy()})["y"]
    err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-6))
    if verbose:
        print("mutations:", ", ".join(m["rule"] for m in plan.mutations) or "none")
        print("predicted: %.4g ms -> %.4g ms" % (plan.report["predicted_cost"]["before_s"] * 1e3,
                                               plan.report["predicted_cost"]["after_s"] * 1e3))
        print("max relative error against PyTorch: %.3g" % err)
    return model, plan, err


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="h100", help="the device the plan is for (default h100)")
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    _, _, err = main(args.device, args.budget, args.seed)
    sys.exit(0 if err <= 1e-4 else 1)
