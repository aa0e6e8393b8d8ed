"""Writes the small models of the ONNX import/export round-trip test.

Usage: make_roundtrip_models.py OUT_DIR

Each model mixes the forms real exporters write (opset-dependent inputs,
shape arithmetic, auto_pad) so that import -> export -> ONNX Runtime checks
the conversions in both directions. Weights come from a fixed seed.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(1234)


def w(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def i64(name, values, scalar=False):
    arr = np.array(values, dtype=np.int64)
    return numpy_helper.from_array(arr.reshape(()) if scalar else arr, name)


def f32(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.float32), name)


def model(name, nodes, inputs, outputs, inits, opset):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def conv_pool():
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "w2"], ["c2"], auto_pad="SAME_UPPER", strides=[2, 2]),
        n("AveragePool", ["c2"], ["p2"], kernel_shape=[2, 2], pads=[0, 0, 1, 1], count_include_pad=0),
        n("GlobalAveragePool", ["p2"], ["g"]),
        n("Flatten", ["g"], ["f"]),
        n("Gemm", ["f", "wg", "bg"], ["y"], transB=1, alpha=0.5),
    ]
    inits = [w("w1", 4, 3, 3, 3), w("b1", 4), w("w2", 6, 4, 3, 3), w("wg", 5, 6), w("bg", 5)]
    return model("conv_pool", nodes, [vi("x", [1, 3, 9, 9])], [vi("y", [1, 5])], inits, 17)


def attention():
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "wq"], ["q0"]),
        n("Add", ["q0", "bq"], ["q"]),
        n("Shape", ["x"], ["xs"]),
        n("Gather", ["xs", "zero"], ["batch"], axis=0),
        n("Unsqueeze", ["batch", "ax0"], ["batch1"]),
        n("Concat", ["batch1", "heads_shape"], ["qshape"], axis=0),
        n("Reshape", ["q", "qshape"], ["qh0"]),
        n("Transpose", ["qh0"], ["qh"], perm=[0, 2, 1, 3]),
        n("Transpose", ["qh"], ["kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["qh", "kt"], ["s0"]),
        n("Div", ["s0", "scale"], ["s1"]),
        n("Trilu", ["ones", "k1"], ["mask_f"], upper=1),
        n("Cast", ["mask_f"], ["mask"], to=TensorProto.BOOL),
        n("Where", ["mask", "neg", "s1"], ["s2"]),
        n("Softmax", ["s2"], ["p"], axis=-1),
        n("MatMul", ["p", "qh"], ["o0"]),
        n("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["o1", "back_shape"], ["o2"]),
        n("LayerNormalization", ["o2", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5),
    ]
    inits = [w("wq", 8, 8), w("bq", 8), i64("zero", 0, scalar=True), i64("ax0", [0]),
             i64("heads_shape", [-1, 2, 4]), f32("scale", 2.0), i64("k1", 1, scalar=True),
             numpy_helper.from_array(np.ones((4, 4), np.float32), "ones"), f32("neg", -1e4),
             i64("back_shape", [0, 0, -1]), w("gamma", 8), w("beta", 8)]
    return model("attention", nodes, [vi("x", [2, 4, 8])], [vi("y", [2, 4, 8])], inits, 17)


def movement():
    n = helper.make_node
    nodes = [
        n("Gather", ["x", "idx"], ["g"], axis=0),
        n("Slice", ["g", "st", "en", "ax1", "stp"], ["sl"]),
        n("Slice", ["x", "st0", "en0"], ["sl0"]),
        n("Concat", ["sl", "sl0"], ["cat"], axis=1),
        n("Greater", ["cat", "zerof"], ["pos"]),
        n("Neg", ["cat"], ["neg"]),
        n("Where", ["pos", "cat", "neg"], ["abs"]),
        n("Expand", ["abs", "eshape"], ["ex"]),
        n("Trilu", ["ex"], ["tri"], upper=0),
        n("Transpose", ["tri"], ["y"], perm=[2, 0, 1]),
    ]
    inits = [i64("idx", [3, 0, 2]), i64("st", [1]), i64("en", [6]), i64("ax1", [1]), i64("stp", [2]),
             i64("st0", [0, 0]), i64("en0", [3, 2]), f32("zerof", 0.0), i64("eshape", [2, 1, 1])]
    return model("movement", nodes, [vi("x", [4, 6])], [vi("y", [5, 2, 3])], inits, 17)


def opset13_forms():
    n = helper.make_node
    nodes = [
        n("ReduceMean", ["x"], ["m"], axes=[2], keepdims=1),
        n("Sub", ["x", "m"], ["xc"]),
        n("ReduceSum", ["xc", "axes1"], ["s"], keepdims=0),
        n("Split", ["x", "split"], ["a", "b"], axis=2),
        n("Pad", ["a", "pads", "padv"], ["ap"], mode="constant"),
        n("Clip", ["ap", "lo", "hi"], ["cl"]),
        n("Squeeze", ["cl", "sq"], ["sqz"]),
        n("Unsqueeze", ["sqz", "usq"], ["u"]),
        n("Max", ["u", "x", "x"], ["mx"]),
        n("Mean", ["mx", "ap", "x"], ["y"]),
    ]
    inits = [i64("axes1", [1]), i64("split", [3, 2]), i64("pads", [0, 0, 1, 0, 0, 1]),
             f32("padv", 0.25), f32("lo", -0.5), f32("hi", 0.75), i64("sq", [0]), i64("usq", [0])]
    return model("opset13_forms", nodes, [vi("x", [1, 3, 5])], [vi("y", [1, 3, 5]), vi("s", [1, 5])], inits, 13)


def gelu_opset20():
    n = helper.make_node
    nodes = [n("Gelu", ["x"], ["g1"]), n("Gelu", ["x"], ["g2"], approximate="tanh"), n("Add", ["g1", "g2"], ["y"])]
    return model("gelu_opset20", nodes, [vi("x", [3, 4])], [vi("y", [3, 4])], [], 20)


def depth_space():
    # PixelShuffle (CRD), DCR and its inverse; imported as Reshape/Transpose
    # chains, exported back as the ops.
    n = helper.make_node
    nodes = [n("DepthToSpace", ["x"], ["d1"], blocksize=2, mode="CRD"),
             n("DepthToSpace", ["x"], ["d2"], blocksize=2),
             n("Add", ["d1", "d2"], ["s"]),
             n("SpaceToDepth", ["s"], ["y"], blocksize=2)]
    return model("depth_space", nodes, [vi("x", [1, 8, 3, 5])], [vi("y", [1, 8, 3, 5])], [], 17)


def resize_scatter():
    # The forms torch.onnx writes (sizes from shape arithmetic; scales), a
    # scale that does not divide evenly, a crop that extrapolates, and
    # ScatterND with and without a reduction.
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("Slice", ["s", "st", "en"], ["nc"]),
        n("Concat", ["nc", "hw"], ["sizes"], axis=0),
        n("Resize", ["x", "", "", "sizes"], ["up"], mode="linear", coordinate_transformation_mode="half_pixel"),
        n("Resize", ["x", "", "sc2"], ["nn"], mode="nearest", coordinate_transformation_mode="asymmetric",
          nearest_mode="floor"),
        n("Add", ["up", "nn"], ["a"]),
        n("Resize", ["a", "", "sc07"], ["c"], mode="cubic", coordinate_transformation_mode="align_corners"),
        n("Resize", ["c", "roi", "", "crop_sizes"], ["t"], mode="linear",
          coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=0.5),
        n("Slice", ["t", "ust", "uen"], ["u0"]),
        n("Reshape", ["u0", "ushape"], ["u"]),
        n("ScatterND", ["t", "idx", "u"], ["y0"]),
        n("ScatterND", ["y0", "idx", "u"], ["y"], reduction="add"),
    ]
    inits = [i64("st", [0]), i64("en", [2]), i64("hw", [10, 12]), f32("sc2", [1, 1, 2, 2]),
             f32("sc07", [1, 1, 0.7, 0.7]), f32("roi", [0, 0, -0.2, 0.1, 1, 1, 1.1, 0.8]),
             i64("crop_sizes", [1, 2, 4, 4]), i64("ust", [0, 0, 0, 0]), i64("uen", [1, 1, 2, 4]),
             i64("ushape", [2, 4]), i64("idx", [[0, 1, 2], [0, 0, 3]])]
    return model("resize_scatter", nodes, [vi("x", [1, 2, 5, 6])], [vi("y", [1, 2, 4, 4])], inits, 17)


def resize_opset19():
    # Opset 18/19 forms: axes with keep_aspect_ratio_policy, antialias,
    # half_pixel_symmetric with a fractional size, ScatterND max. The
    # exporter raises its opset for them.
    n = helper.make_node
    nodes = [
        n("Resize", ["x", "", "", "sizes"], ["a"], mode="linear", antialias=1, axes=[2, 3],
          keep_aspect_ratio_policy="not_larger"),
        n("Resize", ["x", "", "scales"], ["b"], mode="cubic", antialias=1,
          coordinate_transformation_mode="half_pixel_symmetric"),
        n("ScatterND", ["x", "idx", "upd"], ["c"], reduction="max"),
    ]
    inits = [i64("sizes", [5, 4]), f32("scales", [1, 1, 0.6, 0.6]), i64("idx", [[0, 1, 2], [0, 2, 7]]),
             w("upd", 2, 6)]
    return model("resize_opset19", nodes, [vi("x", [1, 3, 8, 6])],
                 [vi("a", [1, 3, 5, 4]), vi("b", [1, 3, 4, 3]), vi("c", [1, 3, 8, 6])], inits, 19)


def static_cache():
    # A static KV cache as torch.onnx writes index_copy_: the position
    # (random in {0, 1, 2}) expanded over the new entry, ScatterElements along
    # the sequence axis; then a ScatterElements max along the last axis with
    # a negative index, over the first 3 of the 6 positions (opset 18).
    n = helper.make_node
    nodes = [
        n("Reshape", ["pos", "one_shape"], ["pos4"]),
        n("Expand", ["pos4", "kv_shape"], ["idx"]),
        n("ScatterElements", ["cache", "idx", "kv"], ["present"], axis=2),
        n("ScatterElements", ["present", "cols", "upd"], ["y"], axis=-1, reduction="max"),
    ]
    inits = [i64("one_shape", [1, 1, 1, 1]), i64("kv_shape", [1, 2, 1, 4]),
             i64("cols", [[[[0, -1], [3, 3], [1, 2]]] * 2]), w("upd", 1, 2, 3, 2)]
    return model("static_cache", nodes, [vi("cache", [1, 2, 6, 4]), vi("pos", [1], TensorProto.INT64),
                                         vi("kv", [1, 2, 1, 4])],
                 [vi("present", [1, 2, 6, 4]), vi("y", [1, 2, 6, 4])], inits, 18)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for make in (conv_pool, attention, movement, opset13_forms, gelu_opset20, depth_space, resize_scatter,
                 resize_opset19, static_cache):
        m = make()
        onnx.save(m, os.path.join(out, m.graph.name + ".onnx"))


if __name__ == "__main__":
    main()
