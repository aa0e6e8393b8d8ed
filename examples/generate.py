#!/usr/bin/env python3
"""Builds the small bundled example models with onnx.helper (numpy weights, fixed
seed) and saves a reference input and ONNX Runtime's output beside each:

    examples/tiny_cnn.onnx          conv+bn+relu, maxpool, a residual block, a
                                    strided conv, global average pool, gemm
    examples/tiny_cnn/input_0.pb, output_0.pb
    examples/tiny_transformer.onnx  one pre-LN causal self-attention block + MLP
    examples/tiny_transformer/input_0.pb, output_0.pb, output_1.pb

The graphs use the opset-17 forms torch.onnx.export writes, so that they exercise
the importer the way real models do: BatchNormalization left unfused, Reshape
whose shape comes from a Shape->Gather->Unsqueeze->Concat chain, Split, Squeeze
and Unsqueeze axes as inputs, a causal mask from Trilu + Where, Gelu written
out with Erf (ONNX has no Gelu before opset 20), and a second LayerNorm written
out with ReduceMean/Sub/Pow/Sqrt/Div as older exporters do.

Outputs are checked against onnx's reference evaluator before they are written.
Usage: python3 examples/generate.py [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
HERE = os.path.dirname(os.path.abspath(__file__))


class Builder:
    """Collects nodes and initializers; names are unique by construction."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, base: str, value: np.ndarray) -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(value, n))
        return n

    def weight(self, base: str, shape, fan_in: int) -> str:
        w = self.rng.standard_normal(shape).astype(np.float32) / np.sqrt(fan_in)
        return self.const(base, w.astype(np.float32))

    def op(self, op_type: str, inputs, num_outputs: int = 1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(num_outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs,
                                           name=self.name(op_type), **attrs))
        return outs[0] if num_outputs == 1 else outs


def i64(values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# --------------------------------------------------------------------------- CNN


def conv_bn(b: Builder, x: str, cin: int, cout: int, stride: int = 1, relu: bool = True) -> str:
    w = b.weight("conv_w", (cout, cin, 3, 3), cin * 9)
    y = b.op("Conv", [x, w], kernel_shape=[3, 3], strides=[stride, stride],
             pads=[1, 1, 1, 1], dilations=[1, 1], group=1)
    scale = b.const("bn_scale", (1 + 0.1 * b.rng.standard_normal(cout)).astype(np.float32))
    bias = b.const("bn_bias", (0.1 * b.rng.standard_normal(cout)).astype(np.float32))
    mean = b.const("bn_mean", (0.1 * b.rng.standard_normal(cout)).astype(np.float32))
    var = b.const("bn_var", b.rng.uniform(0.5, 1.5, cout).astype(np.float32))
    y = b.op("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5, momentum=0.9)
    return b.op("Relu", [y]) if relu else y


def tiny_cnn() -> tuple[onnx.ModelProto, list[np.ndarray]]:
    b = Builder(seed=1)
    x = "input"
    y = conv_bn(b, x, 3, 16)                                               # 16x32x32
    y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0])
    r = conv_bn(b, y, 16, 16)                                              # residual block
    r = conv_bn(b, r, 16, 16, relu=False)
    y = b.op("Relu", [b.op("Add", [y, r])])
    y = conv_bn(b, y, 16, 32, stride=2)                                    # 32x8x8
    y = conv_bn(b, y, 32, 32)
    y = conv_bn(b, y, 32, 32)
    y = b.op("GlobalAveragePool", [y])
    y = b.op("Flatten", [y], axis=1)
    w = b.weight("fc_w", (10, 32), 32)
    bias = b.const("fc_b", np.zeros(10, np.float32))
    b.nodes.append(helper.make_node("Gemm", [y, w, bias], ["logits"], name="fc",
                                    alpha=1.0, beta=1.0, transB=1))
    graph = helper.make_graph(
        b.nodes, "tiny_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], b.inits)
    inputs = [np.random.default_rng(11).standard_normal((1, 3, 32, 32)).astype(np.float32)]
    return graph, inputs


# ------------------------------------------------------------------- Transformer

SEQ, DIM, HEADS, MLP = 16, 64, 4, 256
HEAD_DIM = DIM // HEADS


def layer_norm_decomposed(b: Builder, x: str) -> str:
    """LayerNorm over the last axis as older torch exports write it."""
    mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
    d = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Pow", [d, b.const("two", np.array(2.0, np.float32))])],
               axes=[-1], keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [var, b.const("eps", np.array(1e-5, np.float32))])])
    y = b.op("Div", [d, std])
    gamma = b.const("ln2_scale", (1 + 0.1 * b.rng.standard_normal(DIM)).astype(np.float32))
    beta = b.const("ln2_bias", (0.1 * b.rng.standard_normal(DIM)).astype(np.float32))
    return b.op("Add", [b.op("Mul", [y, gamma]), beta])


def linear(b: Builder, x: str, cin: int, cout: int, base: str) -> str:
    w = b.weight(base + "_w", (cin, cout), cin)
    bias = b.const(base + "_b", (0.02 * b.rng.standard_normal(cout)).astype(np.float32))
    return b.op("Add", [b.op("MatMul", [x, w]), bias])


def split_heads(b: Builder, t: str, x: str, perm) -> str:
    """[1, SEQ, DIM] -> heads, with the target shape computed from Shape(x) the
    way torch traces `t.view(x.size(0), x.size(1), H, D)`."""
    shape = b.op("Shape", [x])
    batch = b.op("Gather", [shape, b.const("idx0", np.array(0, np.int64))], axis=0)
    seq = b.op("Gather", [shape, b.const("idx1", np.array(1, np.int64))], axis=0)
    axes0 = b.const("axes0", i64([0]))
    target = b.op("Concat", [b.op("Unsqueeze", [batch, axes0]), b.op("Unsqueeze", [seq, axes0]),
                             b.const("heads", i64([HEADS])), b.const("head_dim", i64([HEAD_DIM]))],
                  axis=0)
    return b.op("Transpose", [b.op("Reshape", [t, target])], perm=perm)


def tiny_transformer() -> tuple[onnx.ModelProto, list[np.ndarray]]:
    b = Builder(seed=2)
    x = "x"
    ln1 = b.op("LayerNormalization",
               [x, b.const("ln1_scale", (1 + 0.1 * b.rng.standard_normal(DIM)).astype(np.float32)),
                b.const("ln1_bias", (0.1 * b.rng.standard_normal(DIM)).astype(np.float32))],
               axis=-1, epsilon=1e-5)
    qkv = linear(b, ln1, DIM, 3 * DIM, "qkv")
    q, k, v = b.op("Split", [qkv, b.const("qkv_split", i64([DIM, DIM, DIM]))], num_outputs=3,
                   axis=-1)
    q = split_heads(b, q, x, [0, 2, 1, 3])                   # [1, H, S, D]
    kt = split_heads(b, k, x, [0, 2, 3, 1])                  # [1, H, D, S]
    v = split_heads(b, v, x, [0, 2, 1, 3])
    scores = b.op("Div", [b.op("MatMul", [q, kt]),
                          b.const("sqrt_d", np.array(np.sqrt(HEAD_DIM), np.float32))])
    ones = b.const("ones", np.ones((SEQ, SEQ), np.float32))
    causal = b.op("Cast", [b.op("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
    neg = b.const("neg_inf", np.array(np.finfo(np.float32).min, np.float32))
    probs = b.op("Softmax", [b.op("Where", [causal, scores, neg])], axis=-1)
    ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = b.op("Reshape", [ctx, b.const("merge_shape", i64([0, 0, -1]))])
    h = b.op("Add", [x, linear(b, ctx, DIM, DIM, "proj")])

    ln2 = layer_norm_decomposed(b, h)
    f = linear(b, ln2, DIM, MLP, "fc1")
    erf = b.op("Erf", [b.op("Div", [f, b.const("sqrt2", np.array(np.sqrt(2.0), np.float32))])])
    gelu = b.op("Mul", [b.op("Mul", [f, b.op("Add", [erf, b.const("one", np.array(1.0, np.float32))])]),
                        b.const("half", np.array(0.5, np.float32))])
    out = b.op("Add", [h, linear(b, gelu, MLP, DIM, "fc2")])
    b.nodes.append(helper.make_node("Identity", [out], ["y"], name="y_out"))
    # The last position's hidden state, as a decoder's next-token head reads it.
    last = b.op("Slice", [out, b.const("start", i64([-1])),
                          b.const("end", i64([np.iinfo(np.int64).max])), b.const("axis1", i64([1]))])
    b.nodes.append(helper.make_node("Squeeze", [last, b.const("axis1", i64([1]))], ["last"],
                                    name="last_out"))

    graph = helper.make_graph(
        b.nodes, "tiny_transformer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, DIM])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, DIM]),
         helper.make_tensor_value_info("last", TensorProto.FLOAT, [1, DIM])], b.inits)
    inputs = [np.random.default_rng(12).standard_normal((1, SEQ, DIM)).astype(np.float32)]
    return graph, inputs


# --------------------------------------------------------------------------


def save(name: str, graph: onnx.GraphProto, inputs: list[np.ndarray], out_dir: str) -> None:
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tessera-examples")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path = os.path.join(out_dir, name + ".onnx")
    onnx.save(model, path)

    names = [i.name for i in graph.input]
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    outputs = session.run(None, dict(zip(names, inputs)))
    expected = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    for o, e, info in zip(outputs, expected, graph.output):
        if not np.allclose(o, e, rtol=1e-4, atol=1e-5):
            raise SystemExit(f"{name}: ONNX Runtime and onnx's reference disagree on {info.name}")

    data_dir = os.path.join(out_dir, name)
    os.makedirs(data_dir, exist_ok=True)
    for kind, arrays, infos in (("input", inputs, graph.input), ("output", outputs, graph.output)):
        for j, (arr, info) in enumerate(zip(arrays, infos)):
            onnx.save_tensor(numpy_helper.from_array(arr, info.name),
                             os.path.join(data_dir, f"{kind}_{j}.pb"))
    print(f"{path}: {os.path.getsize(path) / 1024:.0f} KiB, {len(graph.node)} nodes, "
          f"outputs {[list(o.shape) for o in outputs]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=HERE, help=f"output folder (default {HERE})")
    args = parser.parse_args()
    for name, build in (("tiny_cnn", tiny_cnn), ("tiny_transformer", tiny_transformer)):
        graph, inputs = build()
        save(name, graph, inputs, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
