// Products of at most 8 rows by a constant weight, run by the skinny kernel
// (runtime/cpu/skinny_matmul.h): against a double-precision sum directly,
// and inside plans with the fused chains of a decoder step and a classifier.
#include "runtime/cpu/skinny_matmul.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/runtime.h"
#include "tests/runtime/runtime_test_util.h"

namespace tessera::runtime {
namespace {

using cpu::SkinnyWeights;
using cpu::skinny_supported;
using testing::attrs;
using testing::random_tensor;

struct Shape3 {
  int64_t k, n;
};

TEST(SkinnyMatmulTest, MatchesADoublePrecisionSum) {
  if (!skinny_supported(DType::kF32)) GTEST_SKIP() << "this host has no AVX-512F: the skinny kernels are not used";
  std::mt19937 rng(5);
  int checked = 0;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    if (!skinny_supported(dt)) continue;
    for (int64_t rows = 1; rows <= cpu::kSkinnyMaxRows; ++rows)
      for (Shape3 s : {Shape3{1, 1}, Shape3{37, 65}, Shape3{64, 64}, Shape3{301, 200}, Shape3{128, 300}})
        for (bool transposed : {false, true}) {
          bool bias = rows % 2 == 0;
          int threads = rows % 3 == 0 ? 1 : 2;
          Tensor w = random_tensor(dt, transposed ? Shape{s.n, s.k} : Shape{s.k, s.n}, rng);
          Tensor a = random_tensor(dt, {rows, s.k}, rng);
          Tensor b = random_tensor(dt, {s.n}, rng);
          SkinnyWeights packed(dt, w.data(), s.k, s.n, transposed ? 1 : s.n, transposed ? s.k : 1, rows);
          Tensor y(dt, {rows, s.n});
          packed.run(a.data(), bias ? b.data() : nullptr, y.mutable_data(), /*f32_out=*/false, threads);
          std::string where = std::string(dtype_name(dt)) + " " + std::to_string(rows) + "x" + std::to_string(s.k) +
                              "x" + std::to_string(s.n) + (transposed ? " transposed" : "") + (bias ? " +bias" : "");
          for (int64_t m = 0; m < rows; ++m)
            for (int64_t j = 0; j < s.n; ++j) {
              double want = bias ? b.get_double(j) : 0.0, scale = std::fabs(want);
              for (int64_t kk = 0; kk < s.k; ++kk) {
                double p = a.get_double(m * s.k + kk) * w.get_double(transposed ? j * s.k + kk : kk * s.n + j);
                want += p;
                scale += std::fabs(p);
              }
              // f32: the sum's rounding; bf16: the result's own rounding too.
              double tol = 1e-6 * scale + (dt == DType::kBF16 ? std::fabs(want) / 128.0 : 0.0) + 1e-6;
              ASSERT_NEAR(y.get_double(m * s.n + j), want, tol) << where << " at row " << m << ", column " << j;
            }
          ++checked;
        }
  }
  EXPECT_GE(checked, 80);
}

// The largest |got - want| relative to the largest |want|.
double relative_error(const Tensor& got, const Tensor& want) {
  double err = 0, mag = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    err = std::max(err, std::fabs(got.get_double(i) - want.get_double(i)));
    mag = std::max(mag, std::fabs(want.get_double(i)));
  }
  return err / std::max(mag, 1e-30);
}

// A decoder step's MLP on `rows` tokens: gate MatMul + Swish * up MatMul,
// down MatMul + the residual; and a classifier Gemm (transB, bias) beside.
Graph mlp_graph(DType dt, int64_t rows) {
  std::mt19937 rng(3);
  Graph g;
  auto c = [&](const std::string& name, const Shape& s) { return g.add_constant(name, random_tensor(dt, s, rng)); };
  ValueId x = g.add_input("x", {dt, {1, rows, 256}});
  ValueId gate = g.add(OpKind::kMatMul, {x, c("w_gate", {256, 600})});
  ValueId up = g.add(OpKind::kMatMul, {x, c("w_up", {256, 600})});
  ValueId act = g.add(OpKind::kMul, {g.add(OpKind::kMul, {gate, g.add(OpKind::kSigmoid, {gate})}), up});
  ValueId down = g.add(OpKind::kAdd, {g.add(OpKind::kMatMul, {act, c("w_down", {600, 256})}), x});
  ValueId flat = g.add(OpKind::kReshape, {down}, attrs({{"shape", testing::Ints{rows, 256}}}));
  ValueId logits = g.add(OpKind::kGemm, {flat, c("w_cls", {1000, 256}), c("b_cls", {1000})},
                         attrs({{"transA", int64_t{0}}, {"transB", int64_t{1}}, {"alpha", 1.0}, {"beta", 1.0}}));
  g.set_outputs({down, logits});
  return g;
}

TEST(SkinnyMatmulTest, DecoderChainsRunOnTheSkinnyKernelAndMatchTheReference) {
  for (DType dt : {DType::kF32, DType::kBF16})
    for (int64_t rows : {1, 3, 8}) {
      if (!skinny_supported(dt)) continue;
      Graph g = mlp_graph(dt, rows);
      RunOptions options;
      options.profile = true;
      ExecutablePlan plan = ExecutablePlan::compile(g, options);
      std::mt19937 rng(9);
      std::vector<Tensor> inputs = {random_tensor(dt, g.type(g.inputs()[0]).shape, rng)};
      std::vector<Tensor> want = evaluate(g, inputs, Precision::kF64);
      std::vector<Tensor> got = plan.run(inputs);
      ASSERT_EQ(got.size(), 2u);
      double tol = dt == DType::kF32 ? 1e-5 : 2e-2;
      for (size_t i = 0; i < 2; ++i)
        EXPECT_LE(relative_error(got[i], want[i]), tol) << dtype_name(dt) << " rows " << rows << " output " << i;
      int skinny = 0;
      for (const KernelProfile& k : plan.profile().kernels)
        if (k.impl.rfind("native:skinny", 0) == 0) ++skinny;
      EXPECT_EQ(skinny, 4) << dtype_name(dt) << " rows " << rows << ": gate, up, down and the classifier";
    }
}

TEST(SkinnyMatmulTest, NineRowsAndSmallWeightsStayWithOnednn) {
  if (!skinny_supported(DType::kF32)) GTEST_SKIP() << "this host has no AVX-512F: the skinny kernels are not used";
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{9, 600}, {1, 64}}) {
    std::mt19937 rng(4);
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {rows, 256}});
    g.set_outputs({g.add(OpKind::kMatMul, {x, g.add_constant("w", random_tensor(DType::kF32, {256, n}, rng))})});
    RunOptions options;
    options.profile = true;
    ExecutablePlan plan = testing::expect_matches_reference(g, options);
    for (const KernelProfile& k : plan.profile().kernels)
      EXPECT_EQ(k.impl.rfind("native:skinny", 0), std::string::npos) << rows << "x256x" << n << ": " << k.impl;
  }
}

// A squeeze-excite block as MobileNetV3 exports it: a convolution (blocked
// output), global pool, two 1x1 convolutions of the 1x1 image (Relu, then
// HardSigmoid fused as linear + clip), and the feature map scaled by the
// result. The two FC convolutions are matrix-vector products: the skinny
// kernel runs them (their weights over its 256 KiB floor), reading the
// pooled vector in its blocked layout; a 1x1 convolution of a larger image,
// or of a small weight, stays with oneDNN. All of it matches the reference.
TEST(SkinnyMatmulTest, SqueezeExciteConvolutionsRunAsProducts) {
  if (!skinny_supported(DType::kF32)) GTEST_SKIP() << "this host has no AVX-512F: the skinny kernels are not used";
  for (int64_t c : {int64_t{480}, int64_t{40}, int64_t{472}}) {  // 472: a partial block of 16 channels
    std::mt19937 rng(21);
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 16, 7, 7}});
    int layer = 0;
    auto conv = [&](ValueId in, int64_t cin, int64_t cout, int64_t k) {
      std::string i = std::to_string(layer++);
      ValueId w = g.add_constant("w" + i, random_tensor(DType::kF32, {cout, cin, k, k}, rng));
      ValueId b = g.add_constant("b" + i, random_tensor(DType::kF32, {cout}, rng));
      int64_t p = k / 2;
      return g.add(OpKind::kConv, {in, w, b},
                   attrs({{"kernel_shape", testing::Ints{k, k}}, {"strides", testing::Ints{1, 1}},
                          {"pads", testing::Ints{p, p, p, p}}, {"dilations", testing::Ints{1, 1}},
                          {"group", int64_t{1}}}));
    };
    ValueId f = g.add(OpKind::kRelu, {conv(x, 16, c, 3)});
    ValueId pooled = g.add(OpKind::kGlobalAveragePool, {f});
    ValueId s1 = g.add(OpKind::kRelu, {conv(pooled, c, c / 4 * 2, 1)});
    ValueId s2 = g.add(OpKind::kHardSigmoid, {conv(s1, c / 4 * 2, c, 1)},
                       attrs({{"alpha", 1.0 / 6.0}, {"beta", 0.5}}));
    g.set_outputs({g.add(OpKind::kMul, {f, s2})});
    RunOptions options;
    options.profile = true;
    ExecutablePlan plan = testing::expect_matches_reference(g, options);
    int skinny = 0, hard_sigmoid_kernels = 0;
    for (const KernelProfile& k : plan.profile().kernels) {
      if (k.impl.rfind("native:skinny", 0) == 0) ++skinny;
      if (k.op == "HardSigmoid") ++hard_sigmoid_kernels;
    }
    EXPECT_EQ(skinny, c == 40 ? 0 : 2) << c << " channels";
    EXPECT_EQ(hard_sigmoid_kernels, 0) << c << " channels: HardSigmoid is a post-op of its convolution";
  }
}

// A HardSigmoid that no kernel absorbs runs as oneDNN's eltwise (linear,
// then clip), alone and with a chain of its own.
TEST(SkinnyMatmulTest, StandaloneHardSigmoidMatchesTheReference) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {2, 24, 9, 9}});
  ValueId h = g.add(OpKind::kHardSigmoid, {x}, attrs({{"alpha", 0.3}, {"beta", 0.4}}));
  ValueId alone = g.add(OpKind::kHardSigmoid, {x}, attrs({{"alpha", 0.2}, {"beta", 0.5}}));
  g.set_outputs({g.add(OpKind::kNeg, {h}), alone});
  RunOptions options;
  options.profile = true;
  ExecutablePlan plan = testing::expect_matches_reference(g, options);
  for (const KernelProfile& k : plan.profile().kernels) EXPECT_FALSE(k.fallback) << k.op << " " << k.impl;
}

// --profile's reading of a decode step: each skinny kernel's weight bytes,
// and the host's DRAM read bandwidth they are held to.
TEST(SkinnyMatmulTest, ProfileShowsEachProductsBandwidthAgainstTheHosts) {
  if (!skinny_supported(DType::kF32)) GTEST_SKIP() << "this host has no AVX-512F: the skinny kernels are not used";
  std::mt19937 rng(6);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 512}});
  ValueId w = g.add_constant("w", random_tensor(DType::kF32, {512, 1024}, rng));
  g.set_outputs({g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {x, w})})});
  RunOptions options;
  options.profile = true;
  options.threads = 2;
  ExecutablePlan plan = testing::expect_matches_reference(g, options);
  Profile p = plan.profile();
  int64_t streamed = 0;
  for (const KernelProfile& k : p.kernels) streamed += k.streamed_bytes;
  EXPECT_EQ(streamed, 512 * 1024 * 4) << p.table();
  EXPECT_EQ(p.dram_threads, 2);
  std::string table = p.table();
  EXPECT_NE(table.find(" of DRAM]"), std::string::npos) << table;
  EXPECT_NE(table.find("DRAM read bandwidth "), std::string::npos) << table;
  // A bandwidth given (another host's, say) is the one the table divides by.
  p.dram_read_gbs = 1e-3;
  EXPECT_NE(p.table().find("DRAM read bandwidth 0.0 GB/s"), std::string::npos) << p.table();
}

// A streaming kernel's figure is its median run's: one slow run in four
// (a preempted thread) moves the mean to half the bandwidth, not the
// median. A plan's kernels each have a median run.
TEST(SkinnyMatmulTest, ProfileHoldsTheMedianRunAgainstTheBandwidth) {
  Profile p;
  p.runs = 4;
  p.dram_threads = 1;
  p.dram_read_gbs = 1.0;
  KernelProfile k;
  k.node = "w";
  k.op = "MatMul";
  k.impl = "native:skinny_avx512";
  k.total_ms = 8.0;  // runs of 1, 1, 1 and 5 ms: the mean 2
  k.median_ms = 1.0;
  k.calls = 4;
  k.streamed_bytes = 1000000;  // 1 GB/s in 1 ms
  p.kernels.push_back(k);
  std::string table = p.table();
  EXPECT_NE(table.find("[1.0 GB/s, 1.00 of DRAM]"), std::string::npos) << table;
  EXPECT_NE(table.find("1.0 GB/s, 1.00 of DRAM (means: 2.000 ms/run, 0.50)"), std::string::npos) << table;

  std::mt19937 rng(7);
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {1, 256}});
  g.set_outputs({g.add(OpKind::kMatMul, {x, g.add_constant("w", random_tensor(DType::kF32, {256, 512}, rng))})});
  RunOptions options;
  options.profile = true;
  ExecutablePlan plan = testing::expect_matches_reference(g, options);
  for (const KernelProfile& kp : plan.profile().kernels) EXPECT_GT(kp.median_ms, 0.0) << kp.op;
}

// The chunks a thread takes from a PanelQueue, until none is left.
std::vector<std::pair<int64_t, int64_t>> drain(cpu::PanelQueue& q, int t) {
  std::vector<std::pair<int64_t, int64_t>> got;
  for (int64_t b = 0, e = 0; q.next(t, &b, &e);) got.emplace_back(b, e);
  return got;
}

// A thread that starts late finds its run taken by the others, from its
// back end (a static split would leave thread 0 with panels 0-3 and the
// product waiting for thread 1); one that starts on time begins at its own
// run's front, and a thief leaves that front to it.
TEST(SkinnyMatmulTest, PanelQueueLeavesALateThreadsRunToTheOthers) {
  using Chunks = std::vector<std::pair<int64_t, int64_t>>;
  cpu::PanelQueue alone(10, 2, 2);  // 5 chunks: runs of chunks {0, 1} and {2, 3, 4}
  EXPECT_EQ(drain(alone, 0), (Chunks{{0, 2}, {2, 4}, {8, 10}, {6, 8}, {4, 6}}));
  EXPECT_TRUE(drain(alone, 1).empty());
  cpu::PanelQueue both(11, 3, 2);  // chunks of 3 panels, the last of 2
  int64_t b = 0, e = 0;
  ASSERT_TRUE(both.next(1, &b, &e));
  EXPECT_EQ(std::make_pair(b, e), std::make_pair(int64_t{6}, int64_t{9}));
  EXPECT_EQ(drain(both, 0), (Chunks{{0, 3}, {3, 6}, {9, 11}}));
  cpu::PanelQueue stolen(12, 2, 2);  // runs of chunks {0, 1, 2} and {3, 4, 5}
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(stolen.next(0, &b, &e));  // thread 0's own run
  ASSERT_TRUE(stolen.next(0, &b, &e));  // then the back of thread 1's
  EXPECT_EQ(std::make_pair(b, e), std::make_pair(int64_t{10}, int64_t{12}));
  EXPECT_EQ(drain(stolen, 1), (Chunks{{6, 8}, {8, 10}}));
  EXPECT_TRUE(drain(both, 3).empty());
  // Threads racing: every panel exactly once.
  cpu::PanelQueue raced(1000, 3, 2);
  std::vector<std::atomic<int>> seen(1000);
  auto worker = [&](int t) {
    for (int64_t lo = 0, hi = 0; raced.next(t, &lo, &hi);)
      for (int64_t p = lo; p < hi; ++p) seen[p].fetch_add(1);
  };
  std::thread other(worker, 1);
  worker(0);
  other.join();
  for (int64_t p = 0; p < 1000; ++p) ASSERT_EQ(seen[p].load(), 1) << "panel " << p;
}

TEST(SkinnyMatmulTest, DramReaderReadsItsWholeBuffer) {
  cpu::DramReader reader(2, int64_t{8} << 20);
  EXPECT_EQ(reader.bytes(), int64_t{8} << 20);
  EXPECT_GT(reader.pass(), 0.0);
  EXPECT_GE(cpu::last_level_cache_bytes(), int64_t{1} << 20);
}

}  // namespace
}  // namespace tessera::runtime
