// graph/liveness.h: the peak of live bytes, on small graphs worked out by hand.
#include "graph/liveness.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

int64_t activation_peak(const Graph& g) {
  return peak_live_bytes(g, g.topo_order(), [&](ValueId v) { return g.value(v).is_constant() ? 0 : g.type(v).nbytes(); });
}

TEST(Liveness, ChainHoldsTwoValuesAtOnce) {
  // x -> a -> b -> c, each 400 bytes: a step holds its input and output.
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {100}});
  ValueId a = g.add(OpKind::kRelu, {x}, {}, "a");
  ValueId b = g.add(OpKind::kRelu, {a}, {}, "b");
  g.set_outputs({g.add(OpKind::kRelu, {b}, {}, "c")});
  EXPECT_EQ(activation_peak(g), 800);
  std::vector<int64_t> last = last_uses(g, g.topo_order());
  EXPECT_EQ(last[static_cast<size_t>(x)], 0);
  EXPECT_EQ(last[static_cast<size_t>(b)], 2);
  EXPECT_EQ(last[static_cast<size_t>(g.outputs()[0])], 3);  // past the end
}

TEST(Liveness, ValueReadTwiceByOneNodeIsFreedOnce) {
  // Mul(a, a) reads a twice at its last use: a is freed once (freed twice,
  // the last step would count 800 instead of 1200).
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {100}});
  ValueId a = g.add(OpKind::kRelu, {x}, {}, "a");
  ValueId sq = g.add(OpKind::kMul, {a, a}, {}, "sq");
  ValueId b = g.add(OpKind::kRelu, {sq}, {}, "b");
  g.set_outputs({g.add(OpKind::kAdd, {b, sq}, {}, "c")});
  // Step sq: a and sq live (x died at step a); step b: sq, b; step c: sq, b, c.
  EXPECT_EQ(activation_peak(g), 1200);
}

TEST(Liveness, UnreadOutputLivesOnlyThroughItsStepAndConstantsFromFirstReader) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {100}});
  ValueId w = g.add_constant("w", Tensor(DType::kF32, {1000}));
  ValueId dead = g.add(OpKind::kRelu, {x}, {}, "dead");  // nothing reads it
  (void)dead;
  ValueId y = g.add(OpKind::kNeg, {x}, {}, "y");
  ValueId s = g.add(OpKind::kReduceSum, {w}, {}, "s");
  g.set_outputs({g.add(OpKind::kAdd, {y, s}, {}, "z")});
  const int64_t sb = g.type(s).nbytes();
  // Activations only: x + dead at step 0 = 800 (dead is then dropped, or
  // the last step would hold 1200); x + y at step 1; y + s + z at the last.
  EXPECT_EQ(activation_peak(g), 800 + sb);
  // Every value: w (4000) joins at its reader, after x died at step 1.
  int64_t all = peak_live_bytes(g, g.topo_order(), [&](ValueId v) { return g.type(v).nbytes(); });
  EXPECT_EQ(all, 400 + 4000 + sb);  // y, w and s at step 2
}

}  // namespace
}  // namespace tessera
