// The per-kernel model: properties that hold for any sensible profile, and
// golden numbers on the H100 profile worked out by hand below. Element-wise
// kernels, movement, fusion and caches here; products, convolutions and the
// CPU's threads and calls in kernel_model_products_test.cc.
#include "cost/kernel_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "cost/flops.h"
#include "cost/graph_cost.h"
#include "graph/error.h"
#include "graph/fusion_groups.h"
#include "tests/cost/kernel_model_test_util.h"
#include "tests/graph/op_test_util.h"

namespace tessera::cost {
namespace {

// A 3x3 convolution's attributes: stride 1, padding and dilation `pad`
// and `dilation` on both axes.
using ::tessera::test::conv3x3;
using test::binary;
using test::level;
using test::matmul;

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

// The same for the kinds that reduce or normalize what they read: one row
// (OpDef::input_arithmetic) per element of input 0. Before it, ArgMax and
// ArgMin were one FLOP an element read and two vector operations.
TEST(KernelModel, ReductionArithmeticIsOneRow) {
  DeviceProfile d = builtin_profile("h100");
  d.transcendental_ops = 1;
  const int64_t rows = 256, cols = 1024;
  const std::pair<OpKind, double> cases[] = {{OpKind::kReduceSum, 1},  {OpKind::kReduceL2, 2},
                                             {OpKind::kArgMax, 2},     {OpKind::kArgMin, 2},
                                             {OpKind::kSoftmax, 5},    {OpKind::kLayerNormalization, 8},
                                             {OpKind::kGlobalMaxPool, 1}};
  for (auto [kind, per_element] : cases) {
    Graph g;
    Shape shape = kind == OpKind::kGlobalMaxPool ? Shape{1, rows, 32, cols / 32} : Shape{rows, cols};
    ValueId x = g.add_input("x", {DType::kF32, shape});
    std::vector<ValueId> ins = {x};
    if (kind == OpKind::kLayerNormalization) ins.push_back(g.add_constant("scale", Tensor(DType::kF32, {cols})));
    ValueId y = g.add(kind, ins, {}, "op");
    g.set_outputs({y});
    const Node& node = g.node(g.value(y).producer);
    int64_t flops = node_flops(g, node);
    EXPECT_EQ(flops, static_cast<int64_t>(per_element * static_cast<double>(rows * cols))) << op_name(kind);
    KernelCost k = node_cost(g, g.value(y).producer, d);
    double vector_flops = k.compute_s * d.peak_flops(DType::kF32, false) * d.vector_efficiency;
    EXPECT_NEAR(vector_flops / static_cast<double>(flops), 2.0, 1e-9) << op_name(kind);
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

}  // namespace
}  // namespace tessera::cost
