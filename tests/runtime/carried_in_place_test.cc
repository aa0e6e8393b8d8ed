// Outputs computed in a donated input's buffer (ExecutablePlan::
// in_place_inputs, run with donated inputs; runtime/plan.cc): a KV cache
// written at a position by ScatterElements is returned in the caller's
// buffer, step after step, with the reference interpreter's values; the
// aliasing is refused where the old cache is read after the write, where
// the write's updates are a view of the cache, and where the caller still
// holds the cache (then a copy is written and the caller's is unchanged).
#include <gtest/gtest.h>

#include <cmath>

#include "graph/error.h"
#include "graph/interpreter.h"
#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

using testing::attrs;
using testing::Ints;

const Shape kCache{1, 2, 8, 4};

// cache [1, 2, 8, 4] written at `at` [1, 2, 1, 4] with `kv`; the written
// cache is output 0, and output 1 is the written cache doubled (a reader
// of the new values after the write). With `read_old_after`, output 2 adds
// the old cache to the new one (a reader of the old values after the
// write); with `read_old_before`, kv is scaled by the old cache's sum first
// (a reader of the old values that the write depends on).
Graph cache_step(bool read_old_after, bool read_old_before = false) {
  Graph g;
  ValueId cache = g.add_input("past", {DType::kF32, kCache});
  ValueId at = g.add_input("at", {DType::kI64, {1, 2, 1, 4}});
  ValueId kv = g.add_input("kv", {DType::kF32, {1, 2, 1, 4}});
  if (read_old_before) {
    ValueId sum = g.add(OpKind::kReduceSum, {cache}, attrs({{"keepdims", int64_t{0}}}), "sum");
    kv = g.add(OpKind::kMul, {kv, sum}, {}, "scale");
  }
  NodeId w = g.add_node(OpKind::kScatterElements, {cache, at, kv}, attrs({{"axis", int64_t{2}}}), "write", {"present"});
  ValueId present = g.node(w).outputs[0];
  ValueId two = g.add_constant("two", Tensor::from_doubles(DType::kF32, {}, {2.0}));
  std::vector<ValueId> outs{present, g.add(OpKind::kMul, {present, two}, {}, "double")};
  if (read_old_after) outs.push_back(g.add(OpKind::kAdd, {present, cache}, {}, "old_plus_new"));
  g.set_outputs(outs);
  return g;
}

std::vector<Tensor> step_inputs(const Tensor& cache, int64_t position, std::mt19937& rng) {
  return {cache, Tensor::from_ints(DType::kI64, {1, 2, 1, 4}, std::vector<int64_t>(8, position)),
          testing::random_tensor(DType::kF32, {1, 2, 1, 4}, rng)};
}

Tensor copy_of(const Tensor& t) {
  return Tensor::from_bytes(t.dtype(), t.shape(), std::vector<uint8_t>(t.data(), t.data() + t.nbytes()));
}

std::vector<Tensor> reference_run(const Graph& g, const std::vector<Tensor>& inputs) {
  return evaluate(g, inputs, Precision::kF64);
}

// Equal up to f32 rounding (the reference sums in f64).
void expect_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_NEAR(a.get_double(i), b.get_double(i), 1e-5 * (std::fabs(b.get_double(i)) + 1)) << what << " element " << i;
}

// The plan's donated steps against the reference interpreter's, which
// copies: the same outputs at every step, and whether the cache stayed in
// the buffer it was given.
void run_steps(const Graph& g, bool expect_in_place) {
  ExecutablePlan plan = ExecutablePlan::compile(g);
  ASSERT_EQ(plan.in_place_inputs().size(), g.outputs().size());
  EXPECT_EQ(plan.in_place_inputs()[0], expect_in_place ? 0 : -1);
  for (size_t j = 1; j < g.outputs().size(); ++j) EXPECT_EQ(plan.in_place_inputs()[j], -1) << j;
  EXPECT_EQ(plan.memory().carried_in_place, expect_in_place ? 1 : 0);
  std::mt19937 rng(7);
  Tensor cache = testing::random_tensor(DType::kF32, kCache, rng), ref_cache = copy_of(cache);
  const uint8_t* buffer = cache.data();
  for (int64_t position : {3, 0, 7, 3}) {
    std::vector<Tensor> in = step_inputs(cache, position, rng);
    std::vector<Tensor> ref_in = in;
    ref_in[0] = ref_cache;
    cache = Tensor();  // the step's inputs hold the only copy: donated
    std::vector<Tensor> want = reference_run(g, ref_in);
    std::vector<Tensor> got = plan.run(in, {true, false, false});
    // Compared while the input is alive, so that no new buffer can be at its address.
    EXPECT_EQ(got[0].data() == in[0].data(), expect_in_place) << "position " << position;
    if (expect_in_place) EXPECT_EQ(got[0].data(), buffer) << "position " << position;
    in.clear();
    for (size_t j = 0; j < want.size(); ++j) expect_equal(got[j], want[j], "output " + std::to_string(j));
    cache = got[0];
    ref_cache = want[0];
  }
}

TEST(CarriedInPlace, CacheWrittenInItsOwnBufferStepAfterStep) { run_steps(cache_step(false), true); }

TEST(CarriedInPlace, ReadersOfTheOldCacheOrderedBeforeTheWriteAreAllowed) {
  run_steps(cache_step(false, true), true);
}

TEST(CarriedInPlace, RefusedWhereTheOldCacheIsReadAfterTheWrite) { run_steps(cache_step(true), false); }

TEST(CarriedInPlace, RefusedWhereTheUpdatesAreAViewOfTheCache) {
  // ScatterND moving rows of a [4, 2] cache that its updates read (a
  // Reshape of the cache: an alias): written in place it would read rows it
  // has overwritten.
  Graph g;
  ValueId cache = g.add_input("past", {DType::kF32, {4, 2}});
  ValueId rows = g.add_constant("rows", Tensor::from_ints(DType::kI64, {4, 1}, {1, 0, 3, 2}));
  ValueId view = g.add(OpKind::kReshape, {cache}, attrs({{"shape", Ints{4, 2}}}), "view");
  NodeId w = g.add_node(OpKind::kScatterND, {cache, rows, view}, {}, "swap", {"present"});
  g.set_outputs({g.node(w).outputs[0]});
  ExecutablePlan plan = ExecutablePlan::compile(g);
  EXPECT_EQ(plan.in_place_inputs()[0], -1);
  Tensor c = Tensor::from_doubles(DType::kF32, {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  std::vector<Tensor> in{c};
  c = Tensor();
  std::vector<Tensor> got = plan.run(in, {true});
  expect_equal(got[0], Tensor::from_doubles(DType::kF32, {4, 2}, {3, 4, 1, 2, 7, 8, 5, 6}), "swapped rows");
}

TEST(CarriedInPlace, ACacheTheCallerStillHoldsIsCopiedNotOverwritten) {
  Graph g = cache_step(false);
  ExecutablePlan plan = ExecutablePlan::compile(g);
  std::mt19937 rng(3);
  Tensor cache = testing::random_tensor(DType::kF32, kCache, rng), before = copy_of(cache);
  std::vector<Tensor> in = step_inputs(cache, 2, rng);  // `cache` still held here
  std::vector<Tensor> got = plan.run(in, {true, false, false});
  EXPECT_NE(got[0].data(), cache.data());
  expect_equal(cache, before, "the caller's cache");
  expect_equal(got[0], reference_run(g, {before, in[1], in[2]})[0], "written copy");
}

TEST(CarriedInPlace, WithoutDonationTheInputIsNotWritten) {
  Graph g = cache_step(false);
  ExecutablePlan plan = ExecutablePlan::compile(g);
  std::mt19937 rng(5);
  Tensor cache = testing::random_tensor(DType::kF32, kCache, rng), before = copy_of(cache);
  std::vector<Tensor> in = step_inputs(cache, 6, rng);
  cache = Tensor();
  std::vector<Tensor> got = plan.run(in);
  EXPECT_NE(got[0].data(), in[0].data());
  expect_equal(in[0], before, "an input not donated");
}

}  // namespace
}  // namespace tessera::runtime
