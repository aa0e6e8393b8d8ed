#!/usr/bin/env python3
"""Bytes a spatial plan's rank files exchange against the halo formula.

For every HaloExchange of a plan folder (`tessera optimize --mesh`), the rows
the rank files receive (their `before`/`after` attributes) times the bytes of
a row of the windowed layer's input, summed over the ranks, against the halo
of the formula recomputed here from the layer's window alone: a band of
output rows [a, b) of a window (kernel K, stride s, dilation d, top padding
p: rank 0's, at the image's edge) reads input rows
[max(0, s*a - p), min(H, s*(b-1) - p + d*(K-1) + 1)), bands as the plan
cuts them over n ranks (uneven where n does not divide the rows: the first
rows % n ranks one row more, graph/sharding.h's block_start).

    python3 bench/sharding/halo_bytes.py PLAN_DIR
"""
import json
import os
import sys

import onnx


def attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def block_start(size, n, b):
    return b * (size // n) + min(b, size % n)


def formula_rows(node, dim, h_in, h_out, n, pad_top):
    k = attr(node, "kernel_shape")[dim - 2]
    s = (attr(node, "strides") or [1, 1])[dim - 2]
    d = (attr(node, "dilations") or [1, 1])[dim - 2]
    rows = 0
    for c in range(n):
        a, b = block_start(h_out, n, c), block_start(h_out, n, c + 1)
        lo, hi = max(0, s * a - pad_top), min(h_in, s * (b - 1) - pad_top + d * (k - 1) + 1)
        own_lo, own_hi = block_start(h_in, n, c), block_start(h_in, n, c + 1)
        rows += max(0, own_lo - lo) + max(0, hi - own_hi)
    return rows


def local_shapes(model):
    out = {}
    for v in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        out[v.name] = [d.dim_value for d in v.type.tensor_type.shape.dim]
    return out


def main():
    plan = sys.argv[1]
    n = len(json.load(open(os.path.join(plan, "plan.json")))["ranks"])
    moved = {}
    shapes = []
    for r in range(n):
        rank = onnx.load(os.path.join(plan, f"rank{r}.onnx"), load_external_data=False)
        shapes.append(local_shapes(rank))
        for node in rank.graph.node:
            if node.op_type == "HaloExchange":
                c = attr(node, "coordinate")
                moved[node.name] = moved.get(node.name, 0) + attr(node, "before")[c] + attr(node, "after")[c]
    # The window each exchange feeds, on rank 0 (whose band is at the top
    # edge: its padding there is the layer's own); the whole rows are the
    # ranks' bands summed.
    rank0 = onnx.load(os.path.join(plan, "rank0.onnx"), load_external_data=False)
    shape = local_shapes(rank0)
    readers = {}
    for node in rank0.graph.node:
        for i in node.input:
            readers.setdefault(i, []).append(node)
    total_moved = total_formula = 0
    for node in rank0.graph.node:
        if node.op_type != "HaloExchange":
            continue
        dim = attr(node, "axis")
        layer = readers[node.output[0]][0]
        if layer.op_type == "Slice":
            layer = readers[layer.output[0]][0]
        x = shape[node.input[0]]
        h_in = sum(sh[node.input[0]][dim] for sh in shapes)
        h_out = sum(sh[layer.output[0]][dim] for sh in shapes)
        row_bytes = 4
        for i, extent in enumerate(x):
            if i != dim:
                row_bytes *= extent
        f = formula_rows(layer, dim, h_in, h_out, n, attr(layer, "pads")[dim - 2])
        total_moved += moved[node.name] * row_bytes
        total_formula += f * row_bytes
        if moved[node.name] != f:
            print(f"{layer.name}: rank files {moved[node.name]} rows, formula {f}")
    print(f"{len(moved)} exchanges over {n} ranks: rank files {total_moved} B, formula {total_formula} B")
    return 0 if total_moved == total_formula else 1


if __name__ == "__main__":
    sys.exit(main())
