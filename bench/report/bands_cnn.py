#!/usr/bin/env python3
"""A five-layer CNN whose spatial plan shows bands and halos of every kind,
the model of docs/report_bands.png: a 3x3 convolution, a strided one (uneven
bands after it on 3 ranks), a dilated one (two-row halos), a 2x2 max pool and
a 3x3 head, on a 1x3x66x40 image, with seeded weights.

    python3 bench/report/bands_cnn.py /tmp/bands.onnx
    build/bin/tessera optimize /tmp/bands.onnx -o /tmp/bands --mesh tp=3 --device h100 --shard 'image=[S(2)]' \\
        --shard 'down:out0=[S(2)]' --shard 'dilated:out0=[S(2)]' --shard 'pool:out0=[S(2)]'
    bench/report/screenshot.sh --size 1400x2600 /tmp/bands /tmp/bands.png
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    rng = np.random.default_rng(0)
    nodes, weights = [], []

    def conv(x, cin, cout, name, stride=1, dilation=1, pad=1):
        w = (rng.standard_normal((cout, cin, 3, 3)) * 0.2).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        weights.extend([numpy_helper.from_array(w, name + "_w"), numpy_helper.from_array(b, name + "_b")])
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name + "_out"], name=name,
                                      kernel_shape=[3, 3], strides=[stride] * 2, dilations=[dilation] * 2,
                                      pads=[pad] * 4))
        nodes.append(helper.make_node("Relu", [name + "_out"], [name + "_relu"], name=name + "_relu"))
        return name + "_relu"

    x = conv("image", 3, 8, "stem")
    x = conv(x, 8, 8, "down", stride=2)
    x = conv(x, 8, 8, "dilated", dilation=2, pad=2)
    nodes.append(helper.make_node("MaxPool", [x], ["pool_out"], name="pool", kernel_shape=[2, 2], strides=[2, 2]))
    y = conv("pool_out", 8, 4, "head")
    graph = helper.make_graph(nodes, "bands", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 66, 40])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
