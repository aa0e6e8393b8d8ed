#!/usr/bin/env python3
"""Robustness sweep: `tessera optimize` on exported models outside the suite.

The suite (generate.py) is what the benchmarks are tuned against; this sweep
exports other torchvision models and small random-weight transformers (the
architectures, not their sizes, are what an importer and a search meet) with
torch's TorchScript exporter at opset 17, then for each one runs
`tessera optimize --budget B` and reports its exit status, wall time, the
optimized model's largest output error in ONNX Runtime against the original
(relative to the output's largest value), and the report's predicted and
measured speedups. A model that fails to export is reported and skipped.

torch, torchvision and transformers are needed (never in CI). Not a test:
nothing here asserts; it is how unseen-model failures are found.

Usage: zoo_sweep.py --tessera build/bin/tessera [--out DIR] [--only a,b] [--budget 10] [--threads 2]
"""
import argparse
import os
import subprocess
import sys
import time
import warnings


def vision_models():
    import torch
    import torchvision
    tv = torchvision.models

    def img(size=224):
        return (torch.randn(1, 3, size, size),)
    return {
        "squeezenet1_1": (lambda: tv.squeezenet1_1(), img()),
        "shufflenet_v2": (lambda: tv.shufflenet_v2_x1_0(), img()),
        "efficientnet_b0": (lambda: tv.efficientnet_b0(), img()),
        "densenet121": (lambda: tv.densenet121(), img()),
        "regnet_y_400mf": (lambda: tv.regnet_y_400mf(), img()),
        "convnext_tiny": (lambda: tv.convnext_tiny(), img()),
        "mnasnet0_5": (lambda: tv.mnasnet0_5(), img()),
        "googlenet": (lambda: tv.googlenet(aux_logits=False, init_weights=True), img()),
        "vit_b_16": (lambda: tv.vit_b_16(), img()),
        "swin_t": (lambda: tv.swin_t(), img()),
        "deeplabv3_mobilenet": (lambda: tv.segmentation.deeplabv3_mobilenet_v3_large(weights_backbone=None,
                                                                                     aux_loss=False), img()),
        "fcn_resnet50": (lambda: tv.segmentation.fcn_resnet50(weights_backbone=None, aux_loss=False), img(160)),
        "mobilenet_v3_small": (lambda: tv.mobilenet_v3_small(), img()),
        "mobilenet_v3_large": (lambda: tv.mobilenet_v3_large(), img()),
        "alexnet": (lambda: tv.alexnet(), img()),
        "wide_resnet50_2": (lambda: tv.wide_resnet50_2(), img(160)),
        "r3d_18": (lambda: tv.video.r3d_18(), (torch.randn(1, 3, 8, 112, 112),)),
    }


def text_models():
    import torch
    import transformers
    small = dict(num_hidden_layers=2, hidden_size=256, intermediate_size=512, num_attention_heads=4)
    ids = (torch.randint(0, 100, (1, 32)),)
    return {
        "distilbert": ("distilbert", dict(n_layers=2, dim=256, hidden_dim=512, n_heads=4), "base", ids),
        "roberta": ("roberta", small, "base", ids),
        "albert": ("albert", dict(small, embedding_size=128), "base", ids),
        "electra": ("electra", dict(small, embedding_size=128), "base", ids),
        "t5_encoder": ("t5", dict(num_layers=2, d_model=256, d_ff=512, num_heads=4, d_kv=64), "t5enc", ids),
        "opt": ("opt", dict(num_hidden_layers=2, hidden_size=256, ffn_dim=512, num_attention_heads=4,
                            word_embed_proj_dim=256), "causal", ids),
        "vit_hf": ("vit", dict(small, image_size=64, patch_size=16), "base", (torch.randn(1, 3, 64, 64),)),
    }


def export(name, out, vision, text):
    import torch

    class Plain(torch.nn.Module):  # tuple outputs, no dicts or model-output objects
        def __init__(self, m, causal=False):
            super().__init__()
            self.m, self.causal = m, causal

        def forward(self, x):
            o = self.m(x, use_cache=False) if self.causal else self.m(x)
            if isinstance(o, dict):
                return tuple(o.values())
            return o if isinstance(o, torch.Tensor) else o[0]
    torch.manual_seed(0)
    if name in vision:
        make, args = vision[name]
        module = Plain(make().eval())
    else:
        import transformers
        kind, kw, cls, args = text[name]
        config = transformers.AutoConfig.for_model(kind, **kw)
        if cls == "t5enc":
            m = transformers.T5EncoderModel(config)
        elif cls == "causal":
            m = transformers.AutoModelForCausalLM.from_config(config)
        else:
            m = transformers.AutoModel.from_config(config)
        module = Plain(m.eval(), causal=cls == "causal")
    torch.onnx.export(module, args, out, opset_version=17, dynamo=False)


def export_bench_dir(name, folder):
    """Exports vision model `name` as a benchmark folder in the suite's layout
    (generate.py): folder/model.onnx and input_0.pb (the export's example
    input, seed 0), which bench_vs_ort.py and bench_runtime read (the
    reference outputs there are ONNX Runtime's)."""
    import torch
    from onnx import numpy_helper
    torch.manual_seed(0)
    vision = vision_models()
    if name not in vision:
        raise KeyError(f"{name} is not one of the sweep's vision models ({', '.join(vision)})")
    os.makedirs(folder, exist_ok=True)
    warnings.filterwarnings("ignore")
    export(name, os.path.join(folder, "model.onnx"), vision, {})
    for i, a in enumerate(vision[name][1]):
        with open(os.path.join(folder, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a.numpy(), f"input_{i}").SerializeToString())


def output_error(original, optimized, threads):
    import numpy as np
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    a = ort.InferenceSession(original, so, providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(optimized, so, providers=["CPUExecutionProvider"])
    rng = np.random.RandomState(1)
    feeds = {}
    for i in a.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = (rng.randint(0, 100, shape).astype(np.int64) if "int64" in i.type
                         else rng.rand(*shape).astype(np.float32))
    want = a.run(None, feeds)
    got = b.run(None, {k: v for k, v in feeds.items() if k in {i.name for i in b.get_inputs()}})
    return max(float(np.abs(x.astype(np.float64) - y).max() / max(np.abs(x).max(), 1e-30))
               for x, y in zip(want, got))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "zoo"))
    ap.add_argument("--only", default="")
    ap.add_argument("--budget", type=float, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    vision, text = vision_models(), text_models()
    names = args.only.split(",") if args.only else list(vision) + list(text)
    os.makedirs(args.out, exist_ok=True)
    print("model | exit | optimize s | max rel err (ORT) | predicted x | measured x | detail")
    for name in names:
        model = os.path.join(args.out, name + ".onnx")
        if not os.path.exists(model):
            try:
                export(name, model, vision, text)
            except Exception as e:  # an exporter limit, not Tessera's
                print(f"{name} | export failed | | | | | {str(e).splitlines()[0][:160]}", flush=True)
                continue
        out = os.path.join(args.out, name + ".opt")
        t0 = time.perf_counter()
        p = subprocess.run([args.tessera, "optimize", model, "-o", out, "--budget", str(args.budget),
                            "--threads", str(args.threads)], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            last = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or [""]
            print(f"{name} | {p.returncode} | {wall:.1f} | | | | {last[0][:200]}", flush=True)
            continue
        import json
        with open(os.path.join(out, "report.json")) as f:
            rep = json.load(f)
        err = output_error(model, os.path.join(out, "model.onnx"), args.threads)
        measured = rep.get("measured", {}).get("speedup", float("nan"))
        rules = sorted({m["rule"] for m in rep.get("mutations", [])})
        print(f"{name} | 0 | {wall:.1f} | {err:.2g} | {rep['predicted_cost']['speedup']:.3f} | {measured:.3f} | "
              f"{', '.join(rules) or 'plan = original graph' if rep.get('unchanged') else ', '.join(rules) or 'canonicalized'}",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
