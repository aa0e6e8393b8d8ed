#include "calibrate/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "calibrate/calibration_graphs.h"
#include "cost/graph_cost.h"
#include "cost/kernel_model.h"
#include "graph/error.h"
#include "graph/fusion_groups.h"
#include "runtime/runtime.h"

namespace tessera::calibrate {

namespace {

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Uniform values in [-1, 1] (integers 0 or 1), fixed: a probe's time does
// not depend on them, only on the kernel.
std::vector<Tensor> probe_inputs(const Graph& g) {
  std::mt19937_64 rng(1);
  std::vector<Tensor> out;
  for (ValueId v : g.inputs()) {
    const TensorType& type = g.type(v);
    Tensor t(type.dtype, type.shape);
    std::uniform_real_distribution<double> real(-1.0, 1.0);
    std::uniform_int_distribution<int64_t> bit(0, 1);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (is_float(type.dtype)) t.set_double(i, real(rng));
      else t.set_int(i, bit(rng));
    }
    out.push_back(std::move(t));
  }
  return out;
}

double profile_ms(const runtime::ExecutablePlan& plan, const std::string& node) {
  double ms = 0;
  for (const auto& k : plan.profile().kernels)
    if (node.empty() || k.node == node) ms += k.total_ms;
  return ms;
}

}  // namespace

namespace detail {

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

Graph weight_matmul_graph(int64_t m, int64_t k, int64_t n, DType dtype) {
  Graph g;
  g.name = "calibrate";
  ValueId a = g.add_input("a", {dtype, {m, k}});
  ValueId b = g.add_constant("b", Tensor(dtype, {k, n}));
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
Graph conv_graph(int64_t channels, int64_t size, int64_t k, bool consumed) {
  Graph g;
  g.name = "calibrate";
  ValueId x = g.add_input("x", {DType::kF32, {1, channels, size, size}});
  // The probed convolution ("op") reads the blocked output of a 1x1 one, as
  // a convolution inside a network does: reading the row-major graph input
  // it would reorder it first (onednn_ops.cc add_main), a cost the model
  // prices apart ("Reorder to blocked", graph_cost.cc). In the 1x1 64-channel
  // 56-pixel probe that reorder was 15% of the time.
  ValueId w0 = g.add_constant("w0", Tensor(DType::kF32, {channels, channels, 1, 1}));
  x = g.add(OpKind::kConv, {x, w0}, conv_attrs(1), "prev");
  ValueId w = g.add_constant("w", Tensor(DType::kF32, {channels, channels, k, k}));
  ValueId y = g.add(OpKind::kConv, {x, w}, conv_attrs(k), "op");
  if (consumed) {
    ValueId w1 = g.add_constant("w1", Tensor(DType::kF32, {channels, channels, 1, 1}));
    y = g.add(OpKind::kConv, {y, w1}, conv_attrs(1), "next");
  }
  g.set_outputs({y});
  return g;
}

}  // namespace detail

using namespace detail;

double measure_kernel_seconds(const Graph& g, double seconds, int threads, const std::string& node,
                              runtime::Backend backend, bool median, const OneThreadLine& line) {
  runtime::RunOptions options;
  options.one_thread_line = line;
  options.backend = backend;
  options.threads = threads;
  // The thread count the fitted profile describes, whatever the load.
  options.one_thread_runs = runtime::RunOptions::OneThreadRuns::kNever;
  options.profile = true;
  runtime::ExecutablePlan plan = runtime::ExecutablePlan::compile(g, options);
  std::vector<Tensor> inputs = probe_inputs(g);
  for (int i = 0; i < 2; ++i) plan.run(inputs);  // first touch, primitive caches
  std::vector<double> per_run;
  auto start = std::chrono::steady_clock::now();
  double before = profile_ms(plan, node);
  // One thread (CPU backend): a run's CPU time bounds what its kernels
  // took on the core, the time descheduled behind other work left out; the
  // kernel's wall time bounds it too (and is the tighter bound in a run no
  // other work interrupted). The smaller, over the fastest run: for the
  // probes of one kernel, its time on the core.
  bool cpu_clock = threads == 1 && backend == runtime::Backend::kCpu;
  while (per_run.size() < 3 ||
         (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds &&
          per_run.size() < 10000)) {
    double cpu0 = cpu_clock ? process_cpu_seconds() : 0;
    plan.run(inputs);
    double cpu = cpu_clock ? process_cpu_seconds() - cpu0 : 0;
    double after = profile_ms(plan, node);
    double kernel = (after - before) * 1e-3;
    // A zero CPU time is a process clock that did not advance over the
    // run, not a kernel that took no time: a quick calibration took such a
    // run as the L2 probe's fastest, and wrote an infinite bandwidth.
    per_run.push_back(cpu_clock && cpu > 0 ? std::min(kernel, cpu) : kernel);
    before = after;
  }
  if (median) {
    std::nth_element(per_run.begin(), per_run.begin() + static_cast<std::ptrdiff_t>(per_run.size() / 2), per_run.end());
    return per_run[per_run.size() / 2];
  }
  // The fastest run: on a shared machine the others include time the
  // kernel's threads spent descheduled, which is not the kernel's cost.
  return *std::min_element(per_run.begin(), per_run.end());
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

}  // namespace tessera::calibrate
