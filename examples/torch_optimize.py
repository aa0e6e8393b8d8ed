#!/usr/bin/env python3
"""A PyTorch module through Tessera, all in memory: export it with
torch.onnx.export, optimize the ModelProto with tessera.optimize, run the plan
and compare its outputs with PyTorch's.

    python3 examples/torch_optimize.py [--budget S] [--seed N]

Needs torch and the installed tessera package (pip install .). Exits 1 when
the plan's outputs are not PyTorch's within tolerance.
"""
import argparse
import io
import sys
import warnings

import numpy as np


def build_module(torch):
    """A small conv net: conv + batch norm + ReLU twice, a residual add, pooling, a linear head."""
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
            self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
            self.head = nn.Linear(16, 10)

        def forward(self, x):
            y = self.stem(x)
            y = y + self.block(y)
            return self.head(y.mean(dim=(2, 3)))

    torch.manual_seed(0)
    net = Net()
    for bn in (net.stem[1], net.block[1]):  # non-trivial statistics, so folding them matters
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
    return net.eval()


def export(torch, net, x):
    """The ModelProto torch.onnx.export writes (opset 17), never touching the disk."""
    import onnx
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(net, (x,), buf, input_names=["x"], output_names=["logits"], opset_version=17, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def main(budget=10.0, seed=0, verbose=True):
    """Returns (max relative error of the plan against PyTorch, the plan)."""
    import torch
    import tessera

    net = build_module(torch)
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        want = net(x).numpy()
    model = export(torch, net, x)
    plan = tessera.optimize(model, device="cpu", budget=budget, seed=seed, measure=False)
    got = plan.run({"x": x.numpy()})["logits"]
    err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-6))
    if verbose:
        print("mutations:", ", ".join(m["rule"] for m in plan.mutations) or "none")
        print("predicted: %.4g ms -> %.4g ms" % (plan.report["predicted_cost"]["before_s"] * 1e3,
                                               plan.report["predicted_cost"]["after_s"] * 1e3))
        print("max relative error against PyTorch: %.3g" % err)
    return err, plan


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    err, _ = main(args.budget, args.seed)
    sys.exit(0 if err <= 1e-4 else 1)
