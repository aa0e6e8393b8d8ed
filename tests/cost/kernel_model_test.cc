// The per-kernel model: properties that hold for any sensible profile, and
// golden numbers on the H100 profile worked out by hand below.
#include "cost/kernel_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "cost/flops.h"
#include "cost/gemm_model.h"
#include "cost/graph_cost.h"
#include "graph/error.h"
#include "graph/fusion_groups.h"
#include "tests/graph/op_test_util.h"

namespace tessera::cost {
namespace {

// A 3x3 convolution's attributes: stride 1, padding and dilation `pad`
// and `dilation` on both axes.
using test::conv3x3;

Graph matmul(int64_t m, int64_t k, int64_t n, DType t = DType::kF32) {
  Graph g;
  ValueId a = g.add_input("a", {t, {m, k}});
  ValueId b = g.add_input("b", {t, {k, n}});
  g.set_outputs({g.add(OpKind::kMatMul, {a, b}, {}, "mm")});
  return g;
}

Graph binary(OpKind kind, int64_t n) {
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {n}});
  ValueId b = g.add_input("b", {DType::kF32, {n}});
  g.set_outputs({g.add(kind, {a, b}, {}, "op")});
  return g;
}

size_t level(const DeviceProfile& d, const std::string& name) {
  for (size_t i = 0; i < d.memory.size(); ++i)
    if (d.memory[i].name == name) return i;
  ADD_FAILURE() << "no level " << name;
  return 0;
}

// The FLOP count and the kernel model read one arithmetic row per op
// (OpDef::arithmetic): with a transcendental priced as one operation, a
// kernel's vector time is exactly its FLOPs at the vector rate (2 FLOP per
// FMA slot). Before the row they disagreed (Gelu 4 FLOPs against t+4 slots,
// Div 1 against 4).
TEST(KernelModel, ElementwiseArithmeticIsOneRow) {
  DeviceProfile d = builtin_profile("h100");
  d.transcendental_ops = 1;
  const int64_t n = 1 << 20;
  struct Case {
    OpKind kind;
    double exponent;  // Pow's constant exponent; NaN: a unary op
    double per_element;
  };
  const Case cases[] = {{OpKind::kRelu, NAN, 1},    {OpKind::kSigmoid, NAN, 3}, {OpKind::kGelu, NAN, 5},
                        {OpKind::kExp, NAN, 1},     {OpKind::kSqrt, NAN, 4},    {OpKind::kHardSwish, NAN, 2},
                        {OpKind::kPow, 2.0, 1},     {OpKind::kPow, 0.5, 4},     {OpKind::kPow, 1.7, 2}};
  for (const Case& c : cases) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {n}});
    ValueId y;
    if (std::isnan(c.exponent)) {
      y = g.add(c.kind, {x}, {}, "op");
    } else {
      Tensor e(DType::kF32, {});
      e.set_double(0, c.exponent);
      y = g.add(c.kind, {x, g.add_constant("e", e)}, {}, "op");
    }
    g.set_outputs({y});
    const Node& node = g.node(g.value(y).producer);
    int64_t flops = node_flops(g, node);
    EXPECT_EQ(flops, static_cast<int64_t>(c.per_element * n)) << op_name(c.kind) << " " << c.exponent;
    KernelCost k = node_cost(g, g.value(y).producer, d);
    double vector_flops = k.compute_s * d.peak_flops(DType::kF32, false) * d.vector_efficiency;
    EXPECT_NEAR(vector_flops / static_cast<double>(flops), 2.0, 1e-9) << op_name(c.kind) << " " << c.exponent;
  }
}

TEST(KernelModel, BoundFlipsFromMemoryToCompute) {
  DeviceProfile d = builtin_profile("h100");
  bool seen_compute = false;
  std::string first, last;
  for (int64_t m = 1; m <= 8192; m *= 2) {
    // Weights as a constant of 32 MiB: more than half the L2, so they come
    // from HBM on every run.
    Graph g;
    ValueId x = g.add_input("x", {DType::kBF16, {m, 4096}});
    ValueId w = g.add_constant("w", Tensor(DType::kBF16, {4096, 4096}));
    g.set_outputs({g.add(OpKind::kMatMul, {x, w}, {}, "mm")});
    KernelCost c = node_cost(g, 0, d);
    if (m == 1) first = c.bound;
    last = c.bound;
    if (c.bound == "compute") seen_compute = true;
    else EXPECT_FALSE(seen_compute) << "back to " << c.bound << " at M=" << m;
  }
  EXPECT_EQ(first, "hbm");  // a matrix-vector product streams the weights
  EXPECT_EQ(last, "compute");
}

// Precision prices the kernel: a matrix-vector product streaming weights
// from DRAM takes about half the time in bf16 as in f32 on the CPU (half
// the bytes), and on an H100 in f16 too; the CPU runtime computes and keeps
// f16 as f32 copies (DeviceProfile::widened), so there f16 costs f32's time.
TEST(KernelModel, SixteenBitBytesAndWidenedF16) {
  auto time = [](const DeviceProfile& d, DType t) { return node_cost(matmul(1, 4096, 8192, t), 0, d).time_s; };
  DeviceProfile cpu = builtin_profile("cpu");
  ASSERT_EQ(cpu.stored_size(DType::kF16), 4u);
  ASSERT_EQ(cpu.stored_size(DType::kBF16), 2u);
  EXPECT_NEAR(time(cpu, DType::kBF16) / time(cpu, DType::kF32), 0.5, 0.1);
  EXPECT_NEAR(time(cpu, DType::kF16) / time(cpu, DType::kF32), 1.0, 0.02);
  DeviceProfile h100 = builtin_profile("h100");
  EXPECT_TRUE(h100.widened.empty());
  EXPECT_LT(time(h100, DType::kF16) / time(h100, DType::kF32), 0.6);
  // The field survives a JSON round trip.
  EXPECT_EQ(profile_from_json(profile_to_json(cpu), "test").widened, std::vector<DType>{DType::kF16});
}

TEST(KernelModel, GoldenElementwiseAddOnH100) {
  DeviceProfile d = builtin_profile("h100");
  int64_t n = int64_t{1} << 26;
  KernelCost c = node_cost(binary(OpKind::kAdd, n), 0, d);
  // 3 tensors x 2^26 x 4 B = 805306368 B, far over the 50 MB L2: HBM at
  // 3350 GB/s x 0.9; 3 us launch.
  double bytes = 3.0 * 4 * static_cast<double>(n);
  EXPECT_DOUBLE_EQ(c.level_bytes[level(d, "hbm")], bytes);
  EXPECT_NEAR(c.level_s[level(d, "hbm")], bytes / (3350e9 * 0.9), 1e-9);
  EXPECT_EQ(c.bound, "hbm");
  EXPECT_NEAR(c.time_s, 267.10e-6 + 3e-6, 0.01e-6);
  // One add per element on 67 TFLOP/s f32 vector units at 0.7, an add
  // taking an FMA slot (2 FLOP of peak): 2^26 x 2 / 46.9e12 = 2.86 us.
  EXPECT_NEAR(c.compute_s, 2.0 * static_cast<double>(n) / (67e12 * 0.7), 1e-12);
  EXPECT_EQ(c.total_flops(), n);
}

TEST(KernelModel, GoldenBf16GemmOnH100) {
  DeviceProfile d = builtin_profile("h100");
  KernelCost c = node_cost(matmul(8192, 8192, 8192, DType::kBF16), 0, d);
  // FLOPs: 2 x 8192^3.
  EXPECT_EQ(c.total_flops(), 2 * int64_t{8192} * 8192 * 8192);
  // Shared memory holds a C block in half of 228 KB at 2 B: 58368 elements,
  // a 241 x 242 block; 34 x 34 = 1156 blocks over 132 SMs is 9 waves, the
  // last partial: utilization 1156 / (9 x 132) = 0.97306.
  double utilization = 1156.0 / (9 * 132);
  double compute = 2.0 * 8192.0 * 8192 * 8192 / (989.4e12 * 0.75 * utilization);
  EXPECT_NEAR(c.compute_s, compute, 1e-9);
  EXPECT_NEAR(c.compute_s, 1.5228e-3, 0.001e-3);
  // HBM: L2 holds a 3620 x 3620 block (half of 50 MiB at 2 B), so A and B
  // are each read ceil(8192 / 3620) = 3 times, C written once: 7 x 128 MiB.
  EXPECT_DOUBLE_EQ(c.level_bytes[level(d, "hbm")], 7.0 * 8192 * 8192 * 2);
  EXPECT_EQ(c.bound, "compute");
  EXPECT_NEAR(c.time_s, compute + 3e-6, 1e-9);
}

TEST(KernelModel, WarmCacheKeepsSmallOperandsOffMainMemory) {
  DeviceProfile d = builtin_profile("cpu");
  Graph g = binary(OpKind::kAdd, 1024);  // 12 KB: fits in L1
  CostOptions cold;
  cold.warm_cache = false;
  EXPECT_DOUBLE_EQ(node_cost(g, 0, d).level_bytes.back(), 0.0);
  EXPECT_DOUBLE_EQ(node_cost(g, 0, d, cold).level_bytes.back(), 3.0 * 4 * 1024);
  EXPECT_EQ(node_cost(g, 0, d).bound, "launch");
}

TEST(KernelModel, SoftmaxReadsOnceFromMainMemoryWhenRowsFit) {
  DeviceProfile d = builtin_profile("cpu");
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {4096, 1024}});
  g.set_outputs({g.add(OpKind::kSoftmax, {x}, {}, "sm")});
  CostOptions cold;
  cold.warm_cache = false;
  KernelCost c = node_cost(g, 0, d, cold);
  double io = 2.0 * 4096 * 1024 * 4;
  EXPECT_DOUBLE_EQ(c.level_bytes.back(), io);
  // A 4 KB row stays in L1 for the three passes.
  EXPECT_DOUBLE_EQ(c.level_bytes[0], 3 * io);
}

// A scatter is priced as the movement it is: the data copied (read and
// written), the indices and updates read, the updates written again at their
// positions. A KV cache [1, 8, 4096, 128] bf16 written at one position moves
// the cache twice and the new entries twice; no arithmetic.
TEST(KernelModel, ScattersCopyTheDataAndWriteTheUpdates) {
  DeviceProfile d = builtin_profile("h100");
  CostOptions cold;
  cold.warm_cache = false;
  Graph g;
  ValueId cache = g.add_input("cache", {DType::kBF16, {1, 8, 4096, 128}});
  ValueId at = g.add_input("at", {DType::kI64, {1, 8, 1, 128}});
  ValueId kv = g.add_input("kv", {DType::kBF16, {1, 8, 1, 128}});
  Attrs a;
  a.set("axis", int64_t{2});
  g.set_outputs({g.add(OpKind::kScatterElements, {cache, at, kv}, a, "write")});
  KernelCost c = node_cost(g, 0, d, cold);
  double data = 8.0 * 4096 * 128 * 2, entries = 8.0 * 128 * 2, indices = 8.0 * 128 * 8;
  EXPECT_DOUBLE_EQ(c.level_bytes[level(d, "hbm")], 2 * data + indices + 2 * entries);
  EXPECT_EQ(c.total_flops(), 0);
  EXPECT_EQ(c.bound, "hbm");
  // ScatterND of the same rows: the same bytes.
  Graph nd;
  ValueId rows = nd.add_input("rows", {DType::kI64, {1, 1}});
  ValueId upd = nd.add_input("upd", {DType::kBF16, {1, 8, 4096, 128}});
  nd.set_outputs({nd.add(OpKind::kScatterND, {nd.add_input("cache", {DType::kBF16, {1, 8, 4096, 128}}), rows, upd})});
  EXPECT_DOUBLE_EQ(node_cost(nd, 0, d, cold).level_bytes[level(d, "hbm")], 4 * data + 8);
}

// Resize: one pass per resized axis, a multiply-add per tap of each pass's
// output (2 taps linear, 4 cubic, none for nearest); the input is read once
// from memory, every tap from the fastest level.
TEST(KernelModel, ResizeFlopsAndBytes) {
  auto resize = [](const char* mode) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 8, 32, 32}});
    Attrs a;
    a.set("mode", std::string(mode));
    a.set("sizes", std::vector<int64_t>{1, 8, 64, 64});
    a.set("scales", std::vector<double>{1, 1, 2, 2});
    g.set_outputs({g.add(OpKind::kResize, {x}, a, "resize")});
    return g;
  };
  DeviceProfile d = builtin_profile("cpu");
  CostOptions cold;
  cold.warm_cache = false;
  // Linear: H pass 8x64x32 outputs, W pass 8x64x64, 2 taps x 2 FLOP each.
  int64_t linear_flops = 2 * 2 * (8 * 64 * 32) + 2 * 2 * (8 * 64 * 64);
  KernelCost linear = node_cost(resize("linear"), 0, d, cold);
  KernelCost cubic = node_cost(resize("cubic"), 0, d, cold);
  KernelCost nearest = node_cost(resize("nearest"), 0, d, cold);
  EXPECT_EQ(linear.total_flops(), linear_flops);
  EXPECT_EQ(cubic.total_flops(), 2 * linear_flops);
  EXPECT_EQ(nearest.total_flops(), 0);
  double io = 4.0 * (8 * 32 * 32 + 8 * 64 * 64);
  EXPECT_DOUBLE_EQ(linear.level_bytes.back(), io);
  EXPECT_DOUBLE_EQ(linear.level_bytes[0], 4.0 * static_cast<double>(linear_flops) / 2);
  EXPECT_DOUBLE_EQ(nearest.level_bytes[0], io);
  EXPECT_LT(nearest.compute_s, linear.compute_s);
  EXPECT_LT(linear.compute_s, cubic.compute_s);
}

TEST(KernelModel, FusionSavesTheIntermediate) {
  DeviceProfile d = builtin_profile("cpu");
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 64, 56, 56}});
  ValueId w = g.add_constant("w", Tensor(DType::kF32, {64, 64, 3, 3}));
  Attrs a = conv3x3();
  ValueId y = g.add(OpKind::kConv, {x, w}, a, "conv");
  ValueId r = g.add(OpKind::kRelu, {y}, {}, "relu");
  g.set_outputs({r});
  CostOptions cold;
  cold.warm_cache = false;
  KernelCost fused = kernel_cost(g, {0, 1}, d, cold);
  KernelCost conv = node_cost(g, 0, d, cold), relu = node_cost(g, 1, d, cold);
  EXPECT_EQ(fused.label, "Conv+Relu");
  EXPECT_LT(fused.time_s, conv.time_s + relu.time_s);
  EXPECT_DOUBLE_EQ(fused.level_bytes.back(), conv.level_bytes.back());
  EXPECT_EQ(fused.total_flops(), conv.total_flops() + relu.total_flops());
  auto groups = kernel_groups(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0], (std::vector<NodeId>{0, 1}));
  EXPECT_EQ(kernel_groups(g, false).size(), 2u);
}

// A CPU product's epilogue: its post-ops' arithmetic at epilogue_ops_scale
// times the streaming price, each operand of more than one element
// epilogue_operand_ops per element more; a per-column bias first in the
// chain (the primitive's bias argument), a scalar operand, and a
// convolution's post-ops pay neither.
TEST(KernelModel, ProductEpiloguePostOps) {
  DeviceProfile base = builtin_profile("cpu");
  base.epilogue_ops_scale = 1.0;
  base.epilogue_operand_ops = 0;
  DeviceProfile d = base;
  d.epilogue_ops_scale = 2.0;
  d.epilogue_operand_ops = 5.0;
  const int64_t m = 256, n = 512;
  double op_s = 2.0 / (d.peak_flops(DType::kF32, false) * d.vector_efficiency) * static_cast<double>(m * n);
  auto chain = [&](const std::vector<std::pair<OpKind, Shape>>& links, bool conv = false) {
    Graph g;
    ValueId y;
    if (conv) {
      ValueId x = g.add_input("x", {DType::kF32, {1, 64, 16, 32}});
      y = g.add(OpKind::kConv, {x, g.add_constant("w", Tensor(DType::kF32, {16, 64, 3, 3}))}, conv3x3(), "r");
    } else {
      ValueId x = g.add_input("x", {DType::kF32, {m, 128}});
      y = g.add(OpKind::kMatMul, {x, g.add_constant("w", Tensor(DType::kF32, {128, n}))}, {}, "r");
    }
    for (const auto& [kind, other] : links) {
      if (other.empty()) y = g.add(kind, {y});
      else y = g.add(kind, {y, g.add_input("o" + std::to_string(g.num_nodes()), {DType::kF32, other})});
    }
    g.set_outputs({y});
    std::vector<NodeId> nodes;
    for (int32_t i = 0; i < g.num_nodes(); ++i) nodes.push_back(i);
    return std::make_pair(kernel_cost(g, nodes, base).compute_s, kernel_cost(g, nodes, d).compute_s);
  };
  auto [bare0, bare1] = chain({});
  EXPECT_DOUBLE_EQ(bare0, bare1);
  // Sigmoid: its streaming price once more.
  auto [sig0, sig1] = chain({{OpKind::kSigmoid, {}}});
  EXPECT_GT(sig0, bare0);
  EXPECT_NEAR(sig1 - bare1, 2.0 * (sig0 - bare0), 1e-12);
  // A full residual: one op at twice the price, and 5 for its operand.
  auto [res0, res1] = chain({{OpKind::kAdd, {m, n}}});
  EXPECT_NEAR(res0 - bare0, op_s, 1e-12);
  EXPECT_NEAR(res1 - bare1, 2.0 * op_s + 5.0 * op_s, 1e-12);
  // A per-column bias first: as in a streaming kernel; the same Add after
  // a Relu is a post-op like any other.
  auto [bias0, bias1] = chain({{OpKind::kAdd, {n}}});
  EXPECT_NEAR(bias1 - bare1, bias0 - bare0, 1e-12);
  auto [late0, late1] = chain({{OpKind::kRelu, {}}, {OpKind::kAdd, {n}}});
  EXPECT_NEAR(late1 - bare1, 2.0 * (late0 - bare0) + 5.0 * op_s, 1e-12);
  // A scalar operand: arithmetic only.
  auto [sc0, sc1] = chain({{OpKind::kMul, {1}}});
  EXPECT_NEAR(sc1 - bare1, 2.0 * (sc0 - bare0), 1e-12);
  // A convolution's chain is priced as streaming ops.
  auto [conv0, conv1] = chain({{OpKind::kSigmoid, {}}}, true);
  EXPECT_DOUBLE_EQ(conv0, conv1);
}

TEST(KernelModel, NoFusionWhenTheLinkHasTwoReaders) {
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {8, 8}});
  ValueId b = g.add_input("b", {DType::kF32, {8, 8}});
  ValueId y = g.add(OpKind::kMatMul, {a, b}, {}, "mm");
  ValueId r = g.add(OpKind::kRelu, {y}, {}, "relu");
  ValueId s = g.add(OpKind::kAdd, {y, r}, {}, "add");
  g.set_outputs({s});
  auto groups = kernel_groups(g);
  // MatMul alone; Relu+Add is a group, but a unary root with a binary link
  // is one oneDNN runs only by its reference kernel, so the runtime (and the
  // model) run Relu and Add apart (tests/cost/graph_cost_test.cc checks).
  EXPECT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0], (std::vector<NodeId>{0}));
}

TEST(KernelModel, RejectsAChainThatIsNotOne) {
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {8}});
  ValueId r = g.add(OpKind::kRelu, {a}, {}, "r1");
  ValueId t = g.add(OpKind::kTanh, {a}, {}, "t1");
  g.set_outputs({r, t});
  try {
    kernel_cost(g, {0, 1}, builtin_profile("cpu"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidGraph);
    EXPECT_NE(std::string(e.what()).find("'t1' does not read"), std::string::npos) << e.what();
  }
}

TEST(KernelModel, ReshapeIsFree) {
  Graph g;
  ValueId a = g.add_input("a", {DType::kF32, {8, 8}});
  Attrs at;
  at.set("shape", std::vector<int64_t>{64});
  g.set_outputs({g.add(OpKind::kReshape, {a}, at, "rs")});
  KernelCost c = node_cost(g, 0, builtin_profile("h100"));
  EXPECT_EQ(c.time_s, 0.0);
  EXPECT_EQ(c.bound, "none");
}

TEST(KernelModel, DepthwiseConvIsNotAGemm) {
  // 32 channels, one per group: the model streams it on the vector units,
  // so it costs far less than a dense convolution of the same channels.
  DeviceProfile d = builtin_profile("cpu");
  auto conv = [&](int64_t group) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 32, 112, 112}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {32, 32 / group, 3, 3}));
    Attrs a = conv3x3();
    a.set("group", group);
    g.set_outputs({g.add(OpKind::kConv, {x, w}, a, "conv")});
    return node_cost(g, 0, d);
  };
  KernelCost dw = conv(32), dense = conv(1);
  EXPECT_EQ(dw.total_flops() * 32, dense.total_flops());
  EXPECT_LT(dw.time_s, dense.time_s);
  // ... but it runs below the GEMM rate per FLOP.
  EXPECT_GT(dw.compute_s, static_cast<double>(dw.total_flops()) / (d.peak_flops(DType::kF32, true) * d.gemm_efficiency));
}

TEST(KernelModel, SmallCpuKernelsRunOnOneCore) {
  // Under the runtime's one-thread line an Add gets one core of two: the
  // same kernel on a device whose rates are those of one core takes as long.
  DeviceProfile two = builtin_profile("cpu");
  two.launch_overhead_s = 0;
  two.parallel_overhead_s = 0;
  DeviceProfile one = two;
  one.units = 1;
  for (auto* peaks : {&one.matrix_flops, &one.vector_flops})
    for (auto& [t, v] : *peaks) v /= 2;
  for (MemoryLevel& m : one.memory) m.bandwidth /= 2;
  for (MemoryLevel& m : one.memory)
    if (m.per_unit) m.capacity_bytes *= 2;  // the same total capacity
  Graph small = binary(OpKind::kAdd, 1000);
  EXPECT_NEAR(node_cost(small, 0, two).time_s, node_cost(small, 0, one).time_s, 1e-12);
  // Over the line both cores work: half the one-core time.
  Graph large = binary(OpKind::kAdd, kOneThreadElements * 4);
  EXPECT_NEAR(node_cost(large, 0, two).time_s * 2, node_cost(large, 0, one).time_s, 1e-12);
  // A small product's work items all go to its one core: no wave over the
  // other (it was priced at half of one core: tiny_cnn's 1.19 MFLOP
  // convolutions at 20.7 us on 2 cores, 11.7 on 1, 11 measured).
  for (auto [m, k, n] : {std::tuple{64, 64, 64}, {8, 256, 96}, {200, 100, 40}}) {
    Graph g = matmul(m, k, n);
    ASSERT_TRUE(runs_on_one_thread(g, g.node(0), g.node(0).outputs[0]));
    EXPECT_NEAR(node_cost(g, 0, two).compute_s, node_cost(g, 0, one).compute_s, 1e-12) << m << "x" << k << "x" << n;
  }
}

// The one-thread line is priced from the profile: a kernel splits over the
// cores where the time it saves there exceeds the fork-join cost. A profile
// without that cost, or of one core, keeps the default line; the cost model
// charges a convolution between the two lines all cores under the host's.
TEST(KernelModel, OneThreadLineFromTheForkJoinCost) {
  DeviceProfile d = builtin_profile("cpu");
  ASSERT_EQ(d.units, 2);
  d.parallel_overhead_s = 5e-6;
  double core_macs = d.peak_flops(DType::kF32, true) * d.gemm_efficiency / 2 / 2;
  OneThreadLine line = one_thread_line(d);
  EXPECT_NEAR(static_cast<double>(line.macs), 2 * 5e-6 * core_macs, 1.0);  // t * (1 - 1/2) = 5 us
  EXPECT_EQ(line.elements, kOneThreadElements);
  ASSERT_LT(line.macs, kOneThreadMacs);
  // Twice the fork-join cost: twice the line.
  d.parallel_overhead_s = 10e-6;
  EXPECT_NEAR(static_cast<double>(one_thread_line(d).macs), 2.0 * static_cast<double>(line.macs), 2.0);
  // Four cores save 3/4 of the time: the line at 4/3 of the overhead's MACs.
  DeviceProfile four = d;
  four.units = 4;
  for (auto& [t, v] : four.matrix_flops) v *= 2;
  EXPECT_NEAR(static_cast<double>(one_thread_line(four).macs), 10e-6 * 4.0 / 3.0 * core_macs, 2.0);
  DeviceProfile unknown = d;
  unknown.parallel_overhead_s = 0;
  EXPECT_EQ(one_thread_line(unknown), OneThreadLine{});
  DeviceProfile single = d;
  single.units = 1;
  EXPECT_EQ(one_thread_line(single), OneThreadLine{});
  EXPECT_EQ(one_thread_line(builtin_profile("h100")), OneThreadLine{});
  // A 1x1 convolution of 2 M MACs: under the default line, over the host's.
  d.parallel_overhead_s = 5e-6;
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 32, 32, 32}});
  Attrs a;
  a.set("kernel_shape", std::vector<int64_t>{1, 1});
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("pads", std::vector<int64_t>{0, 0, 0, 0});
  a.set("dilations", std::vector<int64_t>{1, 1});
  a.set("group", int64_t{1});
  ValueId w = g.add_input("w", {DType::kF32, {64, 32, 1, 1}});
  g.set_outputs({g.add(OpKind::kConv, {x, w}, a, "conv")});
  ASSERT_TRUE(runs_on_one_thread(g, g.node(0), g.node(0).outputs[0]));
  ASSERT_FALSE(runs_on_one_thread(g, g.node(0), g.node(0).outputs[0], one_thread_line(d)));
  EXPECT_TRUE(node_cost(g, 0, d).parallel);
}

// A one-thread kernel streams a shared level at what one core draws from it
// alone (core_bandwidth), not an even share of what every core does at once;
// a parallel kernel at the whole level's rate.
TEST(KernelModel, OneThreadKernelsStreamSharedLevelsAtTheCoresRate) {
  DeviceProfile d = builtin_profile("cpu");
  ASSERT_EQ(d.units, 2);
  d.launch_overhead_s = d.parallel_overhead_s = 0;
  d.vector_efficiency = 1.0;
  MemoryLevel& dram = d.memory.back();
  dram.efficiency = 1.0;
  CostOptions cold;
  cold.warm_cache = false;  // every byte from main memory
  Graph small = binary(OpKind::kAdd, kOneThreadElements / 2);
  Graph large = binary(OpKind::kAdd, kOneThreadElements * 8);
  size_t last = d.memory.size() - 1;
  KernelCost even = node_cost(small, 0, d, cold);
  ASSERT_FALSE(even.parallel);
  ASSERT_EQ(even.bound, "dram");
  EXPECT_NEAR(even.level_s[last], even.level_bytes[last] / (dram.bandwidth / 2), 1e-15);
  // Both cores stream 1.5x what one does: the one-thread kernel gets 2/3 of
  // the level, the parallel one all of it, as before.
  dram.core_bandwidth = dram.bandwidth / 1.5;
  KernelCost alone = node_cost(small, 0, d, cold);
  EXPECT_NEAR(alone.level_s[last], alone.level_bytes[last] / (dram.bandwidth / 1.5), 1e-15);
  EXPECT_NEAR(alone.level_s[last] * 4, even.level_s[last] * 3, 1e-15);
  KernelCost both = node_cost(large, 0, d, cold);
  ASSERT_TRUE(both.parallel);
  EXPECT_NEAR(both.level_s[last], both.level_bytes[last] / dram.bandwidth, 1e-15);
}

// A CPU Softmax costs softmax_ops per element (4 and a transcendental where
// not calibrated) and softmax_row_ops per reduced row: of two Softmaxes of
// the same elements, the one in shorter rows costs the rows' difference.
TEST(KernelModel, SoftmaxPaysPerElementAndPerRow) {
  DeviceProfile d = builtin_profile("cpu");
  d.launch_overhead_s = d.parallel_overhead_s = 0;
  auto softmax = [](int64_t rows, int64_t cols) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {rows, cols}});
    Attrs a;
    a.set("axis", int64_t{-1});
    g.set_outputs({g.add(OpKind::kSoftmax, {x}, a, "sm")});
    return g;
  };
  Graph longer = softmax(32, 2048), shorter = softmax(512, 128);  // 65536 elements each, in L2
  double op_s = 2.0 / (d.peak_flops(DType::kF32, false) * d.vector_efficiency);
  double share = static_cast<double>(d.units);  // under the one-thread line: one core
  ASSERT_FALSE(node_cost(longer, 0, d).parallel);
  d.softmax_ops = 0;
  d.softmax_row_ops = 0;
  KernelCost plain = node_cost(longer, 0, d);
  EXPECT_NEAR(plain.compute_s, 65536 * (4 + d.transcendental_ops) * op_s * share, 1e-12);
  EXPECT_NEAR(node_cost(shorter, 0, d).compute_s, plain.compute_s, 1e-12);  // no row cost: the same
  d.softmax_ops = 20;
  d.softmax_row_ops = 1200;
  KernelCost l = node_cost(longer, 0, d), s = node_cost(shorter, 0, d);
  EXPECT_NEAR(l.compute_s, (65536 * 20 + 32 * 1200) * op_s * share, 1e-12);
  EXPECT_NEAR(s.compute_s - l.compute_s, (512 - 32) * 1200 * op_s * share, 1e-12);
  // Other devices keep the formula.
  DeviceProfile gpu = builtin_profile("h100");
  gpu.softmax_ops = 1000;
  gpu.softmax_row_ops = 1e6;
  DeviceProfile plain_gpu = builtin_profile("h100");
  EXPECT_DOUBLE_EQ(node_cost(shorter, 0, gpu).time_s, node_cost(shorter, 0, plain_gpu).time_s);
}

TEST(KernelModel, ParallelAndGemmCallOverheads) {
  DeviceProfile d = builtin_profile("cpu");
  d.launch_overhead_s = 1e-6;
  d.parallel_overhead_s = 2e-6;
  d.gemm_overhead_s = 4e-6;
  EXPECT_DOUBLE_EQ(node_cost(binary(OpKind::kAdd, 1000), 0, d).launch_s, 1e-6);  // one thread
  EXPECT_DOUBLE_EQ(node_cost(binary(OpKind::kAdd, kOneThreadElements * 4), 0, d).launch_s, 3e-6);
  EXPECT_DOUBLE_EQ(node_cost(matmul(256, 256, 256), 0, d).launch_s, 7e-6);
  EXPECT_DOUBLE_EQ(node_cost(matmul(8, 8, 8), 0, d).launch_s, 5e-6);  // one thread, still a GEMM call
  // GPUs have no thread pool to wake.
  DeviceProfile h = builtin_profile("h100");
  h.parallel_overhead_s = 2e-6;
  EXPECT_DOUBLE_EQ(node_cost(binary(OpKind::kAdd, kOneThreadElements * 4), 0, h).launch_s, h.launch_overhead_s);
}

// Pow by a constant is priced as the runtime computes it: x^2 as one
// multiply (the work of a Mul), x^3 as two, a non-integer or non-constant
// exponent as powf (a log and an exp).
TEST(KernelModel, PowByAConstantExponent) {
  DeviceProfile d = builtin_profile("cpu");
  d.launch_overhead_s = 0;
  d.parallel_overhead_s = 0;
  d.transcendental_ops = 20;
  const int64_t n = kOneThreadElements * 4;
  auto pow_by = [&](std::optional<float> e) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {n}});
    ValueId p = e ? g.add_constant("p", Tensor::scalar_f32(*e)) : g.add_input("p", {DType::kF32, {}});
    g.set_outputs({g.add(OpKind::kPow, {x, p}, {}, "pow")});
    return node_cost(g, 0, d).compute_s;
  };
  Graph mul = binary(OpKind::kMul, n);
  double one_op = node_cost(mul, 0, d).compute_s;
  ASSERT_GT(one_op, 0);
  EXPECT_DOUBLE_EQ(pow_by(2.0f), one_op);
  EXPECT_DOUBLE_EQ(pow_by(3.0f), 2 * one_op);
  EXPECT_DOUBLE_EQ(pow_by(0.5f), 4 * one_op);
  EXPECT_DOUBLE_EQ(pow_by(2.5f), 40 * one_op);
  EXPECT_DOUBLE_EQ(pow_by(std::nullopt), 40 * one_op);
}

TEST(KernelModel, TransposeRunsAndSameTypeCast) {
  DeviceProfile d = builtin_profile("cpu");
  d.permute_ops = 32;
  auto transpose = [](std::vector<int64_t> perm) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {8, 16, 32, 64}});
    Attrs a;
    a.set("perm", perm);
    g.set_outputs({g.add(OpKind::kTranspose, {x}, a, "t")});
    return g;
  };
  d.permute_run_ops = 64;
  // Moving the innermost axis pays the per-element cost, and a run's cost
  // per step of the loop over the outer dims (a 64 x 32 tile each: 128
  // steps); keeping it copies 64-element runs at a cost per run; axes of
  // size 1 do not break a run.
  KernelCost inner = node_cost(transpose({0, 1, 3, 2}), 0, d);
  KernelCost runs = node_cost(transpose({0, 2, 1, 3}), 0, d);
  const double numel = 8 * 16 * 32 * 64;
  EXPECT_NEAR(inner.compute_s, (numel * 32 + 128 * 64) / (numel / 64 * 64) * runs.compute_s, 1e-12);
  EXPECT_EQ(inner.bound, "compute");
  // A copy loop's work adds to its bytes' time: the loop moves them.
  double bytes_s = *std::max_element(inner.level_s.begin(), inner.level_s.end());
  EXPECT_GT(bytes_s, 0);
  EXPECT_NEAR(inner.time_s, inner.launch_s + inner.compute_s + bytes_s, 1e-12);
  auto unit = [](std::vector<int64_t> perm) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {8, 1, 32, 64}});
    Attrs a;
    a.set("perm", perm);
    g.set_outputs({g.add(OpKind::kTranspose, {x}, a, "t")});
    return g;
  };
  // [8,1,32,64] -> [8,32,1,64]: one contiguous run of everything.
  EXPECT_NEAR(node_cost(unit({0, 2, 1, 3}), 0, d).compute_s,
              node_cost(unit({0, 1, 2, 3}), 0, d).compute_s, 1e-15);
  // [8,1,32,64] -> [32,8,1,64]: 256 runs of 64.
  EXPECT_NEAR(node_cost(unit({2, 0, 1, 3}), 0, d).compute_s, 256 * node_cost(unit({0, 1, 2, 3}), 0, d).compute_s,
              1e-15);
  // Without a per-element cost, the steps' cost remains: 128 runs' worth.
  d.permute_ops = 0;
  EXPECT_NEAR(node_cost(transpose({0, 1, 3, 2}), 0, d).compute_s, 128 * runs.compute_s / (numel / 64), 1e-15);
  // [2, 7, 64] -> [64, 7, 2]: each step copies the innermost dim (2) by
  // the source-contiguous one (64), 896 / 128 = 7 steps.
  auto tiles = [](Shape s, std::vector<int64_t> perm) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, std::move(s)});
    Attrs a;
    a.set("perm", perm);
    g.set_outputs({g.add(OpKind::kTranspose, {x}, a, "t")});
    return g;
  };
  EXPECT_NEAR(node_cost(tiles({2, 7, 64}, {2, 1, 0}), 0, d).compute_s, 7 * node_cost(unit({0, 1, 2, 3}), 0, d).compute_s,
              1e-15);
  // Winograd F(4,3)'s output transform at 256 channels, [4, 4, 256, 1, 4, 4]
  // to [1, 256, 4, 4, 4, 4]: the source-contiguous dim (tw, 4 floats) is
  // shorter than a line and takes th (4) of the channels and th merged,
  // which the source continues along: steps of 16 x 4, 1024 of them.
  EXPECT_NEAR(node_cost(tiles({4, 4, 256, 1, 4, 4}, {3, 2, 4, 0, 5, 1}), 0, d).compute_s,
              1024 * node_cost(unit({0, 1, 2, 3}), 0, d).compute_s, 1e-15);
  // [2, 20000, 3] to [3, 20000, 2]: the row of 3 floats takes 8 of the
  // 20000 the source continues along (the fewest that divide it and make a
  // line): steps of 24 x 2, 2500 of them. With 10007 (a prime) it would
  // have to take all of them, past 4096: the row stays 3, 10007 steps.
  EXPECT_NEAR(node_cost(tiles({2, 20000, 3}, {2, 1, 0}), 0, d).compute_s,
              2500 * node_cost(unit({0, 1, 2, 3}), 0, d).compute_s, 1e-15);
  EXPECT_NEAR(node_cost(tiles({2, 10007, 3}, {2, 1, 0}), 0, d).compute_s,
              10007 * node_cost(unit({0, 1, 2, 3}), 0, d).compute_s, 1e-15);
  // A Cast to the type the value has is a view: no kernel.
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1024}});
  Attrs to;
  to.set("to", std::string("f32"));
  g.set_outputs({g.add(OpKind::kCast, {x}, to, "cast")});
  EXPECT_EQ(node_cost(g, 0, d).time_s, 0.0);
}

// Slice, Concat and Split copy contiguous runs too, each at the per-run
// cost: the runs are what the dims after the innermost cut dim make.
TEST(KernelModel, StridedCopiesPayPerRun) {
  DeviceProfile d = builtin_profile("cpu");
  auto slice = [](int64_t axis, int64_t end, int64_t step) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 8, 128, 64}});
    Attrs a;
    a.set("starts", std::vector<int64_t>{0});
    a.set("ends", std::vector<int64_t>{end});
    a.set("axes", std::vector<int64_t>{axis});
    a.set("steps", std::vector<int64_t>{step});
    g.set_outputs({g.add(OpKind::kSlice, {x}, a, "s")});
    return g;
  };
  auto halves = [](bool concat) {
    Graph g;
    if (concat) {
      ValueId a = g.add_input("a", {DType::kF32, {1, 8, 128, 32}});
      ValueId b = g.add_input("b", {DType::kF32, {1, 8, 128, 32}});
      Attrs at;
      at.set("axis", int64_t{3});
      g.set_outputs({g.add(OpKind::kConcat, {a, b}, at, "c")});
    } else {
      ValueId x = g.add_input("x", {DType::kF32, {1, 8, 128, 64}});
      Attrs at;
      at.set("axis", int64_t{-1});
      at.set("split", std::vector<int64_t>{32, 32});
      g.set_outputs(g.node(g.add_node(OpKind::kSplit, {x}, at, "s")).outputs);
    }
    return g;
  };
  // The compute a graph's one kernel gains from the per-run cost.
  auto per_run = [&](const Graph& g) {
    DeviceProfile without = d;
    without.permute_run_ops = 0;
    d.permute_run_ops = 64;
    return node_cost(g, 0, d).compute_s - node_cost(g, 0, without).compute_s;
  };
  double one = per_run(slice(2, 64, 1)) / 8;  // 8 runs of 64 x 64
  ASSERT_GT(one, 0);
  EXPECT_NEAR(per_run(slice(3, 32, 1)), 1024 * one, 1e-12 * 1024);  // 1024 runs of 32
  EXPECT_NEAR(per_run(slice(3, 64, 2)), 32768 * one, 1e-12 * 32768);  // every other element
  EXPECT_NEAR(per_run(slice(3, 64, 1)), 0, 1e-15);  // keeps everything: one copy
  EXPECT_NEAR(per_run(halves(true)), 2048 * one, 1e-12 * 2048);
  EXPECT_NEAR(per_run(halves(false)), 2048 * one, 1e-12 * 2048);
}

TEST(KernelModel, ConvolutionEfficiencyAndCalls) {
  DeviceProfile d = builtin_profile("cpu");
  auto conv = [](bool output) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 64, 28, 28}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {64, 64, 3, 3}));
    Attrs a = conv3x3();
    ValueId y = g.add(OpKind::kConv, {x, w}, a, "conv");
    g.set_outputs({output ? y : g.add(OpKind::kMaxPool, {y}, [] {
      Attrs p;
      p.set("kernel_shape", std::vector<int64_t>{2, 2});
      p.set("strides", std::vector<int64_t>{2, 2});
      p.set("pads", std::vector<int64_t>{0, 0, 0, 0});
      p.set("dilations", std::vector<int64_t>{1, 1});
      return p;
    }(), "pool")});
    return g;
  };
  d.gemm_efficiency = d.conv_efficiency = 0.5;
  d.vector_efficiency = 0.05;  // keep the vector fallback (matrix-vector products) out of it
  d.conv_call_s = 0;
  double base = node_cost(conv(false), 0, d).compute_s;
  d.conv_efficiency = 0.25;  // convolutions only
  EXPECT_NEAR(node_cost(conv(false), 0, d).compute_s, 2 * base, 1e-12);
  EXPECT_NEAR(node_cost(matmul(256, 256, 256), 0, d).compute_s,
              node_cost(matmul(256, 256, 256), 0, [&] { DeviceProfile e = d; e.conv_efficiency = 0.5; return e; }()).compute_s,
              1e-15);
  // One micro-kernel call per output row and kernel position: 28 x 9, at
  // one core's cost each, split over the device's cores by a parallel
  // convolution.
  ASSERT_EQ(d.units, 2);
  ASSERT_TRUE(node_cost(conv(false), 0, d).parallel);
  d.conv_call_s = 1e-9;
  EXPECT_NEAR(node_cost(conv(false), 0, d).compute_s - base * 2, 28 * 9 * 1e-9 / 2, 1e-12);
  // A convolution too small to split runs its calls on one core: all of
  // them at the full cost (8 channels of 4x4: 4 output rows x 9 positions).
  Graph small;
  ValueId sx = small.add_input("x", {DType::kF32, {1, 8, 4, 4}});
  ValueId sw = small.add_constant("w", Tensor(DType::kF32, {8, 8, 3, 3}));
  small.set_outputs({small.add(OpKind::kConv, {sx, sw}, conv3x3(), "conv")});
  ASSERT_FALSE(node_cost(small, 0, d).parallel);
  double small_calls = node_cost(small, 0, d).compute_s;
  d.conv_call_s = 0;
  EXPECT_NEAR(small_calls - node_cost(small, 0, d).compute_s, 4 * 9 * 1e-9, 1e-12);
  d.conv_call_s = 1e-9;
  // The kernel is the same whether its output is a graph output (the
  // row-major copy of one is a reorder, graph_cost_test.cc).
  EXPECT_NEAR(node_cost(conv(true), 0, d).compute_s, node_cost(conv(false), 0, d).compute_s, 1e-15);
}

// A calibrated CPU profile prices a convolution at the efficiency of its
// reduction length K (input channels per group x window), interpolated in
// log K between the calibration's points; MatMuls keep gemm_efficiency.
TEST(KernelModel, ConvolutionEfficiencyByReductionLength) {
  DeviceProfile d = builtin_profile("cpu");
  d.gemm_efficiency = d.conv_efficiency = 0.5;
  d.vector_efficiency = 0.05;
  d.conv_call_s = 0;
  auto conv = [](int64_t c, int64_t k) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, c, 28, 28}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {64, c, k, k}));
    Attrs a = k == 3 ? conv3x3() : conv3x3(0);
    a.set("kernel_shape", std::vector<int64_t>{k, k});
    g.set_outputs({g.add(OpKind::kConv, {x, w}, a, "conv")});
    return g;
  };
  double k64 = node_cost(conv(64, 1), 0, d).compute_s;    // K = 64
  double k576 = node_cost(conv(64, 3), 0, d).compute_s;   // K = 576
  double k1024 = node_cost(conv(1024, 1), 0, d).compute_s;  // K = 1024
  d.conv_efficiency_by_k = {{64, 0.25}, {576, 0.5}, {2304, 1.0}};
  EXPECT_NEAR(node_cost(conv(64, 1), 0, d).compute_s, 2 * k64, 1e-12);
  EXPECT_NEAR(node_cost(conv(64, 3), 0, d).compute_s, k576, 1e-12);
  // 1024 lies log(1024/576) / log(2304/576) of the way from 576 to 2304.
  double e = 0.5 + 0.5 * std::log(1024.0 / 576) / std::log(4.0);
  EXPECT_NEAR(node_cost(conv(1024, 1), 0, d).compute_s, k1024 * 0.5 / e, 1e-12);
  // Below the first point: the first point's efficiency.
  EXPECT_DOUBLE_EQ(d.conv_efficiency_at(16), 0.25);
  EXPECT_DOUBLE_EQ(d.conv_efficiency_at(9216), 1.0);
  EXPECT_NEAR(node_cost(matmul(256, 256, 256), 0, d).compute_s,
              node_cost(matmul(256, 256, 256), 0, [&] { DeviceProfile f = d; f.conv_efficiency_by_k.clear(); return f; }())
                  .compute_s,
              1e-15);
}

TEST(KernelModel, CpuGemmWaitsForWeightsFromMainMemory) {
  DeviceProfile d = builtin_profile("cpu");
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {256, 512}});
  ValueId w = g.add_constant("w", Tensor(DType::kF32, {512, 512}));
  g.set_outputs({g.add(OpKind::kMatMul, {x, w}, {}, "mm")});
  CostOptions cold;
  cold.warm_cache = false;
  double weights = 512.0 * 512 * 4;
  EXPECT_NEAR(node_cost(g, 0, d, cold).compute_s - node_cost(g, 0, d).compute_s,
              weights / d.main_memory().effective_bandwidth(), 1e-12);
  // GPUs overlap the read with the arithmetic.
  DeviceProfile h = builtin_profile("h100");
  EXPECT_NEAR(node_cost(g, 0, h, cold).compute_s, node_cost(g, 0, h).compute_s, 1e-15);
}

}  // namespace
}  // namespace tessera::cost

namespace tessera::cost {
namespace {

// A convolution whose window mostly reads padding (DeepLab's ASPP:
// dilation 36 on a 28-px map) is charged for the taps that read the input;
// ordinary padding (3x3, pad 1) keeps the full count.
TEST(KernelModel, PaddingTapsOfWideDilationsAreFree) {
  DeviceProfile d = builtin_profile("cpu");
  auto conv = [&](int64_t dilation) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 256, 28, 28}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {256, 256, 3, 3}));
    Attrs a = conv3x3(dilation, dilation);
    g.set_outputs({g.add(OpKind::kConv, {x, w}, a, "conv")});
    return node_cost(g, 0, d);
  };
  KernelCost plain = conv(1), wide = conv(36);
  EXPECT_EQ(plain.total_flops(), wide.total_flops());  // the reported count is the full one
  // Dilation 36 on 28 px: only the centre tap reads the input, 1/9 of them.
  EXPECT_LT(wide.compute_s, 0.2 * plain.compute_s);
  EXPECT_NEAR(conv(2).compute_s, plain.compute_s, 1e-3 * plain.compute_s);  // 95% valid: unchanged
}

}  // namespace
}  // namespace tessera::cost
