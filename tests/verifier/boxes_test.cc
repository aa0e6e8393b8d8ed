#include "verifier/boxes.h"

#include <gtest/gtest.h>

namespace tessera::verifier {
namespace {

std::vector<uint8_t> mask_of(const Shape& shape, const std::vector<Box>& boxes) {
  std::vector<uint8_t> m(static_cast<size_t>(shape_numel(shape)), 0);
  std::vector<int64_t> idx(shape.size());
  for (int64_t i = 0; i < shape_numel(shape); ++i) {
    int64_t rem = i;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      idx[d] = rem % shape[d];
      rem /= shape[d];
    }
    for (const Box& b : boxes) m[i] |= b.contains(idx);
  }
  return m;
}

TEST(Boxes, EmptyMaskGivesNoBoxes) {
  EXPECT_TRUE(boxes_from_mask({3, 4}, std::vector<uint8_t>(12, 0)).empty());
}

TEST(Boxes, UniformBandIsOneBox) {
  Shape s = {2, 6, 5};
  Box band{{0, 2, 0}, {2, 4, 5}};
  std::vector<Box> got = boxes_from_mask(s, mask_of(s, {band}));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], band);
  EXPECT_EQ(got[0].str(), "[0:2, 2:4, 0:5]");
}

TEST(Boxes, CoverExactlyTheMaskAndAreDisjoint) {
  Shape s = {4, 5, 3};
  std::vector<uint8_t> m(60, 0);
  for (int i : {0, 1, 7, 8, 22, 23, 24, 40, 59}) m[i] = 1;
  std::vector<Box> got = boxes_from_mask(s, m);
  EXPECT_EQ(mask_of(s, got), m);
  int64_t covered = 0;
  for (const Box& b : got) covered += b.numel();
  EXPECT_EQ(covered, 9);  // disjoint: no position counted twice
}

TEST(Boxes, ScalarOutput) {
  std::vector<Box> got = boxes_from_mask({}, {1});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].lo.empty());
}

}  // namespace
}  // namespace tessera::verifier
