#include "bench/cost/rewrite_pairs.h"

#include "mutator/rules/rule.h"

namespace tessera::bench {

namespace {

Attrs conv_attrs(int64_t k, int64_t pad, int64_t dilation) {
  Attrs a;
  a.set("kernel_shape", std::vector<int64_t>{k, k});
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("pads", std::vector<int64_t>{pad, pad, pad, pad});
  a.set("dilations", std::vector<int64_t>{dilation, dilation});
  return a;
}

Attrs ints_attr(const std::string& name, std::vector<int64_t> v) {
  Attrs a;
  a.set(name, std::move(v));
  return a;
}

Tensor weights(DType t, Shape s) {
  int64_t n = shape_numel(s);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = ((i * 7919) % 101) / 101.0 - 0.5;
  return Tensor::from_doubles(t, std::move(s), v);
}

// DESIGN's example: a dilated 3x3 convolution against the space-to-batch
// mutant that moves the 2x2 dilation phases into the batch and runs a plain
// convolution on each.
RewritePair dilated_conv() {
  const int64_t c = 512, h = 28;
  RewritePair p{"dilated-conv vs space-to-batch", {}, {}};
  {
    Graph& g = p.before;
    ValueId x = g.add_input("x", {DType::kF32, {1, c, h, h}});
    ValueId w = g.add_constant("w", weights(DType::kF32, {c, c, 3, 3}));
    g.set_outputs({g.add(OpKind::kConv, {x, w}, conv_attrs(3, 2, 2), "conv")});
  }
  {
    Graph& g = p.after;
    ValueId x = g.add_input("x", {DType::kF32, {1, c, h, h}});
    ValueId w = g.add_constant("w", weights(DType::kF32, {c, c, 3, 3}));
    ValueId r = g.add(OpKind::kReshape, {x}, ints_attr("shape", {1, c, h / 2, 2, h / 2, 2}), "split_phases");
    ValueId t = g.add(OpKind::kTranspose, {r}, ints_attr("perm", {0, 3, 5, 1, 2, 4}), "to_batch");
    ValueId b = g.add(OpKind::kReshape, {t}, ints_attr("shape", {4, c, h / 2, h / 2}), "batch");
    ValueId y = g.add(OpKind::kConv, {b, w}, conv_attrs(3, 1, 1), "conv");
    ValueId u = g.add(OpKind::kReshape, {y}, ints_attr("shape", {1, 2, 2, c, h / 2, h / 2}), "unbatch");
    ValueId v = g.add(OpKind::kTranspose, {u}, ints_attr("perm", {0, 3, 4, 1, 5, 2}), "from_batch");
    g.set_outputs({g.add(OpKind::kReshape, {v}, ints_attr("shape", {1, c, h, h}), "merge_phases")});
  }
  return p;
}

// TASO's merge: two MatMuls that share their input become one MatMul on the
// concatenated weights, then a Split.
RewritePair merged_matmul(int64_t m, int64_t k, int64_t n) {
  RewritePair p{"two matmuls vs one merged " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n),
                {}, {}};
  {
    Graph& g = p.before;
    ValueId x = g.add_input("x", {DType::kF32, {m, k}});
    ValueId w1 = g.add_constant("w1", weights(DType::kF32, {k, n}));
    ValueId w2 = g.add_constant("w2", weights(DType::kF32, {k, n}));
    ValueId a = g.add(OpKind::kMatMul, {x, w1}, {}, "mm1");
    ValueId b = g.add(OpKind::kMatMul, {x, w2}, {}, "mm2");
    g.set_outputs({a, b});
  }
  {
    Graph& g = p.after;
    ValueId x = g.add_input("x", {DType::kF32, {m, k}});
    ValueId w = g.add_constant("w", weights(DType::kF32, {k, 2 * n}));
    ValueId y = g.add(OpKind::kMatMul, {x, w}, {}, "mm");
    Attrs s;
    s.set("axis", int64_t{1});
    s.set("split", std::vector<int64_t>{n, n});
    NodeId split = g.add_node(OpKind::kSplit, {y}, s, "split");
    g.set_outputs(g.node(split).outputs);
  }
  return p;
}

// Transposing the weights at run time against storing them transposed.
RewritePair pretransposed(int64_t m, int64_t k, int64_t n) {
  RewritePair p{"transpose+matmul vs pretransposed " + std::to_string(m) + "x" + std::to_string(k) + "x" +
                    std::to_string(n),
                {}, {}};
  {
    Graph& g = p.before;
    ValueId x = g.add_input("x", {DType::kF32, {m, k}});
    ValueId w = g.add_input("w", {DType::kF32, {n, k}});
    ValueId t = g.add(OpKind::kTranspose, {w}, ints_attr("perm", {1, 0}), "wt");
    g.set_outputs({g.add(OpKind::kMatMul, {x, t}, {}, "mm")});
  }
  {
    Graph& g = p.after;
    ValueId x = g.add_input("x", {DType::kF32, {m, k}});
    ValueId w = g.add_input("w", {DType::kF32, {k, n}});
    g.set_outputs({g.add(OpKind::kMatMul, {x, w}, {}, "mm")});
  }
  return p;
}

// Two images through the same convolution one at a time, or as a batch.
RewritePair batched_conv(int64_t c, int64_t h) {
  RewritePair p{"two convs vs batched conv " + std::to_string(c) + "ch " + std::to_string(h) + "px", {}, {}};
  {
    Graph& g = p.before;
    ValueId a = g.add_input("a", {DType::kF32, {1, c, h, h}});
    ValueId b = g.add_input("b", {DType::kF32, {1, c, h, h}});
    ValueId w = g.add_constant("w", weights(DType::kF32, {c, c, 3, 3}));
    ValueId ya = g.add(OpKind::kConv, {a, w}, conv_attrs(3, 1, 1), "conv_a");
    ValueId yb = g.add(OpKind::kConv, {b, w}, conv_attrs(3, 1, 1), "conv_b");
    g.set_outputs({ya, yb});
  }
  {
    Graph& g = p.after;
    ValueId a = g.add_input("a", {DType::kF32, {1, c, h, h}});
    ValueId b = g.add_input("b", {DType::kF32, {1, c, h, h}});
    ValueId w = g.add_constant("w", weights(DType::kF32, {c, c, 3, 3}));
    Attrs cat;
    cat.set("axis", int64_t{0});
    ValueId x = g.add(OpKind::kConcat, {a, b}, cat, "batch");
    ValueId y = g.add(OpKind::kConv, {x, w}, conv_attrs(3, 1, 1), "conv");
    Attrs s;
    s.set("axis", int64_t{0});
    s.set("split", std::vector<int64_t>{1, 1});
    NodeId split = g.add_node(OpKind::kSplit, {y}, s, "unbatch");
    g.set_outputs(g.node(split).outputs);
  }
  return p;
}

// A 3x3 convolution + Relu feeding a 1x1 one, against the conv-winograd
// rule's F(m x m, 3x3) form of the first (made by the rule itself).
RewritePair winograd(int64_t c, int64_t h, int64_t m) {
  RewritePair p{"conv vs Winograd F(" + std::to_string(m) + ",3) " + std::to_string(c) + "ch " + std::to_string(h) +
                    "px",
                {}, {}};
  Graph& g = p.before;
  ValueId x = g.add_input("x", {DType::kF32, {1, c, h, h}});
  ValueId y = g.add(OpKind::kConv, {x, g.add_constant("w", weights(DType::kF32, {c, c, 3, 3}))}, conv_attrs(3, 1, 1),
                    "conv");
  y = g.add(OpKind::kRelu, {y}, {}, "relu");
  g.set_outputs({g.add(OpKind::kConv, {y, g.add_constant("w1", weights(DType::kF32, {c, c, 1, 1}))},
                       conv_attrs(1, 0, 1), "next")});
  auto users = g.users();
  mutator::RuleContext ctx{g, users};
  for (mutator::Mutation& mu : mutator::find_rule("conv-winograd").fn(ctx, 0))
    if (mu.description.find("F(" + std::to_string(m) + "x") != std::string::npos)
      p.after = mutator::apply_mutation(g, mu);
  return p;
}

}  // namespace

std::vector<RewritePair> rewrite_pairs() {
  std::vector<RewritePair> pairs;
  pairs.push_back(dilated_conv());
  pairs.push_back(merged_matmul(128, 768, 768));
  pairs.push_back(merged_matmul(1, 768, 3072));
  pairs.push_back(pretransposed(256, 1024, 1024));
  pairs.push_back(pretransposed(8, 4096, 1024));
  pairs.push_back(batched_conv(64, 56));
  pairs.push_back(batched_conv(256, 14));
  for (int64_t m : {2, 4}) {
    pairs.push_back(winograd(64, 56, m));
    pairs.push_back(winograd(256, 14, m));
    pairs.push_back(winograd(512, 28, m));
  }
  return pairs;
}

}  // namespace tessera::bench
