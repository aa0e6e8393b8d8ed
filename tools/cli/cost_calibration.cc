#include "tools/cli/cost_calibration.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "cost/graph_cost.h"
#include "cost/kernel_model.h"
#include "graph/error.h"
#include "graph/fusion_groups.h"
#include "runtime/runtime.h"
#include "tools/api/tessera.h"

namespace tessera::cli {

namespace {

double profile_ms(const runtime::ExecutablePlan& plan, const std::string& node) {
  double ms = 0;
  for (const auto& k : plan.profile().kernels)
    if (node.empty() || k.node == node) ms += k.total_ms;
  return ms;
}

Graph binary_graph(OpKind kind, int64_t n) {
  Graph g;
  g.name = "calibrate";
  ValueId a = g.add_input("a", {DType::kF32, {n}});
  ValueId b = g.add_input("b", {DType::kF32, {n}});
  g.set_outputs({g.add(kind, {a, b}, {}, "op")});
  return g;
}

Graph unary_graph(OpKind kind, int64_t n) {
  Graph g;
  g.name = "calibrate";
  ValueId a = g.add_input("a", {DType::kF32, {n}});
  g.set_outputs({g.add(kind, {a}, {}, "op")});
  return g;
}

Graph weight_matmul_graph(int64_t m, int64_t k, int64_t n) {
  Graph g;
  g.name = "calibrate";
  ValueId a = g.add_input("a", {DType::kF32, {m, k}});
  ValueId b = g.add_constant("b", Tensor(DType::kF32, {k, n}));
  g.set_outputs({g.add(OpKind::kMatMul, {a, b}, {}, "op")});
  return g;
}

Attrs conv_attrs(int64_t k) {
  Attrs a;
  a.set("kernel_shape", std::vector<int64_t>{k, k});
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2});
  a.set("dilations", std::vector<int64_t>{1, 1});
  return a;
}

// A k x k convolution as in a ResNet stage (node "op"). consumed: a 1x1
// convolution reads its result, so that "op" writes the blocked layout it
// does inside a network rather than a row-major graph output.
Graph conv_graph(int64_t channels, int64_t size, int64_t k = 3, bool consumed = true) {
  Graph g;
  g.name = "calibrate";
  ValueId x = g.add_input("x", {DType::kF32, {1, channels, size, size}});
  ValueId w = g.add_constant("w", Tensor(DType::kF32, {channels, channels, k, k}));
  ValueId y = g.add(OpKind::kConv, {x, w}, conv_attrs(k), "op");
  if (consumed) {
    ValueId w1 = g.add_constant("w1", Tensor(DType::kF32, {channels, channels, 1, 1}));
    y = g.add(OpKind::kConv, {y, w1}, conv_attrs(1), "next");
  }
  g.set_outputs({y});
  return g;
}

}  // namespace

double measure_kernel_seconds(const Graph& g, double seconds, int threads, const std::string& node,
                              runtime::Backend backend) {
  runtime::RunOptions options;
  options.backend = backend;
  options.threads = threads;
  // The thread count the fitted profile describes, whatever the load.
  options.one_thread_runs = runtime::RunOptions::OneThreadRuns::kNever;
  options.profile = true;
  runtime::ExecutablePlan plan = runtime::ExecutablePlan::compile(g, options);
  std::vector<Tensor> inputs = api::random_inputs(g, 1);
  for (int i = 0; i < 2; ++i) plan.run(inputs);  // first touch, primitive caches
  std::vector<double> per_run;
  auto start = std::chrono::steady_clock::now();
  double before = profile_ms(plan, node);
  while (per_run.size() < 3 ||
         (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds &&
          per_run.size() < 10000)) {
    plan.run(inputs);
    double after = profile_ms(plan, node);
    per_run.push_back((after - before) * 1e-3);
    before = after;
  }
  // The fastest run: on a shared machine the others include time the
  // kernel's threads spent descheduled, which is not the kernel's cost.
  return *std::min_element(per_run.begin(), per_run.end());
}

cost::DeviceProfile calibrate_host(double seconds, int threads, std::ostream& log) {
  cost::DeviceProfile p = cost::detect_host_cpu();
  if (threads > 0 && threads < p.units) {
    double share = static_cast<double>(threads) / static_cast<double>(p.units);
    for (auto* peaks : {&p.matrix_flops, &p.vector_flops})
      for (auto& [t, v] : *peaks) v *= share;
    p.units = threads;
  }
  p.parallel_overhead_s = 0;
  p.gemm_overhead_s = 0;
  double slice = seconds / 16;
  auto predicted = [&](const Graph& graph) { return cost::node_cost(graph, 0, p); };
  auto measure = [&](const Graph& graph) { return measure_kernel_seconds(graph, slice, threads); };
  // The model runs a small kernel on one core (graph/fusion_groups.h): what
  // one measures of it is 1/units of the device's rate.
  auto rate_share = [&](const Graph& graph) {
    const Node& n = graph.node(0);
    return p.units > 1 && runs_on_one_thread(graph, n, n.outputs[0]) ? static_cast<double>(p.units) : 1.0;
  };
  std::ostringstream notes;

  // Launch overhead: kernels with almost no work (they run on one thread),
  // the median of kinds whose fixed costs differ (oneDNN eltwise, binary
  // and softmax primitives).
  std::vector<double> tiny = {measure(unary_graph(OpKind::kRelu, 16)), measure(binary_graph(OpKind::kAdd, 16)),
                              measure(unary_graph(OpKind::kSoftmax, 16))};
  std::sort(tiny.begin(), tiny.end());
  double launch = tiny[1];
  p.launch_overhead_s = launch;
  log << "launch overhead: " << launch * 1e6 << " us\n";
  notes << "launch " << launch * 1e6 << " us";

  // Parallel overhead: the intercept of two Adds over cache-resident data,
  // both large enough to spread over every core.
  if (p.units > 1) {
    int64_t n1 = kOneThreadElements * 2, n2 = kOneThreadElements * 4;
    double t1 = measure(binary_graph(OpKind::kAdd, n1)), t2 = measure(binary_graph(OpKind::kAdd, n2));
    double intercept = (t1 * static_cast<double>(n2) - t2 * static_cast<double>(n1)) / static_cast<double>(n2 - n1);
    p.parallel_overhead_s = std::clamp(intercept - launch, 0.0, t1 / 2);
    log << "parallel overhead: " << p.parallel_overhead_s * 1e6 << " us (Add " << t1 * 1e6 << " / " << t2 * 1e6
        << " us)\n";
    notes << ", parallel " << p.parallel_overhead_s * 1e6 << " us";
  }
  auto overhead = [&](const Graph& graph) {
    return launch + (rate_share(graph) > 1 ? 0.0 : p.parallel_overhead_s) +
           (graph.node(0).kind == OpKind::kConv || graph.node(0).kind == OpKind::kMatMul ? p.gemm_overhead_s : 0.0);
  };

  // Bandwidth per level: Add over three tensors sized to live in the level.
  // The model charges Add's bytes to every level up to the one that holds
  // them, so the fitted bandwidth is the one a kernel of that size sees.
  struct LevelProbe {
    size_t level;
    double working_set;
  };
  std::vector<LevelProbe> probes;
  size_t last = p.memory.size() - 1;
  for (size_t i = 1; i < p.memory.size(); ++i) {
    double cap = static_cast<double>(p.memory[i - 1].capacity_bytes) * (p.memory[i - 1].per_unit ? p.units : 1);
    double ws = i == last ? std::max(4 * cap, 64e6) : std::min(0.5 * static_cast<double>(p.memory[i].capacity_bytes) *
                                                                     (p.memory[i].per_unit ? p.units : 1),
                                                                 4 * cap);
    probes.push_back({i, ws});
  }
  for (const LevelProbe& probe : probes) {
    int64_t n = static_cast<int64_t>(probe.working_set / 12);
    Graph g = binary_graph(OpKind::kAdd, n);
    double t = measure(g);
    double bytes = 3.0 * static_cast<double>(n) * 4;
    double bw = bytes / std::max(t - overhead(g), t * 0.1) * rate_share(g);
    cost::MemoryLevel& m = p.memory[probe.level];
    // The fitted value is stored as the bandwidth at full efficiency.
    m.bandwidth = bw;
    m.efficiency = 1.0;
    log << m.name << " bandwidth: " << bw / 1e9 << " GB/s (Add over " << bytes / 1e6 << " MB)\n";
    notes << ", " << m.name << " " << bw / 1e9 << " GB/s";
  }
  // The last cache level's effective capacity: on a shared (virtual)
  // machine far less than the spec's. Add over growing working sets; the
  // level holds the largest one still streamed nearer its bandwidth than
  // main memory's.
  if (p.memory.size() >= 3) {
    cost::MemoryLevel& llc = p.memory[p.memory.size() - 2];
    double fast = llc.bandwidth, slow = p.memory.back().bandwidth;
    double held = probes[probes.size() - 2].working_set;
    bool dropped = false;
    for (double ws = 2 * held; ws < static_cast<double>(llc.capacity_bytes); ws *= 2) {
      int64_t n = static_cast<int64_t>(ws / 12);
      Graph g = binary_graph(OpKind::kAdd, n);
      double t = measure(g);
      double bw = 3.0 * static_cast<double>(n) * 4 / std::max(t - overhead(g), t * 0.1) * rate_share(g);
      log << "  Add over " << ws / 1e6 << " MB: " << bw / 1e9 << " GB/s\n";
      dropped = bw < std::sqrt(fast * slow);
      if (dropped) break;
      held = ws;
    }
    // No drop below the spec's capacity: the spec's capacity stands.
    if (!dropped) held = static_cast<double>(llc.capacity_bytes);
    llc.capacity_bytes = static_cast<int64_t>(held);
    log << llc.name << " effective capacity: " << held / 1e6 << " MB\n";
    notes << ", " << llc.name << " holds " << held / 1e6 << " MB";
  }
  // The fastest level bounds only window loads (convolution, pooling); keep
  // its ratio to the next level from the reference host.
  if (p.memory.size() >= 2) {
    cost::DeviceProfile ref = cost::detect_host_cpu();
    double ratio = ref.memory[0].effective_bandwidth() / ref.memory[1].effective_bandwidth();
    p.memory[0].bandwidth = p.memory[1].bandwidth * ratio;
    p.memory[0].efficiency = 1.0;
  }

  // GEMM and convolution: a per-call cost and efficiencies, from generic
  // shapes (not the model suite's): 3x3 convolutions of ResNet-like stages
  // and a 1x1 one, MatMuls with constant (prepacked) weights. Two 3x3
  // convolutions of one channel count, small and large images, give the
  // per-call cost (t = overhead + compute at efficiency 1 / efficiency).
  // Where a kind beats the profile's peak (turbo clocks above the nominal
  // one), the peaks move up and the other kind's efficiency drops below 1.
  {
    p.gemm_efficiency = p.conv_efficiency = 1.0;
    auto conv_s = [&](const Graph& g) { return measure_kernel_seconds(g, slice, threads, "op"); };
    Graph small = conv_graph(64, 16), large = conv_graph(64, 56);
    double ts = conv_s(small) - overhead(small), tl = conv_s(large) - overhead(large);
    double cs = predicted(small).compute_s, cl = predicted(large).compute_s;
    double inv_eff = (tl - ts) / (cl - cs);
    // A negative slope or a large intercept is noise (a shared machine):
    // the overhead is at most half the small convolution.
    p.gemm_overhead_s = inv_eff > 0 ? std::clamp(ts - cs * inv_eff, 0.0, ts / 2) : 0.0;
    log << "gemm overhead: " << p.gemm_overhead_s * 1e6 << " us (Conv " << ts * 1e6 << " / " << tl * 1e6 << " us)\n";
    notes << ", gemm call " << p.gemm_overhead_s * 1e6 << " us";
    auto ratio_of = [&](const Graph& g, double t) {
      double r = predicted(g).compute_s / std::max(t - overhead(g), t / 2);
      log << "  " << op_name(g.node(0).kind) << " " << shape_str(g.type(g.node(0).inputs[1]).shape) << ": " << t * 1e6
          << " us, " << r << " of peak\n";
      return r;
    };
    double conv_log = 0, gemm_log = 0;
    std::vector<Graph> convs;
    convs.push_back(conv_graph(64, 56));
    convs.push_back(conv_graph(128, 28));
    convs.push_back(conv_graph(256, 14));
    convs.push_back(conv_graph(256, 28, 1));
    for (const Graph& g : convs) conv_log += std::log(ratio_of(g, conv_s(g))) / static_cast<double>(convs.size());
    std::vector<Graph> mms;
    mms.push_back(weight_matmul_graph(512, 1024, 1024));
    mms.push_back(weight_matmul_graph(256, 512, 2048));
    for (const Graph& g : mms) gemm_log += std::log(ratio_of(g, measure(g))) / static_cast<double>(mms.size());
    double rc = std::exp(conv_log), rm = std::exp(gemm_log);
    double scale = std::max({1.0, rc, rm});
    if (scale > 1.0) {
      for (auto* peaks : {&p.matrix_flops, &p.vector_flops})
        for (auto& [t, v] : *peaks) v *= scale;
      p.clock_hz *= scale;
    }
    p.gemm_efficiency = std::clamp(rm / scale, 0.01, 1.0);
    p.conv_efficiency = std::clamp(rc / scale, 0.01, 1.0);
    log << "gemm efficiency: " << p.gemm_efficiency << ", conv efficiency " << p.conv_efficiency << ", f32 peak "
        << p.peak_flops(DType::kF32, true) / 1e9 << " GFLOP/s\n";
    notes << ", gemm efficiency " << p.gemm_efficiency << ", conv efficiency " << p.conv_efficiency << " of "
          << p.peak_flops(DType::kF32, true) / 1e9 << " GFLOP/s";
  }

  // Convolution micro-kernel calls: a 4x4, stride-2 convolution of 256
  // single-channel 14x14 images (a Winograd input transform), whose time
  // is mostly calls over tiny rows.
  {
    p.conv_call_s = 0;
    Graph g;
    g.name = "calibrate";
    ValueId x = g.add_input("x", {DType::kF32, {256, 1, 14, 14}});
    ValueId w = g.add_constant("w", Tensor(DType::kF32, {16, 1, 4, 4}));
    Attrs a;
    a.set("kernel_shape", std::vector<int64_t>{4, 4});
    a.set("strides", std::vector<int64_t>{2, 2});
    a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    a.set("dilations", std::vector<int64_t>{1, 1});
    ValueId y = g.add(OpKind::kConv, {x, w}, a, "op");
    Attrs perm;
    perm.set("perm", std::vector<int64_t>{1, 0, 2, 3});
    g.set_outputs({g.add(OpKind::kTranspose, {y}, perm, "next")});  // keeps the blocked layout of a consumed conv
    double t = measure_kernel_seconds(g, slice, threads, "op");
    double calls = 256.0 * 7 * 16;
    p.conv_call_s = std::max(0.0, t - overhead(g) - predicted(g).compute_s) / (calls * rate_share(g));
    log << "conv call: " << p.conv_call_s * 1e9 << " ns (Conv 256x1x14x14 by 16x1x4x4 " << t * 1e6 << " us)\n";
    notes << ", conv call " << p.conv_call_s * 1e9 << " ns";
  }

  // Layout reorders: the rate of the row-major copy of a convolution's
  // blocked output that a Transpose reads.
  {
    p.reorder_bandwidth = 0;
    Graph g = conv_graph(64, 56, 3, false);
    Attrs perm;
    perm.set("perm", std::vector<int64_t>{0, 1, 3, 2});
    g.set_outputs({g.add(OpKind::kTranspose, {g.outputs()[0]}, perm, "next")});
    ValueId y = g.node(0).outputs[0];
    double t = measure_kernel_seconds(g, slice, threads, g.value(y).name);
    double launch_s = cost::reorder_cost(g, y, p).launch_s;
    p.reorder_bandwidth = static_cast<double>(g.type(y).nbytes()) / std::max(t - launch_s, t / 2);
    log << "reorder: " << p.reorder_bandwidth / 1e9 << " GB/s (" << t * 1e6 << " us)\n";
    notes << ", reorder " << p.reorder_bandwidth / 1e9 << " GB/s";
  }

  // Transcendentals: Exp over data that stays in L2, at the vector
  // efficiency a streaming Add reaches.
  {
    int64_t n = static_cast<int64_t>(static_cast<double>(p.memory.size() > 1 ? p.memory[1].capacity_bytes : 65536) / 16);
    Graph g = unary_graph(OpKind::kExp, n);
    double t = measure(g);
    double per_elem_ops = (t - overhead(g)) / rate_share(g) * p.peak_flops(DType::kF32, false) * p.vector_efficiency /
                          (2.0 * static_cast<double>(n));
    p.transcendental_ops = std::clamp(per_elem_ops, 1.0, 200.0);
    log << "transcendental: " << p.transcendental_ops << " vector ops (Exp " << t * 1e6 << " us)\n";
    notes << ", transcendental " << p.transcendental_ops << " ops";
  }
  // Permuting copies, what they take beyond their bytes: a 2-D Transpose of
  // L2-sized data (copied element by element, a cost per element), and one
  // that keeps its last axis (copied in contiguous runs, a cost per run).
  {
    auto transpose = [](Shape shape, std::vector<int64_t> order) {
      Graph g;
      g.name = "calibrate";
      ValueId a = g.add_input("a", {DType::kF32, std::move(shape)});
      Attrs perm;
      perm.set("perm", std::move(order));
      g.set_outputs({g.add(OpKind::kTranspose, {a}, perm, "op")});
      return g;
    };
    auto fitted_ops = [&](const Graph& g, double count, double& field, const char* what) {
      field = 0;
      double t = measure(g);
      double extra = std::max(0.0, t - overhead(g) - predicted(g).time_s + p.launch_overhead_s);
      field = std::clamp(extra / rate_share(g) * p.peak_flops(DType::kF32, false) * p.vector_efficiency / (2.0 * count),
                         0.0, 2000.0);
      log << "permute: " << field << " vector ops per " << what << " (Transpose " << t * 1e6 << " us)\n";
      notes << ", permute " << field << " ops per " << what;
    };
    fitted_ops(transpose({256, 512}, {1, 0}), 256.0 * 512, p.permute_ops, "element");
    fitted_ops(transpose({128, 64, 32}, {1, 0, 2}), 128.0 * 64, p.permute_run_ops, "run");
  }
  p.calibrated = true;
  p.description += ", calibrated";
  p.source = "tessera cost --calibrate through the runtime's CPU kernels: " + notes.str();
  p.validate();
  return p;
}

// Unrun so far (no GPU where it was written): bench/gpu_check.sh runs it
// when a GPU machine is lent.
cost::DeviceProfile calibrate_gpu(const std::string& base, double seconds, std::ostream& log) {
  cost::DeviceProfile p = cost::builtin_profile(base);
  if (p.kind != cost::DeviceKind::kGpu) TESSERA_THROW(ErrorKind::kUsage, "'" << base << "' is not a GPU profile");
  double slice = seconds / 6;
  auto measure = [&](const Graph& g) { return measure_kernel_seconds(g, slice, 0, "", runtime::Backend::kCuda); };
  auto predicted = [&](const Graph& g) { return cost::node_cost(g, 0, p); };
  std::ostringstream notes;

  double launch = measure(unary_graph(OpKind::kRelu, 16));
  p.launch_overhead_s = launch;
  log << "launch overhead: " << launch * 1e6 << " us\n";
  notes << "launch " << launch * 1e6 << " us";

  // Main memory: Add over 3 x 256 MB; the L2 below it: Add over a quarter
  // of its capacity (the model charges Add's bytes to the level that holds
  // them). Stored as efficiencies of the spec-sheet bandwidths.
  for (size_t level : {p.memory.size() - 1, p.memory.size() - 2}) {
    cost::MemoryLevel& m = p.memory[level];
    double ws = level + 1 == p.memory.size() ? 768e6 : static_cast<double>(m.capacity_bytes) / 4;
    int64_t n = static_cast<int64_t>(ws / 12);
    double t = measure(binary_graph(OpKind::kAdd, n));
    double bw = 3.0 * static_cast<double>(n) * 4 / std::max(t - launch, t * 0.1);
    m.efficiency = std::clamp(bw / m.bandwidth, 0.01, 1.0);
    log << m.name << ": " << bw / 1e9 << " GB/s, efficiency " << m.efficiency << "\n";
    notes << ", " << m.name << " " << bw / 1e9 << " GB/s";
  }

  // Tensor cores: a large f16 MatMul (the profile's f16 matrix peak); the
  // convolution efficiency follows it (cuDNN implicit GEMM).
  {
    Graph g;
    g.name = "calibrate";
    ValueId a = g.add_input("a", {DType::kF16, {8192, 8192}});
    ValueId b = g.add_constant("b", Tensor(DType::kF16, {8192, 8192}));
    g.set_outputs({g.add(OpKind::kMatMul, {a, b}, {}, "op")});
    p.gemm_efficiency = 1.0;
    double t = measure(g);
    p.gemm_efficiency = std::clamp(predicted(g).compute_s / std::max(t - launch, 1e-9), 0.01, 1.0);
    p.conv_efficiency = p.gemm_efficiency;
    log << "gemm: f16 8192^3 " << t * 1e3 << " ms, efficiency " << p.gemm_efficiency << "\n";
    notes << ", gemm efficiency " << p.gemm_efficiency;
  }
  // CUDA cores: Exp at the vector efficiency the profile states, over data
  // that stays in L2, gives the cost of a transcendental.
  {
    int64_t n = p.memory.size() > 1 ? p.memory[p.memory.size() - 2].capacity_bytes / 16 : 1 << 20;
    double t = measure(unary_graph(OpKind::kExp, n));
    double ops = (t - launch) * p.peak_flops(DType::kF32, false) * p.vector_efficiency / (2.0 * static_cast<double>(n));
    p.transcendental_ops = std::clamp(ops, 1.0, 200.0);
    log << "transcendental: " << p.transcendental_ops << " vector ops\n";
    notes << ", transcendental " << p.transcendental_ops << " ops";
  }
  p.calibrated = true;
  p.description += ", calibrated";
  p.source = "tessera cost --calibrate --device " + base + " through the CUDA backend: " + notes.str();
  p.validate();
  return p;
}

}  // namespace tessera::cli
