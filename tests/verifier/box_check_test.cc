// Splitting points, the position-wise evaluator and the box-sampling path of
// the multilinear test, against the whole-output evaluation as reference.
#include "verifier/box_check.h"

#include <gtest/gtest.h>

#include "graph/interpreter.h"
#include "tests/verifier/test_graphs.h"
#include "verifier/multilinear.h"
#include "verifier/index_maps.h"
#include "verifier/point_eval.h"
#include "verifier/random.h"
#include "verifier/split_points.h"

namespace tessera::verifier {
namespace {

using testing::concat;
using testing::conv;
using testing::f32;
using testing::Ints;
using testing::make_attrs;
using testing::slice;
using testing::transpose;

const DimSplits& splits_of(const std::vector<DimSplits>& s, ValueId v) { return s[static_cast<size_t>(v)]; }

TEST(SplitPoints, PadConcatAndSliceBounds) {
  Graph g;
  ValueId x = g.add_input("x", f32({4, 5})), y = g.add_input("y", f32({3, 5}));
  ValueId p = g.add(OpKind::kPad, {x}, make_attrs({{"pads", Ints{1, 0, 2, 0}}}));  // [7, 5]
  ValueId c = concat(g, {p, y}, 0);                                                  // [10, 5]
  ValueId s = slice(g, c, {2}, {9}, {0});                                             // rows 2..8
  g.set_outputs({s});
  auto sp = split_points(g);
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(splits_of(*sp, p), (DimSplits{{1, 5}, {}}));
  EXPECT_EQ(splits_of(*sp, c), (DimSplits{{1, 5, 7}, {}}));
  EXPECT_EQ(splits_of(*sp, s), (DimSplits{{3, 5}, {}}));
}

// A 3x3 conv with pad 1 changes form where its window leaves the input:
// rows 0 and H-1; over a seam at row 5 of the input, rows 4, 5 and 6.
TEST(SplitPoints, ConvWindowsTouchingEdgesAndSeams) {
  Graph g;
  ValueId a = g.add_input("a", f32({1, 1, 5, 4})), b = g.add_input("b", f32({1, 1, 5, 4}));
  ValueId w = g.add_input("w", f32({2, 1, 3, 3}));
  ValueId y = conv(g, concat(g, {a, b}, 2), w, {3, 3}, {1, 1, 1, 1});
  g.set_outputs({y});
  auto sp = split_points(g);
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(splits_of(*sp, y), (DimSplits{{}, {}, {1, 4, 5, 6, 9}, {1, 3}}));
}

TEST(SplitPoints, ReshapeMergeHasOnePeriodPerRow) {
  Graph g;
  ValueId x = g.add_input("x", f32({3, 4}));
  ValueId r = g.add(OpKind::kReshape, {x}, make_attrs({{"shape", Ints{12}}}));
  ValueId back = g.add(OpKind::kReshape, {r}, make_attrs({{"shape", Ints{2, 6}}}));
  g.set_outputs({back});
  auto sp = split_points(g);
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(splits_of(*sp, r), (DimSplits{{4, 8}}));
  // Flat 4 is (0, 4) in [2, 6]: row 0 splits at column 4, row 1 separately.
  EXPECT_EQ(splits_of(*sp, back), (DimSplits{{1}, {2, 4}}));
}

TEST(SplitPoints, ConstantDataSplitsWhereValuesChange) {
  Graph g;
  ValueId x = g.add_input("x", f32({4}));
  ValueId m = g.add_constant("m", Tensor::from_doubles(DType::kF32, {4}, {1, 1, 0, 0}));
  ValueId y = g.add(OpKind::kMul, {x, m});
  g.set_outputs({y});
  auto sp = split_points(g);
  ASSERT_TRUE(sp.has_value());
  EXPECT_EQ(splits_of(*sp, y), (DimSplits{{2}}));
}

TEST(SplitPoints, OpsWithoutRuleDecline) {
  Graph g;
  ValueId x = g.add_input("x", f32({4, 4}));
  g.set_outputs({g.add(OpKind::kTrilu, {x})});
  EXPECT_FALSE(split_points(g).has_value());
}

TEST(SplitPoints, GridBoxesAndSamples) {
  std::vector<Box> boxes = grid_boxes({4, 3}, DimSplits{{1}, {}});
  EXPECT_EQ(boxes, (std::vector<Box>{Box{{0, 0}, {1, 3}}, Box{{1, 0}, {4, 3}}}));
  // Corners (1,0), (1,2), (3,0), (3,2) and steps (2,0), (1,1).
  EXPECT_EQ(box_samples(boxes[1]).size(), 6u);
  EXPECT_EQ(grid_box_count({4, 3}, DimSplits{{1, 2}, {1}}), 6);
}

// Random small programs of shape-keeping ops on [1, 2, H, W]; the candidate
// is the same program with one decision changed, so outputs differ on part
// of the index space (or nowhere, when the change is neutral).
class ProgramMaker {
 public:
  explicit ProgramMaker(std::vector<uint64_t> choices) : choices_(std::move(choices)) {}

  Graph make() {
    at_ = 0;
    Graph g;
    ValueId x = g.add_input("x", f32({1, 2, kH, kW}));
    ValueId x2 = g.add_input("x2", f32({1, 2, kH, kW}));
    ValueId w = g.add_input("w", f32({2, 2, 3, 3}));
    ValueId bias = g.add_input("b", f32({1, 1, 1, kW}));
    ValueId v = x;
    for (int step = 0; step < 3; ++step) {
      switch (pick(8)) {
        case 0: {  // same-size conv, dilation 1 or 2
          int64_t d = 1 + static_cast<int64_t>(pick(2));
          v = conv(g, v, w, {3, 3}, {d, d, d, d}, {d, d});
          break;
        }
        case 1: {  // shift: pad then slice back to size
          int64_t p = static_cast<int64_t>(pick(3)), s = static_cast<int64_t>(pick(3));
          ValueId padded = g.add(OpKind::kPad, {v}, make_attrs({{"pads", Ints{0, 0, p, 0, 0, 0, 2 - p, 0}}}));
          v = slice(g, padded, {s}, {s + kH}, {2});
          break;
        }
        case 2:
          v = transpose(g, v, {0, 1, 3, 2});
          break;
        case 3:
          v = g.add(OpKind::kAdd, {g.add(OpKind::kRelu, {v}), bias});
          break;
        case 4: {  // concat with the second input, take a window of kH rows
          int64_t s = static_cast<int64_t>(pick(kH + 1));
          v = slice(g, concat(g, {v, x2}, 2), {s}, {s + kH}, {2});
          break;
        }
        case 5: {  // split along W and put back, in order or swapped
          NodeId sp = g.add_node(OpKind::kSplit, {v}, make_attrs({{"axis", int64_t{3}}, {"split", Ints{2, kW - 2}}}));
          ValueId a = g.node(sp).outputs[0], b = g.node(sp).outputs[1];
          v = pick(2) ? concat(g, {a, b}, 3) : concat(g, {b, a}, 3);
          if (g.type(v).shape[3] != kW) v = slice(g, v, {0}, {kW}, {3});
          break;
        }
        case 6:  // reversed along W: crosses the original's index map
          v = slice(g, v, {-1}, {-100}, {3}, {-1});
          break;
        default: {  // through a flat reshape and back
          ValueId r = g.add(OpKind::kReshape, {v}, make_attrs({{"shape", Ints{1, 2, kH * kW}}}));
          v = g.add(OpKind::kReshape, {r}, make_attrs({{"shape", Ints{1, 2, kH, kW}}}));
        }
      }
    }
    g.set_outputs({v});
    return g;
  }

  static constexpr int64_t kH = 6, kW = 6;

 private:
  uint64_t pick(uint64_t n) { return at_ < choices_.size() ? choices_[at_++] % n : 0; }
  std::vector<uint64_t> choices_;
  size_t at_ = 0;
};

TEST(BoxCheck, RandomProgramsGiveTheVerdictAndBoxesOfFullEvaluation) {
  SplitMix rng(2024);
  CheckOptions full, sampled;
  full.evaluation = CheckOptions::Evaluation::kFull;
  sampled.evaluation = CheckOptions::Evaluation::kBoxes;
  int differing = 0, decided = 0;
  for (int iter = 0; iter < 60; ++iter) {
    std::vector<uint64_t> choices(16);
    for (uint64_t& c : choices) c = rng.next();
    std::vector<uint64_t> changed = choices;
    changed[rng.next() % changed.size()] = rng.next();
    Graph a = ProgramMaker(choices).make(), b = ProgramMaker(changed).make();
    Verdict vf = check_equivalence(a, b, full), vs = check_equivalence(a, b, sampled);
    ASSERT_EQ(vs.kind, vf.kind) << "program " << iter << ": " << vs.summary() << " vs " << vf.summary();
    ASSERT_EQ(vs.differing.size(), vf.differing.size()) << "program " << iter;
    for (size_t j = 0; j < vs.differing.size(); ++j)
      EXPECT_EQ(vs.differing[j].boxes, vf.differing[j].boxes) << "program " << iter;
    differing += vf.kind == Verdict::kDiffers;
    decided += vs.sampled_boxes > 0;
  }
  // The generator must exercise both outcomes and the fast path itself.
  EXPECT_GT(differing, 10);
  EXPECT_GT(decided, 30);
}

// The position-wise evaluator computes exactly what interpret<Zp> does.
TEST(PointEvaluator, MatchesWholeEvaluationAtEveryPosition) {
  SplitMix rng(7);
  for (int iter = 0; iter < 10; ++iter) {
    std::vector<uint64_t> choices(16);
    for (uint64_t& c : choices) c = rng.next();
    Graph g = ProgramMaker(choices).make();
    std::vector<TensorType> types;
    for (ValueId v : g.inputs()) types.push_back(g.type(v));
    std::vector<RefTensor<Zp>> in = random_inputs<Zp>(types, rng);
    RefTensor<Zp> whole = interpret<Zp>(g, in)[0];
    int64_t work = 0;
    PointEvaluator pe(g, in, &work, INT64_MAX);
    std::vector<int64_t> idx;
    for (int64_t f = 0; f < whole.numel(); ++f) {
      int64_t rem = f;
      idx.assign(4, 0);
      for (int d = 3; d >= 0; --d) {
        idx[static_cast<size_t>(d)] = rem % whole.type.shape[static_cast<size_t>(d)];
        rem /= whole.type.shape[static_cast<size_t>(d)];
      }
      ASSERT_EQ(pe.output_at(0, idx), whole.num[static_cast<size_t>(f)].v) << "program " << iter << " at " << f;
    }
  }
}

TEST(PointEvaluator, StopsAtItsWorkBudget) {
  Graph g;
  ValueId a = g.add_input("a", f32({8, 64})), b = g.add_input("b", f32({64, 8}));
  g.set_outputs({g.add(OpKind::kMatMul, {a, b})});
  SplitMix rng(1);
  std::vector<RefTensor<Zp>> in = random_inputs<Zp>({g.type(a), g.type(b)}, rng);
  int64_t work = 0;
  PointEvaluator pe(g, in, &work, 100);
  EXPECT_NO_THROW(pe.output_at(0, {0, 0}));  // one dot product of 64
  EXPECT_EQ(work, 64);
  EXPECT_NO_THROW(pe.output_at(0, {0, 0}));  // memoized: free
  EXPECT_THROW(pe.output_at(0, {0, 1}), WorkBudgetExceeded);
}

// Large enough that the automatic choice samples boxes: a 32-channel conv
// on stacked images, wrong exactly on the two seam rows.
TEST(BoxCheck, AutoSamplesLargeProgramsAndFindsTheSeam) {
  const int64_t H = 16, W = 16;
  auto build = [&](bool batched) {
    Graph g;
    ValueId x0 = g.add_input("x0", f32({1, 32, H, W})), x1 = g.add_input("x1", f32({1, 32, H, W}));
    ValueId w = g.add_input("w", f32({32, 32, 3, 3}));
    Ints k = {3, 3}, p = {1, 1, 1, 1};
    if (batched) g.set_outputs({conv(g, concat(g, {x0, x1}, 2), w, k, p)});
    else g.set_outputs({concat(g, {conv(g, x0, w, k, p), conv(g, x1, w, k, p)}, 2)});
    return g;
  };
  Verdict v = check_equivalence(build(false), build(true));
  EXPECT_GT(v.sampled_boxes, 0);
  ASSERT_EQ(v.kind, Verdict::kDiffers) << v.summary();
  ASSERT_EQ(v.differing.size(), 1u);
  EXPECT_EQ(v.differing[0].boxes, (std::vector<Box>{Box{{0, 0, H - 1, 0}, {1, 32, H + 1, W}}}));
}

// A reversed slice agrees with the original at the middle row only: its
// index map crosses the original's inside the one box, which corner samples
// cannot see; the box is left to the whole evaluation, whose boxes exclude
// the middle row.
TEST(BoxCheck, CrossingIndexMapsAreLeftToFullEvaluation) {
  const int64_t n = 7;
  Graph a, b;
  a.set_outputs({a.add(OpKind::kIdentity, {a.add_input("x", f32({n, 3}))})});
  b.set_outputs({slice(b, b.add_input("x", f32({n, 3})), {-1}, {-100}, {0}, {-1})});
  CheckOptions sampled;
  sampled.evaluation = CheckOptions::Evaluation::kBoxes;
  Verdict v = check_equivalence(a, b, sampled);
  EXPECT_EQ(v.sampled_boxes, 0);
  ASSERT_EQ(v.kind, Verdict::kDiffers);
  EXPECT_EQ(v.differing[0].boxes, (std::vector<Box>{Box{{0, 0}, {3, 3}}, Box{{4, 0}, {7, 3}}}));
}

TEST(IndexMaps, LinearPartsComposeThroughOps) {
  Graph g;
  ValueId x = g.add_input("x", f32({4, 6}));
  ValueId t = transpose(g, x, {1, 0});                      // [6, 4]
  ValueId s = slice(g, t, {0}, {6}, {0}, {2});              // [3, 4], rows step 2
  ValueId r = g.add(OpKind::kReshape, {s}, make_attrs({{"shape", Ints{12}}}));
  g.set_outputs({r});
  auto reads = linear_reads(g);
  ASSERT_TRUE(reads.has_value());
  // s[i, j] = x[j, 2i]; r[f] = s[f / 4, f % 4]: only the inner dim moves in a box.
  EXPECT_EQ((*reads)[static_cast<size_t>(s)], (LinearReads{{0, {0, 1, 2, 0}}}));
  EXPECT_EQ((*reads)[static_cast<size_t>(r)], (LinearReads{{0, {1, 0}}}));
  const LinearReads& rs = (*reads)[static_cast<size_t>(s)];
  const LinearReads& rx = (*reads)[static_cast<size_t>(x)];  // [4, 6]: identity
  EXPECT_TRUE(single_linear_part(rs, rs, {true, true}));
  EXPECT_FALSE(single_linear_part(rs, rx, {true, true}));
  // Inside a box one row high the two maps differ only along dims that move.
  EXPECT_FALSE(single_linear_part(rs, rx, {false, true}));
  EXPECT_TRUE(single_linear_part(rs, rx, {false, false}));
}

}  // namespace
}  // namespace tessera::verifier
