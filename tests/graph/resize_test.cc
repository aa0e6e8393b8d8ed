// Tests of Resize (graph/ops/resize.cc): shape inference and its errors, and
// the kernel on small cases computed by hand (the ONNX backend node tests in
// tests/node_conformance.h cover every mode against ONNX's reference).
#include <gtest/gtest.h>

#include "graph/interpreter.h"
#include "graph/op.h"
#include "graph/text_form.h"
#include "tests/graph/op_test_util.h"

namespace tessera {
namespace {

using test::contains;
using test::expect_ints;
using test::expect_values;
using test::f32;
using test::run;

// Resize attributes: the output shape, the scales and whatever else.
Attrs resize_attrs(Shape sizes, std::vector<double> scales,
                   std::initializer_list<std::pair<std::string, AttrValue>> more = {}) {
  Attrs a;
  a.set("sizes", std::vector<int64_t>(sizes.begin(), sizes.end()));
  a.set("scales", scales);
  for (const auto& [k, v] : more) a.set(k, v);
  return a;
}

std::string infer_error(const TensorType& x, Attrs attrs) {
  return test::add_error(OpKind::kResize, {x}, std::move(attrs));
}

TEST(ResizeTest, OutputShapeIsSizes) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF16, {1, 3, 5, 7}});
  ValueId y = g.add(OpKind::kResize, {x}, resize_attrs({1, 3, 10, 3}, {1, 1, 2, 0.5}));
  EXPECT_EQ(g.type(y), (TensorType{DType::kF16, {1, 3, 10, 3}}));
}

TEST(ResizeTest, ShapeErrors) {
  TensorType x{DType::kF32, {1, 1, 4, 4}};
  EXPECT_TRUE(contains(infer_error(x, resize_attrs({1, 1, 8}, {1, 1, 2, 2})), "sizes has 3 values, expected 4"));
  EXPECT_TRUE(contains(infer_error(x, resize_attrs({1, 1, 8, 8}, {1, 2, 2})), "scales has 3 values, expected 4"));
  EXPECT_TRUE(contains(infer_error(x, resize_attrs({1, 1, 8, 8}, {1, 1, 2, -2})), "scales[3] must be positive"));
  EXPECT_TRUE(contains(infer_error(x, resize_attrs({1, 1, 8, 9}, {1, 1, 2, 2})),
                       "sizes[3] = 9 does not match scale 2 of input dim 4"));
  EXPECT_TRUE(contains(infer_error(x, resize_attrs({1, 1, 8, 8}, {1, 1, 2, 2}, {{"mode", std::string("area")}})),
                       "Resize mode 'area' is not one of nearest, linear, cubic"));
  EXPECT_TRUE(contains(infer_error(x, resize_attrs({1, 1, 8, 8}, {1, 1, 2, 2},
                                                   {{"nearest_mode", std::string("round")}})),
                       "nearest_mode 'round' is not one of"));
  Attrs crop = resize_attrs({1, 1, 8, 8}, {1, 1, 2, 2},
                            {{"coordinate_transformation_mode", std::string("tf_crop_and_resize")}});
  EXPECT_TRUE(contains(infer_error(x, crop), "roi has 0 values, expected 8"));
  EXPECT_TRUE(contains(infer_error(x, resize_attrs({1, 1, 8, 8}, {1, 1, 2, 2}, {{"roi", std::vector<double>{0, 1}}})),
                       "without tf_crop_and_resize"));
  Attrs no_sizes;
  no_sizes.set("scales", std::vector<double>{1, 1, 2, 2});
  EXPECT_TRUE(contains(infer_error(x, no_sizes), "required attribute 'sizes' is missing"));
}

// ONNX's resize_upsample_scales_nearest: half_pixel, round_prefer_floor.
TEST(ResizeTest, NearestUpsample) {
  Tensor y = run(OpKind::kResize, {f32({1, 1, 2, 2}, {1, 2, 3, 4})}, resize_attrs({1, 1, 4, 6}, {1, 1, 2, 3}));
  expect_values(y, DType::kF32, {1, 1, 4, 6},
                {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4});
}

// asymmetric x = y / 1.5 at y = 0..5: 0, 0.67, 1.33, 2, 2.67, 3.33.
TEST(ResizeTest, NearestModes) {
  Tensor x = f32({4}, {10, 11, 12, 13});
  auto with = [&](const char* nearest) {
    return run(OpKind::kResize, {x},
               resize_attrs({6}, {1.5}, {{"coordinate_transformation_mode", std::string("asymmetric")},
                                         {"nearest_mode", std::string(nearest)}}));
  };
  expect_values(with("floor"), DType::kF32, {6}, {10, 10, 11, 12, 12, 13});
  expect_values(with("ceil"), DType::kF32, {6}, {10, 11, 12, 12, 13, 13});  // 3.33 -> 4, clamped to 3
  expect_values(with("round_prefer_floor"), DType::kF32, {6}, {10, 11, 11, 12, 13, 13});
  // Ties: x = y / 2 = 0.5 and 1.5.
  Tensor tie = run(OpKind::kResize, {x},
                   resize_attrs({8}, {2}, {{"coordinate_transformation_mode", std::string("asymmetric")},
                                           {"nearest_mode", std::string("round_prefer_ceil")}}));
  expect_values(tie, DType::kF32, {8}, {10, 11, 11, 12, 12, 13, 13, 13});
}

// half_pixel: x = y / 2 - 0.25; the ends clamp to the edge elements.
TEST(ResizeTest, Linear1d) {
  Tensor y = run(OpKind::kResize, {f32({4}, {1, 2, 3, 4})}, resize_attrs({8}, {2}, {{"mode", std::string("linear")}}));
  expect_values(y, DType::kF32, {8}, {1, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75, 4});
}

TEST(ResizeTest, BilinearAlignCorners) {
  Tensor y = run(OpKind::kResize, {f32({1, 1, 2, 2}, {1, 2, 3, 4})},
                 resize_attrs({1, 1, 3, 3}, {1, 1, 1.5, 1.5},
                              {{"mode", std::string("linear")},
                               {"coordinate_transformation_mode", std::string("align_corners")}}));
  expect_values(y, DType::kF32, {1, 1, 3, 3}, {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4});
}

// Keys' kernel with a = -0.75 at t = 0.5: weights -0.09375, 0.59375, 0.59375,
// -0.09375. At x = 0.5 the left neighbour is clamped to element 0.
TEST(ResizeTest, CubicAndExcludeOutside) {
  Tensor x = f32({4}, {0, 1, 2, 3});
  auto cubic = [&](int64_t exclude) {
    return run(OpKind::kResize, {x},
               resize_attrs({8}, {2}, {{"mode", std::string("cubic")},
                                       {"coordinate_transformation_mode", std::string("asymmetric")},
                                       {"exclude_outside", exclude}}));
  };
  Tensor y = cubic(0);
  std::vector<double> v = y.to_doubles();
  EXPECT_NEAR(v[0], 0, 1e-6);
  EXPECT_NEAR(v[1], 0.40625, 1e-6);
  EXPECT_NEAR(v[3], 1.5, 1e-6);  // linear data is reproduced inside
  // exclude_outside drops the tap at -1 and renormalizes: 0.40625 / 1.09375.
  EXPECT_NEAR(cubic(1).to_doubles()[1], 0.40625 / 1.09375, 1e-6);
}

// tf_crop_and_resize over roi [0.5, 1.5] of 4 elements into 3: x = 1.5 y +
// 1.5, so the last output (x = 4.5) lies outside and is the extrapolation.
TEST(ResizeTest, TfCropAndResizeExtrapolates) {
  Tensor y = run(OpKind::kResize, {f32({4}, {1, 2, 3, 4})},
                 resize_attrs({3}, {0.75}, {{"mode", std::string("linear")},
                                            {"coordinate_transformation_mode", std::string("tf_crop_and_resize")},
                                            {"roi", std::vector<double>{0.5, 1.5}},
                                            {"extrapolation_value", 10.0}}));
  expect_values(y, DType::kF32, {3}, {2.5, 4, 10});
}

// Downscaling by 2 with antialias: the linear kernel stretched to 4 taps,
// weights 1/8, 3/8, 3/8, 1/8 around x = 0.5 and 2.5.
TEST(ResizeTest, LinearAntialiasDownscale) {
  Tensor y = run(OpKind::kResize, {f32({4}, {1, 2, 3, 4})},
                 resize_attrs({2}, {0.5}, {{"mode", std::string("linear")}, {"antialias", int64_t{1}}}));
  expect_values(y, DType::kF32, {2}, {1.625, 3.375});
  Tensor plain =
      run(OpKind::kResize, {f32({4}, {1, 2, 3, 4})}, resize_attrs({2}, {0.5}, {{"mode", std::string("linear")}}));
  expect_values(plain, DType::kF32, {2}, {1.5, 3.5});
}

// Integer data is interpolated, then rounded half to even and saturated.
TEST(ResizeTest, IntegerDataRoundsAndSaturates) {
  Tensor lin = run(OpKind::kResize, {Tensor::from_ints(DType::kU8, {3}, {0, 1, 3})},
                   resize_attrs({6}, {2}, {{"mode", std::string("linear")},
                                           {"coordinate_transformation_mode", std::string("asymmetric")}}));
  expect_ints(lin, DType::kU8, {6}, {0, 0, 1, 2, 3, 3});  // 0.5 -> 0, 1.5 -> 2 (half to even)
  Tensor cub = run(OpKind::kResize, {Tensor::from_ints(DType::kU8, {4}, {0, 0, 255, 255})},
                   resize_attrs({8}, {2}, {{"mode", std::string("cubic")},
                                           {"coordinate_transformation_mode", std::string("asymmetric")}}));
  std::vector<int64_t> c = cub.to_ints();
  EXPECT_EQ(c[1], 0);    // -23.9 saturates at 0
  EXPECT_EQ(c[3], 128);  // 127.5 -> 128 (half to even)
  EXPECT_EQ(c[5], 255);  // 278.9 saturates at 255
}

// Over Z_p the weights are fixed residues: Resize stays linear in its data,
// which is what the multilinear test relies on.
TEST(ResizeTest, LinearInDataOverZp) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 1, 3, 3}});
  g.set_outputs({g.add(OpKind::kResize, {x},
                       resize_attrs({1, 1, 5, 7}, {1, 1, 5.0 / 3, 7.0 / 3}, {{"mode", std::string("cubic")}}))});
  auto ref = [](std::vector<Zp> v) {
    RefTensor<Zp> t;
    t.type = {DType::kF32, {1, 1, 3, 3}};
    t.num = std::move(v);
    return t;
  };
  std::vector<Zp> a, b, sum;
  for (uint64_t i = 0; i < 9; ++i) {
    a.push_back(Zp::from_u64(1000003 * i + 17));
    b.push_back(Zp::from_u64(7777 * i * i + 5));
    sum.push_back(a.back() + b.back());
  }
  std::vector<Zp> fa = interpret<Zp>(g, {ref(a)})[0].num, fb = interpret<Zp>(g, {ref(b)})[0].num;
  std::vector<Zp> fs = interpret<Zp>(g, {ref(sum)})[0].num;
  ASSERT_EQ(fs.size(), 35u);
  for (size_t i = 0; i < fs.size(); ++i) EXPECT_EQ(fs[i], fa[i] + fb[i]) << i;
}

// The float lists (scales, an empty roi) survive the text form exactly.
TEST(ResizeTest, TextFormRoundTrip) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 2, 3, 7}});
  g.set_outputs({g.add(OpKind::kResize, {x}, resize_attrs({1, 2, 5, 12}, {1, 1, 5.0 / 3, 12.0 / 7}), "r")});
  std::string text = print_graph(g);
  Graph back = parse_graph(text);
  EXPECT_EQ(print_graph(back), text);
  EXPECT_EQ(back.node(0).attrs.floats("scales"), (std::vector<double>{1, 1, 5.0 / 3, 12.0 / 7}));
  EXPECT_TRUE(back.node(0).attrs.floats("roi").empty());
}

Linearity linearity(Attrs attrs) {
  Graph g;
  NodeId n = g.add_node(OpKind::kResize, {g.add_input("x", {DType::kF32, {4}})}, std::move(attrs));
  return op_def(OpKind::kResize).linearity(g.node(n));
}

TEST(ResizeTest, Linearity) {
  EXPECT_EQ(linearity(resize_attrs({8}, {2}, {{"mode", std::string("cubic")}})).inputs_mask, 1u);
  Attrs crop = resize_attrs({3}, {0.75}, {{"coordinate_transformation_mode", std::string("tf_crop_and_resize")},
                                          {"roi", std::vector<double>{0.5, 1.5}}});
  EXPECT_EQ(linearity(crop).inputs_mask, 1u);  // extrapolates 0
  crop.set("extrapolation_value", 1.0);
  EXPECT_FALSE(linearity(crop).any());  // affine
}

}  // namespace
}  // namespace tessera
