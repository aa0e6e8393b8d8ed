// Small graphs and checks the mutator tests share.
#pragma once

#include <random>

#include "cost/device_profile.h"
#include "graph/graph.h"
#include "graph/interpreter.h"
#include "mutator/sharding/propagate.h"
#include "verifier/plan_check.h"
#include "verifier/program.h"

namespace tessera::mutator::testing {

inline const cost::DeviceProfile& h100() {
  static const cost::DeviceProfile p = cost::resolve_device("h100");
  return p;
}

// The shipped reference CPU profile (not this host's rescaled one): tests
// must not depend on the machine.
inline const cost::DeviceProfile& reference_cpu() {
  static const cost::DeviceProfile p = cost::load_profile(TESSERA_SOURCE_DIR "/cost/profiles/cpu.json");
  return p;
}
inline const cost::DeviceProfile& cpu() { return reference_cpu(); }

// Nodes of kind `k` in `g`.
inline int count(const Graph& g, OpKind k) {
  int c = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n) c += g.node(n).kind == k;
  return c;
}

inline Tensor random_tensor(DType dtype, Shape shape, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t(dtype, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.set_double(i, dist(rng));
  return t;
}

inline ValueId weight(Graph& g, const std::string& name, Shape shape, std::mt19937_64& rng) {
  return g.add_constant(name, random_tensor(DType::kF32, std::move(shape), rng));
}

// Exporters name weights arbitrarily but keep module paths in node names:
// a two-layer MLP as torch writes it, for the annotation tests.
inline Graph torch_like_mlp() {
  std::mt19937_64 rng(1);
  Graph g;
  ValueId x = g.add_input("input", {DType::kF32, {4, 8}});
  ValueId w1 = weight(g, "onnx::MatMul_1144", {8, 16}, rng);
  ValueId w2 = weight(g, "onnx::MatMul_1145", {16, 8}, rng);
  ValueId h = g.add(OpKind::kMatMul, {x, w1}, {}, "/blocks.0/fc1/MatMul");
  ValueId a = g.add(OpKind::kRelu, {h}, {}, "/blocks.0/act/Relu");
  g.set_outputs({g.add(OpKind::kMatMul, {a, w2}, {}, "/blocks.0/fc2/MatMul")});
  return g;
}

inline Attrs conv_attrs(int64_t k, int64_t stride = 1, int64_t pad = 0) {
  Attrs a;
  a.set("kernel_shape", std::vector<int64_t>{k, k});
  a.set("strides", std::vector<int64_t>{stride, stride});
  a.set("pads", std::vector<int64_t>{pad, pad, pad, pad});
  a.set("dilations", std::vector<int64_t>{1, 1});
  return a;
}

// Largest |a - b| over all outputs of two graphs run on the same seeded inputs.
inline double max_output_diff(const Graph& a, const Graph& b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs;
  for (ValueId v : a.inputs()) inputs.push_back(random_tensor(a.type(v).dtype, a.type(v).shape, rng));
  std::vector<Tensor> x = evaluate(a, inputs, Precision::kF64), y = evaluate(b, inputs, Precision::kF64);
  if (x.size() != y.size()) return 1e30;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].type() != y[i].type()) return 1e30;
    for (int64_t k = 0; k < x[i].numel(); ++k) worst = std::max(worst, std::abs(x[i].get_double(k) - y[i].get_double(k)));
  }
  return worst;
}

// Three projections of one activation with biases, as attention's Q/K/V.
inline Graph qkv_graph(int64_t tokens, int64_t width, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, tokens, width}});
  std::vector<ValueId> outs;
  for (const char* n : {"q", "k", "v"}) {
    ValueId m = g.add(OpKind::kMatMul, {x, weight(g, std::string(n) + "_w", {width, width}, rng)}, {}, std::string(n) + "_mm");
    outs.push_back(g.add(OpKind::kAdd, {m, weight(g, std::string(n) + "_b", {width}, rng)}, {}, std::string(n) + "_add"));
  }
  ValueId s = g.add(OpKind::kAdd, {outs[0], outs[1]}, {}, "sum");
  g.set_outputs({s, outs[2]});
  return g;
}

// The ranks' programs of a sharded graph checked end to end against it.
inline verifier::EndToEndReport check_ranks(const Graph& g, const ShardedGraph& s, std::vector<Graph> ranks) {
  verifier::ShardedProgram sp;
  sp.mesh = s.mesh;
  sp.per_rank = std::move(ranks);
  sp.input_shardings = s.inputs;
  sp.output_shardings = s.outputs;
  return verifier::check_end_to_end(verifier::Program(g), verifier::Program(sp));
}

}  // namespace tessera::mutator::testing
