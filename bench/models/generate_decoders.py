#!/usr/bin/env python3
"""Writes the decoder files that Hugging Face optimum's ONNX export gives, for a
small transformers Llama (random weights, fixed seed) with grouped-query
attention, exported by torch.onnx.export (dynamo=False) as optimum exports it
(optimum itself is not needed):

    OUT/model.onnx                    the single decoder with a dynamic past:
        inputs   input_ids [batch_size, sequence_length] i64,
                 attention_mask [batch_size, past_sequence_length + sequence_length] i64,
                 position_ids [batch_size, sequence_length] i64,
                 past_key_values.N.key/.value [batch_size, kv_heads, past_sequence_length, head_dim]
        outputs  logits [batch_size, sequence_length, vocab],
                 present.N.key/.value [batch_size, kv_heads, past_sequence_length + sequence_length, head_dim]
    OUT/decoder_model.onnx            the same decoder without a past (the prefill)
    OUT/decoder_with_past_model.onnx  model.onnx under optimum's older name
    OUT/decoder_model_merged.onnx     the legacy merged decoder: If(use_cache_branch)
                                      of the two (merge_decoder.py, onnx API only)
    OUT/manifest.json                 shapes and ONNX Runtime's error against torch

Each file is run in ONNX Runtime against the torch model (the merged one on
both branches); the script fails if one is off by more than --tolerance.

Usage: generate_decoders.py [--out DIR] [--layers 2] [--hidden 128] [--heads 8]
                            [--kv-heads 2] [--vocab 1000] [--past 5]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from merge_decoder import merge_decoders  # noqa: E402

OPSET = 17
SEED = 0


def _wrapper(model, config, layers: int, with_past: bool):
    """The decoder as a module of plain tensors: past in (flattened), logits and
    present out, as optimum's export wraps transformers' cache classes."""
    import torch
    from transformers import DynamicCache

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = DynamicCache(config=config)
            if with_past:
                for i in range(layers):
                    cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True)
            present = []
            for layer in out.past_key_values.layers[:layers]:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    return Decoder().eval()


def export(args, out_dir: str) -> dict:
    import onnx
    import onnxruntime as ort
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(hidden_size=args.hidden, intermediate_size=int(args.hidden * 2.6875),
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, vocab_size=args.vocab, max_position_embeddings=256,
                         use_cache=True)
    config._attn_implementation = "eager"
    llama = LlamaForCausalLM(config).eval()
    head_dim = args.hidden // args.heads
    layers, past, prompt = args.layers, args.past, args.past
    present_names = [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    past_names = [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    outputs = ["logits", *present_names]
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "past_sequence_length + sequence_length"},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            "logits": {0: "batch_size", 1: "sequence_length"}}
    for n in past_names:
        axes[n] = {0: "batch_size", 2: "past_sequence_length"}
    for n in present_names:
        axes[n] = {0: "batch_size", 2: "past_sequence_length + sequence_length"}

    gen = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, args.vocab, (1, prompt), generator=gen)
    # The reference: the prompt's prefill without a past, then one step.
    no_past_inputs = [("input_ids", ids), ("attention_mask", torch.ones(1, prompt, dtype=torch.int64)),
                      ("position_ids", torch.arange(prompt)[None])]
    with torch.no_grad():
        prefill = _wrapper(llama, config, layers, False)(*[t for _, t in no_past_inputs])
    step_inputs = [("input_ids", torch.randint(0, args.vocab, (1, 1), generator=gen)),
                   ("attention_mask", torch.ones(1, past + 1, dtype=torch.int64)),
                   ("position_ids", torch.tensor([[past]]))]
    step_inputs += list(zip(past_names, prefill[1:]))

    files = {}
    checks = {}
    for file, with_past, inputs in (("model.onnx", True, step_inputs), ("decoder_model.onnx", False, no_past_inputs)):
        module = _wrapper(llama, config, layers, with_past)
        names = [n for n, _ in inputs]
        path = os.path.join(out_dir, file)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            ref = module(*[t for _, t in inputs])
            torch.onnx.export(module, tuple(t for _, t in inputs), path, dynamo=False, opset_version=OPSET,
                              input_names=names, output_names=outputs,
                              dynamic_axes={n: axes[n] for n in names + outputs}, do_constant_folding=True)
        onnx.checker.check_model(path)
        got = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
            outputs, {n: t.numpy() for n, t in inputs})
        checks[file] = max(float(np.max(np.abs(g - r.numpy()))) / max(float(np.max(np.abs(r.numpy()))), 1e-30)
                           for g, r in zip(got, ref))
        files[file] = (inputs, ref)
    with_past = onnx.load(os.path.join(out_dir, "model.onnx"))
    onnx.save(with_past, os.path.join(out_dir, "decoder_with_past_model.onnx"))
    merged = merge_decoders(onnx.load(os.path.join(out_dir, "decoder_model.onnx")), with_past)
    merged_path = os.path.join(out_dir, "decoder_model_merged.onnx")
    onnx.save(merged, merged_path)
    session = ort.InferenceSession(merged_path, providers=["CPUExecutionProvider"])
    for branch, file in ((True, "model.onnx"), (False, "decoder_model.onnx")):
        inputs, ref = files[file]
        feed = {n: t.numpy() for n, t in inputs}
        for n in past_names:  # the no-past branch reads none: an empty past, as optimum feeds it
            feed.setdefault(n, np.zeros((1, args.kv_heads, 0, head_dim), np.float32))
        feed["use_cache_branch"] = np.array([branch])
        got = session.run(outputs, feed)
        checks[f"decoder_model_merged.onnx use_cache_branch={int(branch)}"] = max(
            float(np.max(np.abs(g - r.numpy()))) / max(float(np.max(np.abs(r.numpy()))), 1e-30)
            for g, r in zip(got, ref))
    manifest = {
        "config": {"layers": layers, "hidden": args.hidden, "heads": args.heads, "kv_heads": args.kv_heads,
                   "head_dim": head_dim, "vocab": args.vocab},
        "reference_past": past,
        "exporter": f"torch {torch.__version__} torch.onnx.export(dynamo=False), opset {OPSET}",
        "ort_max_rel_error": checks,
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    return manifest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "cache", "optimum_llama"))
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--past", type=int, default=5, help="the reference inputs' past length")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import torch
    torch.set_grad_enabled(False)
    manifest = export(args, args.out)
    bad = {k: v for k, v in manifest["ort_max_rel_error"].items() if not v <= args.tolerance}
    for k, v in manifest["ort_max_rel_error"].items():
        print(f"{k:45} ORT max rel error {v:.2e}")
    if bad:
        print(f"failed: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
