// The native scatter kernels (runtime/cpu/native_scatter.cc) against the
// reference interpreter: ScatterElements and ScatterND without a reduction,
// f32 and bf16 data, i64 and i32 indices, negative ones; in place where the
// data dies at the scatter; a bad index fails naming the node.
#include <gtest/gtest.h>

#include <algorithm>

#include "graph/error.h"
#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

using testing::attrs;
using testing::expect_matches_reference;
using testing::kernel_ops;

// A KV cache [1, 2, 8, 4] computed here (a + b, which dies at the write),
// written at position 5 (head 1's index given as -3) along axis 2, then
// doubled; beside it a ScatterND of head 1's rows of `a` with i32 indices.
Graph cache_write(const std::string& reduction, DType dt = DType::kF32, int64_t position = 5) {
  Graph g;
  ValueId a = g.add_input("a", {dt, {1, 2, 8, 4}}), b = g.add_input("b", {dt, {1, 2, 8, 4}});
  ValueId kv = g.add_input("kv", {dt, {1, 2, 1, 4}});
  std::vector<int64_t> at(8, position);
  for (size_t i = 4; i < 8; ++i) at[i] = position - 8;
  ValueId idx = g.add_constant("idx", Tensor::from_ints(DType::kI64, {1, 2, 1, 4}, at));
  ValueId cache = g.add(OpKind::kAdd, {a, b}, {}, "cache");
  ValueId present = g.add(OpKind::kScatterElements, {cache, idx, kv},
                          attrs({{"axis", int64_t{2}}, {"reduction", reduction}}), "write");
  ValueId two = g.add_constant("two", Tensor::from_doubles(dt, {}, {2.0}));
  ValueId rows = g.add_constant("rows", Tensor::from_ints(DType::kI32, {1, 2}, {0, -1}));
  ValueId nd = g.add(OpKind::kScatterND, {a, rows, g.add_input("upd", {dt, {1, 8, 4}})}, {}, "rows");
  g.set_outputs({g.add(OpKind::kMul, {present, two}, {}, "double"), nd});
  return g;
}

int count_of(const std::vector<std::string>& ops, const std::string& op) {
  return static_cast<int>(std::count(ops.begin(), ops.end(), op));
}

TEST(NativeScatter, WritesInPlaceWhereTheDataDies) {
  ExecutablePlan plan = expect_matches_reference(cache_write("none"));
  std::vector<std::string> ops = kernel_ops(cache_write("none"));
  EXPECT_EQ(count_of(ops, "ScatterElements"), 1);
  EXPECT_EQ(count_of(ops, "ScatterND"), 1);
  // The same graph with a reduction runs the reference kernel, which copies:
  // one buffer fewer is taken over.
  ExecutablePlan added = expect_matches_reference(cache_write("add"));
  EXPECT_EQ(count_of(kernel_ops(cache_write("add")), "ScatterElements!"), 1);
  EXPECT_EQ(plan.memory().in_place, added.memory().in_place + 1);
}

TEST(NativeScatter, SixteenBitDataIsCopiedAsItIs) {
  expect_matches_reference(cache_write("none", DType::kBF16));
  for (const std::string& op : kernel_ops(cache_write("none", DType::kBF16)))
    if (op.rfind("Scatter", 0) == 0) EXPECT_EQ(op.find('!'), std::string::npos) << op << " fell back";
}

TEST(NativeScatter, AnIndexOutOfRangeFailsNamingTheNode) {
  // Position 8 is past the cache; position -1 is 7 on head 0 and -9 on head 1.
  for (int64_t position : {8, -1}) {
    Graph g = cache_write("none", DType::kF32, position);
    ExecutablePlan plan = ExecutablePlan::compile(g);
    std::mt19937 rng(2);
    std::vector<Tensor> inputs;
    for (ValueId v : g.inputs()) inputs.push_back(testing::random_tensor(g.type(v).dtype, g.type(v).shape, rng));
    std::string bad = "index " + std::to_string(position == 8 ? 8 : -9) + " is out of range for axis 2 of size 8";
    try {
      plan.run(inputs);
      ADD_FAILURE() << "ran with " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("'write'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tessera::runtime
