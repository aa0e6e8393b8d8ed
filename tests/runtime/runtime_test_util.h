// Shared helpers of the runtime tests: random tensors, small graph builders,
// and the comparison of a compiled plan against the reference interpreter.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/interpreter.h"
#include "graph/sharding.h"
#include "runtime/runtime.h"

namespace tessera::runtime::testing {

inline Tensor random_tensor(DType dtype, const Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = u(rng);
  return Tensor::from_doubles(dtype, shape, v);
}

inline Attrs attrs(std::initializer_list<std::pair<const char*, AttrValue>> kv) {
  Attrs a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

// A collective's attributes over mesh axis `axis`, plus `ints`.
inline Attrs collective_attrs(const DeviceMesh& mesh, int axis, std::vector<std::pair<const char*, int64_t>> ints) {
  Attrs a;
  a.set("mesh_axis", mesh.axes()[static_cast<size_t>(axis)].name);
  a.set("group_size", mesh.axes()[static_cast<size_t>(axis)].size);
  for (auto& [k, v] : ints) a.set(k, v);
  return a;
}

using Ints = std::vector<int64_t>;

// Compiles `g` for the CPU backend, runs it twice on fresh random inputs
// (the second run reuses the arena) and compares each output with the
// reference interpreter: |got - want| <= 1e-4 * (|want| + 1), relative for
// large values and absolute near zero, where f32 sums cancel.
inline ExecutablePlan expect_matches_reference(const Graph& g, RunOptions options = {}, uint32_t seed = 1) {
  ExecutablePlan plan = ExecutablePlan::compile(g, options);
  std::mt19937 rng(seed);
  for (int round = 0; round < 2; ++round) {
    std::vector<Tensor> inputs;
    for (ValueId v : g.inputs()) inputs.push_back(random_tensor(g.type(v).dtype, g.type(v).shape, rng));
    std::vector<Tensor> want = evaluate(g, inputs, Precision::kF64);
    std::vector<Tensor> got = plan.run(inputs);
    EXPECT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      EXPECT_EQ(got[i].type(), want[i].type()) << "output " << i;
      if (got[i].type() != want[i].type()) continue;
      int64_t bad = 0;
      std::string first;
      for (int64_t j = 0; j < got[i].numel(); ++j) {
        double a = got[i].get_double(j), b = want[i].get_double(j);
        if (!(std::fabs(a - b) <= 1e-4 * (std::fabs(b) + 1.0))) {
          if (bad++ == 0) first = "at " + std::to_string(j) + ": " + std::to_string(a) + " vs " + std::to_string(b);
        }
      }
      EXPECT_EQ(bad, 0) << "output " << i << " differs from the reference in " << bad << " of " << got[i].numel()
                        << " elements, first " << first;
    }
  }
  return plan;
}

// Op labels of the plan's kernels (profile order is by time; we only look
// for presence).
inline std::vector<std::string> kernel_ops(const Graph& g, RunOptions options = {}) {
  options.profile = true;
  ExecutablePlan plan = ExecutablePlan::compile(g, options);
  std::vector<Tensor> inputs;
  std::mt19937 rng(7);
  for (ValueId v : g.inputs()) inputs.push_back(random_tensor(g.type(v).dtype, g.type(v).shape, rng));
  plan.run(inputs);
  std::vector<std::string> ops;
  for (const KernelProfile& k : plan.profile().kernels) ops.push_back(k.op + (k.fallback ? "!" : ""));
  return ops;
}

// Copies with an empty dim, for every backend: Slices of an input with a dim
// of size 0 (a negative step and out-of-range starts, which clamp to [0, -1]
// without slice_plan's `dim == 0` guard), Slices that select nothing
// (start == end), and Concat / Split with empty pieces. Non-empty outputs
// are kept beside them so that a misplaced empty piece shows.
inline Graph empty_dims_graph(DType dt) {
  Graph g;
  ValueId e = g.add_input("e", {dt, {2, 0, 3}});
  ValueId x = g.add_input("x", {dt, {2, 4, 3}});
  auto slice = [&](ValueId v, Ints starts, Ints ends, Ints axes, Ints steps) {
    return g.add(OpKind::kSlice, {v}, attrs({{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}}));
  };
  ValueId reversed = slice(e, {-1, 1}, {-100, 3}, {1, 2}, {-1, 1});  // 2x0x2
  ValueId past_end = slice(e, {5}, {7}, {1}, {1});                   // 2x0x3
  ValueId nothing = slice(x, {1}, {1}, {1}, {1});                    // 2x0x3
  ValueId nothing_back = slice(x, {-2}, {2}, {1}, {-1});             // 2x0x3
  ValueId cat = g.add(OpKind::kConcat, {e, x, nothing}, attrs({{"axis", int64_t{1}}}));  // 2x4x3
  ValueId all_empty = g.add(OpKind::kConcat, {e, past_end}, attrs({{"axis", int64_t{0}}}));  // 4x0x3
  NodeId split = g.add_node(OpKind::kSplit, {x}, attrs({{"axis", int64_t{1}}, {"split", Ints{0, 3, 0, 1}}}));
  std::vector<ValueId> outs = {reversed, past_end, nothing, nothing_back, cat, all_empty};
  for (ValueId v : g.node(split).outputs) outs.push_back(v);
  g.set_outputs(outs);
  return g;
}

}  // namespace tessera::runtime::testing
