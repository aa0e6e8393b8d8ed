// The plan picture (report/plan_picture.h): repeated blocks found in a
// label sequence, and a stack of identical layers drawn once with every
// copy still named; the splice's node names read back as their subprogram.
#include "report/plan_picture.h"

#include <gtest/gtest.h>

#include <random>

#include "mutator/mutation.h"
#include "tests/mutator/mutator_test_util.h"

namespace tessera::report {
namespace {

using namespace tessera::mutator;

std::vector<uint64_t> seq(const std::string& s) { return {s.begin(), s.end()}; }

std::string blocks_str(const std::vector<PictureBlock>& bs) {
  std::string out;
  for (const PictureBlock& b : bs)
    out += b.times == 1 ? std::to_string(b.first) + " "
                        : "[" + std::to_string(b.first) + "+" + std::to_string(b.length) + "x" + std::to_string(b.times) + "] ";
  return out;
}

TEST(CollapseRepeats, FindsTheLongestRunOfEqualBlocks) {
  // xy, then abcd four times, then z: one block of 4 entries times 4.
  EXPECT_EQ(blocks_str(collapse_repeats(seq("xyabcdabcdabcdabcdz"))), "0 1 [2+4x4] 18 ");
  // Both sides of a block are searched again.
  EXPECT_EQ(blocks_str(collapse_repeats(seq("abababababqrsqrsqrsqrs"), 6)), "[0+2x5] [10+3x4] ");
  // Only repeats that save at least min_saved entries.
  EXPECT_EQ(blocks_str(collapse_repeats(seq("abcabc"), 6)), "0 1 2 3 4 5 ");
  EXPECT_EQ(blocks_str(collapse_repeats(seq("abcabc"), 3)), "[0+3x2] ");
  // The shortest period of a run: aaaa... is one entry many times.
  EXPECT_EQ(blocks_str(collapse_repeats(seq("aaaaaaaaa"), 6)), "[0+1x9] ");
  EXPECT_TRUE(collapse_repeats({}).empty());
}

// Copies only begin and end where cuts allow: abab... with cuts only
// before each b starts the block at the first b.
TEST(CollapseRepeats, CopiesBeginOnlyWhereCutsAllow) {
  std::vector<uint64_t> labels = seq("abababababab");
  std::vector<bool> cut(labels.size() + 1, false);
  for (size_t i = 1; i < labels.size(); i += 2) cut[i] = true;
  EXPECT_EQ(blocks_str(collapse_repeats(labels, 6, cut)), "0 [1+2x5] 11 ");
  cut.assign(labels.size() + 1, false);
  EXPECT_EQ(blocks_str(collapse_repeats(labels, 6, cut)), "0 1 2 3 4 5 6 7 8 9 10 11 ");
}

TEST(CollapseRepeats, CoversEveryEntryOnce) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint64_t> labels;
    for (int i = 0; i < 60; ++i) labels.push_back(rng() % 3);
    size_t next = 0;
    for (const PictureBlock& b : collapse_repeats(labels, 2)) {
      ASSERT_EQ(b.first, next);
      for (int c = 1; c < b.times; ++c)
        for (size_t j = 0; j < b.length; ++j) ASSERT_EQ(labels[b.first + j], labels[b.first + c * b.length + j]);
      next = b.first + b.length * static_cast<size_t>(b.times);
    }
    EXPECT_EQ(next, labels.size());
  }
}

// Eight identical MatMul+Tanh layers: drawn once in a frame "repeated N
// times", every layer's node named in the tooltips.
TEST(PlanSvg, StackOfLayersIsDrawnOnceAndNamesEveryCopy) {
  std::mt19937_64 rng(1);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 8}});
  for (int i = 0; i < 8; ++i) {
    ValueId w = testing::weight(g, "w" + std::to_string(i), {8, 8}, rng);
    x = g.add(OpKind::kTanh, {g.add(OpKind::kMatMul, {x, w}, {}, "layer" + std::to_string(i) + "/mm")}, {},
              "layer" + std::to_string(i) + "/tanh");
  }
  g.set_outputs({x});
  PictureInput in;
  in.lanes = {&g};
  in.lane_titles = {"plan"};
  std::string svg = plan_svg(in);
  EXPECT_NE(svg.find("repeated"), std::string::npos) << svg;
  for (int i = 0; i < 8; ++i) EXPECT_NE(svg.find("layer" + std::to_string(i) + "/mm"), std::string::npos) << i;
  // Drawn once: far fewer boxes than the 16 ops.
  size_t boxes = 0;
  for (size_t at = svg.find("<g class=\"op"); at != std::string::npos; at = svg.find("<g class=\"op", at + 1)) ++boxes;
  EXPECT_LT(boxes, 8u) << svg;
  EXPECT_GE(boxes, 2u);
}

TEST(PlanSvg, SplicedNodesAreMarkedWithTheirSubprogram) {
  EXPECT_EQ(spliced_subprogram(MutationId::splice(12).name() + "_40"), 12);
  EXPECT_EQ(spliced_subprogram("subprogram-x_1"), -1);
  EXPECT_EQ(spliced_subprogram("layer0/mm"), -1);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4, 4}});
  ValueId y = g.add(OpKind::kRelu, {g.add(OpKind::kNeg, {x}, {}, "subprogram-3_7")}, {}, "relu");
  g.set_outputs({y});
  PictureInput in;
  in.lanes = {&g};
  in.lane_titles = {"plan"};
  in.subprograms[3] = {5, "some-rule"};
  std::string svg = plan_svg(in);
  EXPECT_NE(svg.find("data-subprograms=\"3\""), std::string::npos) << svg;
  EXPECT_NE(svg.find("#5 some-rule"), std::string::npos) << svg;
  EXPECT_NE(svg.find("op changed"), std::string::npos) << svg;
}

}  // namespace
}  // namespace tessera::report
