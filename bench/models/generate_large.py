#!/usr/bin/env python3
"""Writes Llama-style decoders in the shapes of public checkpoints, with random
weights, as ONNX with external data: models larger than this machine's memory
for Tessera's planning and running (issue 39).

The graph is one decode step with a KV cache, in the form that Optimum-style
exports of Llama checkpoints have (and bench/models/generate.py's llama_step
writes through torch): RMSNorm, rotary embeddings from position_ids, attention
with grouped-query K/V heads repeated by Expand+Reshape, the past concatenated
in front of the new key and value, a mask from attention_mask by Where,
SwiGLU, the LM head.

    inputs   input_ids [1,1] i64, attention_mask [1,past+1] i64,
             position_ids [1,1] i64, past_key_values.N.key/.value
             [1,kv_heads,past,head_dim] (N = 0..layers-1)
    outputs  logits [1,1,vocab], present.N.key/.value [1,kv_heads,past+1,head_dim]

With --static-cache L, the step has the form compiled servers use (and
bench/models/generate.py's llama_static_step writes through torch), which
`tessera generate` loops over: a fixed-length cache of L positions written
in place at cache_position by ScatterElements (torch's index_copy_),
attention over all L positions with a mask of those <= cache_position.

    inputs   input_ids [1,1] i64, cache_position [1] i64,
             past_key_values.N.key/.value [1,kv_heads,L,head_dim]
    outputs  logits [1,1,vocab], present.N.key/.value [1,kv_heads,L,head_dim]

The model is never held in memory: each weight is drawn in chunks (seeded by
the weight's index, so the bytes do not depend on the chunk size) and
appended to OUT/model.onnx.data as it is made; the graph proto refers to the
bytes by offset. A model written in bf16 with the same --seed holds the f32
model's weights rounded to bf16 (round to nearest even).

Usage: generate_large.py --shape tinyllama-1.1b [--dtype f32|bf16]
                         [--past 127 | --static-cache L] [--seed 0] [--layers N] --out DIR
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
DATA_FILE = "model.onnx.data"
# Offsets of weights in the data file are multiples of this, so that a
# reader that maps the file can view every weight in place (64: a cache
# line, and a multiple of every element size).
ALIGN = 64
CHUNK_ELEMENTS = 1 << 22  # 16 MiB of f32 drawn at a time


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    rope_theta: float = 10000.0
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def parameters(self) -> int:
        kv = self.kv_heads * self.head_dim
        layer = 2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate
        return 2 * self.vocab * self.hidden + self.layers * (layer + 2 * self.hidden) + self.hidden


# The configurations of the public checkpoints (their config.json).
SHAPES = {
    "tiny": Shape(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=160, vocab=512),
    # Small decoders of the structure of the public ones, for plans made in
    # seconds: 16 query heads over 4 KV heads (TinyLlama's ratio and KV head
    # count, so tp=8 has more ranks than KV heads), and Llama-2-7B's
    # multi-head attention at a small hidden size.
    "gqa-small": Shape(layers=2, hidden=256, heads=16, kv_heads=4, intermediate=688, vocab=1024),
    "mha-small": Shape(layers=2, hidden=512, heads=8, kv_heads=8, intermediate=1376, vocab=1024),
    "tinyllama-1.1b": Shape(layers=22, hidden=2048, heads=32, kv_heads=4, intermediate=5632, vocab=32000),
    "llama2-7b": Shape(layers=32, hidden=4096, heads=32, kv_heads=32, intermediate=11008, vocab=32000),
    "mistral-7b": Shape(layers=32, hidden=4096, heads=32, kv_heads=8, intermediate=14336, vocab=32000),
}

DTYPES = {"f32": TensorProto.FLOAT, "bf16": TensorProto.BFLOAT16}


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """f32 values as bf16 bit patterns, rounded to nearest even (finite inputs)."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


class Writer:
    """Appends weights to the data file and builds the graph around them."""

    def __init__(self, folder: str, dtype: str, seed: int):
        self.folder = folder
        self.dtype = dtype
        self.elem = DTYPES[dtype]
        self.seed = seed
        self.data = open(os.path.join(folder, DATA_FILE), "wb")
        self.initializers: list[TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.weights = 0
        self.names = 0

    def close(self) -> None:
        self.data.close()

    def weight(self, name: str, dims: list[int], std: float, mean: float = 0.0) -> str:
        """A weight of normal(mean, std) values in the model's dtype, appended
        to the data file chunk by chunk."""
        rng = np.random.default_rng([self.seed, self.weights])
        self.weights += 1
        self.data.write(b"\0" * (-self.data.tell() % ALIGN))
        offset = self.data.tell()
        left = int(np.prod(dims))
        while left:
            n = min(left, CHUNK_ELEMENTS)
            x = rng.standard_normal(n, dtype=np.float32) * np.float32(std) + np.float32(mean)
            self.data.write((to_bf16_bits(x) if self.dtype == "bf16" else x).tobytes())
            left -= n
        tensor = TensorProto(name=name, data_type=self.elem, dims=dims, data_location=TensorProto.EXTERNAL)
        for key, value in (("location", DATA_FILE), ("offset", offset), ("length", self.data.tell() - offset)):
            tensor.external_data.add(key=key, value=str(value))
        self.initializers.append(tensor)
        return name

    def constant(self, name: str, array: np.ndarray) -> str:
        """A small constant (shapes, axes, the rotary frequencies), kept in
        the graph proto as exporters keep tensors under a kilobyte."""
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def ints(self, name: str, values: list[int]) -> str:
        return self.constant(name, np.array(values, dtype=np.int64))

    def node(self, op: str, inputs: list[str], attrs: dict | None = None, out: str | None = None) -> str:
        self.names += 1
        out = out or f"{op.lower()}_{self.names}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{self.names}", **(attrs or {})))
        return out


def rms_norm(w: Writer, x: str, eps: str, weight: str) -> str:
    """x * 1/sqrt(mean(x^2) + eps) * weight, over the last axis."""
    sq = w.node("Mul", [x, x])
    mean = w.node("ReduceMean", [sq], {"axes": [-1], "keepdims": 1})
    inv = w.node("Reciprocal", [w.node("Sqrt", [w.node("Add", [mean, eps])])])
    return w.node("Mul", [w.node("Mul", [x, inv]), weight])


def rotate(w: Writer, x: str, cos: str, sin: str, c: dict) -> str:
    """x * cos + cat(-x2, x1) * sin, x1 and x2 the halves of the last axis."""
    x1 = w.node("Slice", [x, c["zero"], c["half"], c["minus1"]])
    x2 = w.node("Slice", [x, c["half"], c["big"], c["minus1"]])
    rot = w.node("Concat", [w.node("Neg", [x2]), x1], {"axis": -1})
    return w.node("Add", [w.node("Mul", [x, cos]), w.node("Mul", [rot, sin])])


def attention(w: Writer, s: Shape, i: int, h: str, cos: str, sin: str, mask: str, c: dict) -> tuple[str, str, str]:
    """The attention block of layer i on the normed hidden state h: returns
    its output projection and the layer's present key and value."""
    d, kv = s.head_dim, s.kv_heads * s.head_dim
    p = f"model.layers.{i}.self_attn"
    q = w.node("MatMul", [h, w.weight(f"{p}.q_proj.weight", [s.hidden, s.hidden], 0.02)])
    k = w.node("MatMul", [h, w.weight(f"{p}.k_proj.weight", [s.hidden, kv], 0.02)])
    v = w.node("MatMul", [h, w.weight(f"{p}.v_proj.weight", [s.hidden, kv], 0.02)])
    heads = lambda t, n: w.node("Transpose", [w.node("Reshape", [t, c[f"heads{n}"]])], {"perm": [0, 2, 1, 3]})
    q = rotate(w, heads(q, s.heads), cos, sin, c)
    k = rotate(w, heads(k, s.kv_heads), cos, sin, c)
    v = heads(v, s.kv_heads)
    if "write_at" in c:  # a fixed-length cache: the new entry written at cache_position
        write = lambda past, t, name: w.node("ScatterElements", [past, c["write_at"], t], {"axis": 2}, out=name)
    else:  # a growing one: the new entry appended
        write = lambda past, t, name: w.node("Concat", [past, t], {"axis": 2}, out=name)
    key = write(f"past_key_values.{i}.key", k, f"present.{i}.key")
    value = write(f"past_key_values.{i}.value", v, f"present.{i}.value")
    if s.kv_heads != s.heads:  # repeat_kv: [1,kvh,T,d] -> [1,kvh,rep,T,d] -> [1,heads,T,d]
        rep = lambda t: w.node("Reshape", [w.node("Expand", [w.node("Unsqueeze", [t, c["axis2"]]), c["rep"]]),
                                           c["all_heads"]])
        key_all, value_all = rep(key), rep(value)
    else:
        key_all, value_all = key, value
    scores = w.node("Div", [w.node("MatMul", [q, w.node("Transpose", [key_all], {"perm": [0, 1, 3, 2]})]),
                            c["sqrt_d"]])
    scores = w.node("Where", [mask, scores, c["masked"]])
    a = w.node("MatMul", [w.node("Softmax", [scores], {"axis": -1}), value_all])
    a = w.node("Reshape", [w.node("Transpose", [a], {"perm": [0, 2, 1, 3]}), c["hidden"]])
    return w.node("MatMul", [a, w.weight(f"{p}.o_proj.weight", [s.hidden, s.hidden], 0.02)]), key, value


def mlp(w: Writer, s: Shape, i: int, h: str) -> str:
    """down(silu(gate(h)) * up(h))."""
    p = f"model.layers.{i}.mlp"
    gate = w.node("MatMul", [h, w.weight(f"{p}.gate_proj.weight", [s.hidden, s.intermediate], 0.02)])
    up = w.node("MatMul", [h, w.weight(f"{p}.up_proj.weight", [s.hidden, s.intermediate], 0.02)])
    act = w.node("Mul", [w.node("Mul", [gate, w.node("Sigmoid", [gate])]), up])
    return w.node("MatMul", [act, w.weight(f"{p}.down_proj.weight", [s.intermediate, s.hidden], 0.02)])


def build(folder: str, s: Shape, dtype: str, past: int, seed: int, static_len: int = 0) -> onnx.ModelProto:
    """The step; with static_len > 0 over a fixed-length cache of that many
    positions (past is then unused)."""
    os.makedirs(folder, exist_ok=True)
    w = Writer(folder, dtype, seed)
    d = s.head_dim
    cache_len = static_len if static_len else past + 1  # positions attention reads
    scalar = lambda name, v: w.constant(name, np.array(v, dtype=np.float32))
    c = {
        "zero": w.ints("const.zero", [0]), "half": w.ints("const.half", [d // 2]),
        "big": w.ints("const.end", [2**62]), "minus1": w.ints("const.last_axis", [-1]),
        "axis2": w.ints("const.axis2", [2]), f"heads{s.heads}": w.ints("const.q_heads", [1, 1, s.heads, d]),
        "hidden": w.ints("const.hidden", [1, 1, s.hidden]),
    }
    c[f"heads{s.kv_heads}"] = w.ints("const.kv_heads", [1, 1, s.kv_heads, d])
    c["rep"] = w.ints("const.repeat", [1, s.kv_heads, s.heads // s.kv_heads, cache_len, d])
    c["all_heads"] = w.ints("const.all_heads", [1, s.heads, cache_len, d])
    # Constants the f32 or bf16 graph computes with, in its type (bf16 by Cast).
    eps, sqrt_d, masked = scalar("const.eps", s.eps), scalar("const.sqrt_d", d ** 0.5), scalar("const.masked", -1e4)
    inv_freq = w.constant("rotary.inv_freq",
                          (1.0 / s.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d)).astype(np.float32))
    if dtype == "bf16":
        cast = lambda t: w.node("Cast", [t], {"to": TensorProto.BFLOAT16})
        eps, sqrt_d, masked = cast(eps), cast(sqrt_d), cast(masked)
    else:
        cast = lambda t: t
    c["sqrt_d"], c["masked"] = sqrt_d, masked

    # Rotary angles from the position: [1,1] -> [1,1,1,d] (over heads).
    position = w.node("Reshape", ["cache_position", w.ints("const.one_by_one", [1, 1])]) if static_len \
        else "position_ids"
    pos = w.node("Unsqueeze", [w.node("Cast", [position], {"to": TensorProto.FLOAT}), c["minus1"]])
    freqs = w.node("Mul", [pos, inv_freq])
    angles = w.node("Unsqueeze", [w.node("Concat", [freqs, freqs], {"axis": -1}), w.ints("const.axis1", [1])])
    cos, sin = cast(w.node("Cos", [angles])), cast(w.node("Sin", [angles]))
    if static_len:
        # The positions written so far (<= cache_position), and where the
        # step writes: cache_position on every KV head and channel.
        written = w.node("LessOrEqual", [w.ints("const.positions", list(range(static_len))), "cache_position"])
        mask = w.node("Reshape", [written, w.ints("const.mask_shape", [1, 1, 1, static_len])])
        c["write_at"] = w.node("Expand", [w.node("Reshape", ["cache_position", w.ints("const.at_shape", [1, 1, 1, 1])]),
                                          w.ints("const.write_shape", [1, s.kv_heads, 1, d])])
    else:
        mask = w.node("Reshape", [w.node("Cast", ["attention_mask"], {"to": TensorProto.BOOL}),
                                  w.ints("const.mask_shape", [1, 1, 1, past + 1])])

    x = w.node("Gather", [w.weight("model.embed_tokens.weight", [s.vocab, s.hidden], 0.02), "input_ids"],
               {"axis": 0})
    presents = []
    for i in range(s.layers):
        p = f"model.layers.{i}"
        h = rms_norm(w, x, eps, w.weight(f"{p}.input_layernorm.weight", [s.hidden], 0.1, 1.0))
        o, key, value = attention(w, s, i, h, cos, sin, mask, c)
        x = w.node("Add", [x, o])
        h = rms_norm(w, x, eps, w.weight(f"{p}.post_attention_layernorm.weight", [s.hidden], 0.1, 1.0))
        x = w.node("Add", [x, mlp(w, s, i, h)])
        presents += [key, value]
    h = rms_norm(w, x, eps, w.weight("model.norm.weight", [s.hidden], 0.1, 1.0))
    w.node("MatMul", [h, w.weight("lm_head.weight", [s.hidden, s.vocab], 0.02)], out="logits")
    w.close()

    elem = DTYPES[dtype]
    cache = lambda name, t: helper.make_tensor_value_info(name, elem, [1, s.kv_heads, t, d])
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 1])]
    if static_len:
        inputs.append(helper.make_tensor_value_info("cache_position", TensorProto.INT64, [1]))
    else:
        inputs += [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, past + 1]),
                   helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, 1])]
    past_len = static_len if static_len else past
    for i in range(s.layers):
        inputs += [cache(f"past_key_values.{i}.key", past_len), cache(f"past_key_values.{i}.value", past_len)]
    outputs = [helper.make_tensor_value_info("logits", elem, [1, 1, s.vocab])]
    outputs += [cache(name, cache_len) for name in presents]
    graph = helper.make_graph(w.nodes, "llama_decode_step", inputs, outputs, w.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             producer_name="tessera bench/models/generate_large.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", required=True, choices=sorted(SHAPES))
    parser.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    parser.add_argument("--past", type=int, default=127, help="cached tokens before the step (default 127)")
    parser.add_argument("--static-cache", type=int, default=0, metavar="L",
                        help="a fixed-length cache of L positions written in place at cache_position "
                             "(the form `tessera generate` loops over) instead of --past")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=0,
                        help="layers instead of the checkpoint's (the same layer shape, fewer of them: plans in seconds)")
    parser.add_argument("--out", required=True, help="folder for model.onnx and model.onnx.data")
    args = parser.parse_args()
    if args.past < 0:
        parser.error("--past must be at least 0")
    if args.static_cache < 0:
        parser.error("--static-cache must be at least 1")
    s = SHAPES[args.shape]
    if args.layers < 0:
        parser.error("--layers must be at least 1")
    if args.layers:
        s = dataclasses.replace(s, layers=args.layers)
    model = build(args.out, s, args.dtype, args.past, args.seed, args.static_cache)
    path = os.path.join(args.out, "model.onnx")
    onnx.save_model(model, path)
    onnx.checker.check_model(path)
    data = os.path.getsize(os.path.join(args.out, DATA_FILE))
    print(f"{path}: {args.shape} {args.dtype}, {s.parameters() / 1e6:.1f}M parameters, "
          f"{data / 2**20:.1f} MiB of external data, "
          + (f"a fixed-length cache of {args.static_cache}" if args.static_cache else f"past {args.past}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
