// The CUDA backend. Part 1 runs everywhere: the host-side lowering
// (lowering.h) of graphs to the descriptors our device kernels and cuBLASLt
// calls execute, evaluated on the host with the same per-element functions
// the kernels run, against the reference interpreter; and the geometry
// handed to cuDNN against shape inference. Part 2 runs plans on the GPU
// and skips with a message where there is none.
#include <gtest/gtest.h>

#include <map>

#include "graph/error.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/lowering.h"
#include "runtime/fusion.h"
#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

using namespace tessera::runtime::cuda;
using testing::attrs;
using testing::Ints;
using testing::random_tensor;

// Runs g the way the CUDA compiler lowers it, with every descriptor evaluated
// on the host. A node without a device form fails the test.
std::vector<Tensor> emulate(const Graph& g, const std::vector<Tensor>& inputs) {
  std::map<ValueId, Tensor> val;
  for (size_t i = 0; i < inputs.size(); ++i) val[g.inputs()[i]] = inputs[i];
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).constant) val[v] = *g.value(v).constant;
  auto out = [&](ValueId v) -> Tensor& {
    if (!val.count(v)) val[v] = Tensor(g.type(v).dtype, g.type(v).shape);
    return val[v];
  };
  auto ptrs = [&](const std::vector<ValueId>& vs) {
    std::vector<const void*> p;
    for (ValueId v : vs) p.push_back(val.at(v).data());
    return p;
  };
  for (const FusedGroup& grp : form_groups(g, g.topo_order(), true)) {
    const Node& n = g.node(grp.root);
    SCOPED_TRACE(grp.label(g));
    if (grp.post.empty() && op_def(n.kind).is_view) {
      val[n.outputs[0]] = val.at(n.inputs[0]).reshaped(g.type(n.outputs[0]).shape);
      continue;
    }
    if (n.kind == OpKind::kMatMul || n.kind == OpKind::kGemm) {
      bool gemm = n.kind == OpKind::kGemm;
      GemmPlan p = gemm ? plan_gemm(g, n) : plan_matmul(g.type(n.inputs[0]).shape, g.type(n.inputs[1]).shape);
      Tensor raw(g.type(n.outputs[0]).dtype, g.type(n.outputs[0]).shape);
      if (gemm && p.beta != 0.0f) copy_on_host(*broadcast_copy(g.type(n.inputs[2]), raw.type()), val.at(n.inputs[2]).data(), raw.mutable_data());
      gemm_on_host(p, val.at(n.inputs[0]).data_as<float>(), val.at(n.inputs[1]).data_as<float>(), raw.mutable_data_as<float>());
      if (grp.post.empty()) {
        val[n.outputs[0]] = raw;
        continue;
      }
      ValueId raw_id = g.num_values() + 1000;
      val[raw_id] = raw;
      auto l = lower_epilogue(g, grp, raw_id, kNoValue);
      EXPECT_TRUE(l.has_value());
      if (l) ew_on_host(l->program, ptrs(l->inputs), out(grp.output(g)).mutable_data());
      continue;
    }
    if (auto l = lower_elementwise_group(g, grp)) {
      ew_on_host(l->program, ptrs(l->inputs), out(grp.output(g)).mutable_data());
      continue;
    }
    EXPECT_TRUE(grp.post.empty()) << "a fused group with no device form";
    ValueId x = n.inputs[0], y = n.outputs[0];
    if (auto parts = lower_strided_copy(g, n)) {
      for (const CopyPart& p : *parts)
        copy_on_host(p.desc, val.at(n.inputs[p.src]).data(), out(n.outputs[p.dst]).mutable_data());
    } else if (n.kind == OpKind::kTile) {
      auto c = lower_tile(g, n);
      EXPECT_TRUE(c.has_value());
      if (c) copy_on_host(*c, val.at(x).data(), out(y).mutable_data());
    } else if (n.kind == OpKind::kPad) {
      auto p = lower_pad(g, n);
      EXPECT_TRUE(p.has_value());
      Tensor& t = out(y);
      for (int64_t i = 0; i < t.numel(); ++i) t.set_double(i, p->value);
      copy_on_host(p->copy, val.at(x).data(), t.mutable_data());
    } else if (n.kind == OpKind::kGather) {
      auto d = lower_gather(g, n);
      EXPECT_TRUE(d.has_value());
      gather_on_host(*d, val.at(x).data(), val.at(n.inputs[1]).data(), out(y).mutable_data());
    } else if (n.kind == OpKind::kLayerNormalization) {
      auto d = lower_layer_norm(g, n);
      EXPECT_TRUE(d.has_value());
      const void* bias = n.inputs.size() > 2 ? val.at(n.inputs[2]).data() : nullptr;
      void* mean = n.outputs.size() > 1 ? out(n.outputs[1]).mutable_data() : nullptr;
      void* inv = n.outputs.size() > 2 ? out(n.outputs[2]).mutable_data() : nullptr;
      for (int64_t r = 0; d && r < d->rows; ++r)
        layer_norm_row(*d, val.at(x).data(), val.at(n.inputs[1]).data(), bias, out(y).mutable_data(), mean, inv, r);
    } else if (auto d = lower_reduce(g, n)) {
      reduce_on_host(*d, val.at(x).data(), out(y).mutable_data());
    } else {
      ADD_FAILURE() << op_name(n.kind) << " has no device lowering";
    }
  }
  std::vector<Tensor> result;
  for (ValueId v : g.outputs()) result.push_back(val.at(v));
  return result;
}

void expect_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].type(), want[i].type()) << "output " << i;
    int64_t bad = 0;
    std::string first;
    for (int64_t j = 0; j < got[i].numel(); ++j) {
      double a = got[i].get_double(j), b = want[i].get_double(j);
      bool same_nan = std::isnan(a) && std::isnan(b);
      if (!same_nan && !(std::fabs(a - b) <= tol * (std::fabs(b) + 1.0)) && bad++ == 0)
        first = "at " + std::to_string(j) + ": " + std::to_string(a) + " vs " + std::to_string(b);
    }
    EXPECT_EQ(bad, 0) << "output " << i << ": " << bad << " of " << got[i].numel() << " differ, first " << first;
  }
}

std::vector<Tensor> random_inputs(const Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Tensor> in;
  for (ValueId v : g.inputs()) in.push_back(random_tensor(g.type(v).dtype, g.type(v).shape, rng));
  return in;
}

// The lowering evaluated on the host matches the reference (f64).
void expect_lowering_matches(const Graph& g, double tol = 1e-4) {
  std::vector<Tensor> in = random_inputs(g, 11);
  expect_close(emulate(g, in), evaluate(g, in, Precision::kF64), tol);
}

// ---- Part 1: host-side lowering ----

TEST(CudaLoweringTest, EveryUnaryOpMatchesReference) {
  const std::vector<std::pair<OpKind, Attrs>> ops = {
      {OpKind::kRelu, {}}, {OpKind::kLeakyRelu, attrs({{"alpha", 0.2}})}, {OpKind::kElu, {}},
      {OpKind::kSigmoid, {}}, {OpKind::kHardSigmoid, {}}, {OpKind::kHardSwish, {}}, {OpKind::kSoftplus, {}},
      {OpKind::kTanh, {}}, {OpKind::kErf, {}}, {OpKind::kGelu, {}},
      {OpKind::kGelu, attrs({{"approximate", std::string("tanh")}})}, {OpKind::kAbs, {}}, {OpKind::kExp, {}},
      {OpKind::kSin, {}}, {OpKind::kCos, {}}, {OpKind::kFloor, {}}, {OpKind::kCeil, {}}, {OpKind::kRound, {}},
      {OpKind::kSign, {}}, {OpKind::kNeg, {}}, {OpKind::kClip, attrs({{"min", -0.3}, {"max", 0.4}})}};
  for (const auto& [kind, a] : ops) {
    SCOPED_TRACE(op_name(kind));
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {3, 17}});
    g.set_outputs({g.add(kind, {x}, a)});
    expect_lowering_matches(g);
  }
}

TEST(CudaLoweringTest, FusedChainIsOneProgramWithBroadcast) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 3, 4, 5}});
  ValueId b = g.add_input("b", {DType::kF32, {3, 1, 1}});
  ValueId r = g.add_input("r", {DType::kF32, {5}});
  ValueId y = g.add(OpKind::kSigmoid, {g.add(OpKind::kMul, {g.add(OpKind::kRelu, {g.add(OpKind::kAdd, {x, b})}), r})});
  g.set_outputs({g.add(OpKind::kSub, {y, r})});
  auto groups = form_groups(g, g.topo_order(), true);
  ASSERT_EQ(groups.size(), 1u);
  auto l = lower_elementwise_group(g, groups[0]);
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->inputs.size(), 3u);  // r is read once
  EXPECT_FALSE(l->program.in[1].contiguous);
  EXPECT_EQ(l->program.in[1].strides[3], 0);  // b broadcasts along the last dim
  expect_lowering_matches(g);
}

TEST(CudaLoweringTest, ComparisonsWhereCastAndBatchNorm) {
  std::mt19937 rng(2);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 4, 3, 3}});
  ValueId z = g.add_input("z", {DType::kF32, {3}});
  ValueId c = g.add(OpKind::kLess, {x, z});
  ValueId w = g.add(OpKind::kWhere, {c, x, g.add(OpKind::kNeg, {x})});
  ValueId h = g.add(OpKind::kCast, {w}, attrs({{"to", std::string("f16")}}));
  ValueId back = g.add(OpKind::kCast, {h}, attrs({{"to", std::string("f32")}}));
  std::vector<ValueId> bn = {back};
  for (const char* name : {"scale", "bias", "mean"}) bn.push_back(g.add_constant(name, random_tensor(DType::kF32, {4}, rng)));
  bn.push_back(g.add_constant("var", Tensor::from_doubles(DType::kF32, {4}, {0.5, 1.0, 2.0, 0.1})));
  ValueId y = g.add(OpKind::kBatchNormalization, bn);
  g.set_outputs({y, c, g.add(OpKind::kCast, {c}, attrs({{"to", std::string("f32")}}))});
  expect_lowering_matches(g, 1e-3);  // f16 rounding in the middle
}

TEST(CudaLoweringTest, IntegerArithmeticHasNoDeviceForm) {
  Graph g;
  ValueId a = g.add_input("a", {DType::kI64, {4}});
  g.set_outputs({g.add(OpKind::kAdd, {a, a})});
  EXPECT_FALSE(lower_elementwise_group(g, form_groups(g, g.topo_order(), true)[0]).has_value());
}

TEST(CudaLoweringTest, HalfConversionsMatchTheGraphs) {
  std::mt19937 rng(4);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 20000; ++i) {
    float f = bits_float(bits(rng));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), float_to_half(f)) << f;
    ASSERT_EQ(f32_to_bf16(f), float_to_bf16(f)) << f;
    uint16_t h = static_cast<uint16_t>(bits(rng));
    float a = f16_to_f32(h), b = half_to_float(h);
    ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << h;
  }
}

TEST(CudaLoweringTest, DataMovementMatchesReference) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 3, 4}});
  ValueId t = g.add(OpKind::kTranspose, {x}, attrs({{"perm", Ints{2, 0, 1}}}));
  ValueId s = g.add(OpKind::kSlice, {x}, attrs({{"starts", Ints{-1, 0}}, {"ends", Ints{-100, 3}},
                                               {"axes", Ints{2, 1}}, {"steps", Ints{-2, 2}}}));
  ValueId cat = g.add(OpKind::kConcat, {x, x}, attrs({{"axis", int64_t{1}}}));
  NodeId split = g.add_node(OpKind::kSplit, {cat}, attrs({{"axis", int64_t{1}}, {"split", Ints{1, 5}}}));
  ValueId e = g.add(OpKind::kExpand, {g.add_input("v", {DType::kF32, {3, 1}})}, attrs({{"shape", Ints{2, 3, 5}}}));
  ValueId tile = g.add(OpKind::kTile, {x}, attrs({{"repeats", Ints{2, 1, 3}}}));
  ValueId pad = g.add(OpKind::kPad, {x}, attrs({{"pads", Ints{0, 1, -1, 1, 0, 2}}, {"value", 0.5}}));
  ValueId r = g.add(OpKind::kReshape, {t}, attrs({{"shape", Ints{8, 3}}}));
  g.set_outputs({t, s, cat, g.node(split).outputs[0], g.node(split).outputs[1], e, tile, pad, r});
  expect_lowering_matches(g, 0.0);
}

// Copies with empty dims: every piece has a strided form (an empty one
// copies nothing), and the pieces that hold elements land where the
// reference puts them.
TEST(CudaLoweringTest, EmptyDimsMatchReference) {
  for (DType dt : {DType::kF32, DType::kI64}) {
    SCOPED_TRACE(dtype_name(dt));
    Graph g = testing::empty_dims_graph(dt);
    int64_t empty_parts = 0;
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      auto parts = lower_strided_copy(g, g.node(id));
      ASSERT_TRUE(parts.has_value()) << g.node(id).name;
      for (const CopyPart& p : *parts) empty_parts += p.desc.numel == 0;
    }
    EXPECT_EQ(empty_parts, 10);  // 4 slices, 2 + 2 concat inputs, 2 split outputs
    expect_lowering_matches(g, 0.0);
  }
}

TEST(CudaLoweringTest, ReductionsGatherAndLayerNormMatchReference) {
  std::mt19937 rng(8);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {3, 4, 5, 2}});
  std::vector<ValueId> outs;
  outs.push_back(g.add(OpKind::kReduceSum, {x}, attrs({{"axes", Ints{1, 3}}, {"keepdims", int64_t{0}}})));
  outs.push_back(g.add(OpKind::kReduceMean, {x}, attrs({{"axes", Ints{-1}}})));
  outs.push_back(g.add(OpKind::kReduceMax, {x}, attrs({{"axes", Ints{0, 2}}})));
  outs.push_back(g.add(OpKind::kReduceMin, {x}));
  outs.push_back(g.add(OpKind::kReduceL2, {x}, attrs({{"axes", Ints{2}}})));
  outs.push_back(g.add(OpKind::kReduceSumSquare, {x}, attrs({{"axes", Ints{0}}})));
  outs.push_back(g.add(OpKind::kReduceProd, {x}, attrs({{"axes", Ints{3}}})));
  outs.push_back(g.add(OpKind::kGlobalAveragePool, {x}));
  ValueId idx = g.add_constant("idx", Tensor::from_ints(DType::kI64, {2, 2}, {0, -1, 2, 1}));
  outs.push_back(g.add(OpKind::kGather, {x, idx}, attrs({{"axis", int64_t{2}}})));
  ValueId scale = g.add_constant("s", random_tensor(DType::kF32, {5, 2}, rng));
  ValueId bias = g.add_constant("b", random_tensor(DType::kF32, {5, 2}, rng));
  NodeId ln = g.add_node(OpKind::kLayerNormalization, {x, scale, bias}, attrs({{"axis", int64_t{2}}}));
  for (ValueId v : g.node(ln).outputs) outs.push_back(v);
  g.set_outputs(outs);
  expect_lowering_matches(g);
}

TEST(CudaLoweringTest, MatmulBatchingCoversBroadcasts) {
  struct Case {
    Shape a, b;
    size_t calls;
    int64_t batch;
  };
  for (const Case& c : std::vector<Case>{{{4}, {4, 3}, 1, 1},
                                         {{2, 4}, {4}, 1, 1},
                                         {{5, 2, 4}, {4, 3}, 1, 5},
                                         {{2, 4}, {6, 4, 3}, 1, 6},
                                         {{2, 5, 2, 4}, {5, 4, 3}, 2, 5},
                                         {{2, 1, 2, 4}, {1, 3, 4, 3}, 2, 3},
                                         {{3, 1, 4}, {4}, 1, 3}}) {
    SCOPED_TRACE(shape_str(c.a) + " x " + shape_str(c.b));
    GemmPlan p = plan_matmul(c.a, c.b);
    EXPECT_EQ(p.off_a.size(), c.calls);
    EXPECT_EQ(p.batch, c.batch);
    Graph g;
    ValueId a = g.add_input("a", {DType::kF32, c.a});
    ValueId b = g.add_input("b", {DType::kF32, c.b});
    g.set_outputs({g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {a, b})})});
    expect_lowering_matches(g);
  }
}

TEST(CudaLoweringTest, GemmTransposesAlphaBetaAndBias) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Graph g;
      ValueId a = g.add_input("a", {DType::kF32, ta ? Shape{5, 3} : Shape{3, 5}});
      ValueId b = g.add_input("b", {DType::kF32, tb ? Shape{4, 5} : Shape{5, 4}});
      ValueId c = g.add_input("c", {DType::kF32, {4}});
      g.set_outputs({g.add(OpKind::kGemm, {a, b, c},
                           attrs({{"transA", int64_t{ta}}, {"transB", int64_t{tb}}, {"alpha", 0.5}, {"beta", 2.0}}))});
      expect_lowering_matches(g);
    }
}

TEST(CudaLoweringTest, ConvAndPoolGeometryAgreesWithShapeInference) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int64_t> u(0, 2);
  for (int t = 0; t < 200; ++t) {
    int spatial = 1 + t % 3;
    Shape x{2, 4};
    Ints kernel, strides, pads(2 * spatial), dil;
    for (int i = 0; i < spatial; ++i) {
      x.push_back(6 + u(rng) * 3);
      kernel.push_back(1 + u(rng));
      strides.push_back(1 + u(rng));
      dil.push_back(1 + u(rng) % 2);
      pads[i] = u(rng);
      pads[spatial + i] = u(rng);
    }
    Graph g;
    ValueId xv = g.add_input("x", {DType::kF32, x});
    Shape ws{6, 2};
    ws.insert(ws.end(), kernel.begin(), kernel.end());
    ValueId w = g.add_input("w", {DType::kF32, ws});
    ValueId y = g.add(OpKind::kConv, {xv, w}, attrs({{"kernel_shape", kernel}, {"strides", strides}, {"pads", pads},
                                                    {"dilations", dil}, {"group", int64_t{2}}}));
    auto geo = conv_geometry(g, g.node(g.value(y).producer));
    ASSERT_TRUE(geo.has_value());
    Shape want = g.type(y).shape;
    EXPECT_EQ(Shape(want.begin() + 2, want.end()), Shape(geo->out.begin(), geo->out.end()));
    EXPECT_EQ(geo->cudnn_dims(geo->out, geo->n, geo->k).size(), spatial == 1 ? 4u : static_cast<size_t>(2 + spatial));
    EXPECT_EQ(geo->symmetric(), std::equal(pads.begin(), pads.begin() + spatial, pads.begin() + spatial));
    Ints pool_pads(pads.begin(), pads.begin() + spatial);
    pool_pads.insert(pool_pads.end(), pool_pads.begin(), pool_pads.end());
    Ints ones(static_cast<size_t>(spatial), 1);
    ValueId p = g.add(OpKind::kMaxPool, {xv}, attrs({{"kernel_shape", Ints(kernel.size(), 2)}, {"strides", strides},
                                                    {"pads", Ints(2 * spatial, 0)}, {"dilations", ones}}));
    auto pg = pool_geometry(g, g.node(g.value(p).producer));
    ASSERT_TRUE(pg.has_value());
    Shape pw = g.type(p).shape;
    EXPECT_EQ(Shape(pw.begin() + 2, pw.end()), Shape(pg->out.begin(), pg->out.end()));
  }
}

TEST(CudaLoweringTest, LaunchGeometryCoversEveryElement) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257}, int64_t{1} << 40}) {
    Launch1d l = launch_1d(n);
    EXPECT_GE(l.blocks, 1u);
    EXPECT_LE(l.blocks, 65535u * 4u);
    if (n < (int64_t{1} << 20)) {
      EXPECT_GE(static_cast<int64_t>(l.blocks) * l.threads, n);
    }
  }
}

// ---- Part 2: plans on the GPU ----

#define REQUIRE_GPU()                                        \
  do {                                                       \
    std::string why = cuda_unavailable_reason();             \
    if (!why.empty()) GTEST_SKIP() << why;                   \
  } while (0)

TEST(CudaBackendTest, WithoutAGpuCompileSaysWhy) {
  std::string why = cuda_unavailable_reason();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is present";
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2}});
  g.set_outputs({g.add(OpKind::kRelu, {x})});
  try {
    ExecutablePlan::compile(g, {.backend = Backend::kCuda});
    FAIL() << "compiled for CUDA without a device";
  } catch (const tessera::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

// Runs the plan three times (eager, captured, replayed) against the reference.
void expect_gpu_matches(const Graph& g, double tol = 1e-4, bool tf32 = false) {
  RunOptions o;
  o.backend = Backend::kCuda;
  o.allow_tf32 = tf32;
  ExecutablePlan plan = ExecutablePlan::compile(g, o);
  for (uint32_t round = 0; round < 3; ++round) {
    SCOPED_TRACE("run " + std::to_string(round));
    std::vector<Tensor> in = random_inputs(g, 20 + round);
    expect_close(plan.run(in), evaluate(g, in, Precision::kF64), tol);
  }
}

TEST(CudaBackendTest, MlpWithFusedEpilogue) {
  REQUIRE_GPU();
  std::mt19937 rng(1);
  Graph g2;
  ValueId x2 = g2.add_input("x", {DType::kF32, {8, 64}});
  ValueId w1c = g2.add_constant("w1", random_tensor(DType::kF32, {64, 128}, rng));
  ValueId b1c = g2.add_constant("b1", random_tensor(DType::kF32, {128}, rng));
  ValueId h2 = g2.add(OpKind::kGelu, {g2.add(OpKind::kAdd, {g2.add(OpKind::kMatMul, {x2, w1c}), b1c})});
  ValueId w2c = g2.add_constant("w2", random_tensor(DType::kF32, {10, 128}, rng));
  ValueId c2 = g2.add_constant("c", random_tensor(DType::kF32, {10}, rng));
  g2.set_outputs({g2.add(OpKind::kGemm, {h2, w2c, c2}, attrs({{"transB", int64_t{1}}, {"beta", 0.5}}))});
  expect_gpu_matches(g2);
}

TEST(CudaBackendTest, BatchedBroadcastMatmul) {
  REQUIRE_GPU();
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {2, 1, 16, 32}});
  ValueId b = g.add_input("b", {DType::kF32, {3, 32, 24}});
  g.set_outputs({g.add(OpKind::kMatMul, {a, b})});
  expect_gpu_matches(g);
}

TEST(CudaBackendTest, HalfMatmul) {
  REQUIRE_GPU();
  Graph g;
  ValueId a = g.add_input("a", {DType::kF16, {4, 32, 64}});
  ValueId b = g.add_input("b", {DType::kF16, {64, 16}});
  g.set_outputs({g.add(OpKind::kMatMul, {a, b})});
  expect_gpu_matches(g, 1e-2);
}

TEST(CudaBackendTest, ConvolutionForms) {
  REQUIRE_GPU();
  struct Case {
    Shape x;
    int64_t k;
    Ints kernel, strides, pads, dil;
    int64_t group;
  };
  for (const Case& c : std::vector<Case>{{{1, 3, 9, 9}, 8, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
                                         {{2, 4, 10, 7}, 6, {3, 2}, {2, 1}, {0, 1, 1, 0}, {1, 1}, 1},
                                         {{1, 8, 12, 12}, 8, {3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 4},
                                         {{2, 3, 20}, 5, {4}, {3}, {1, 1}, {2}, 1},
                                         {{1, 2, 5, 6, 7}, 4, {3, 3, 2}, {1, 2, 1}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}, 2}}) {
    SCOPED_TRACE(shape_str(c.x));
    std::mt19937 rng(3);
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, c.x});
    Shape ws{c.k, c.x[1] / c.group};
    ws.insert(ws.end(), c.kernel.begin(), c.kernel.end());
    ValueId w = g.add_constant("w", random_tensor(DType::kF32, ws, rng));
    ValueId b = g.add_constant("b", random_tensor(DType::kF32, {c.k}, rng));
    ValueId y = g.add(OpKind::kConv, {x, w, b}, attrs({{"kernel_shape", c.kernel}, {"strides", c.strides},
                                                      {"pads", c.pads}, {"dilations", c.dil}, {"group", c.group}}));
    g.set_outputs({g.add(OpKind::kRelu, {y})});
    expect_gpu_matches(g);
  }
}

TEST(CudaBackendTest, EmptyDims) {
  REQUIRE_GPU();
  for (DType dt : {DType::kF32, DType::kI64}) {
    SCOPED_TRACE(dtype_name(dt));
    expect_gpu_matches(testing::empty_dims_graph(dt), 0.0);
  }
}

TEST(CudaBackendTest, PoolingSoftmaxLayerNormAndMovement) {
  REQUIRE_GPU();
  std::mt19937 rng(6);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 3, 8, 8}});
  Ints k{3, 3}, s{2, 2}, p{1, 1, 1, 1}, d{1, 1};
  ValueId mp = g.add(OpKind::kMaxPool, {x}, attrs({{"kernel_shape", k}, {"strides", s}, {"pads", p}, {"dilations", d}}));
  ValueId ap = g.add(OpKind::kAveragePool, {x}, attrs({{"kernel_shape", k}, {"strides", s}, {"pads", p},
                                                      {"dilations", d}, {"count_include_pad", int64_t{1}}}));
  ValueId sm = g.add(OpKind::kSoftmax, {x}, attrs({{"axis", int64_t{1}}}));
  ValueId lsm = g.add(OpKind::kLogSoftmax, {x});
  ValueId sc = g.add_constant("s", random_tensor(DType::kF32, {8}, rng));
  ValueId ln = g.add(OpKind::kLayerNormalization, {x, sc});
  ValueId t = g.add(OpKind::kTranspose, {x}, attrs({{"perm", Ints{0, 2, 3, 1}}}));
  ValueId cat = g.add(OpKind::kConcat, {x, x}, attrs({{"axis", int64_t{2}}}));
  ValueId red = g.add(OpKind::kReduceMean, {x}, attrs({{"axes", Ints{2, 3}}}));
  ValueId gap = g.add(OpKind::kGlobalAveragePool, {x});
  ValueId idx = g.add_constant("i", Tensor::from_ints(DType::kI64, {3}, {2, -1, 0}));
  ValueId ga = g.add(OpKind::kGather, {x, idx}, attrs({{"axis", int64_t{3}}}));
  ValueId cs = g.add(OpKind::kCumSum, {x}, attrs({{"axis", int64_t{3}}}));  // host fallback in the middle
  g.set_outputs({mp, ap, sm, lsm, ln, t, cat, red, gap, ga, g.add(OpKind::kRelu, {cs})});
  expect_gpu_matches(g);
}

}  // namespace
}  // namespace tessera::runtime
