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
    missing = [p for p in ("torch", "torchvision", "transformers", "onnx", "onnxruntime", "onnxconverter_common")
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


def _torchvision(factory: str, size: int = 224, **kwargs):
    def build():
        import torchvision
        model = getattr(torchvision.models, factory)(weights=None, **kwargs)
        return model, _image(size), ["logits"]
    return build


def build_fcn_resnet50(size: int = 1024):
    """torchvision's FCN-ResNet50 segmentation model (dilated ResNet-50 at output
    stride 8, a 3x3 head, bilinear upsampling to the image), 21 classes, no aux
    head: its output dict as one tensor."""
    import torch
    import torchvision

    class Fcn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torchvision.models.segmentation.fcn_resnet50(weights=None, weights_backbone=None,
                                                                      aux_loss=False)

        def forward(self, x):
            return (self.model(x)["out"],)

    return Fcn(), _image(size), ["segmentation"]


def build_inception_v3():
    import torchvision
    model = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=True)
    return model, _image(299), ["logits"]


def build_csrnet(size: int = 224):
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

    return CSRNet(), _image(size), ["density"]


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


def _rms_norm(hidden: int):
    """Llama's RMSNorm (eps 1e-5), its scale random around 1."""
    import torch
    from torch import nn

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden) + 0.1 * torch.randn(hidden))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    return RMSNorm()


def _rotary_angles(positions, head_dim: int):
    """Rotary angles [len(positions), head_dim] (base 10000, halves repeated)."""
    import torch
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    return torch.cat((torch.outer(positions, inv),) * 2, dim=-1)


def _rotate(x, cos, sin, head_dim: int):
    """Rotary embedding of x [..., head_dim]: x cos + rotate_half(x) sin."""
    import torch
    x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _swiglu_block(x, norm, gate, up, down):
    """x + down(silu(gate(norm(x))) * up(norm(x))): Llama's MLP sub-block."""
    from torch import nn
    h = norm(x)
    return x + down(nn.functional.silu(gate(h)) * up(h))


def _llama_trunk(module, vocab: int, hidden: int, layers: int, make_layer) -> None:
    """Gives `module` Llama's token embedding, `layers` layers from
    make_layer(), the final RMSNorm and the LM head, made in that order."""
    from torch import nn
    module.embed = nn.Embedding(vocab, hidden)
    module.layers = nn.ModuleList(make_layer() for _ in range(layers))
    module.norm = _rms_norm(hidden)
    module.head = nn.Linear(hidden, vocab, bias=False)


def _masked_attention(q, k, v, mask, head_dim: int):
    """softmax(q k^T / sqrt(head_dim), where mask else -1e4) v."""
    import torch
    s = torch.matmul(q, k.transpose(2, 3)) / (head_dim ** 0.5)
    s = torch.where(mask, s, torch.tensor(-1e4, dtype=s.dtype))
    return torch.matmul(torch.softmax(s, dim=-1), v)


def build_llama_step(dtype="float32", layers=8, hidden=1024, intermediate=2816, heads=16, vocab=32000,
                     past=127, seq=1):
    """A Llama-style decoder written out (no transformers cache classes, whose
    export changes between releases): RMSNorm, rotary embeddings, attention
    over a KV cache passed in and returned (past_k/past_v -> present_k/
    present_v, [layers, 1, heads, past + seq, head_dim]), a causal mask by
    Where, SwiGLU, the LM head. seq=1 is one decode step, seq>1 a prefill
    after `past` tokens. Built in `dtype` (torch.bfloat16 exports bf16 ONNX)."""
    import torch
    from torch import nn
    dt = getattr(torch, dtype)
    head_dim = hidden // heads
    rotate = lambda x, cos, sin: _rotate(x, cos, sin, head_dim)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = _rms_norm(hidden), _rms_norm(hidden)
            self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))
            self.gate = nn.Linear(hidden, intermediate, bias=False)
            self.up = nn.Linear(hidden, intermediate, bias=False)
            self.down = nn.Linear(intermediate, hidden, bias=False)

        def forward(self, x, cos, sin, mask, pk, pv):
            h = self.n1(x)
            split = lambda t: t.view(1, seq, heads, head_dim).transpose(1, 2)
            q, k, v = rotate(split(self.q(h)), cos, sin), rotate(split(self.k(h)), cos, sin), split(self.v(h))
            k, v = torch.cat((pk, k), dim=2), torch.cat((pv, v), dim=2)
            a = _masked_attention(q, k, v, mask, head_dim).transpose(1, 2).reshape(1, seq, hidden)
            x = x + self.o(a)
            return _swiglu_block(x, self.n2, self.gate, self.up, self.down), k, v

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            _llama_trunk(self, vocab, hidden, layers, Layer)
            ang = _rotary_angles(torch.arange(past, past + seq, dtype=torch.float32), head_dim)
            self.register_buffer("cos", ang.cos()[None, None])
            self.register_buffer("sin", ang.sin()[None, None])
            total = past + seq
            causal = torch.arange(total)[None, :] <= (torch.arange(seq)[:, None] + past)
            self.register_buffer("mask", causal[None, None])

        def forward(self, input_ids, past_k, past_v):
            x = self.embed(input_ids)
            ks, vs = [], []
            for i, layer in enumerate(self.layers):
                x, k, v = layer(x, self.cos.to(x.dtype), self.sin.to(x.dtype), self.mask, past_k[i], past_v[i])
                ks.append(k)
                vs.append(v)
            return self.head(self.norm(x)), torch.stack(ks), torch.stack(vs)

    model = Decoder().to(dt)
    cache = (layers, 1, heads, past, head_dim)
    inputs = [("input_ids", _token_ids(vocab, seq)), ("past_k", 0.5 * torch.randn(cache).to(dt)),
              ("past_v", 0.5 * torch.randn(cache).to(dt))]
    return model, inputs, ["logits", "present_k", "present_v"]


def build_llama_static_step(layers=2, hidden=128, intermediate=344, heads=8, kv_heads=2, vocab=1000,
                            max_len=64, position=37):
    """One decode step of a Llama-style decoder over a static KV cache, as
    compiled LLM servers keep one (transformers' StaticCache): per layer a key
    and a value cache of fixed length max_len, [1, kv_heads, max_len,
    head_dim], passed in as past_key_values.N.key/value, and a cache_position
    input. The new key and value are written into the caches with
    index_copy_ at cache_position (torch.onnx writes ScatterElements along
    the sequence axis), attention runs over the whole fixed-length cache with
    a mask of the positions written so far (<= cache_position), with grouped
    query heads (heads // kv_heads query heads read each KV head, repeated as
    transformers' repeat_kv does), and the updated caches are returned as
    present.N.key/value. Rotary embeddings are looked up at cache_position.
    The reference inputs hold `position` cached tokens, zeros after them."""
    import torch
    from torch import nn
    head_dim = hidden // heads
    group = heads // kv_heads
    rotate = lambda x, cos, sin: _rotate(x, cos, sin, head_dim)

    def repeat_kv(t):
        t = t[:, :, None, :, :].expand(1, kv_heads, group, max_len, head_dim)
        return t.reshape(1, heads, max_len, head_dim)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = _rms_norm(hidden), _rms_norm(hidden)
            self.q = nn.Linear(hidden, heads * head_dim, bias=False)
            self.k = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.v = nn.Linear(hidden, kv_heads * head_dim, bias=False)
            self.o = nn.Linear(heads * head_dim, hidden, bias=False)
            self.gate = nn.Linear(hidden, intermediate, bias=False)
            self.up = nn.Linear(hidden, intermediate, bias=False)
            self.down = nn.Linear(intermediate, hidden, bias=False)

        def forward(self, x, cos, sin, mask, cache_position, k_cache, v_cache):
            h = self.n1(x)
            split = lambda t, n: t.view(1, 1, n, head_dim).transpose(1, 2)
            q = rotate(split(self.q(h), heads), cos, sin)
            k = rotate(split(self.k(h), kv_heads), cos, sin)
            v = split(self.v(h), kv_heads)
            # The caller's caches stay as they were (a cache passed in and
            # returned, as the exported graph has it).
            k_cache, v_cache = k_cache.clone(), v_cache.clone()
            k_cache.index_copy_(2, cache_position, k)
            v_cache.index_copy_(2, cache_position, v)
            a = _masked_attention(q, repeat_kv(k_cache), repeat_kv(v_cache), mask, head_dim)
            x = x + self.o(a.transpose(1, 2).reshape(1, 1, hidden))
            return _swiglu_block(x, self.n2, self.gate, self.up, self.down), k_cache, v_cache

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            _llama_trunk(self, vocab, hidden, layers, Layer)
            ang = _rotary_angles(torch.arange(max_len, dtype=torch.float32), head_dim)
            self.register_buffer("cos", ang.cos())
            self.register_buffer("sin", ang.sin())
            self.register_buffer("positions", torch.arange(max_len))

        def forward(self, input_ids, cache_position, *caches):
            x = self.embed(input_ids)
            cos = self.cos[cache_position][None, None]
            sin = self.sin[cache_position][None, None]
            mask = (self.positions <= cache_position)[None, None, None, :]
            present = []
            for i, layer in enumerate(self.layers):
                x, k, v = layer(x, cos, sin, mask, cache_position, caches[2 * i], caches[2 * i + 1])
                present += [k, v]
            return (self.head(self.norm(x)), *present)

    model = Decoder()
    cache = torch.zeros(1, kv_heads, max_len, head_dim)
    inputs = [("input_ids", _token_ids(vocab, 1)), ("cache_position", torch.tensor([position]))]
    outputs = ["logits"]
    for i in range(layers):
        for kind in ("key", "value"):
            c = cache.clone()
            c[:, :, :position] = 0.5 * torch.randn(1, kv_heads, position, head_dim)
            inputs.append((f"past_key_values.{i}.{kind}", c))
            outputs.append(f"present.{i}.{kind}")
    return model, inputs, outputs


def _fp16(base):
    """An f32 model made fp16 as ONNX Runtime users make one: onnxconverter-
    common's convert_float_to_float16 with keep_io_types (f32 in and out)."""
    def build():
        model, inputs, outputs = base()
        return model, inputs, outputs
    build.fp16 = True
    return build


MODELS = {
    "resnet18": (_torchvision("resnet18"), "ResNet-18, 224x224"),
    "resnet50": (_torchvision("resnet50"), "ResNet-50, 224x224"),
    "resnext50_32x4d": (_torchvision("resnext50_32x4d"), "ResNeXt-50 32x4d, 224x224"),
    "mobilenet_v2": (_torchvision("mobilenet_v2"), "MobileNetV2, 224x224"),
    "inception_v3": (build_inception_v3, "Inception-v3, 299x299, no aux logits"),
    "vgg16": (_torchvision("vgg16"), "VGG-16, 224x224"),
    "csrnet": (build_csrnet, "CSRNet-style dilated conv net (VGG-16 front, dilation-2 back), 224x224"),
    # Crowd counting at a high resolution: what spatial sharding is for (issue 43).
    "csrnet_768": (lambda: build_csrnet(768), "CSRNet as csrnet at 768x768"),
    "resnet50_896": (_torchvision("resnet50", 896), "ResNet-50 at 896x896 (spatial splits, issue 43)"),
    "fcn_resnet50_1024": (build_fcn_resnet50, "FCN-ResNet50 segmentation (dilated, 21 classes) at 1024x1024"),
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
    # Low precision (issue 37): a KV-cache decoder in f32 and bf16, one
    # decode step and a 64-token prefill; fp16 vision models.
    "llama_step": (lambda: build_llama_step(), "Llama-style decoder (hidden 1024, 8 layers, 16 heads, SwiGLU 2816,"
                   " vocab 32000): one decode step after 127 cached tokens, f32"),
    "llama_step_bf16": (lambda: build_llama_step("bfloat16"), "llama_step in bf16"),
    "llama_prefill": (lambda: build_llama_step(past=64, seq=64), "llama_step's decoder: 64-token prefill after"
                      " 64 cached tokens, f32"),
    "llama_prefill_bf16": (lambda: build_llama_step("bfloat16", past=64, seq=64), "llama_prefill in bf16"),
    # A static KV cache written in place (index_copy_ -> ScatterElements), with
    # grouped-query attention: what compiled LLM servers run each step.
    "llama_static_step": (build_llama_static_step, "Llama-style decoder step over a static KV cache (hidden 128,"
                          " 2 layers, 8 query / 2 KV heads, 64 positions, vocab 1000): index_copy_ at"
                          " cache_position 37, f32"),
    "resnet50_fp16": (_fp16(_torchvision("resnet50")), "ResNet-50, 224x224, fp16 (keep_io_types)"),
    "mobilenet_v2_fp16": (_fp16(_torchvision("mobilenet_v2")), "MobileNetV2, 224x224, fp16 (keep_io_types)"),
    "convnext_tiny": (_torchvision("convnext_tiny"), "ConvNeXt-Tiny, 224x224 (f32, beside its fp16 form)"),
    "convnext_tiny_fp16": (_fp16(_torchvision("convnext_tiny")), "ConvNeXt-Tiny, 224x224, fp16 (keep_io_types)"),
}


# ---------------------------------------------------------------------------


def _to_numpy(t):
    """A tensor as numpy; bf16 (which numpy lacks) as f32 values."""
    import torch
    if isinstance(t, torch.Tensor):
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    return t


def _tensor_proto(t, name):
    """A TensorProto of t in its own type (bf16 stays bf16)."""
    import torch
    from onnx import TensorProto, helper, numpy_helper
    if isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16:
        raw = t.contiguous().view(torch.int16).numpy().tobytes()
        return helper.make_tensor(name, TensorProto.BFLOAT16, list(t.shape), raw, raw=True)
    return numpy_helper.from_array(_to_numpy(t), name)


def _low_precision(build, inputs) -> bool:
    import torch
    return getattr(build, "fp16", False) or any(
        isinstance(t, torch.Tensor) and t.dtype in (torch.bfloat16, torch.float16) for _, t in inputs)


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
    ref = [_to_numpy(r.detach()) for r in ref]

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
    if getattr(build, "fp16", False):
        # Outputs stay PyTorch's f32 ones: the check's tolerance covers fp16.
        from onnxconverter_common import float16
        onnx.save(float16.convert_float_to_float16(onnx.load(path), keep_io_types=True), path)
    onnx.checker.check_model(path)

    for i, (n, t) in enumerate(inputs):
        with open(os.path.join(folder, f"input_{i}.pb"), "wb") as f:
            f.write(_tensor_proto(t, n).SerializeToString())
    for i, (n, r) in enumerate(zip(output_names, ref)):
        with open(os.path.join(folder, f"output_{i}.pb"), "wb") as f:
            f.write(_tensor_proto(r, n).SerializeToString())

    # Inputs the exporter found unused (e.g. a constant mask) are not graph inputs.
    graph_inputs = [i.name for i in onnx.load(path, load_external_data=False).graph.input]
    manifest = {
        "name": name,
        "description": description,
        "opset": OPSET,
        "exporter": f"torch {torch.__version__} torch.onnx.export(dynamo=False)",
        "seed": SEED,
        "inputs": [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                    "file": f"input_{i}.pb", "in_graph": n in graph_inputs}
                   for i, (n, t) in enumerate(inputs)],
        "outputs": [{"name": n, "shape": list(r.shape), "dtype": str(r.dtype),
                     "file": f"output_{i}.pb"} for i, (n, r) in enumerate(zip(output_names, ref))],
        "model_bytes": os.path.getsize(path),
        "parameters": int(sum(p.numel() for p in model.parameters())),
    }

    if check:
        import onnxruntime as ort
        try:
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            feed = {n: _to_numpy(t) for n, t in inputs if n in graph_inputs}
            got = session.run(output_names, feed)
            errors = []
            for g, r in zip(got, ref):
                r = np.asarray(r, dtype=np.float64)
                scale = max(float(np.max(np.abs(r))), 1e-30)
                errors.append(float(np.max(np.abs(np.asarray(g, dtype=np.float64) - r))) / scale)
            manifest["ort_max_rel_error"] = max(errors)
            manifest["ort_tolerance"] = tolerance * (50 if _low_precision(build, inputs) else 1)
        except Exception as e:  # ORT's CPU provider lacks bf16 kernels (Where, MatMul, ...)
            manifest["ort_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
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
        if err is None and "ort_error" in m:
            err_text = f"ORT refuses it ({m['ort_error'][:80]})"
        print(f"{name:18} {m['model_bytes'] / 2**20:8.1f} MiB  {m['parameters'] / 1e6:7.1f}M params"
              f"  export {m['export_s']:5.1f}s  {err_text}", flush=True)
        if err is not None and err > m.get("ort_tolerance", args.tolerance):
            bad.append(name)
    if bad:
        print(f"failed: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
