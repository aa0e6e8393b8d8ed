// The host CPU's calibration (calibrate_host): see calibrate.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "calibrate/calibrate.h"
#include "calibrate/calibration_graphs.h"
#include "calibrate/host_identity.h"
#include "calibrate/host_profile_cache.h"
#include "cost/graph_cost.h"
#include "cost/kernel_model.h"
#include "graph/error.h"
#include "graph/fusion_groups.h"
#include "runtime/pool_probe.h"

namespace tessera::calibrate {

using namespace detail;

namespace {

double load_average() {
  double load = 0;
  std::ifstream("/proc/loadavg") >> load;
  return load;
}

// One calibration run: the profile being fitted and the measurements that
// fit it, each kept with its kernel class so that the remaining error of
// the fitted profile can be reported per class.
class HostCalibrator {
 public:
  HostCalibrator(const CalibrationOptions& o, std::ostream& log) : o_(o), log_(log) {
    host_ = cost::detect_host_cpu(id_);
    // Rates are measured per core, on one thread, and scaled to the host's
    // cores: a parallel region of a static split waits for its slowest
    // thread, so on a machine shared with other work (this 2-core host with
    // two builds running) every multi-threaded run measures the scheduler,
    // not the core. One thread's fastest run is the core's. Big GEMMs and
    // convolutions split over cores nearly perfectly, and the shared levels'
    // bandwidth is the per-core one times the cores up to the socket's
    // (host_cpu.cc); what a parallel region costs is fitted on its own, with
    // every thread (fit_parallel_overhead).
    threads_ = o.threads > 0 ? o.threads : 1;
    p_ = cost::scale_to_cores(host_, static_cast<double>(std::min<int64_t>(threads_, host_.units)),
                              cost::CoreSharing::kAlone);
    // The budget, less the time compiling and warming up take (about a
    // third on this 2-core host), in slices: a dense probe gets 3 (its runs
    // take milliseconds, and on a busy machine only the fastest of many is
    // undisturbed), every other probe one. Quick: 4 dense probes and about
    // 18 others; full: 6 and about 25.
    slice_ = o.seconds * 0.65 / (o.quick ? 30 : 43);
  }

  cost::DeviceProfile run() {
    auto start = std::chrono::steady_clock::now();
    if (double load = load_average(); load > static_cast<double>(host_.units))
      log_ << "note: the machine is busy (load average " << load << " on " << host_.units
           << " cores); rates are measured on one thread's fastest runs\n";
    // Dense kernels first: their rates decide most of a model's time, and a
    // quick calibration cut short still has them.
    fit_dense();
    fit_bandwidths();
    fit_llc_capacity();
    fit_launch_overhead();
    fit_cold_launch();
    // What the shipped reference host's figures get most wrong elsewhere:
    // layout reorders, transcendentals and permuting copies (on a Zen 5 at
    // 4.1 GHz: Transpose 18.6 vector ops per element against the
    // reference's 60, reorders 16 GB/s a core against 28), which decide Winograd's
    // and layout rewrites' pairs; each is one short probe.
    fit_reorder();
    fit_transcendental();
    fit_softmax();
    fit_permutes();
    fit_epilogue();
    // Convolutions over many tiny single-channel images (the Winograd
    // rule's input transforms) are mostly micro-kernel calls: the shipped
    // reference's figure is another host's (3.3 ns against 5.1 here, a
    // Zen 4 guest), which priced those transforms 25-35% low and put
    // Winograd ahead where it measured behind. One short probe.
    if (!o_.quick) fit_gemm_overhead();
    fit_conv_calls();
    report_residuals();
    cost::DeviceProfile one_core;
    if (o_.threads == 0 && threads_ < host_.units) {
      one_core = p_;
      p_ = cost::scale_to_cores(p_, static_cast<double>(host_.units), cost::CoreSharing::kAlone);
      threads_ = static_cast<int>(host_.units);
    }
    fit_parallel_overhead();
    if (!one_core.memory.empty()) fit_shared_bandwidths(one_core);
    fit_pool_wake();
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    log_ << (o_.quick ? "quick" : "full") << " calibration: " << wall << " s\n";
    p_.calibrated = true;
    p_.source = std::string(o_.quick ? "first-use quick calibration" : "tessera cost --calibrate") +
                " through the runtime's CPU kernels (" + std::to_string(static_cast<int>(wall + 0.5)) +
                " s): " + notes_.str() + "; other factors: " + host_.source;
    stamp_host(p_, id_);
    p_.validate();
    return p_;
  }

 private:
  struct Probe {
    std::string kind;  // kernel class: gemm, conv, memory, overhead, vector, permute
    std::string what;
    Graph graph;
    std::string node;  // the kernel measured ("" every kernel)
    double measured_s = 0;
  };

  // The kernel a probe measures: the node named "op" where there is one
  // (conv_graph's convolution, after the 1x1 one that gives it a blocked
  // input), else the first.
  static NodeId probed(const Graph& g) {
    for (NodeId i = 0; i < g.num_nodes(); ++i)
      if (g.node(i).name == "op") return i;
    return 0;
  }
  double measure(const Graph& g, const std::string& node = "", double slices = 0) {
    OpKind k = g.node(probed(g)).kind;
    if (slices == 0) slices = k == OpKind::kMatMul || (k == OpKind::kConv && node == "op") ? 3 : 1;
    return measure_kernel_seconds(g, slices * slice_, threads_, node, runtime::Backend::kCpu, false,
                                  cost::one_thread_line(p_));
  }
  // Measures `g` and keeps it for the residual report.
  double probe(const std::string& kind, const std::string& what, const Graph& g, const std::string& node = "",
               double slices = 0) {
    double t = measure(g, node, slices);
    probes_.push_back({kind, what, g, node, t});
    return t;
  }
  cost::KernelCost predicted(const Graph& g) const { return cost::node_cost(g, probed(g), p_); }
  // The model runs a small kernel on one core (graph/fusion_groups.h, under
  // the line the profile so far prices, as measure() ran it): what one
  // measures of it is 1/units of the device's rate.
  double rate_share(const Graph& g) const {
    const Node& n = g.node(probed(g));
    return p_.units > 1 && runs_on_one_thread(g, n, n.outputs[0], cost::one_thread_line(p_)) ? static_cast<double>(p_.units)
                                                                                             : 1.0;
  }
  double overhead(const Graph& g) const {
    OpKind k = g.node(probed(g)).kind;
    bool parallel = p_.units > 1 && rate_share(g) == 1;
    return p_.launch_overhead_s + (parallel ? p_.parallel_overhead_s : 0.0) +
           (k == OpKind::kConv || k == OpKind::kMatMul ? p_.gemm_overhead_s : 0.0);
  }

  // What an Add of `g` (binary_graph: two inputs and an output of n f32)
  // streamed per second in t seconds.
  double add_bandwidth(const Graph& g, double t) const {
    double bytes = 3.0 * static_cast<double>(g.type(g.node(probed(g)).outputs[0]).numel()) * 4;
    return bytes / std::max(t - overhead(g), t * 0.1) * rate_share(g);
  }

  void fit_dense();
  void fit_bandwidths();
  void fit_llc_capacity();
  void fit_launch_overhead();
  void fit_cold_launch();
  void fit_parallel_overhead();
  void fit_shared_bandwidths(const cost::DeviceProfile& one_core);
  void fit_pool_wake();
  void fit_gemm_overhead();
  void fit_conv_calls();
  void fit_reorder();
  void fit_transcendental();
  void fit_softmax();
  void fit_permutes();
  void fit_epilogue();
  void report_residuals();

  CalibrationOptions o_;
  std::ostream& log_;
  cost::CpuIdentity id_ = read_host_identity();
  cost::DeviceProfile host_;  // detected
  cost::DeviceProfile p_;     // being fitted, for threads_ cores
  int threads_ = 1;
  double slice_ = 0;
  std::vector<Probe> probes_;
  std::vector<double> level_ws_;  // the working set each bandwidth probe streamed, per level
  std::ostringstream notes_;
};

// GEMM and convolution efficiencies from generic shapes (not the model
// suite's): 3x3 convolutions of ResNet-like stages and 1x1 ones, MatMuls
// with constant (prepacked) weights. Where a kind beats the profile's peak
// (turbo clocks above the nominal one), the peaks and the clock move up and
// the other kind's efficiency drops below 1. The convolutions span
// reduction lengths K of 64 to 2304 (256 and 1152 too in the full
// calibration): each gives its point of conv_efficiency_by_k, and their
// geometric mean conv_efficiency.
void HostCalibrator::fit_dense() {
  p_.gemm_efficiency = p_.conv_efficiency = 1.0;
  p_.conv_efficiency_by_k.clear();
  double before = p_.peak_flops(DType::kF32, true);
  auto ratio_of = [&](const Graph& g, double t) {
    double r = predicted(g).compute_s / std::max(t - overhead(g), t / 2);
    const Node& n = g.node(probed(g));
    log_ << "  " << op_name(n.kind) << " " << shape_str(g.type(n.inputs[1]).shape) << ": " << t * 1e6
         << " us, " << r << " of the detected peak\n";
    return r;
  };
  std::vector<Graph> mms;
  mms.push_back(weight_matmul_graph(512, 1024, 1024));
  mms.push_back(weight_matmul_graph(256, 512, 2048));
  double gemm_log = 0, conv_log = 0;
  for (const Graph& g : mms) gemm_log += std::log(ratio_of(g, probe("gemm", "MatMul", g))) / static_cast<double>(mms.size());
  std::vector<Graph> convs;
  convs.push_back(conv_graph(64, 56, 1));
  convs.push_back(conv_graph(64, 56));
  convs.push_back(conv_graph(256, 14));
  if (!o_.quick) {
    convs.push_back(conv_graph(128, 28));
    convs.push_back(conv_graph(256, 28, 1));
  }
  std::vector<std::pair<double, double>> by_k;
  for (const Graph& g : convs) {
    double r = ratio_of(g, probe("conv", "Conv", g, "op"));
    conv_log += std::log(r) / static_cast<double>(convs.size());
    const TensorType& w = g.type(g.node(probed(g)).inputs[1]);
    by_k.emplace_back(static_cast<double>(w.numel() / w.shape[0]), r);
  }
  double rc = std::exp(conv_log), rm = std::exp(gemm_log);
  double scale = std::max({1.0, rc, rm});
  if (scale > 1.0) {
    for (auto* peaks : {&p_.matrix_flops, &p_.vector_flops})
      for (auto& [t, v] : *peaks) v *= scale;
    p_.clock_hz *= scale;
  }
  p_.gemm_efficiency = std::clamp(rm / scale, 0.01, 1.0);
  p_.conv_efficiency = std::clamp(rc / scale, 0.01, 1.0);
  std::sort(by_k.begin(), by_k.end());
  for (const auto& [k, r] : by_k) p_.conv_efficiency_by_k.emplace_back(k, std::clamp(r / scale, 0.01, 2.0));
  double peak = p_.peak_flops(DType::kF32, true);
  std::string on = p_.units == 1 ? " per core" : " on " + std::to_string(p_.units) + " cores";
  std::ostringstream by;
  for (const auto& [k, e] : p_.conv_efficiency_by_k) by << (by.tellp() > 0 ? ", " : "") << e << " at K=" << k;
  log_ << "f32 peak " << peak / 1e9 << " GFLOP/s" << on << " (detected " << before / 1e9 << "), gemm efficiency "
       << p_.gemm_efficiency << ", conv efficiency " << p_.conv_efficiency << " (" << by.str() << ")\n";
  notes_ << "f32 peak " << peak / 1e9 << " GFLOP/s" << on << ", gemm efficiency " << p_.gemm_efficiency << ", conv efficiency "
         << p_.conv_efficiency << " (" << by.str() << ")";
  // bf16: one product fits the bf16 matrix peak at the f32 fit's efficiency
  // (oneDNN's brgemm on AVX512-BF16 or AMX; on a 2-vCPU Zen 5, 128x2048x5632
  // ran 344 GFLOP/s against f32's 192). f16 keeps the detected rate: hosts
  // without f16 kernels compute it over f32 (runtime/cpu/cpu_compiler.cc).
  Graph bf16 = weight_matmul_graph(512, 1024, 1024, DType::kBF16);
  double t = probe("gemm_bf16", "MatMul", bf16);
  double before_bf16 = p_.matrix_flops[DType::kBF16];
  double r = predicted(bf16).compute_s / std::max(t - overhead(bf16), t / 2);
  p_.matrix_flops[DType::kBF16] = before_bf16 * std::clamp(r, 0.25, 4.0);
  log_ << "bf16 matrix peak " << p_.matrix_flops[DType::kBF16] / 1e9 << " GFLOP/s (detected " << before_bf16 / 1e9
       << ", " << t * 1e6 << " us for " << shape_str(bf16.type(bf16.inputs()[0]).shape) << " x 1024x1024)\n";
  notes_ << ", bf16 matrix peak " << p_.matrix_flops[DType::kBF16] / 1e9 << " GFLOP/s";
}

// Bandwidth per level: Add over three tensors sized to live in the level.
// The model charges Add's bytes to every level up to the one that holds
// them, so the fitted bandwidth is the one a kernel of that size sees.
void HostCalibrator::fit_bandwidths() {
  size_t last = p_.memory.size() - 1;
  auto total = [&](size_t i) {
    return static_cast<double>(p_.memory[i].capacity_bytes) * (p_.memory[i].per_unit ? p_.units : 1);
  };
  level_ws_.assign(p_.memory.size(), 0.0);
  for (size_t i = 1; i < p_.memory.size(); ++i) {
    // Large enough that the bytes, not the launch, take the time (an L2
    // probe of 4 L1s, 0.2 MB here, was half launch).
    double ws = i == last ? std::clamp(4 * total(i - 1), 64e6, 256e6) : std::min(0.5 * total(i), 16 * total(i - 1));
    level_ws_[i] = ws;
    int64_t n = static_cast<int64_t>(ws / 12);
    Graph g = binary_graph(OpKind::kAdd, n);
    char what[32];
    std::snprintf(what, sizeof what, "Add %.1f MB", ws / 1e6);
    double t = probe("memory", what, g);
    double bytes = 3.0 * static_cast<double>(n) * 4;
    double bw = add_bandwidth(g, t);
    cost::MemoryLevel& m = p_.memory[i];
    if (!(bw > 0 && std::isfinite(bw))) {
      // A probe no clock saw (t = 0): the detected figure stands.
      log_ << m.name << " bandwidth: not measured (" << t * 1e6 << " us), detected " << m.effective_bandwidth() / 1e9
           << " GB/s kept\n";
      continue;
    }
    m.bandwidth = bw;  // stored as the bandwidth at full efficiency
    m.efficiency = 1.0;
    log_ << m.name << " bandwidth: " << bw / 1e9 << " GB/s (Add over " << bytes / 1e6 << " MB)\n";
    notes_ << ", " << m.name << " " << bw / 1e9 << " GB/s";
  }
  // A level measured slower than the one outside it is noise (a busy
  // machine); it streams at least as fast as main memory.
  for (size_t i = last; i-- > 1;)
    p_.memory[i].bandwidth = std::max(p_.memory[i].bandwidth, p_.memory[i + 1].bandwidth);
  // The fastest level bounds only window loads (convolution, pooling); it
  // keeps the detected ratio to the next level.
  if (p_.memory.size() >= 2) {
    cost::DeviceProfile ref = cost::detect_host_cpu(id_);
    double ratio = ref.memory[0].effective_bandwidth() / ref.memory[1].effective_bandwidth();
    p_.memory[0].bandwidth = p_.memory[1].bandwidth * ratio;
    p_.memory[0].efficiency = 1.0;
  }
}

// The last cache level's effective capacity: on a shared (virtual) machine
// less than the spec's. Add over growing working sets; the level holds the
// largest one still streamed nearer its bandwidth than main memory's.
void HostCalibrator::fit_llc_capacity() {
  if (p_.memory.size() < 3) return;
  cost::MemoryLevel& llc = p_.memory[p_.memory.size() - 2];
  double fast = llc.bandwidth, slow = p_.memory.back().bandwidth;
  double held = level_ws_[p_.memory.size() - 2];
  bool dropped = false;
  int steps = 0;
  for (double ws = 2 * held; ws < static_cast<double>(llc.capacity_bytes) && steps < (o_.quick ? 2 : 5); ws *= 2, ++steps) {
    int64_t n = static_cast<int64_t>(ws / 12);
    Graph g = binary_graph(OpKind::kAdd, n);
    double t = measure(g);
    double bw = add_bandwidth(g, t);
    log_ << "  Add over " << ws / 1e6 << " MB: " << bw / 1e9 << " GB/s\n";
    dropped = bw < std::sqrt(fast * slow);
    if (dropped) break;
    held = ws;
  }
  // No drop below the spec's capacity: the spec's capacity stands.
  if (!dropped && steps < (o_.quick ? 2 : 5)) held = static_cast<double>(llc.capacity_bytes);
  llc.capacity_bytes = std::max<int64_t>(static_cast<int64_t>(held), p_.memory[p_.memory.size() - 3].capacity_bytes *
                                                                          (p_.memory[p_.memory.size() - 3].per_unit ? p_.units : 1));
  log_ << llc.name << " effective capacity: " << static_cast<double>(llc.capacity_bytes) / 1e6 << " MB\n";
  notes_ << ", " << llc.name << " holds " << static_cast<double>(llc.capacity_bytes) / 1e6 << " MB";
}

// Launch overhead: kernels with almost no work (they run on one thread),
// the median of kinds whose fixed costs differ (oneDNN eltwise, binary and
// softmax primitives).
void HostCalibrator::fit_launch_overhead() {
  std::vector<double> tiny = {probe("overhead", "Relu 16", unary_graph(OpKind::kRelu, 16)),
                              probe("overhead", "Add 16", binary_graph(OpKind::kAdd, 16)),
                              probe("overhead", "Softmax 16", unary_graph(OpKind::kSoftmax, 16))};
  std::sort(tiny.begin(), tiny.end());
  p_.launch_overhead_s = tiny[1];
  log_ << "launch overhead: " << p_.launch_overhead_s * 1e6 << " us\n";
  notes_ << ", launch " << p_.launch_overhead_s * 1e6 << " us";
}

// Cold launches (DeviceProfile::cold_launch_s): a tiny kernel run after a
// stream through twice the last cache, against a tiny kernel run right
// after it, in one program; the median runs.
void HostCalibrator::fit_cold_launch() {
  p_.cold_launch_s = 0;
  const size_t llc = p_.memory.size() - 2;
  auto n = static_cast<int64_t>(static_cast<double>(p_.memory[llc].capacity_bytes) *
                                (p_.memory[llc].per_unit ? p_.units : 1) / 4.0);
  Graph g;
  g.name = "calibrate";
  ValueId x = g.add_input("x", {DType::kF32, {n}});
  ValueId s = g.add_input("s", {DType::kF32, {128}});
  ValueId y = g.add(OpKind::kRelu, {x}, {}, "stream");  // n floats in, n out: twice the last cache
  ValueId after = g.add(OpKind::kAdd, {s, s}, {}, "cold");
  ValueId next = g.add(OpKind::kMul, {after, s}, {}, "warm");
  g.set_outputs({y, after, next});  // `after` read twice: not fused into "warm"
  // Medians: the fastest of many runs is one whose misses were lucky, and
  // a model's runs pay the usual ones (a [1, 128, 1] Add after 16 MB: 1.3
  // us at best, 5-9 on average per run).
  double cold = measure_kernel_seconds(g, slice_, threads_, "cold", runtime::Backend::kCpu, true,
                                         cost::one_thread_line(p_));
  double warm = measure_kernel_seconds(g, slice_, threads_, "warm", runtime::Backend::kCpu, true,
                                         cost::one_thread_line(p_));
  p_.cold_launch_s = std::clamp(cold - warm, 0.0, 50e-6);
  log_ << "cold launch: " << p_.cold_launch_s * 1e6 << " us (" << cold * 1e6 << " us after " << n * 8 / 1000000
       << " MB, " << warm * 1e6 << " us after a tiny kernel)\n";
  notes_ << ", cold launch " << p_.cold_launch_s * 1e6 << " us";
}

// Parallel overhead (waking the pool's threads and joining them), with
// every thread: the intercept of two Adds over cache-resident data, both
// large enough to spread over every core. On a busy machine the fastest
// run still waits for a descheduled thread now and then; more than
// kMaxParallelOverhead is that, not the pool, and the detected value stays.
void HostCalibrator::fit_parallel_overhead() {
  constexpr double kMaxParallelOverhead = 50e-6;
  if (p_.units <= 1) return;
  if (double load = load_average(); load > static_cast<double>(p_.units)) {
    // Every thread's fastest run still waits for a descheduled one now and
    // then, or the intercept of two such runs is noise (0 or milliseconds).
    log_ << "parallel overhead: the detected " << p_.parallel_overhead_s * 1e6 << " us (load " << load
         << " on " << p_.units << " cores: not measurable)\n";
    notes_ << ", parallel " << p_.parallel_overhead_s * 1e6 << " us (detected)";
    return;
  }
  double detected = p_.parallel_overhead_s;
  p_.parallel_overhead_s = 0;
  int64_t n1 = kOneThreadElements * 2, n2 = kOneThreadElements * 4;
  double t1 = measure(binary_graph(OpKind::kAdd, n1)), t2 = measure(binary_graph(OpKind::kAdd, n2));
  double intercept = (t1 * static_cast<double>(n2) - t2 * static_cast<double>(n1)) / static_cast<double>(n2 - n1);
  double fitted = std::clamp(intercept - p_.launch_overhead_s, 0.0, t1 / 2);
  p_.parallel_overhead_s = fitted <= kMaxParallelOverhead ? fitted : detected;
  log_ << "parallel overhead: " << fitted * 1e6 << " us (Add " << t1 * 1e6 << " / " << t2 * 1e6 << " us on "
       << threads_ << " threads)" << (fitted <= kMaxParallelOverhead ? "" : ", implausible: kept the detected")
       << "\n";
  notes_ << ", parallel " << p_.parallel_overhead_s * 1e6 << " us";
}

// The shared levels (last cache, main memory) with every core streaming:
// the bandwidth probes of fit_bandwidths again, on all threads. One core's
// rate is scaled linearly to the cores before this (cost::scale_to_cores); on the
// 2-vCPU Zen 5 guest both cores together streamed 1.75-1.8x one core's
// rate from the last cache and 1.4-2.0x from main memory in these probes,
// not 2x. The one-core rate stays as the level's core_bandwidth, what a kernel on one
// thread streams (kernel_model.cc).
void HostCalibrator::fit_shared_bandwidths(const cost::DeviceProfile& one_core) {
  if (p_.units <= 1) return;
  if (double load = load_average(); load > static_cast<double>(p_.units)) {
    log_ << "shared levels on " << p_.units << " cores: not measured (load " << load << "), one core's rate scaled\n";
    notes_ << ", shared levels scaled from one core";
    return;
  }
  for (size_t i = 1; i < p_.memory.size() && i < level_ws_.size(); ++i) {
    cost::MemoryLevel& m = p_.memory[i];
    if (m.per_unit || level_ws_[i] <= 0) continue;
    double core = one_core.memory[i].effective_bandwidth();
    auto n = static_cast<int64_t>(level_ws_[i] / 12);
    Graph g = binary_graph(OpKind::kAdd, n);
    double t = measure(g);
    double bw = add_bandwidth(g, t);
    if (!(bw > 0 && std::isfinite(bw))) {
      log_ << m.name << " on " << threads_ << " threads: not measured (" << t * 1e6 << " us), one core's rate scaled\n";
      continue;
    }
    // Between one core's rate and every core's at that rate (noise either way).
    double scaled = m.effective_bandwidth();
    m.bandwidth = std::clamp(bw, core, std::max(core, scaled));
    m.efficiency = 1.0;
    m.core_bandwidth = core;
    log_ << m.name << " on " << threads_ << " threads: " << bw / 1e9 << " GB/s (Add over " << level_ws_[i] / 1e6
         << " MB; one core " << core / 1e9
         << " GB/s, x" << bw / core << ")\n";
    notes_ << ", " << m.name << " " << m.bandwidth / 1e9 << " GB/s on " << threads_ << " cores";
  }
}

// The pool's spin window and wake-up cost (runtime/pool_probe.h): a tiny
// parallel region after one-thread gaps doubling from 10 us to 2.56 ms. The
// wake-up is the first gap whose region takes more than the back-to-back
// one by 2 us and by 3 times it; the window is the geometric mean of that
// gap and the one before, the cost the median excess from it on. None:
// the threads never slept within the gaps (an active wait policy).
void HostCalibrator::fit_pool_wake() {
  p_.spin_window_s = p_.wake_overhead_s = 0;
  if (p_.units <= 1) return;
  if (double load = load_average(); load > static_cast<double>(p_.units)) {
    log_ << "pool wake-up: not measured (load " << load << " on " << p_.units << " cores)\n";
    notes_ << ", pool wake-up not measured";
    return;
  }
  std::vector<double> gaps = {0};
  for (double g = 10e-6; g <= 2.6e-3; g *= 2) gaps.push_back(g);
  std::vector<runtime::PoolWakeSample> s = runtime::measure_pool_wake(threads_, gaps, o_.quick ? 40 : 100);
  double base = s[0].region_s, line = base + std::max(2e-6, 3 * base);
  size_t first = 1;
  while (first < s.size() && s[first].region_s <= line) ++first;
  if (first == s.size()) {
    log_ << "pool wake-up: none within " << gaps.back() * 1e6 << " us of one-thread work\n";
    notes_ << ", no pool wake-up";
    return;
  }
  std::vector<double> excess;
  for (size_t i = first; i < s.size(); ++i) excess.push_back(s[i].region_s - base);
  std::nth_element(excess.begin(), excess.begin() + static_cast<std::ptrdiff_t>(excess.size() / 2), excess.end());
  p_.wake_overhead_s = excess[excess.size() / 2];
  p_.spin_window_s = first > 1 ? std::sqrt(gaps[first - 1] * gaps[first]) : gaps[first] / 2;
  log_ << "pool wake-up: " << p_.wake_overhead_s * 1e6 << " us after more than " << p_.spin_window_s * 1e6
       << " us of one-thread work (a region back to back: " << base * 1e6 << " us)\n";
  notes_ << ", pool wake-up " << p_.wake_overhead_s * 1e6 << " us after " << p_.spin_window_s * 1e6 << " us";
}

// Two 3x3 convolutions of one channel count, small and large images, give
// the per-call cost (t = overhead + compute / efficiency).
void HostCalibrator::fit_gemm_overhead() {
  p_.gemm_overhead_s = 0;
  Graph small = conv_graph(64, 16), large = conv_graph(64, 56);
  double ts = probe("conv", "Conv", small, "op") - overhead(small);
  double tl = measure(large, "op") - overhead(large);
  double cs = predicted(small).compute_s * p_.conv_efficiency, cl = predicted(large).compute_s * p_.conv_efficiency;
  double inv_eff = (tl - ts) / (cl - cs);
  // A negative slope or a large intercept is noise (a shared machine): the
  // overhead is at most half the small convolution.
  p_.gemm_overhead_s = inv_eff > 0 && ts > 0 ? std::clamp(ts - cs * inv_eff, 0.0, ts / 2) : 0.0;
  log_ << "gemm overhead: " << p_.gemm_overhead_s * 1e6 << " us (Conv " << ts * 1e6 << " / " << tl * 1e6 << " us)\n";
  notes_ << ", gemm call " << p_.gemm_overhead_s * 1e6 << " us";
}

// Convolution micro-kernel calls: a 4x4, stride-2 convolution of 256
// single-channel 14x14 images (a Winograd input transform), whose time is
// mostly calls over tiny rows.
void HostCalibrator::fit_conv_calls() {
  p_.conv_call_s = 0;
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
  double t = probe("conv", "Conv 256x1x14x14", g, "op");
  double calls = 256.0 * 7 * 16;
  p_.conv_call_s = std::max(0.0, t - overhead(g) - predicted(g).compute_s) / (calls * rate_share(g));
  log_ << "conv call: " << p_.conv_call_s * 1e9 << " ns (" << t * 1e6 << " us)\n";
  notes_ << ", conv call " << p_.conv_call_s * 1e9 << " ns";
}

// Layout reorders: the rate of the row-major copy of a convolution's
// blocked output that a Transpose reads.
void HostCalibrator::fit_reorder() {
  p_.reorder_bandwidth = 0;
  Graph g = conv_graph(64, 56, 3, false);
  Attrs perm;
  perm.set("perm", std::vector<int64_t>{0, 1, 3, 2});
  g.set_outputs({g.add(OpKind::kTranspose, {g.outputs()[0]}, perm, "next")});
  ValueId y = g.node(probed(g)).outputs[0];
  double t = measure(g, g.value(y).name);
  double launch_s = cost::reorder_cost(g, y, p_).launch_s;
  p_.reorder_bandwidth = static_cast<double>(g.type(y).nbytes()) / std::max(t - launch_s, t / 2);
  log_ << "reorder: " << p_.reorder_bandwidth / 1e9 << " GB/s (" << t * 1e6 << " us)\n";
  notes_ << ", reorder " << p_.reorder_bandwidth / 1e9 << " GB/s";
}

// Transcendentals: Exp over data that stays in L2, at the vector
// efficiency a streaming Add reaches.
void HostCalibrator::fit_transcendental() {
  int64_t n = static_cast<int64_t>(static_cast<double>(p_.memory.size() > 1 ? p_.memory[1].capacity_bytes : 65536) / 16);
  Graph g = unary_graph(OpKind::kExp, n);
  double t = probe("vector", "Exp", g);
  double ops = (t - overhead(g)) / rate_share(g) * p_.peak_flops(DType::kF32, false) * p_.vector_efficiency /
               (2.0 * static_cast<double>(n));
  // An exp is a range reduction and a polynomial: under 4 vector ops per
  // element the probe measured a slow moment of the rates it is divided by
  // (a quick calibration on a 2-vCPU guest fitted 1.0 once, 8.4-9.9
  // otherwise), and the detected value stays.
  constexpr double kMinTranscendentalOps = 4;
  if (ops < kMinTranscendentalOps) {
    log_ << "transcendental: " << ops << " vector ops (Exp " << t * 1e6 << " us), implausible: kept the detected "
         << p_.transcendental_ops << "\n";
    notes_ << ", transcendental " << p_.transcendental_ops << " ops (detected)";
    return;
  }
  p_.transcendental_ops = std::min(ops, 200.0);
  log_ << "transcendental: " << p_.transcendental_ops << " vector ops (Exp " << t * 1e6 << " us)\n";
  notes_ << ", transcendental " << p_.transcendental_ops << " ops";
}

// Softmax over the last axis, per element and per row: two probes of the
// same L2-sized elements, in long rows (2048) and short ones (128). The
// difference is the rows' cost (the horizontal max and sum, the row loop),
// the rest the elements'. A Zen 5 core, 65536 elements: 20 us in rows of
// 2048, 30 in rows of 128, priced 12.2 by four ops and an exp per element.
void HostCalibrator::fit_softmax() {
  p_.softmax_ops = p_.softmax_row_ops = 0;
  int64_t n = std::max<int64_t>(
      8192, static_cast<int64_t>(static_cast<double>(p_.memory.size() > 1 ? p_.memory[1].capacity_bytes : 65536) / 16));
  n = n / 2048 * 2048;
  auto softmax = [](int64_t rows, int64_t cols) {
    Graph g;
    g.name = "calibrate";
    ValueId a = g.add_input("a", {DType::kF32, {rows, cols}});
    Attrs axis;
    axis.set("axis", int64_t{-1});
    g.set_outputs({g.add(OpKind::kSoftmax, {a}, std::move(axis), "op")});
    return g;
  };
  Graph longer = softmax(n / 2048, 2048), shorter = softmax(n / 128, 128);
  double tl = probe("vector", "Softmax rows of 2048", longer), ts = probe("vector", "Softmax rows of 128", shorter);
  // Vector ops per second of one core (the probes run on one thread).
  double rate = p_.peak_flops(DType::kF32, false) * p_.vector_efficiency / 2.0 / rate_share(longer);
  double ol = (tl - overhead(longer)) * rate, os = (ts - overhead(shorter)) * rate;
  double rows_l = static_cast<double>(n / 2048), rows_s = static_cast<double>(n / 128);
  double per_row = std::clamp((os - ol) / (rows_s - rows_l), 0.0, 1e5);
  double per_elem = (ol - rows_l * per_row) / static_cast<double>(n);
  // Under 4 ops an element (a max, a subtraction, an exp, a sum and a
  // scale) the probes measured a slow moment of the rates they are divided
  // by: the formula (4 and a transcendental) stays.
  if (!(per_elem >= 4 && per_elem <= 400)) {
    log_ << "softmax: " << per_elem << " ops per element (" << tl * 1e6 << " / " << ts * 1e6
         << " us), implausible: kept 4 and a transcendental\n";
    notes_ << ", softmax not fitted";
    return;
  }
  p_.softmax_ops = per_elem;
  p_.softmax_row_ops = per_row;
  log_ << "softmax: " << per_elem << " vector ops per element, " << per_row << " per row (rows of 2048 " << tl * 1e6
       << " us, of 128 " << ts * 1e6 << " us)\n";
  notes_ << ", softmax " << per_elem << " ops per element and " << per_row << " per row";
}

// Permuting copies, what they take beyond their bytes: a 2-D Transpose of
// L2-sized data (copied element by element, a cost per element), and one
// that keeps its last axis (copied in contiguous runs, a cost per run).
void HostCalibrator::fit_permutes() {
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
    double t = probe("permute", std::string("Transpose per ") + what, g);
    double extra = std::max(0.0, t - overhead(g) - predicted(g).time_s + p_.launch_overhead_s);
    field = std::clamp(extra / rate_share(g) * p_.peak_flops(DType::kF32, false) * p_.vector_efficiency / (2.0 * count),
                       0.0, 2000.0);
    log_ << "permute: " << field << " vector ops per " << what << " (Transpose " << t * 1e6 << " us)\n";
    notes_ << ", permute " << field << " ops per " << what;
  };
  fitted_ops(transpose({256, 512}, {1, 0}), 256.0 * 512, p_.permute_ops, "element");
  fitted_ops(transpose({128, 64, 32}, {1, 0, 2}), 128.0 * 64, p_.permute_run_ops, "run");
}

// The fitted profile's remaining error on what it was fitted to, per kernel
// class: the geometric mean of predicted / measured and the worst kernel.
// Post-ops in a product's epilogue (DeviceProfile::epilogue_ops_scale and
// epilogue_operand_ops): a MatMul of little depth, whose epilogue is a large
// share of its time, alone, with a Sigmoid and with an Add of a full
// operand, one slice each. What each post-op adds beyond the bare product,
// against what the model prices the same ops at in a streaming kernel.
void HostCalibrator::fit_epilogue() {
  p_.epilogue_ops_scale = 1.0;
  p_.epilogue_operand_ops = 0;
  constexpr int64_t m = 256, k = 64, n = 1024;
  Graph bare = weight_matmul_graph(m, k, n);
  ValueId y = bare.outputs()[0];
  Graph sig = bare;
  sig.set_outputs({sig.add(OpKind::kSigmoid, {y}, {}, "post")});
  Graph add = bare;
  add.set_outputs({add.add(OpKind::kAdd, {y, add.add_input("c", {DType::kF32, {m, n}})}, {}, "post")});
  auto compute = [&](const Graph& g) {
    std::vector<NodeId> nodes;
    for (int32_t i = 0; i < g.num_nodes(); ++i) nodes.push_back(static_cast<NodeId>(i));
    return cost::kernel_cost(g, nodes, p_).compute_s;
  };
  double t0 = measure(bare, "", 1);
  double ts = probe("gemm", "MatMul+Sigmoid", sig, "", 1);
  double ta = probe("gemm", "MatMul+Add", add, "", 1);
  // The model's price of the Sigmoid and of the Add's arithmetic, at the
  // streaming rate (scale 1, no operand ops).
  double sig_s = compute(sig) - compute(bare), add_s = compute(add) - compute(bare);
  double op_s = 2.0 / (p_.peak_flops(DType::kF32, false) * p_.vector_efficiency) * static_cast<double>(m * n);
  // Implausible fits (a product faster with its post-op: a slow moment of
  // the bare probe) keep the streaming prices.
  if (sig_s > 0 && ts > t0) p_.epilogue_ops_scale = std::clamp((ts - t0) / sig_s, 1.0, 4.0);
  if (ta > t0) p_.epilogue_operand_ops = std::clamp((ta - t0 - add_s * p_.epilogue_ops_scale) / op_s, 0.0, 40.0);
  log_ << "epilogue: x" << p_.epilogue_ops_scale << " ops, " << p_.epilogue_operand_ops << " ops per operand element"
       << " (MatMul " << t0 * 1e6 << " us, +Sigmoid " << ts * 1e6 << ", +Add " << ta * 1e6 << ")\n";
  notes_ << ", epilogue x" << p_.epilogue_ops_scale << " ops and " << p_.epilogue_operand_ops << " per operand element";
}

void HostCalibrator::report_residuals() {
  std::map<std::string, std::vector<std::pair<double, std::string>>> by_kind;
  for (const Probe& pr : probes_) {
    cost::GraphCost c = cost::graph_cost(pr.graph, p_);
    double pred = 0;
    for (size_t k = 0; k < c.groups.size(); ++k)
      if (pr.node.empty() || pr.graph.node(c.groups[k][0]).name == pr.node) pred += c.kernels[k].time_s;
    if (pr.node.empty())
      for (const cost::KernelCost& r : c.reorders) pred += r.time_s;
    by_kind[pr.kind].push_back({pred / pr.measured_s, pr.what});
  }
  log_ << "remaining error per kernel class (predicted / measured):\n";
  for (const auto& [kind, rows] : by_kind) {
    double lsum = 0;
    size_t worst = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      lsum += std::log(rows[i].first);
      if (std::abs(std::log(rows[i].first)) > std::abs(std::log(rows[worst].first))) worst = i;
    }
    char line[200];
    std::snprintf(line, sizeof line, "  %-9s %2zu kernels  mean x%.2f  worst x%.2f (%s)\n", kind.c_str(), rows.size(),
                  std::exp(lsum / static_cast<double>(rows.size())), rows[worst].first, rows[worst].second.c_str());
    log_ << line;
  }
}

}  // namespace

cost::DeviceProfile calibrate_host(const CalibrationOptions& options, std::ostream& log) {
  return HostCalibrator(options, log).run();
}

}  // namespace tessera::calibrate
