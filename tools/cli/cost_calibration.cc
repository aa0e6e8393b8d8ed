#include "tools/cli/cost_calibration.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "cost/kernel_model.h"
#include "runtime/runtime.h"
#include "tools/api/tessera.h"

namespace tessera::cli {

namespace {

double profile_ms(const runtime::ExecutablePlan& plan) {
  double ms = 0;
  for (const auto& k : plan.profile().kernels) ms += k.total_ms;
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

// A 3x3 convolution as in a ResNet stage.
Graph conv_graph(int64_t channels, int64_t size) {
  Graph g;
  g.name = "calibrate";
  ValueId x = g.add_input("x", {DType::kF32, {1, channels, size, size}});
  ValueId w = g.add_constant("w", Tensor(DType::kF32, {channels, channels, 3, 3}));
  Attrs a;
  a.set("kernel_shape", std::vector<int64_t>{3, 3});
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  a.set("dilations", std::vector<int64_t>{1, 1});
  g.set_outputs({g.add(OpKind::kConv, {x, w}, a, "op")});
  return g;
}

}  // namespace

double measure_kernel_seconds(const Graph& g, double seconds, int threads) {
  runtime::RunOptions options;
  options.threads = threads;
  options.profile = true;
  runtime::ExecutablePlan plan = runtime::ExecutablePlan::compile(g, options);
  std::vector<Tensor> inputs = api::random_inputs(g, 1);
  for (int i = 0; i < 2; ++i) plan.run(inputs);  // first touch, primitive caches
  std::vector<double> per_run;
  auto start = std::chrono::steady_clock::now();
  double before = profile_ms(plan);
  while (per_run.size() < 3 ||
         (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds &&
          per_run.size() < 10000)) {
    plan.run(inputs);
    double after = profile_ms(plan);
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
  double slice = seconds / 8;
  auto predicted = [&](const Graph& graph) { return cost::node_cost(graph, 0, p); };
  std::ostringstream notes;

  // Launch overhead: a kernel with almost no work.
  double launch = measure_kernel_seconds(unary_graph(OpKind::kRelu, 16), slice, threads);
  p.launch_overhead_s = launch;
  log << "launch overhead: " << launch * 1e6 << " us\n";
  notes << "launch " << launch * 1e6 << " us";

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
    double t = measure_kernel_seconds(g, slice, threads);
    double bytes = 3.0 * static_cast<double>(n) * 4;
    double bw = bytes / std::max(t - launch, t * 0.1);
    cost::MemoryLevel& m = p.memory[probe.level];
    // The fitted value is stored as the bandwidth at full efficiency.
    m.bandwidth = bw;
    m.efficiency = 1.0;
    log << m.name << " bandwidth: " << bw / 1e9 << " GB/s (Add over " << bytes / 1e6 << " MB)\n";
    notes << ", " << m.name << " " << bw / 1e9 << " GB/s";
  }
  // The fastest level bounds only window loads (convolution, pooling); keep
  // its ratio to the next level from the reference host.
  if (p.memory.size() >= 2) {
    cost::DeviceProfile ref = cost::detect_host_cpu();
    double ratio = ref.memory[0].effective_bandwidth() / ref.memory[1].effective_bandwidth();
    p.memory[0].bandwidth = p.memory[1].bandwidth * ratio;
    p.memory[0].efficiency = 1.0;
  }

  // GEMM efficiency: a convolution and a MatMul with constant (prepacked)
  // weights, the way models use them; both are compute bound. Where they
  // beat the profile's peak (turbo clocks above the nominal one), the peaks
  // move up instead.
  {
    double ratio = 1.0;
    for (const Graph& g : {conv_graph(64, 56), weight_matmul_graph(512, 1024, 1024)}) {
      double t = measure_kernel_seconds(g, slice, threads);
      p.gemm_efficiency = 1.0;
      double r = predicted(g).compute_s / std::max(t - launch, 1e-9);
      log << "gemm: " << op_name(g.node(0).kind) << " " << t * 1e3 << " ms, " << r << " of peak\n";
      ratio *= std::sqrt(r);
    }
    if (ratio > 1.0) {
      for (auto* peaks : {&p.matrix_flops, &p.vector_flops})
        for (auto& [t, v] : *peaks) v *= ratio;
      p.clock_hz *= ratio;
      ratio = 1.0;
    }
    p.gemm_efficiency = std::clamp(ratio, 0.01, 1.0);
    log << "gemm efficiency: " << p.gemm_efficiency << ", f32 peak " << p.peak_flops(DType::kF32, true) / 1e9
        << " GFLOP/s\n";
    notes << ", gemm efficiency " << p.gemm_efficiency << " of " << p.peak_flops(DType::kF32, true) / 1e9
          << " GFLOP/s";
  }

  // Transcendentals: Exp over data that stays in L2, at the vector
  // efficiency a streaming Add reaches.
  {
    int64_t n = static_cast<int64_t>(static_cast<double>(p.memory.size() > 1 ? p.memory[1].capacity_bytes : 65536) / 16);
    Graph g = unary_graph(OpKind::kExp, n);
    double t = measure_kernel_seconds(g, slice, threads);
    double per_elem_ops = (t - launch) * p.peak_flops(DType::kF32, false) * p.vector_efficiency / (2.0 * static_cast<double>(n));
    p.transcendental_ops = std::clamp(per_elem_ops, 1.0, 200.0);
    log << "transcendental: " << p.transcendental_ops << " vector ops (Exp " << t * 1e6 << " us)\n";
    notes << ", transcendental " << p.transcendental_ops << " ops";
  }
  p.calibrated = true;
  p.description += ", calibrated";
  p.source = "tessera cost --calibrate through the runtime's CPU kernels: " + notes.str();
  p.validate();
  return p;
}

}  // namespace tessera::cli
