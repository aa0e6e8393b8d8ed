#!/usr/bin/env python3
"""Writes GPT-2 (124M by default) with random weights as ONNX, in the form of
transformers' GPT2Model exported by torch.onnx's TorchScript exporter
(generate.py's `gpt2`), with numpy and onnx only: for measuring `tessera
optimize` where torch cannot be installed.

The graph: token and position embeddings by Gather; per layer LayerNorm, the
merged QKV projection (MatMul + Add, Conv1D's [in, out] weight) split in
three, heads by Reshape + Transpose, scores scaled by Div, the causal mask by
Where, the padding mask added, Softmax, the output projection, the residual,
LayerNorm, the MLP with gelu_new spelled as the exporter spells it
(0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))), the residual; a
final LayerNorm. Weights are kept in the protobuf as the exporter keeps them
(497 MB at full size).

    inputs   input_ids [1,seq] i64, attention_mask [1,seq] i64
    outputs  last_hidden_state [1,seq,hidden]

Usage: generate_gpt2.py [--layers 12] [--hidden 768] [--heads 12] [--seq 128]
                        [--vocab 50257] [--seed 0] --out DIR
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.count = 0

    def weight(self, name: str, dims: list[int], std: float = 0.02, mean: float = 0.0) -> str:
        x = self.rng.standard_normal(dims, dtype=np.float32) * np.float32(std) + np.float32(mean)
        self.inits.append(numpy_helper.from_array(x, name))
        return name

    def const(self, array: np.ndarray) -> str:
        self.count += 1
        name = f"onnx::Constant_{self.count}"
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def ints(self, values: list[int]) -> str:
        return self.const(np.array(values, dtype=np.int64))

    def scalar(self, value: float) -> str:
        return self.const(np.array(value, dtype=np.float32))

    def node(self, op: str, inputs: list[str], attrs: dict | None = None, outputs: int = 1,
             out: str | None = None) -> str | list[str]:
        self.count += 1
        names = [out] if out else [f"/{op}_{self.count}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=f"/{op}_{self.count}", **(attrs or {})))
        return names[0] if outputs == 1 else names


def layer_norm(b: Builder, x: str, prefix: str, hidden: int) -> str:
    gamma = b.weight(f"{prefix}.weight", [hidden], 0.1, 1.0)
    beta = b.weight(f"{prefix}.bias", [hidden], 0.02)
    return b.node("LayerNormalization", [x, gamma, beta], {"axis": -1, "epsilon": 1e-5})


def linear(b: Builder, x: str, prefix: str, n_in: int, n_out: int) -> str:
    w = b.weight(f"{prefix}.weight", [n_in, n_out])
    bias = b.weight(f"{prefix}.bias", [n_out])
    return b.node("Add", [bias, b.node("MatMul", [x, w])])


def block(b: Builder, x: str, i: int, a) -> str:
    p = f"h.{i}"
    hd = a.hidden // a.heads
    h = layer_norm(b, x, f"{p}.ln_1", a.hidden)
    qkv = linear(b, h, f"{p}.attn.c_attn", a.hidden, 3 * a.hidden)
    q, k, v = b.node("Split", [qkv, b.ints([a.hidden] * 3)], {"axis": 2}, outputs=3)
    heads = lambda t: b.node("Reshape", [t, b.ints([1, a.seq, a.heads, hd])])
    q = b.node("Transpose", [heads(q)], {"perm": [0, 2, 1, 3]})
    k = b.node("Transpose", [heads(k)], {"perm": [0, 2, 3, 1]})
    v = b.node("Transpose", [heads(v)], {"perm": [0, 2, 1, 3]})
    s = b.node("Div", [b.node("MatMul", [q, k]), b.scalar(math.sqrt(hd))])
    causal = b.const(np.tril(np.ones((a.seq, a.seq), dtype=bool))[None, None])
    s = b.node("Where", [causal, s, b.scalar(float(np.finfo(np.float32).min))])
    s = b.node("Add", [s, "mask_bias"])
    attn = b.node("MatMul", [b.node("Softmax", [s], {"axis": -1}), v])
    attn = b.node("Reshape", [b.node("Transpose", [attn], {"perm": [0, 2, 1, 3]}), b.ints([1, a.seq, a.hidden])])
    x = b.node("Add", [linear(b, attn, f"{p}.attn.c_proj", a.hidden, a.hidden), x])
    h = linear(b, layer_norm(b, x, f"{p}.ln_2", a.hidden), f"{p}.mlp.c_fc", a.hidden, 4 * a.hidden)
    cube = b.node("Mul", [b.node("Pow", [h, b.scalar(3.0)]), b.scalar(0.044715)])
    inner = b.node("Mul", [b.node("Add", [h, cube]), b.scalar(math.sqrt(2.0 / math.pi))])
    gelu = b.node("Mul", [b.node("Mul", [h, b.scalar(0.5)]),
                          b.node("Add", [b.node("Tanh", [inner]), b.scalar(1.0)])])
    return b.node("Add", [linear(b, gelu, f"{p}.mlp.c_proj", 4 * a.hidden, a.hidden), x])


def build(a) -> onnx.ModelProto:
    b = Builder(a.seed)
    wte = b.weight("wte.weight", [a.vocab, a.hidden])
    wpe = b.weight("wpe.weight", [1024, a.hidden], 0.01)
    positions = b.const(np.arange(a.seq, dtype=np.int64)[None])
    x = b.node("Add", [b.node("Gather", [wte, "input_ids"]), b.node("Gather", [wpe, positions])])
    # (1 - mask) * finfo.min, broadcast over heads and query rows.
    mask = b.node("Cast", [b.node("Unsqueeze", ["attention_mask", b.ints([1, 2])])], {"to": TensorProto.FLOAT})
    b.node("Mul", [b.node("Sub", [b.scalar(1.0), mask]), b.scalar(float(np.finfo(np.float32).min))],
           out="mask_bias")
    for i in range(a.layers):
        x = block(b, x, i, a)
    b.node("LayerNormalization", [x, b.weight("ln_f.weight", [a.hidden], 0.1, 1.0),
                                  b.weight("ln_f.bias", [a.hidden])],
           {"axis": -1, "epsilon": 1e-5}, out="last_hidden_state")
    graph = helper.make_graph(
        b.nodes, "main_graph",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, a.seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, a.seq])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, a.seq, a.hidden])],
        b.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             producer_name="tessera bench/models/generate_gpt2.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="folder for model.onnx")
    a = parser.parse_args()
    if a.hidden % a.heads:
        parser.error("--hidden must be a multiple of --heads")
    os.makedirs(a.out, exist_ok=True)
    model = build(a)
    path = os.path.join(a.out, "model.onnx")
    onnx.save_model(model, path)
    onnx.checker.check_model(path)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type == TensorProto.FLOAT
                 and len(t.dims) > 0 and not t.name.startswith("onnx::"))
    print(f"{path}: {params / 1e6:.1f}M parameters, {os.path.getsize(path) / 1e6:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
