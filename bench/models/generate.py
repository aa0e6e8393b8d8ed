#!/usr/bin/env python3
"""Generates Tessera's model suite: well-known vision and language models with
random weights (fixed seed), exported to ONNX opset 17 at batch 1, each with a
reference input and the framework's own output.

Layout, for each model NAME:
    OUT/NAME/model.onnx
    OUT/NAME/input_0.pb ...   reference inputs (ONNX TensorProto files)
    OUT/NAME/output_0.pb ...  PyTorch's outputs for those inputs
    OUT/NAME/manifest.json    names, shapes, dtypes, exporter, ORT check

Every exported model is run in ONNX Runtime on the reference inputs and compared
with PyTorch's outputs; the script prints the max relative error per model and
fails if one is off by more than --tolerance.

torch, torchvision and transformers are installed with pip when missing (CPU is
enough; they are large and never needed by the C++ build or CI). The export uses
torch's TorchScript-based exporter (torch.onnx.export(dynamo=False)): the dynamo
exporter needs onnxscript, and the classic one writes the opset-17 forms the
importer is written against.

Usage: generate.py [--list] [--only NAME[,NAME]] [--out DIR] [--no-check]
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "cache")
OPSET = 17
SEED = 0
SEQ_LEN = 128


def ensure_packages() -> None:
    missing = [p for p in ("torch", "torchvision", "transformers", "onnx", "onnxruntime")
               if importlib.util.find_spec(p) is None]
    if missing:
        print(f"installing {' '.join(missing)} with pip (this can take several minutes)",
              flush=True)
        subprocess.check_call([sys.executable, "-m", "pip", "install", *missing])
        importlib.invalidate_caches()


# ---------------------------------------------------------------------------
# Model builders. Each returns (module, [(input name, tensor)], [output names]).
# Modules return a tuple of tensors so the exporter sees plain outputs.


def _image(size: int = 224):
    import torch
    return [("input", torch.randn(1, 3, size, size))]


def _torchvision(factory: str, **kwargs):
    def build():
        import torchvision
        model = getattr(torchvision.models, factory)(weights=None, **kwargs)
        return model, _image(), ["logits"]
    return build


def build_inception_v3():
    import torchvision
    model = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=True)
    return model, _image(299), ["logits"]


def build_csrnet():
    """CSRNet (Li et al. 2018): the first ten conv layers of VGG-16 as front end and
    a back end of 3x3 convolutions with dilation 2, ending in a 1x1 density map."""
    from torch import nn

    def layers(cfg, in_channels, dilation):
        out = []
        for v in cfg:
            if v == "M":
                out.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                out += [nn.Conv2d(in_channels, v, 3, padding=dilation, dilation=dilation),
                        nn.ReLU(inplace=True)]
                in_channels = v
        return nn.Sequential(*out)

    class CSRNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.frontend = layers([64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                                    512, 512, 512], 3, 1)
            self.backend = layers([512, 512, 512, 256, 128, 64], 512, 2)
            self.output_layer = nn.Conv2d(64, 1, kernel_size=1)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.normal_(m.weight, std=0.01)
                    nn.init.zeros_(m.bias)

        def forward(self, x):
            return (self.output_layer(self.backend(self.frontend(x))),)

    return CSRNet(), _image(), ["density"]


class _TupleOutputs:
    """Wraps a transformers model so that forward returns a tuple of tensors."""

    @staticmethod
    def wrap(model, input_names, output_count):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                out = self.model(**dict(zip(input_names, args)), return_dict=False)
                return tuple(out[:output_count])

        return Wrapped()


def _token_ids(vocab_size: int, seq: int = SEQ_LEN):
    import torch
    return torch.randint(0, vocab_size, (1, seq), dtype=torch.int64)


def build_bert_base():
    import torch
    from transformers import BertConfig, BertModel
    config = BertConfig()
    model = BertModel(config, add_pooling_layer=True)
    model.config._attn_implementation = "eager"
    # A padded batch: the last 28 positions are masked out, two segments.
    mask = torch.ones(1, SEQ_LEN, dtype=torch.int64)
    mask[:, 100:] = 0
    segments = torch.zeros(1, SEQ_LEN, dtype=torch.int64)
    segments[:, 64:] = 1
    inputs = [("input_ids", _token_ids(config.vocab_size)), ("attention_mask", mask),
              ("token_type_ids", segments)]
    return _TupleOutputs.wrap(model, [n for n, _ in inputs], 2), inputs, ["last_hidden_state", "pooler_output"]


def _decoder_inputs(vocab_size: int, seq: int = SEQ_LEN):
    """input_ids and an all-ones attention_mask, as ONNX exports of decoders take
    them; an explicit mask also keeps transformers off its packed-sequence
    detection, which needs aten::diff (no ONNX export)."""
    import torch
    return [("input_ids", _token_ids(vocab_size, seq)),
            ("attention_mask", torch.ones(1, seq, dtype=torch.int64))]


def build_gpt2(seq=SEQ_LEN):
    from transformers import GPT2Config, GPT2Model
    config = GPT2Config()
    config.use_cache = False
    model = GPT2Model(config)
    model.config._attn_implementation = "eager"
    inputs = _decoder_inputs(config.vocab_size, seq)
    return _TupleOutputs.wrap(model, [n for n, _ in inputs], 1), inputs, ["last_hidden_state"]


def build_llama(layers=4, hidden=512, intermediate=1376, heads=8, vocab=32000, seq=SEQ_LEN):
    from transformers import LlamaConfig, LlamaModel
    config = LlamaConfig(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads, vocab_size=vocab,
                         max_position_embeddings=2048, use_cache=False)
    model = LlamaModel(config)
    model.config._attn_implementation = "eager"
    inputs = _decoder_inputs(config.vocab_size, seq)
    return _TupleOutputs.wrap(model, [n for n, _ in inputs], 1), inputs, ["last_hidden_state"]


MODELS = {
    "resnet18": (_torchvision("resnet18"), "ResNet-18, 224x224"),
    "resnet50": (_torchvision("resnet50"), "ResNet-50, 224x224"),
    "resnext50_32x4d": (_torchvision("resnext50_32x4d"), "ResNeXt-50 32x4d, 224x224"),
    "mobilenet_v2": (_torchvision("mobilenet_v2"), "MobileNetV2, 224x224"),
    "inception_v3": (build_inception_v3, "Inception-v3, 299x299, no aux logits"),
    "vgg16": (_torchvision("vgg16"), "VGG-16, 224x224"),
    "csrnet": (build_csrnet, "CSRNet-style dilated conv net (VGG-16 front, dilation-2 back), 224x224"),
    "bert_base": (build_bert_base, "BERT-base encoder, seq 128"),
    "gpt2": (build_gpt2, "GPT-2 (124M) decoder, seq 128, no past"),
    "llama_small": (build_llama, "Llama-style decoder: hidden 512, 4 layers, 8 heads, SwiGLU 1376, seq 128"),
    # Deep and narrow: what the sharding search's time must not grow with.
    "llama_deep": (lambda: build_llama(layers=32, hidden=256, intermediate=688, heads=8, vocab=8000),
                   "Llama-style decoder: hidden 256, 32 layers, 8 heads, SwiGLU 688, seq 128"),
    # Wide: big enough that an H100 mesh gains from tensor parallelism.
    "llama_wide": (lambda: build_llama(layers=2, hidden=2048, intermediate=5504, heads=16, vocab=8000),
                   "Llama-style decoder: hidden 2048, 2 layers, 16 heads, SwiGLU 5504, seq 128"),
    # One token, no past: bound by launches and weight reads, where a split
    # by tokens is impossible (the sharding search's other regime).
    "gpt2_token1": (lambda: build_gpt2(seq=1), "GPT-2 (124M) decoder, 1 token, no past"),
    "llama_token1": (lambda: build_llama(seq=1), "Llama-style decoder as llama_small, 1 token, no past"),
}


# ---------------------------------------------------------------------------


def export_model(name: str, out_dir: str, check: bool, tolerance: float) -> dict:
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper

    torch.manual_seed(SEED)
    build, description = MODELS[name]
    model, inputs, output_names = build()
    model.eval()
    args = tuple(t for _, t in inputs)
    input_names = [n for n, _ in inputs]

    with torch.no_grad():
        ref = model(*args)
    if isinstance(ref, torch.Tensor):
        ref = (ref,)
    ref = [r.detach().numpy() for r in ref]

    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    start = time.time()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, path, dynamo=False, opset_version=OPSET,
                          input_names=input_names, output_names=output_names,
                          do_constant_folding=True)
    export_s = time.time() - start
    onnx.checker.check_model(path)

    for i, (n, t) in enumerate(inputs):
        with open(os.path.join(folder, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(t.numpy(), n).SerializeToString())
    for i, (n, r) in enumerate(zip(output_names, ref)):
        with open(os.path.join(folder, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(r, n).SerializeToString())

    # Inputs the exporter found unused (e.g. a constant mask) are not graph inputs.
    graph_inputs = [i.name for i in onnx.load(path, load_external_data=False).graph.input]
    manifest = {
        "name": name,
        "description": description,
        "opset": OPSET,
        "exporter": f"torch {torch.__version__} torch.onnx.export(dynamo=False)",
        "seed": SEED,
        "inputs": [{"name": n, "shape": list(t.shape), "dtype": str(t.numpy().dtype),
                    "file": f"input_{i}.pb", "in_graph": n in graph_inputs}
                   for i, (n, t) in enumerate(inputs)],
        "outputs": [{"name": n, "shape": list(r.shape), "dtype": str(r.dtype),
                     "file": f"output_{i}.pb"} for i, (n, r) in enumerate(zip(output_names, ref))],
        "model_bytes": os.path.getsize(path),
        "parameters": int(sum(p.numel() for p in model.parameters())),
    }

    if check:
        import onnxruntime as ort
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feed = {n: t.numpy() for n, t in inputs if n in graph_inputs}
        got = session.run(output_names, feed)
        errors = []
        for g, r in zip(got, ref):
            scale = max(float(np.max(np.abs(r))), 1e-30)
            errors.append(float(np.max(np.abs(g.astype(np.float64) - r))) / scale)
        manifest["ort_max_rel_error"] = max(errors)
        manifest["ort_tolerance"] = tolerance
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    manifest["export_s"] = export_s
    return manifest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the models and exit")
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    parser.add_argument("--no-check", action="store_true", help="skip the ONNX Runtime check")
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="largest ORT-vs-PyTorch error, relative to the output's max magnitude")
    args = parser.parse_args()

    if args.list:
        for name, (_, description) in MODELS.items():
            print(f"{name:18} {description}")
        return 0
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"unknown model(s): {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2

    ensure_packages()
    import torch
    torch.set_grad_enabled(False)

    bad = []
    for name in names:
        try:
            m = export_model(name, args.out, not args.no_check, args.tolerance)
        except Exception as e:  # report every model, then fail
            print(f"{name:18} FAILED: {type(e).__name__}: {e}", flush=True)
            bad.append(name)
            continue
        err = m.get("ort_max_rel_error")
        err_text = "unchecked" if err is None else f"ORT max rel error {err:.2e}"
        print(f"{name:18} {m['model_bytes'] / 2**20:8.1f} MiB  {m['parameters'] / 1e6:7.1f}M params"
              f"  export {m['export_s']:5.1f}s  {err_text}", flush=True)
        if err is not None and err > args.tolerance:
            bad.append(name)
    if bad:
        print(f"failed: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
