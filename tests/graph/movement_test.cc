// Tests of the data-movement op family (graph/ops/movement.cc,
// graph/ops/movement_index.cc, graph/ops/scatter.cc; Resize has
// resize_test.cc). Expected values
// were computed with numpy when the tests were written. Most value tests run
// twice, on i64 data (integer storage of the interpreter) and on f32 data
// (number storage).
#include <gtest/gtest.h>

#include "graph/dim_map.h"
#include "graph/error.h"
#include "graph/graph.h"
#include "graph/interpreter.h"
#include "graph/op.h"
#include "tests/graph/op_test_util.h"

namespace tessera {
namespace {

using Ints = std::vector<int64_t>;

using test::expect_infer_error;
using test::i64;
using test::make_attrs;

Tensor iota_i64(Shape shape, int64_t offset = 0) {
  Ints v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i) + offset;
  return i64(std::move(shape), v);
}

// One-node graph; inputs with `constant` set become graph constants.
struct In {
  Tensor t;
  bool constant = false;
};

std::vector<Tensor> run_node(OpKind kind, const std::vector<In>& ins, Attrs attrs) {
  Graph g;
  std::vector<ValueId> ids;
  std::vector<Tensor> feeds;
  for (size_t i = 0; i < ins.size(); ++i) {
    std::string name = "in" + std::to_string(i);
    if (ins[i].constant) {
      ids.push_back(g.add_constant(name, ins[i].t));
    } else {
      ids.push_back(g.add_input(name, ins[i].t.type()));
      feeds.push_back(ins[i].t);
    }
  }
  NodeId n = g.add_node(kind, ids, std::move(attrs));
  g.set_outputs(g.node(n).outputs);
  return evaluate(g, feeds, Precision::kF64);
}

Tensor run_op(OpKind kind, const std::vector<In>& ins, Attrs attrs = {}) { return run_node(kind, ins, std::move(attrs)).at(0); }

// Runs the op with `data` as i64 and as f32 (other inputs as given) and checks
// both against `want`.
void check_both(OpKind kind, const Tensor& data, std::vector<In> rest, const Attrs& attrs, const Shape& shape,
                const Ints& want) {
  for (DType dt : {DType::kI64, DType::kF32}) {
    std::vector<In> ins{{data.cast(dt)}};
    ins.insert(ins.end(), rest.begin(), rest.end());
    Tensor y = run_op(kind, ins, attrs);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(y.shape(), shape) << dtype_name(dt);
    EXPECT_EQ(y.to_ints(), want) << dtype_name(dt);
  }
}


TEST(MovementTest, ReshapeFlattenSqueezeUnsqueezeKeepData) {
  Tensor x = iota_i64({2, 3, 1});
  Ints flat = x.to_ints();
  check_both(OpKind::kReshape, x, {}, make_attrs({{"shape", Ints{3, 2}}}), {3, 2}, flat);
  check_both(OpKind::kFlatten, x, {}, make_attrs({{"axis", int64_t{-1}}}), {6, 1}, flat);
  check_both(OpKind::kFlatten, x, {}, make_attrs({{"axis", int64_t{0}}}), {1, 6}, flat);
  check_both(OpKind::kSqueeze, x, {}, make_attrs({{"axes", Ints{-1}}}), {2, 3}, flat);
  check_both(OpKind::kUnsqueeze, x, {}, make_attrs({{"axes", Ints{0, -1}}}), {1, 2, 3, 1, 1}, flat);
}

TEST(MovementTest, ShapeErrors) {
  TensorType t{DType::kF32, {2, 3}};
  expect_infer_error(OpKind::kReshape, {t}, make_attrs({{"shape", Ints{4, 2}}}),
                     "cannot reshape 2x3 (6 elements) to 4x2 (8 elements)");
  expect_infer_error(OpKind::kReshape, {t}, make_attrs({{"shape", Ints{-1, 2}}}), "must be fully resolved");
  expect_infer_error(OpKind::kSqueeze, {t}, make_attrs({{"axes", Ints{1}}}), "cannot squeeze dim 1 of size 3");
  expect_infer_error(OpKind::kUnsqueeze, {t}, make_attrs({{"axes", Ints{4}}}), "axis 4 is out of range for rank 3");
  expect_infer_error(OpKind::kTranspose, {t}, make_attrs({{"perm", Ints{0, 0}}}), "not a permutation");
  expect_infer_error(OpKind::kFlatten, {t}, make_attrs({{"axis", int64_t{3}}}), "Flatten axis 3 is out of range");
}

TEST(MovementTest, Transpose) {
  check_both(OpKind::kTranspose, iota_i64({2, 3, 4}), {}, make_attrs({{"perm", Ints{2, 0, 1}}}), {4, 2, 3},
             {0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23});
}

TEST(MovementTest, ConcatAndSplit) {
  for (DType dt : {DType::kI64, DType::kF32}) {
    Tensor cat = run_op(OpKind::kConcat, {{i64({2, 1}, {1, 2}).cast(dt)}, {i64({2, 2}, {3, 4, 5, 6}).cast(dt)}},
                        make_attrs({{"axis", int64_t{-1}}}));
    EXPECT_EQ(cat.shape(), (Shape{2, 3}));
    EXPECT_EQ(cat.to_ints(), (Ints{1, 3, 4, 2, 5, 6}));
    std::vector<Tensor> parts = run_node(OpKind::kSplit, {{iota_i64({2, 5}).cast(dt)}},
                                         make_attrs({{"axis", int64_t{1}}, {"split", Ints{2, 3}}}));
    ASSERT_EQ(parts.size(), 2u);
    EXPECT_EQ(parts[0].shape(), (Shape{2, 2}));
    EXPECT_EQ(parts[0].to_ints(), (Ints{0, 1, 5, 6}));
    EXPECT_EQ(parts[1].to_ints(), (Ints{2, 3, 4, 7, 8, 9}));
  }
}

TEST(MovementTest, ConcatAndSplitErrors) {
  Attrs axis1 = make_attrs({{"axis", int64_t{1}}});
  expect_infer_error(OpKind::kConcat, {{DType::kF32, {2, 3}}, {DType::kF32, {3, 3}}}, axis1,
                     "Concat input 1 3x3 differs from input 0 2x3 in dim 0");
  expect_infer_error(OpKind::kConcat, {{DType::kF32, {2, 3}}, {DType::kF32, {2, 3, 1}}}, axis1, "has rank 3");
  expect_infer_error(OpKind::kConcat, {{DType::kF32, {2, 3}}, {DType::kI64, {2, 3}}}, axis1, "Concat input 1 is i64");
  expect_infer_error(OpKind::kSplit, {{DType::kF32, {2, 5}}}, make_attrs({{"axis", int64_t{1}}, {"split", Ints{2, 2}}}),
                     "Split sizes add up to 4 but dim 1 of 2x5 is 5");
}

Attrs slice_attrs(Ints starts, Ints ends, Ints axes, Ints steps) {
  return make_attrs({{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}});
}

TEST(SliceTest, NegativeStepsClamp) {
  // x[-1::-1, 3:0:-2] of a 3x4 ramp; the huge negative end clamps to -1 (= before the first row).
  check_both(OpKind::kSlice, iota_i64({3, 4}), {}, slice_attrs({-1, 3}, {-1000000, 0}, {0, 1}, {-1, -2}), {3, 2},
             {11, 9, 7, 5, 3, 1});
  check_both(OpKind::kSlice, iota_i64({3, 4}), {}, slice_attrs({1}, {INT64_MAX}, {-1}, {2}), {3, 2},
             {1, 3, 5, 7, 9, 11});
  // A start past the end with a negative step clamps to the last element.
  check_both(OpKind::kSlice, iota_i64({5}), {}, slice_attrs({100}, {INT64_MIN}, {0}, {INT64_MIN}), {1}, {4});
  check_both(OpKind::kSlice, iota_i64({5}), {}, slice_attrs({3}, {3}, {0}, {1}), {0}, {});
}

// Empty dims are accepted and give empty pieces: a Slice of a dim of size 0
// (its starts, even negative or past the end with a negative step, read
// nothing), a Slice with start == end, Concat and Split with empty pieces.
// The dim maps of these ops, which the runtimes' copies read, give one
// strided read per piece, empty where the piece is.
TEST(SliceTest, EmptyDims) {
  Tensor empty = iota_i64({2, 0, 3});
  check_both(OpKind::kSlice, empty, {}, slice_attrs({-1, 1}, {-100, 3}, {1, 2}, {-1, 1}), {2, 0, 2}, {});
  check_both(OpKind::kSlice, empty, {}, slice_attrs({5}, {7}, {1}, {1}), {2, 0, 3}, {});
  check_both(OpKind::kSlice, iota_i64({2, 4}), {}, slice_attrs({1}, {1}, {1}, {1}), {2, 0}, {});
  check_both(OpKind::kSlice, iota_i64({2, 4}), {}, slice_attrs({-2}, {2}, {1}, {-1}), {2, 0}, {});
  check_both(OpKind::kSlice, empty, {}, slice_attrs({1}, {2}, {0}, {1}), {1, 0, 3}, {});
}

TEST(MovementTest, ConcatAndSplitWithEmptyPieces) {
  for (DType dt : {DType::kI64, DType::kF32}) {
    Tensor cat = run_op(OpKind::kConcat, {{iota_i64({2, 0}).cast(dt)}, {iota_i64({2, 2}).cast(dt)},
                                          {iota_i64({2, 0}).cast(dt)}, {iota_i64({2, 1}, 4).cast(dt)}},
                        make_attrs({{"axis", int64_t{1}}}));
    EXPECT_EQ(cat.shape(), (Shape{2, 3}));
    EXPECT_EQ(cat.to_ints(), (Ints{0, 1, 4, 2, 3, 5}));
    EXPECT_EQ(run_op(OpKind::kConcat, {{iota_i64({0, 3}).cast(dt)}, {iota_i64({0, 3}).cast(dt)}},
                     make_attrs({{"axis", int64_t{1}}}))
                  .shape(),
              (Shape{0, 6}));
    std::vector<Tensor> parts = run_node(OpKind::kSplit, {{iota_i64({2, 3}).cast(dt)}},
                                         make_attrs({{"axis", int64_t{1}}, {"split", Ints{0, 2, 0, 1}}}));
    ASSERT_EQ(parts.size(), 4u);
    EXPECT_EQ(parts[0].shape(), (Shape{2, 0}));
    EXPECT_EQ(parts[1].to_ints(), (Ints{0, 1, 3, 4}));
    EXPECT_EQ(parts[2].shape(), (Shape{2, 0}));
    EXPECT_EQ(parts[3].to_ints(), (Ints{2, 5}));
  }
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {2, 0}});
  ValueId b = g.add_input("b", {DType::kF32, {2, 3}});
  const Node& cat = g.node(g.add_node(OpKind::kConcat, {a, b, a}, make_attrs({{"axis", int64_t{1}}})));
  std::vector<StridedRead> reads = strided_reads(dim_map(g, cat), 0, {2, 3}, {{2, 0}, {2, 3}, {2, 0}});
  ASSERT_EQ(reads.size(), 3u);
  EXPECT_EQ(reads[0].extent, (Shape{2, 0}));
  EXPECT_EQ(reads[1].extent, (Shape{2, 3}));
  EXPECT_EQ(reads[1].dst_lo, (Ints{0, 0}));
  EXPECT_EQ(reads[2].extent, (Shape{2, 0}));
  EXPECT_EQ(reads[2].dst_lo, (Ints{0, 3}));
  const Node& slice = g.node(g.add_node(OpKind::kSlice, {a}, slice_attrs({-1}, {-100}, {1}, {-1})));
  reads = strided_reads(dim_map(g, slice), 0, {2, 0}, {{2, 0}});
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].extent, (Shape{2, 0}));
  EXPECT_EQ(reads[0].src_offset, 0);
}

TEST(SliceTest, Errors) {
  TensorType t{DType::kF32, {3, 4}};
  expect_infer_error(OpKind::kSlice, {t}, slice_attrs({0}, {1}, {0}, {0}), "step for axis 0 is zero");
  expect_infer_error(OpKind::kSlice, {t}, slice_attrs({0, 0}, {1, 1}, {1, -1}, {1, 1}), "axis 1 appears twice");
  expect_infer_error(OpKind::kSlice, {t}, slice_attrs({0}, {1, 2}, {0}, {1}), "same length");
}

TEST(GatherTest, NegativeIndicesOnAxis1) {
  Tensor idx = i64({2, 2}, {-1, 0, 1, -3});
  check_both(OpKind::kGather, iota_i64({2, 4}), {{idx}}, make_attrs({{"axis", int64_t{1}}}), {2, 2, 2},
             {3, 0, 1, 1, 7, 4, 5, 5});
  check_both(OpKind::kGatherElements, iota_i64({2, 4}), {{i64({2, 2}, {3, 0, 1, 1})}},
             make_attrs({{"axis", int64_t{1}}}), {2, 2}, {3, 0, 5, 5});
}

TEST(GatherTest, Errors) {
  expect_infer_error(OpKind::kGather, {{DType::kF32, {2, 4}}, {DType::kF32, {2}}}, {},
                     "Gather indices must be integer, got f32[2]");
  expect_infer_error(OpKind::kGatherElements, {{DType::kF32, {2, 4}}, {DType::kI64, {2}}}, {},
                     "must have the rank of data");
  // An index out of range is a data error, reported when the graph runs.
  try {
    run_op(OpKind::kGather, {{iota_i64({2, 4})}, {i64({1}, {4})}}, make_attrs({{"axis", int64_t{1}}}));
    FAIL() << "expected an out-of-range error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 4 is out of range for axis 1 of size 4"), std::string::npos) << e.what();
  }
}

// A scatter with data and updates in both storages (i64 and f32).
void check_scatter_op(OpKind kind, const Tensor& data, const Tensor& indices, const Tensor& updates,
                      const Attrs& attrs, const Ints& want) {
  for (DType dt : {DType::kI64, DType::kF32}) {
    Tensor y = run_op(kind, {{data.cast(dt)}, {indices}, {updates.cast(dt)}}, attrs);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(y.shape(), data.shape());
    EXPECT_EQ(y.to_ints(), want) << op_name(kind) << " " << attrs.s("reduction") << " " << dtype_name(dt);
  }
}

// Replacing or adding updates is linear in data and updates jointly (not
// in the indices); products, maxima and minima are not linear.
void expect_scatter_linearity(OpKind kind, const std::vector<TensorType>& inputs) {
  Graph g;
  std::vector<ValueId> in;
  for (const TensorType& t : inputs) in.push_back(g.add_input("in" + std::to_string(in.size()), t));
  for (const char* r : {"none", "add", "mul", "max", "min"}) {
    NodeId n = g.add_node(kind, in, make_attrs({{"reduction", std::string(r)}}));
    Linearity lin = op_def(kind).linearity(g.node(n));
    bool linear = std::string(r) == "none" || std::string(r) == "add";
    EXPECT_EQ(lin.inputs_mask, linear ? 0b101u : 0u) << op_name(kind) << " " << r;
    EXPECT_FALSE(lin.separately) << op_name(kind) << " " << r;
  }
}

void check_scatter(const Tensor& data, const Tensor& indices, const Tensor& updates, const std::string& reduction,
                   const Ints& want) {
  check_scatter_op(OpKind::kScatterND, data, indices, updates, make_attrs({{"reduction", reduction}}), want);
}

TEST(ScatterNDTest, ElementsAndSlices) {
  // ONNX's scatternd example 1 on rank 1 (k = 1 indexes single elements),
  // with a negative index counting from the end.
  check_scatter(iota_i64({8}, 1), i64({4, 1}, {4, 3, 1, -1}), i64({4}, {9, 10, 11, 12}), "none",
                {1, 11, 3, 10, 9, 6, 7, 12});
  // k = 1 on rank 2 replaces whole rows.
  check_scatter(iota_i64({3, 2}), i64({2, 1}, {2, 0}), i64({2, 2}, {7, 8, 9, 10}), "none", {9, 10, 2, 3, 7, 8});
  // k = 2 on rank 2: single elements by (row, column).
  check_scatter(iota_i64({2, 3}), i64({2, 2}, {0, 2, 1, 0}), i64({2}, {20, 30}), "none", {0, 1, 20, 30, 4, 5});
}

TEST(ScatterNDTest, ReductionsCombineRepeatedIndices) {
  Tensor data = i64({3}, {2, 5, 1});
  Tensor idx = i64({3, 1}, {0, 0, 2});
  Tensor upd = i64({3}, {3, 4, 0});
  check_scatter(data, idx, upd, "none", {4, 5, 0});  // the last update of a repeated index wins
  check_scatter(data, idx, upd, "add", {9, 5, 1});
  check_scatter(data, idx, upd, "mul", {24, 5, 0});
  check_scatter(data, idx, upd, "max", {4, 5, 1});
  check_scatter(data, idx, upd, "min", {2, 5, 0});
}

TEST(ScatterNDTest, ErrorsAndLinearity) {
  TensorType data{DType::kF32, {4, 3}};
  expect_infer_error(OpKind::kScatterND, {data, {DType::kI64, {2, 1}}, {DType::kF32, {2}}}, {},
                     "ScatterND updates 2 must have shape 2x3");
  expect_infer_error(OpKind::kScatterND, {data, {DType::kI64, {2, 3}}, {DType::kF32, {2}}}, {},
                     "index 3 dims, more than the rank of data 4x3");
  expect_infer_error(OpKind::kScatterND, {data, {DType::kF32, {2, 1}}, {DType::kF32, {2, 3}}}, {},
                     "ScatterND indices must be integer");
  expect_infer_error(OpKind::kScatterND, {data, {DType::kI64, {2, 1}}, {DType::kI64, {2, 3}}}, {},
                     "must have the dtype of data");
  expect_infer_error(OpKind::kScatterND, {data, {DType::kI64, {2, 1}}, {DType::kF32, {2, 3}}},
                     make_attrs({{"reduction", std::string("sub")}}), "reduction 'sub' is not one of");
  try {
    run_op(OpKind::kScatterND, {{iota_i64({4})}, {i64({1, 1}, {4})}, {i64({1}, {0})}});
    FAIL() << "expected an out-of-range error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 4 is out of range for axis 0 of size 4"), std::string::npos)
        << e.what();
  }
  expect_scatter_linearity(OpKind::kScatterND, {data, {DType::kI64, {2, 1}}, {DType::kF32, {2, 3}}});
}

void check_scatter_elements(const Tensor& data, const Tensor& indices, const Tensor& updates, int64_t axis,
                            const std::string& reduction, const Ints& want) {
  check_scatter_op(OpKind::kScatterElements, data, indices, updates,
                   make_attrs({{"axis", axis}, {"reduction", reduction}}), want);
}

TEST(ScatterElementsTest, WritesEachUpdateAtItsIndexAlongTheAxis) {
  // ONNX's example 1 (axis 0) over data 10..18: updates[i][j] goes to row
  // indices[i][j] of column j.
  check_scatter_elements(iota_i64({3, 3}, 10), i64({2, 3}, {1, 0, 2, 0, 2, 1}), i64({2, 3}, {1, 3, 5, 2, 4, 6}), 0,
                         "none", {2, 3, 12, 1, 14, 6, 16, 4, 5});
  // Example 2 (axis 1) with a negative index counting from the end; the
  // same with axis -1.
  for (int64_t axis : {1, -1})
    check_scatter_elements(iota_i64({1, 5}, 1), i64({1, 2}, {1, -2}), i64({1, 2}, {7, 8}), axis, "none",
                           {1, 7, 3, 8, 5});
  // Indices shorter than data off the axis: the rows past them keep data.
  check_scatter_elements(iota_i64({3, 3}), i64({1, 1}, {2}), i64({1, 1}, {9}), 1, "none", {0, 1, 9, 3, 4, 5, 6, 7, 8});
  // A KV cache [1, heads 2, len 4, dim 2] written at position 1 for every
  // head and dim (torch's index_copy_ along len, as exported).
  Tensor cache = iota_i64({1, 2, 4, 2}, 100);
  check_scatter_elements(cache, i64({1, 2, 1, 2}, {1, 1, 1, 1}), i64({1, 2, 1, 2}, {-1, -2, -3, -4}), 2, "none",
                         {100, 101, -1, -2, 104, 105, 106, 107, 108, 109, -3, -4, 112, 113, 114, 115});
}

TEST(ScatterElementsTest, ReductionsCombineRepeatedIndices) {
  Tensor data = i64({1, 3}, {2, 5, 1});
  Tensor idx = i64({1, 3}, {0, 0, 2});
  Tensor upd = i64({1, 3}, {3, 4, 0});
  check_scatter_elements(data, idx, upd, 1, "none", {4, 5, 0});  // the last update of a repeated index wins
  check_scatter_elements(data, idx, upd, 1, "add", {9, 5, 1});
  check_scatter_elements(data, idx, upd, 1, "mul", {24, 5, 0});
  check_scatter_elements(data, idx, upd, 1, "max", {4, 5, 1});
  check_scatter_elements(data, idx, upd, 1, "min", {2, 5, 0});
}

TEST(ScatterElementsTest, ErrorsAndLinearity) {
  TensorType data{DType::kF32, {4, 3}};
  TensorType idx{DType::kI64, {2, 3}}, upd{DType::kF32, {2, 3}};
  expect_infer_error(OpKind::kScatterElements, {data, {DType::kI64, {2}}, {DType::kF32, {2}}}, {},
                     "ScatterElements indices 2 must have the rank of data 4x3");
  expect_infer_error(OpKind::kScatterElements, {data, idx, {DType::kF32, {3, 2}}}, {},
                     "ScatterElements updates 3x2 must have the shape of indices 2x3");
  expect_infer_error(OpKind::kScatterElements, {data, {DType::kI64, {2, 4}}, {DType::kF32, {2, 4}}}, {},
                     "ScatterElements indices dim 1 (4) exceeds data dim 3");
  expect_infer_error(OpKind::kScatterElements, {data, {DType::kF32, {2, 3}}, upd}, {},
                     "ScatterElements indices must be integer, got f32[2x3]");
  expect_infer_error(OpKind::kScatterElements, {data, idx, {DType::kI64, {2, 3}}}, {}, "must have the dtype of data");
  expect_infer_error(OpKind::kScatterElements, {data, idx, upd}, make_attrs({{"reduction", std::string("sub")}}),
                     "ScatterElements reduction 'sub' is not one of none, add, mul, max, min");
  expect_infer_error(OpKind::kScatterElements, {data, idx, upd}, make_attrs({{"axis", int64_t{2}}}),
                     "axis 2 is out of range for rank 2");
  // An index outside [-3, 3) is a data error, reported when the graph runs,
  // naming the node and the op.
  for (int64_t bad : {3, -4}) {
    Graph g;
    ValueId d = g.add_input("d", {DType::kI64, {2, 3}});
    ValueId i = g.add_constant("i", i64({1, 1}, {bad}));
    ValueId u = g.add_input("u", {DType::kI64, {1, 1}});
    g.set_outputs({g.add(OpKind::kScatterElements, {d, i, u}, make_attrs({{"axis", int64_t{1}}}), "cache_write")});
    Error e = test::error_of([&] { evaluate(g, {iota_i64({2, 3}), i64({1, 1}, {0})}, Precision::kF64); });
    std::string want = "index " + std::to_string(bad) + " is out of range for axis 1 of size 3";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cache_write"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ScatterElements"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
  expect_scatter_linearity(OpKind::kScatterElements, {data, idx, upd});
}

// The axis written is read at gathered positions (no shard can carry it);
// the other dims pass through data, indices and updates, guarded where
// indices is shorter than data.
TEST(ScatterElementsTest, DimMapWritesTheAxisAtGatheredPositions) {
  Graph g;
  ValueId cache = g.add_input("cache", {DType::kF32, {1, 2, 4, 2}});
  ValueId pos = g.add_input("pos", {DType::kI64, {1, 2, 1, 2}});
  ValueId kv = g.add_input("kv", {DType::kF32, {1, 2, 1, 2}});
  ValueId y = g.add(OpKind::kScatterElements, {cache, pos, kv}, make_attrs({{"axis", int64_t{2}}}));
  EXPECT_EQ(dim_map_str(dim_map(g, g.node(g.value(y).producer))),
            "a:1 b:2 c:4 d:2 e:1/reduce; out0[0, b, gather(c), d] <- in0[0, b, c, d] in1[0, b, 0, d] in2[0, b, 0, d]");
  ValueId row = g.add_input("row", {DType::kI64, {1, 2}}), val = g.add_input("val", {DType::kF32, {1, 2}});
  ValueId z = g.add(OpKind::kScatterElements, {g.add_input("m", {DType::kF32, {3, 3}}), row, val},
                    make_attrs({{"axis", int64_t{1}}}));
  EXPECT_EQ(dim_map_str(dim_map(g, g.node(g.value(z).producer))),
            "a:3 b:3 c:2/reduce; out0[a, gather(b)] <- in0[a, b] in1[a?, c] in2[a?, c]");
}

Attrs pad_attrs(Ints pads, std::string mode, double value = 0) {
  return make_attrs({{"pads", pads}, {"mode", mode}, {"value", value}});
}

TEST(PadTest, Modes) {
  Tensor x = iota_i64({2, 3});
  check_both(OpKind::kPad, x, {}, pad_attrs({1, 2, 0, 1}, "reflect"), {3, 6},
             {5, 4, 3, 4, 5, 4, 2, 1, 0, 1, 2, 1, 5, 4, 3, 4, 5, 4});
  check_both(OpKind::kPad, x, {}, pad_attrs({1, 2, 0, 1}, "edge"), {3, 6},
             {0, 0, 0, 1, 2, 2, 0, 0, 0, 1, 2, 2, 3, 3, 3, 4, 5, 5});
  check_both(OpKind::kPad, x, {}, pad_attrs({0, 1, 1, 0}, "constant", 7), {3, 4}, {7, 0, 1, 2, 7, 3, 4, 5, 7, 7, 7, 7});
  // Negative pads crop.
  check_both(OpKind::kPad, x, {}, pad_attrs({0, -1, 0, -1}, "constant"), {2, 1}, {1, 4});
}

TEST(PadTest, ErrorsAndLinearity) {
  expect_infer_error(OpKind::kPad, {{DType::kF32, {2, 3}}}, pad_attrs({0, 3, 0, 0}, "reflect"),
                     "reflect Pad of dim 1 (size 3) needs pads < 3");
  expect_infer_error(OpKind::kPad, {{DType::kF32, {2, 3}}}, pad_attrs({0, 0}, "constant"), "expected 4 for rank 2");
  expect_infer_error(OpKind::kPad, {{DType::kF32, {2, 3}}}, pad_attrs({0, 0, 0, 0}, "wrap"), "Pad mode 'wrap'");
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 3}});
  auto lin = [&](Attrs a) { return op_def(OpKind::kPad).linearity(g.node(g.add_node(OpKind::kPad, {x}, a))); };
  EXPECT_EQ(lin(pad_attrs({1, 1, 1, 1}, "constant")).inputs_mask, 1u);
  EXPECT_FALSE(lin(pad_attrs({1, 1, 1, 1}, "constant", 1)).any());
  EXPECT_FALSE(lin(pad_attrs({1, 1, 1, 1}, "reflect")).any());
  ValueId y = g.add_input("y", {DType::kF32, {2, 3}});
  const Node& cat = g.node(g.add_node(OpKind::kConcat, {x, y, x}, make_attrs({{"axis", int64_t{0}}})));
  Linearity c = op_def(OpKind::kConcat).linearity(cat);
  EXPECT_EQ(c.inputs_mask, 0b111u);
  EXPECT_FALSE(c.separately);
}

TEST(MovementTest, ExpandTileTrilu) {
  check_both(OpKind::kExpand, iota_i64({3, 1}), {}, make_attrs({{"shape", Ints{2, 1, 4}}}), {2, 3, 4},
             {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
  check_both(OpKind::kTile, i64({2, 2}, {1, 2, 3, 4}), {}, make_attrs({{"repeats", Ints{1, 2}}}), {2, 4},
             {1, 2, 1, 2, 3, 4, 3, 4});
  Tensor x = iota_i64({3, 4}, 1);
  check_both(OpKind::kTrilu, x, {}, make_attrs({{"upper", int64_t{1}}, {"k", int64_t{1}}}), {3, 4},
             {0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
  check_both(OpKind::kTrilu, x, {}, make_attrs({{"upper", int64_t{0}}, {"k", int64_t{-1}}}), {3, 4},
             {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  expect_infer_error(OpKind::kExpand, {{DType::kF32, {3, 2}}}, make_attrs({{"shape", Ints{4, 4}}}),
                     "cannot expand 3x2 to 4x4");
  expect_infer_error(OpKind::kTrilu, {{DType::kF32, {3}}}, {}, "rank >= 2");
}

TEST(ShapeOpsTest, ShapeAndSize) {
  Tensor x = iota_i64({2, 3, 5, 7});
  EXPECT_EQ(run_op(OpKind::kShape, {{x}}).to_ints(), (Ints{2, 3, 5, 7}));
  Tensor mid = run_op(OpKind::kShape, {{x}}, make_attrs({{"start", int64_t{-3}}, {"end", int64_t{-1}}}));
  EXPECT_EQ(mid.dtype(), DType::kI64);
  EXPECT_EQ(mid.to_ints(), (Ints{3, 5}));
  Tensor size = run_op(OpKind::kSize, {{x}});
  EXPECT_EQ(size.shape(), Shape{});
  EXPECT_EQ(size.to_ints(), (Ints{210}));
}

TEST(ShapeOpsTest, ConstantOfShapeReadsConstantInput) {
  Attrs a = make_attrs({{"value", Tensor::from_ints(DType::kI64, {1}, {9})}});
  Tensor y = run_op(OpKind::kConstantOfShape, {{Tensor::vector_i64({2, 3}), true}}, a);
  EXPECT_EQ(y.dtype(), DType::kI64);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_ints(), Ints(6, 9));
  Tensor z = run_op(OpKind::kConstantOfShape, {{Tensor::vector_i64({2}), true}});
  EXPECT_EQ(z.dtype(), DType::kF32);
  EXPECT_EQ(z.to_doubles(), (std::vector<double>{0, 0}));
  expect_infer_error(OpKind::kConstantOfShape, {{DType::kI64, {2}}}, {}, "needs a constant shape input");
}

TEST(ShapeOpsTest, RangeReadsConstants) {
  auto scalar = [](DType dt, double v) { return In{Tensor::from_doubles(dt, {}, {v}), true}; };
  Tensor f = run_op(OpKind::kRange, {scalar(DType::kF32, 1), scalar(DType::kF32, 2), scalar(DType::kF32, 0.25)});
  EXPECT_EQ(f.to_doubles(), (std::vector<double>{1, 1.25, 1.5, 1.75}));
  Tensor i = run_op(OpKind::kRange, {scalar(DType::kI64, 10), scalar(DType::kI64, 1), scalar(DType::kI64, -3)});
  EXPECT_EQ(i.to_ints(), (Ints{10, 7, 4}));
  Tensor empty = run_op(OpKind::kRange, {scalar(DType::kI64, 1), scalar(DType::kI64, 5), scalar(DType::kI64, -1)});
  EXPECT_EQ(empty.shape(), Shape{0});
  expect_infer_error(OpKind::kRange, {{DType::kI64, {}}, {DType::kI64, {}}, {DType::kI64, {}}}, {},
                     "Range needs a constant start");
}

}  // namespace
}  // namespace tessera
