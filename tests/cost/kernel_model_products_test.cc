// The per-kernel model on products and convolutions (GEMM efficiency,
// epilogues, convolution efficiency and padding taps) and on the CPU's
// threads and calls (the one-thread line, fork-join and call overheads).
// Element-wise kernels, movement and fusion: kernel_model_test.cc.
#include "cost/kernel_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cost/graph_cost.h"
#include "tests/cost/kernel_model_test_util.h"
#include "tests/graph/op_test_util.h"

namespace tessera::cost {
namespace {

using ::tessera::test::conv3x3;
using test::binary;
using test::matmul;

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
