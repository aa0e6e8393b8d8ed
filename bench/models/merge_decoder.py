#!/usr/bin/env python3
"""optimum's legacy merged decoder (decoder_model_merged.onnx) from two
decoder exports, with the onnx Python API alone (no torch, no optimum):

    inputs   the with-past decoder's inputs, then use_cache_branch bool[1]
    graph    one If(use_cache_branch): then_branch = the with-past decoder,
             else_branch = the no-past decoder; the branches take no inputs
             and read the outer graph's inputs and initializers by name
    outputs  the If's, named as both decoders name theirs (logits,
             present.N.key/value), the branches' outputs named alike

As optimum's merge does it: initializers equal in both exports (same type,
shape and bytes) become one initializer of the outer graph; the others move
to the outer graph too, renamed where the two exports use one name for
different values; scalars and 1-D integer tensors (shapes, axes) stay in
their branch. The branches keep the exports' node and value names.

Also a tiny decoder built with onnx.helper (tiny_decoder) for tests that may
not use torch: token and position embeddings, per layer grouped-query
attention over a cache concatenated in front of the new keys and values,
masked by attention_mask, a residual MLP, and the LM head.

Usage: merge_decoder.py NO_PAST.onnx WITH_PAST.onnx OUT.onnx
       merge_decoder.py --tiny OUT_DIR   (tiny decoder_model.onnx,
                                          decoder_with_past_model.onnx and
                                          decoder_model_merged.onnx)
"""
from __future__ import annotations

import hashlib
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _stays_in_branch(t: onnx.TensorProto) -> bool:
    return len(t.dims) == 0 or (len(t.dims) == 1 and t.data_type in (TensorProto.INT32, TensorProto.INT64))


def _key(t: onnx.TensorProto) -> tuple:
    data = numpy_helper.to_array(t)
    return (t.data_type, tuple(t.dims), hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest())


def _rename_reads(graph: onnx.GraphProto, renames: dict) -> None:
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in renames:
                node.input[i] = renames[name]
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_reads(a.g, renames)
            for g in a.graphs:
                _rename_reads(g, renames)


def merge_decoders(no_past: onnx.ModelProto, with_past: onnx.ModelProto, name: str = "merged") -> onnx.ModelProto:
    """The merged model: If(use_cache_branch) of with_past (then) and no_past (else)."""
    no_past, with_past = onnx.ModelProto.FromString(no_past.SerializeToString()), \
        onnx.ModelProto.FromString(with_past.SerializeToString())
    for m in (no_past, with_past):
        if any(i.name in {t.name for t in m.graph.initializer} for i in m.graph.input):
            raise ValueError("a decoder lists initializers among its inputs")
    np_out = [o.name for o in no_past.graph.output]
    wp_out = [o.name for o in with_past.graph.output]
    if np_out != wp_out:
        raise ValueError(f"the decoders' outputs differ: {np_out} vs {wp_out}")

    outer: list[onnx.TensorProto] = []
    by_key: dict[tuple, str] = {}
    outer_names: set[str] = set()
    branch_inits: dict[int, list] = {0: [], 1: []}
    for index, m in enumerate((with_past, no_past)):
        renames = {}
        for t in m.graph.initializer:
            if _stays_in_branch(t):
                branch_inits[index].append(t)
                continue
            key = _key(t)
            if key in by_key:  # the same weight in both exports: one outer initializer
                renames[t.name] = by_key[key]
                continue
            new = t.name
            k = 0
            while new in outer_names:
                k += 1
                new = f"{t.name}_merged_{k}"
            renames[t.name] = new
            by_key[key] = new
            outer_names.add(new)
            copy = onnx.TensorProto()
            copy.CopyFrom(t)
            copy.name = new
            outer.append(copy)
        _rename_reads(m.graph, renames)
        for o in m.graph.output:
            if o.name in renames:
                o.name = renames[o.name]

    def branch(m, inits, graph_name):
        return helper.make_graph(list(m.graph.node), graph_name, [], list(m.graph.output), initializer=inits)

    then_branch = branch(with_past, branch_inits[0], "with_past")
    else_branch = branch(no_past, branch_inits[1], "no_past")
    inputs = list(with_past.graph.input)
    names = {i.name for i in inputs}
    inputs += [i for i in no_past.graph.input if i.name not in names]
    inputs.append(helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1]))
    if_node = helper.make_node("If", ["use_cache_branch"], wp_out, name="optimum::if",
                               then_branch=then_branch, else_branch=else_branch)
    # The outputs' past length differs between the branches: symbolic.
    outputs = []
    for o in with_past.graph.output:
        t = o.type.tensor_type
        dims = [d.dim_param or (d.dim_value if d.HasField("dim_value") else None) for d in t.shape.dim]
        if o.name.startswith("present"):
            dims[2] = "past_sequence_length + sequence_length"
        outputs.append(helper.make_tensor_value_info(o.name, t.elem_type, dims))
    graph = helper.make_graph([if_node], name, inputs, outputs, initializer=outer)
    opset = max(op.version for op in with_past.opset_import if op.domain in ("", "ai.onnx"))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="merge_decoder.py")
    model.ir_version = min(with_past.ir_version, no_past.ir_version) or model.ir_version
    onnx.checker.check_model(model)
    return model


# ---------------------------------------------------------------------------
# A tiny decoder with the optimum interface, for tests without torch.


def tiny_decoder(with_past: bool, layers=2, hidden=32, heads=4, kv_heads=2, vocab=64, max_pos=64,
                 seed=0) -> onnx.ModelProto:
    """decoder_model.onnx (no past) or decoder_with_past_model.onnx: the
    same weights (seeded), the dynamic dims named as optimum names them."""
    rng = np.random.default_rng(seed)
    hd = hidden // heads
    group = heads // kv_heads
    inits, nodes = [], []

    def weight(name, shape, scale=0.3):
        inits.append(numpy_helper.from_array((scale * rng.standard_normal(shape)).astype(np.float32), name))
        return name

    def ints(name, values):
        inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=f"/{out}/{op}", **attrs))
        return out

    embed = weight("model.embed_tokens.weight", (vocab, hidden), 1.0)
    pos = weight("model.embed_positions.weight", (max_pos, hidden), 0.5)
    x = node("Add", [node("Gather", [embed, "input_ids"], "tok"), node("Gather", [pos, "position_ids"], "pos")], "x0")
    # Additive mask [b, 1, 1, T] from attention_mask [b, T].
    m = node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    inits.append(numpy_helper.from_array(np.array(1.0, np.float32), "one"))
    inits.append(numpy_helper.from_array(np.array(-1e4, np.float32), "neg"))
    m = node("Mul", [node("Sub", ["one", m], "mask_inv"), "neg"], "mask_add")
    m = node("Unsqueeze", [m, ints("axes_12", [1, 2])], "mask4")
    inits.append(numpy_helper.from_array(np.array(hd ** -0.5, np.float32), "scale"))
    split_q = ints("shape_q", [0, 0, heads, hd])
    split_kv = ints("shape_kv", [0, 0, kv_heads, hd])
    merged = ints("shape_merged", [0, 0, hidden])
    rep = ints("shape_rep", [0, heads, -1, hd])
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch_size", "past_sequence_length + sequence_length"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    outputs = []
    present = []
    for i in range(layers):
        p = f"layers.{i}"
        q = node("MatMul", [x, weight(f"model.{p}.q_proj.weight", (hidden, hidden))], f"{p}/q")
        k = node("MatMul", [x, weight(f"model.{p}.k_proj.weight", (hidden, kv_heads * hd))], f"{p}/k")
        v = node("MatMul", [x, weight(f"model.{p}.v_proj.weight", (hidden, kv_heads * hd))], f"{p}/v")
        q = node("Transpose", [node("Reshape", [q, split_q], f"{p}/q4")], f"{p}/qt", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [k, split_kv], f"{p}/k4")], f"{p}/kt", perm=[0, 2, 1, 3])
        v = node("Transpose", [node("Reshape", [v, split_kv], f"{p}/v4")], f"{p}/vt", perm=[0, 2, 1, 3])
        if with_past:
            for kind in ("key", "value"):
                inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT,
                                                            ["batch_size", kv_heads, "past_sequence_length", hd]))
            k = node("Concat", [f"past_key_values.{i}.key", k], f"{p}/kcat", axis=2)
            v = node("Concat", [f"past_key_values.{i}.value", v], f"{p}/vcat", axis=2)
        k = node("Identity", [k], f"present.{i}.key")
        v = node("Identity", [v], f"present.{i}.value")
        present += [k, v]
        # Grouped-query heads: each KV head read by `group` query heads.
        ku = node("Unsqueeze", [k, ints(f"{p}/axis2", [2])], f"{p}/ku")
        vu = node("Unsqueeze", [v, ints(f"{p}/axis2v", [2])], f"{p}/vu")
        ke = node("Expand", [ku, node("Concat", [ints(f"{p}/e0", [1, kv_heads, group]),
                                                   node("Slice", [node("Shape", [k], f"{p}/ks"), ints(f"{p}/s2", [2]),
                                                                  ints(f"{p}/s4", [4])], f"{p}/ktail")],
                                          f"{p}/eshape", axis=0)], f"{p}/ke")
        ve = node("Expand", [vu, node("Concat", [ints(f"{p}/e0v", [1, kv_heads, group]),
                                                   node("Slice", [node("Shape", [v], f"{p}/vs"), ints(f"{p}/s2v", [2]),
                                                                  ints(f"{p}/s4v", [4])], f"{p}/vtail")],
                                          f"{p}/eshapev", axis=0)], f"{p}/ve")
        kr = node("Reshape", [ke, rep], f"{p}/kr")
        vr = node("Reshape", [ve, rep], f"{p}/vr")
        s = node("MatMul", [q, node("Transpose", [kr], f"{p}/kT", perm=[0, 1, 3, 2])], f"{p}/scores")
        s = node("Add", [node("Mul", [s, "scale"], f"{p}/scaled"), m], f"{p}/masked")
        a = node("MatMul", [node("Softmax", [s], f"{p}/probs", axis=-1), vr], f"{p}/attn")
        a = node("Reshape", [node("Transpose", [a], f"{p}/at", perm=[0, 2, 1, 3]), merged], f"{p}/am")
        x = node("Add", [x, node("MatMul", [a, weight(f"model.{p}.o_proj.weight", (hidden, hidden))], f"{p}/o")],
                 f"{p}/x1")
        h = node("Tanh", [node("MatMul", [x, weight(f"model.{p}.up.weight", (hidden, 2 * hidden))], f"{p}/up")],
                 f"{p}/act")
        x = node("Add", [x, node("MatMul", [h, weight(f"model.{p}.down.weight", (2 * hidden, hidden))], f"{p}/down")],
                 f"{p}/x2")
    node("MatMul", [x, weight("lm_head.weight", (hidden, vocab))], "logits")
    outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", vocab]))
    for i in range(layers):
        for kind in ("key", "value"):
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", TensorProto.FLOAT,
                                                         ["batch_size", kv_heads,
                                                          "past_sequence_length + sequence_length", hd]))
    graph = helper.make_graph(nodes, "decoder_with_past" if with_past else "decoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="merge_decoder.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--tiny":
        os.makedirs(argv[1], exist_ok=True)
        no_past, with_past = tiny_decoder(False), tiny_decoder(True)
        onnx.save(no_past, os.path.join(argv[1], "decoder_model.onnx"))
        onnx.save(with_past, os.path.join(argv[1], "decoder_with_past_model.onnx"))
        onnx.save(merge_decoders(no_past, with_past), os.path.join(argv[1], "decoder_model_merged.onnx"))
        return 0
    if len(argv) != 3:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    merged = merge_decoders(onnx.load(argv[0]), onnx.load(argv[1]))
    onnx.save(merged, argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
