// The cost model and the runtime share the grouping rule
// (graph/fusion_groups.h); these graphs check that the kernels the CPU
// backend actually compiles (as its profile names them) are the ones the
// cost model costs, so a compiler that stops using the rule, or uses it
// with other options, is caught.
#include "cost/graph_cost.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "graph/fusion_groups.h"
#include "runtime/runtime.h"
#include "tests/graph/op_test_util.h"

namespace tessera::cost {
namespace {

// The kernels the CPU plan runs, from one profiled run.
std::vector<runtime::KernelProfile> runtime_kernels(const Graph& g) {
  runtime::RunOptions opt;
  opt.profile = true;
  opt.threads = 1;
  runtime::ExecutablePlan plan = runtime::ExecutablePlan::compile(g, opt);
  std::vector<Tensor> inputs;
  for (ValueId v : g.inputs()) inputs.emplace_back(g.type(v).dtype, g.type(v).shape);
  plan.run(inputs);
  return plan.profile().kernels;
}

// Root node names of the kernels the CPU plan runs, sorted.
std::vector<std::string> runtime_roots(const Graph& g) {
  std::vector<std::string> out;
  for (const runtime::KernelProfile& k : runtime_kernels(g))
    if (k.op != "Reorder") out.push_back(k.node);  // layout copies: ReordersMatchTheRuntime
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> cost_roots(const Graph& g) {
  std::vector<std::string> out;
  for (const auto& group : kernel_groups(g)) out.push_back(g.node(group[0]).name);
  std::sort(out.begin(), out.end());
  return out;
}

ValueId scalar(Graph& g, const std::string& name, double v) {
  return g.add_constant(name, Tensor::from_doubles(DType::kF32, {}, {v}));
}

using test::conv3x3;

TEST(GraphCost, FusionMatchesTheRuntime) {
  std::vector<Graph> graphs;
  {  // residual block: Relu(Add(Conv(Relu(Conv(x))), x))
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 8, 6, 6}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {8, 8, 3, 3}));
    ValueId a = g.add(OpKind::kRelu, {g.add(OpKind::kConv, {x, w}, conv3x3(), "c1")}, {}, "r1");
    ValueId b = g.add(OpKind::kConv, {a, w}, conv3x3(), "c2");
    g.set_outputs({g.add(OpKind::kRelu, {g.add(OpKind::kAdd, {b, x}, {}, "add")}, {}, "r2")});
    graphs.push_back(std::move(g));
  }
  {  // MLP: bias and Gelu fuse; a non-commutative link with the chain
     // second, and a value with two readers, end chains
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {4, 16}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {16, 16}));
    ValueId bias = g.add_constant("bias", Tensor(DType::kF32, {16}));
    ValueId h = g.add(OpKind::kAdd, {g.add(OpKind::kMatMul, {x, w}, {}, "mm1"), bias}, {}, "b1");
    ValueId gl = g.add(OpKind::kGelu, {h}, {}, "gelu");
    ValueId s = g.add(OpKind::kSub, {bias, g.add(OpKind::kMatMul, {gl, w}, {}, "mm2")}, {}, "sub");
    ValueId t = g.add(OpKind::kTanh, {gl}, {}, "tanh");  // gl now has two readers
    g.set_outputs({g.add(OpKind::kMul, {s, t}, {}, "mul")});
    graphs.push_back(std::move(g));
  }
  {  // unary roots with binary and unary links; a broadcasting binary root
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 8, 64, 64}});
    ValueId y = g.add_input("y", {DType::kF32, {1, 8, 64, 64}});
    ValueId b = g.add_input("b", {DType::kF32, {8, 1, 1}});
    ValueId s = g.add(OpKind::kMul, {g.add(OpKind::kSigmoid, {x}, {}, "sig"), y}, {}, "sig_mul");
    ValueId r = g.add(OpKind::kTanh, {g.add(OpKind::kRelu, {s}, {}, "relu")}, {}, "tanh");
    ValueId d = g.add(OpKind::kRelu, {g.add(OpKind::kSub, {b, r}, {}, "bsub")}, {}, "bsub_relu");
    g.set_outputs({d});
    graphs.push_back(std::move(g));
  }
  {  // after an AllReduce, as row-parallel plans have it: Add(bias, x) with
     // the bias first runs swapped and takes the residual Add as a post-op;
     // Sub(bias, x) cannot swap
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 16, 32}});
    ValueId r = g.add_input("r", {DType::kF32, {1, 16, 32}});
    ValueId bias = g.add_constant("bias", Tensor(DType::kF32, {32}));
    ValueId a = g.add(OpKind::kAdd, {g.add(OpKind::kAdd, {bias, x}, {}, "bias_add"), r}, {}, "residual");
    ValueId s = g.add(OpKind::kAdd, {g.add(OpKind::kSub, {bias, a}, {}, "bias_sub"), r}, {}, "residual2");
    g.set_outputs({s});
    EXPECT_EQ(kernel_groups(g).size(), 3u);
    graphs.push_back(std::move(g));
  }
  {  // a MatMul output read twice: by Relu and by the Add after it
    Graph g;
    ValueId a = g.add_input("a", {DType::kF32, {8, 8}});
    ValueId b = g.add_input("b", {DType::kF32, {8, 8}});
    ValueId y = g.add(OpKind::kMatMul, {a, b}, {}, "mm");
    g.set_outputs({g.add(OpKind::kAdd, {y, g.add(OpKind::kRelu, {y}, {}, "relu")}, {}, "add")});
    graphs.push_back(std::move(g));
  }
  {  // PyTorch's erf Gelu after a MatMul: one kernel in both
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {4, 16}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {16, 16}));
    ValueId h = g.add(OpKind::kMatMul, {x, w}, {}, "mm");
    ValueId e = g.add(OpKind::kErf, {g.add(OpKind::kDiv, {h, scalar(g, "sqrt2", std::sqrt(2.0))}, {}, "div")}, {}, "erf");
    ValueId a = g.add(OpKind::kAdd, {e, scalar(g, "one", 1.0)}, {}, "add");
    ValueId m = g.add(OpKind::kMul, {h, a}, {}, "mul");
    g.set_outputs({g.add(OpKind::kMul, {m, scalar(g, "half", 0.5)}, {}, "mul_half")});
    EXPECT_EQ(kernel_groups(g).size(), 1u);
    graphs.push_back(std::move(g));
  }
  for (const Graph& g : graphs) EXPECT_EQ(cost_roots(g), runtime_roots(g));
}

// The CPU runtime copies a blocked value to row-major form once for the
// kernels that read only row-major data; the model prices the same copies.
TEST(GraphCost, ReordersMatchTheRuntime) {
  auto runtime_reorders = [](const Graph& g) {
    size_t n = 0;
    for (const runtime::KernelProfile& k : runtime_kernels(g)) n += k.op == "Reorder";
    return n;
  };
  DeviceProfile d = builtin_profile("cpu");
  auto block = [](bool two_convs, OpKind last) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 16, 8, 8}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {16, 16, 3, 3}));
    ValueId y = g.add(OpKind::kRelu, {g.add(OpKind::kConv, {x, w}, conv3x3(), "c1")}, {}, "r1");
    if (two_convs) y = g.add(OpKind::kConv, {y, w}, conv3x3(), "c2");
    Attrs a;
    if (last == OpKind::kTranspose) a.set("perm", std::vector<int64_t>{0, 1, 3, 2});
    if (last == OpKind::kReshape) a.set("shape", std::vector<int64_t>{16, 64});
    ValueId z = g.add(last, {y}, a, "last");
    // Two readers of the row-major copy: it is made once.
    g.set_outputs({z, g.add(OpKind::kSigmoid, {z}, {}, "sig")});
    return g;
  };
  // The copies to row-major are kernels of their own; the reorder of a
  // convolution's row-major input into its blocked layout is a step of the
  // convolution's kernel.
  auto count = [](const GraphCost& c, const std::string& label) {
    size_t n = 0;
    for (const KernelCost& k : c.reorders) n += k.label == label;
    return n;
  };
  for (bool two_convs : {false, true})
    for (OpKind last : {OpKind::kTranspose, OpKind::kReshape, OpKind::kRelu}) {
      Graph g = block(two_convs, last);
      GraphCost c = graph_cost(g, d);
      EXPECT_EQ(count(c, "Reorder"), runtime_reorders(g)) << op_name(last) << (two_convs ? " after two convs" : "");
      // Every variant's last value is a graph output read by one more kernel:
      // copied to row-major once.
      EXPECT_GE(count(c, "Reorder"), 1u);
      // c1 reads the row-major graph input; c2 reads c1's blocked output.
      EXPECT_EQ(count(c, "Reorder to blocked"), 1u);
      EXPECT_EQ(c.reorders.size(), count(c, "Reorder") + 1);
    }
  // A convolution that is a graph output writes its blocked layout and the
  // runtime copies it to row-major.
  {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, 16, 8, 8}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {16, 16, 3, 3}));
    g.set_outputs({g.add(OpKind::kRelu, {g.add(OpKind::kConv, {x, w}, conv3x3(), "c1")}, {}, "r1")});
    EXPECT_EQ(count(graph_cost(g, d), "Reorder"), 1u);
    EXPECT_EQ(runtime_reorders(g), 1u);
  }
  // A single-channel input is the same in both layouts: no reorder to
  // blocked (the Winograd rule's input transforms read their images so).
  {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {16, 1, 8, 8}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {16, 1, 3, 3}));
    g.set_outputs({g.add(OpKind::kConv, {x, w}, conv3x3(), "c1")});
    EXPECT_EQ(count(graph_cost(g, d), "Reorder to blocked"), 0u);
    Graph g3;
    ValueId x3 = g3.add_input("x", {DType::kF32, {16, 3, 8, 8}});
    ValueId w3 = g3.add_constant("w", Tensor(DType::kF32, {16, 3, 3, 3}));
    g3.set_outputs({g3.add(OpKind::kConv, {x3, w3}, conv3x3(), "c1")});
    GraphCost c3 = graph_cost(g3, d);
    ASSERT_EQ(count(c3, "Reorder to blocked"), 1u);
    // Priced as the reorders to row-major are: the value's bytes at the
    // device's reorder rate.
    for (const KernelCost& k : c3.reorders) {
      if (k.label != "Reorder to blocked") continue;
      EXPECT_NEAR(k.time_s, reorder_cost(g3, x3, d).time_s, 1e-15);
    }
  }
  // GPUs keep one layout: nothing to reorder.
  EXPECT_TRUE(graph_cost(block(false, OpKind::kTranspose), builtin_profile("h100")).reorders.empty());
}

// A reorder's rate is the whole device's: a large one runs on every core
// (half the time on 2 cores of what one core of them takes), a small one on
// one core, as the runtime runs them.
TEST(GraphCost, ReordersRunOnTheCoresTheRuntimeGivesThem) {
  DeviceProfile d = builtin_profile("cpu");
  ASSERT_EQ(d.units, 2);
  ASSERT_GT(d.reorder_bandwidth, 0);
  DeviceProfile one = rank_share(d, 2);  // one core of the two
  EXPECT_DOUBLE_EQ(one.reorder_bandwidth, d.reorder_bandwidth / 2);
  auto reorder_s = [](int64_t c, int64_t h, const DeviceProfile& p) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {1, c, h, h}});
    KernelCost k = reorder_cost(g, x, p);
    return k.time_s - k.launch_s;
  };
  // 64 x 56 x 56: over kOneThreadElements, on every core.
  EXPECT_NEAR(reorder_s(64, 56, d), 64.0 * 56 * 56 * 4 / d.reorder_bandwidth, 1e-12);
  EXPECT_NEAR(reorder_s(64, 56, one), 2 * reorder_s(64, 56, d), 1e-12);
  // 16 x 8 x 8: on one core, at its share whatever the cores.
  EXPECT_NEAR(reorder_s(16, 8, d), reorder_s(16, 8, one), 1e-15);
  EXPECT_NEAR(reorder_s(16, 8, d), 16.0 * 8 * 8 * 4 / (d.reorder_bandwidth / 2), 1e-15);
}

TEST(GraphCost, GeluErfLinkReadsNoIntermediate) {
  // The fused Gelu's second Mul reads the MatMul output again; that value
  // never reaches memory, so the kernel moves no more than the MatMul alone
  // plus the three scalar constants.
  DeviceProfile d = builtin_profile("cpu");
  Graph plain;
  ValueId px = plain.add_input("x", {DType::kF32, {64, 64}});
  ValueId pw = plain.add_constant("w", Tensor(DType::kF32, {64, 64}));
  ValueId ph = plain.add(OpKind::kMatMul, {px, pw}, {}, "mm");
  ValueId pe = plain.add(OpKind::kErf, {plain.add(OpKind::kDiv, {ph, scalar(plain, "sqrt2", std::sqrt(2.0))}, {}, "div")}, {}, "erf");
  ValueId pa = plain.add(OpKind::kAdd, {pe, scalar(plain, "one", 1.0)}, {}, "add");
  plain.set_outputs({plain.add(OpKind::kMul, {plain.add(OpKind::kMul, {ph, pa}, {}, "mul"), scalar(plain, "half", 0.5)}, {}, "mul_half")});
  auto groups = kernel_groups(plain);
  ASSERT_EQ(groups.size(), 1u);
  KernelCost gelu = kernel_cost(plain, groups[0], d);
  KernelCost mm = node_cost(plain, groups[0][0], d);
  double scalars = 3 * 4.0;
  EXPECT_LE(gelu.level_bytes.back(), mm.level_bytes.back() + scalars + 1e-9);
}

TEST(GraphCost, SumsKernels) {
  Graph g;
  ValueId x = g.add_input("x", {DType::kF32, {64, 64}});
  ValueId w = g.add_constant("w", Tensor(DType::kF32, {64, 64}));
  g.set_outputs({g.add(OpKind::kRelu, {g.add(OpKind::kMatMul, {x, w}, {}, "mm")}, {}, "relu")});
  DeviceProfile d = builtin_profile("a100");
  GraphCost fused = graph_cost(g, d), unfused = graph_cost(g, d, {}, false);
  EXPECT_EQ(fused.kernels.size(), 1u);
  EXPECT_EQ(unfused.kernels.size(), 2u);
  EXPECT_NEAR(unfused.time_s, unfused.kernels[0].time_s + unfused.kernels[1].time_s, 1e-15);
  EXPECT_LT(fused.time_s, unfused.time_s);  // one launch and no intermediate
  EXPECT_EQ(fused.flops, unfused.flops);
}

// Reuse distances: a value read after more traffic than the last cache
// holds comes from main memory, though the kernel reading it is small; after
// little traffic it does not. A graph input was last read a run before.
TEST(GraphCost, ValuesReadAfterMuchTrafficComeFromMainMemory) {
  DeviceProfile d = builtin_profile("cpu");
  size_t dram = d.memory.size() - 1;
  double llc = static_cast<double>(d.memory[dram - 1].capacity_bytes);
  const int64_t n = 1 << 20;  // 4 MB of f32
  for (int steps : {1, 12}) {
    Graph g;
    ValueId y = g.add_input("y", {DType::kF32, {n / 1024, 1024}});
    ValueId a = g.add(OpKind::kRelu, {g.add_input("x", {DType::kF32, {1024}})}, {}, "a");
    ValueId h = y;
    for (int i = 0; i < steps; ++i) h = g.add(OpKind::kSigmoid, {h}, {}, "s" + std::to_string(i));
    g.set_outputs({g.add(OpKind::kAdd, {h, a}, {}, "last"), a});
    ASSERT_EQ(steps * 2.0 * 4.0 * n > llc, steps == 12);
    GraphCost c = graph_cost(g, d);
    ASSERT_EQ(c.groups.size(), static_cast<size_t>(steps) + 2);
    const KernelCost& last = c.kernels.back();
    ASSERT_EQ(g.node(c.groups.back()[0]).name, "last");
    KernelCost alone = node_cost(g, c.groups.back()[0], d);
    EXPECT_DOUBLE_EQ(alone.level_bytes[dram], 0.0);
    EXPECT_DOUBLE_EQ(last.level_bytes[dram], steps == 12 ? 4096.0 : 0.0);
    // y's first reader: a run's traffic since y was last read.
    size_t first = g.node(c.groups[0][0]).name == "s0" ? 0 : 1;
    EXPECT_DOUBLE_EQ(c.kernels[first].level_bytes[dram], steps == 12 ? 4.0 * n : 0.0);
  }
}

// Cold launches: in a program that touches more per run than the last
// cache holds, every kernel and reorder pays DeviceProfile::cold_launch_s;
// in one that stays in it, none does; views never do.
TEST(GraphCost, KernelsOfAProgramLargerThanTheCacheStartCold) {
  DeviceProfile d = builtin_profile("cpu");
  DeviceProfile cold = d;
  cold.cold_launch_s = 5e-6;
  double llc = static_cast<double>(d.memory[d.memory.size() - 2].capacity_bytes);
  for (int64_t n : {int64_t{1} << 10, static_cast<int64_t>(llc / 4)}) {
    Graph g;
    ValueId x = g.add_input("x", {DType::kF32, {n}});
    Attrs shape;
    shape.set("shape", std::vector<int64_t>{n / 2, 2});
    ValueId r = g.add(OpKind::kReshape, {g.add(OpKind::kRelu, {x}, {}, "relu")}, shape, "view");
    g.set_outputs({g.add(OpKind::kSigmoid, {r}, {}, "sig")});
    GraphCost a = graph_cost(g, d), b = graph_cost(g, cold);
    ASSERT_EQ(a.kernels.size(), b.kernels.size());
    bool big = 2.0 * 4.0 * static_cast<double>(n) * 2 > llc;
    EXPECT_EQ(big, n > 1024);
    int launched = 0;
    for (size_t k = 0; k < a.kernels.size(); ++k) {
      double extra = b.kernels[k].time_s - a.kernels[k].time_s;
      if (a.kernels[k].launch_s == 0) {
        EXPECT_DOUBLE_EQ(extra, 0.0);  // the view
        continue;
      }
      ++launched;
      EXPECT_NEAR(extra, big ? 5e-6 : 0.0, 1e-12) << g.node(a.groups[k][0]).name;
    }
    EXPECT_EQ(launched, 2);
    EXPECT_NEAR(b.time_s - a.time_s, big ? 10e-6 : 0.0, 1e-12);
  }
}

// A parallel kernel after more one-thread work than the pool's spin window
// pays the wake-up, once; within the window, or after another parallel
// kernel, it does not; one-thread kernels never do.
TEST(GraphCost, AParallelKernelAfterTheSpinWindowWakesThePool) {
  Graph g;
  const int64_t big = kOneThreadElements * 4;
  ValueId x = g.add_input("x", {DType::kF32, {big}});
  ValueId s = g.add_input("s", {DType::kF32, {64}});
  std::vector<ValueId> outs;
  auto add = [&](ValueId v, const std::string& name) {
    outs.push_back(g.add(OpKind::kAdd, {v, v}, {}, name));
    return outs.back();
  };
  add(x, "p1");
  ValueId t = s;
  for (int i = 0; i < 6; ++i) t = add(t, "s" + std::to_string(i));
  add(x, "p2");
  add(x, "p3");
  g.set_outputs(outs);
  DeviceProfile d = builtin_profile("cpu");
  ASSERT_GT(d.units, 1);
  d.launch_overhead_s = 10e-6;  // each one-thread Add: at least 10 us
  std::vector<std::vector<NodeId>> order;  // p1, the six serial Adds, p2, p3
  for (NodeId n = 0; n < g.num_nodes(); ++n) order.push_back({n});
  double base = graph_cost(g, d, {}, order).time_s;
  d.wake_overhead_s = 20e-6;
  d.spin_window_s = 50e-6;  // six serial Adds (over 60 us) outlast it: p2 wakes, p3 does not
  GraphCost c = graph_cost(g, d, {}, order);
  EXPECT_NEAR(c.time_s - base, 20e-6, 1e-12);
  EXPECT_TRUE(c.kernels[7].parallel);
  EXPECT_FALSE(c.kernels[3].parallel);
  d.spin_window_s = 100e-6;  // they do not outlast this one
  EXPECT_NEAR(graph_cost(g, d, {}, order).time_s, base, 1e-12);
}

}  // namespace
}  // namespace tessera::cost
