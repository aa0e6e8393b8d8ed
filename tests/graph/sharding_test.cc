// Device meshes and shardings: parsing, validation errors, rank coordinates,
// collective groups, and local shapes.
#include "graph/sharding.h"

#include <gtest/gtest.h>

#include "graph/error.h"
#include "graph/strategy.h"
#include "tests/graph/op_test_util.h"

namespace tessera {
namespace {

using test::error_of;

TEST(ShardingTest, MeshParseAndPrint) {
  DeviceMesh m = DeviceMesh::parse("dp=2,tp=4");
  ASSERT_EQ(m.axes().size(), 2u);
  EXPECT_EQ(m.axes()[0].name, "dp");
  EXPECT_EQ(m.axes()[1].size, 4);
  EXPECT_EQ(m.num_devices(), 8);
  EXPECT_EQ(m.str(), "dp=2,tp=4");
  EXPECT_EQ(m.axis_index("tp"), 1);
  EXPECT_EQ(m.axis_size("dp"), 2);
  EXPECT_EQ(DeviceMesh::parse(m.str()), m);
  EXPECT_EQ(DeviceMesh::parse("single").num_devices(), 1);
  EXPECT_EQ(DeviceMesh().str(), "single");
  EXPECT_FALSE(DeviceMesh::parse("tp=4") == DeviceMesh::parse("dp=4"));
}

TEST(ShardingTest, MeshErrors) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"tp", "expected NAME=SIZE"},
      {"=4", "expected NAME=SIZE"},
      {"tp=", "expected NAME=SIZE"},
      {"tp=4,", "expected NAME=SIZE"},
      {"tp=four", "size of 'tp' is not a number"},
      {"tp=4x", "size of 'tp' is not a number"},
      {"tp=0", "mesh axis 'tp' has size 0"},
      {"tp=-2", "mesh axis 'tp' has size -2"},
      {"tp=2,tp=2", "mesh axis 'tp' appears twice"},
  };
  for (const Case& c : cases) {
    Error e = error_of([&] { DeviceMesh::parse(c.text); });
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << c.text;
    EXPECT_NE(e.message().find(c.message), std::string::npos) << c.text << ": " << e.what();
  }
  Error missing = error_of([] { DeviceMesh::parse("tp=4").axis_index("dp"); });
  EXPECT_NE(missing.message().find("mesh tp=4 has no axis 'dp'"), std::string::npos) << missing.what();
}

TEST(ShardingTest, CoordsAreRowMajorAndInvertible) {
  DeviceMesh m = DeviceMesh::parse("dp=2,tp=3");
  EXPECT_EQ(m.coords(0), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(m.coords(2), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(m.coords(4), (std::vector<int64_t>{1, 1}));
  for (int64_t r = 0; r < m.num_devices(); ++r) EXPECT_EQ(m.rank_of(m.coords(r)), r);
  EXPECT_THROW(m.coords(6), Error);
}

TEST(ShardingTest, GroupsRunAlongOneAxis) {
  DeviceMesh m = DeviceMesh::parse("dp=2,tp=3");
  // Along tp: the ranks sharing rank 4's dp coordinate.
  EXPECT_EQ(m.group(4, 1), (std::vector<int64_t>{3, 4, 5}));
  // Along dp: the ranks sharing rank 4's tp coordinate.
  EXPECT_EQ(m.group(4, 0), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(m.group(0, 0), (std::vector<int64_t>{0, 3}));
}

TEST(ShardingTest, PlacementsPrintAndParse) {
  Sharding s{{Placement::shard(1), Placement::replicate(), Placement::partial()}};
  EXPECT_EQ(s.str(), "[S(1),R,P]");
  EXPECT_EQ(Sharding::parse("[S(1),R,P]"), s);
  EXPECT_EQ(Sharding::parse("[]").placements.size(), 0u);
  EXPECT_EQ(Sharding::parse("[S(0)]").placements[0], Placement::shard(0));
  EXPECT_FALSE(Sharding::parse("[S(0)]") == Sharding::parse("[S(1)]"));
  EXPECT_NE(Sharding::parse("[S(0),R]").hash(), Sharding::parse("[R,S(0)]").hash());
  Sharding s0r{{Placement::shard(0), Placement::replicate()}};
  EXPECT_EQ(Sharding::parse("[S(0),R]").hash(), s0r.hash());
}

TEST(ShardingTest, ShardingParseErrors) {
  for (const char* text : {"", "R", "[R", "[X]", "[S()]", "[S(a)]", "[R,,P]", "[r]", "[S(1x)]"}) {
    Error e = error_of([&] { Sharding::parse(text); });
    EXPECT_EQ(e.kind(), ErrorKind::kParse) << text;
  }
  Error e = error_of([] { Sharding::parse("[R,Q]"); });
  EXPECT_NE(e.message().find("bad placement 'Q'"), std::string::npos) << e.what();
}

TEST(ShardingTest, ValidateChecksMeshAndShape) {
  DeviceMesh m = DeviceMesh::parse("dp=2,tp=4");
  TensorType t{DType::kF32, {8, 12}};
  Sharding::parse("[S(0),S(1)]").validate(m, t);
  Sharding::parse("[R,P]").validate(m, t);
  Sharding::replicated(m).validate(m, t);
  EXPECT_EQ(Sharding::replicated(m).str(), "[R,R]");

  Error count = error_of([&] { Sharding::parse("[R]").validate(m, t); });
  EXPECT_EQ(count.kind(), ErrorKind::kInvalidGraph);
  EXPECT_NE(count.message().find("has 1 placements for mesh dp=2,tp=4"), std::string::npos) << count.what();

  Error range = error_of([&] { Sharding::parse("[S(2),R]").validate(m, t); });
  EXPECT_NE(range.message().find("splits dim 2 of f32[8x12]"), std::string::npos) << range.what();
  EXPECT_THROW(Sharding::parse("[S(-1),R]").validate(m, t), Error);

  Error divide = error_of([&] { Sharding::parse("[R,S(0)]").validate(m, TensorType{DType::kF32, {6, 12}}); });
  EXPECT_NE(divide.message().find("dim 0 of f32[6x12] is not divisible by mesh axis 'tp' (4)"), std::string::npos)
      << divide.what();
  // Two axes on one dim divide it twice: 8 / 2 / 4 = 1 is fine, 4 / 2 / 4 is not.
  Sharding::parse("[S(0),S(0)]").validate(m, t);
  EXPECT_THROW(Sharding::parse("[S(0),S(0)]").validate(m, TensorType{DType::kF32, {4, 12}}), Error);
}

TEST(ShardingTest, LocalShape) {
  DeviceMesh m = DeviceMesh::parse("dp=2,tp=4");
  EXPECT_EQ(Sharding::parse("[S(0),S(1)]").local_shape(m, {8, 12}), (Shape{4, 3}));
  EXPECT_EQ(Sharding::parse("[S(1),S(1)]").local_shape(m, {8, 16}), (Shape{8, 2}));
  EXPECT_EQ(Sharding::parse("[R,P]").local_shape(m, {8, 12}), (Shape{8, 12}));
}

// Uneven blocks (the spatial bands of an image the ranks do not divide):
// the first size % n blocks one element longer; allowed only when asked
// for, on a dim split over one whole axis, with a row for every rank.
TEST(ShardingTest, UnevenBlocks) {
  EXPECT_EQ(block_start(18, 4, 0), 0);
  EXPECT_EQ(block_start(18, 4, 1), 5);
  EXPECT_EQ(block_start(18, 4, 2), 10);
  EXPECT_EQ(block_start(18, 4, 3), 14);
  EXPECT_EQ(block_start(18, 4, 4), 18);
  EXPECT_EQ(block_size(7, 3, 0), 3);
  EXPECT_EQ(block_size(7, 3, 2), 2);
  EXPECT_EQ(block_size(8, 4, 3), 2);  // even: the plain quotient
  DeviceMesh tp4 = DeviceMesh::parse("tp=4");
  TensorType t{DType::kF32, {1, 3, 18, 6}};
  Sharding rows = Sharding::parse("[S(2)]");
  EXPECT_THROW(rows.validate(tp4, t), Error);
  rows.validate(tp4, t, Blocks::kUneven);
  EXPECT_FALSE(rows.is_even(tp4, t.shape));
  EXPECT_TRUE(rows.is_even(tp4, {1, 3, 16, 6}));
  EXPECT_THROW(rows.validate(tp4, TensorType{DType::kF32, {1, 3, 3, 6}}, Blocks::kUneven), Error);  // a rank without rows
  DeviceMesh two = DeviceMesh::parse("dp=2,tp=2");
  EXPECT_THROW(Sharding::parse("[S(2),S(2)]").validate(two, TensorType{DType::kF32, {1, 3, 18, 6}}, Blocks::kUneven),
               Error);  // two axes on an uneven dim
  EXPECT_EQ(rows.local_shape(tp4, t.shape), (Shape{1, 3, 5, 6}));  // the largest block
  EXPECT_EQ(rows.local_shape(tp4, t.shape, 1), (Shape{1, 3, 5, 6}));
  EXPECT_EQ(rows.local_shape(tp4, t.shape, 3), (Shape{1, 3, 4, 6}));
  std::vector<int64_t> offset;
  Shape size;
  local_block(tp4, rows, t.shape, 2, offset, size);
  EXPECT_EQ(offset, (std::vector<int64_t>{0, 0, 10, 0}));
  EXPECT_EQ(size, (Shape{1, 3, 4, 6}));
  // shard_of and unshard agree on the blocks.
  Tensor whole = Tensor::from_doubles(DType::kF32, {1, 1, 7, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13});
  DeviceMesh tp3 = DeviceMesh::parse("tp=3");
  std::vector<Tensor> blocks;
  for (int64_t r = 0; r < 3; ++r) blocks.push_back(shard_of(whole, rows, tp3, r));
  EXPECT_EQ(blocks[0].shape(), (Shape{1, 1, 3, 2}));
  EXPECT_EQ(blocks[2].shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(blocks[2].to_doubles(), (std::vector<double>{10, 11, 12, 13}));
  EXPECT_EQ(unshard(blocks, rows, tp3, whole.shape()).to_doubles(), whole.to_doubles());
}

// A shard in groups: dim 1 in 4 blocks over 8 ranks, each block held by
// 2 ranks (rank r holds block r / 2), as KV heads replicated over tp=8.
TEST(ShardingTest, ShardInGroups) {
  DeviceMesh m = DeviceMesh::parse("tp=8");
  Sharding s = Sharding::parse("[S(1/4)]");
  EXPECT_EQ(s.placements[0], Placement::shard_groups(1, 4));
  EXPECT_EQ(s.str(), "[S(1/4)]");
  EXPECT_NE(s.hash(), Sharding::parse("[S(1)]").hash());
  EXPECT_FALSE(s == Sharding::parse("[S(1)]"));
  TensorType cache{DType::kF32, {1, 4, 64, 16}};
  s.validate(m, cache);
  EXPECT_EQ(s.local_shape(m, cache.shape), (Shape{1, 1, 64, 16}));
  for (int64_t r = 0; r < 8; ++r) {
    std::vector<int64_t> off;
    Shape size;
    local_block(m, s, cache.shape, r, off, size);
    EXPECT_EQ(off[1], r / 2) << r;
    EXPECT_EQ(size, (Shape{1, 1, 64, 16}));
  }
  // The blocks of every rank give the tensor back; the second rank of each
  // group is a replica.
  Tensor whole = Tensor::from_doubles(DType::kF32, {2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  std::vector<Tensor> blocks;
  for (int64_t r = 0; r < 8; ++r) blocks.push_back(shard_of(whole, s, m, r));
  EXPECT_EQ(blocks[5].to_doubles(), (std::vector<double>{2, 6}));
  EXPECT_EQ(unshard(blocks, s, m, {2, 4}).to_doubles(), whole.to_doubles());
  // The groups divide the axis, leave two or more ranks a group, and do not
  // share a dim with another axis.
  for (const char* bad : {"[S(1/3)]", "[S(1/8)]"})
    EXPECT_EQ(error_of([&] { Sharding::parse(bad).validate(m, cache); }).kind(), ErrorKind::kInvalidGraph) << bad;
  EXPECT_THROW(Sharding::parse("[S(1/4)]").validate(m, TensorType{DType::kF32, {1, 6, 64, 16}}), Error);
  DeviceMesh two = DeviceMesh::parse("dp=2,tp=4");
  EXPECT_THROW(Sharding::parse("[S(1),S(1/2)]").validate(two, TensorType{DType::kF32, {1, 8}}), Error);
  EXPECT_EQ(error_of([] { Sharding::parse("[S(1/1)]"); }).kind(), ErrorKind::kParse);
}

}  // namespace
}  // namespace tessera
