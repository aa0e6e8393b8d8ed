// Validation of the cost model on this CPU: every kernel of the model suite
// run through the runtime (oneDNN, post-op fusion as the runtime forms it),
// predicted against measured time per kernel, per model, and the ordering
// of pairs of alternative programs (fused vs unfused plans of each model,
// and rewrites from bench/cost/rewrite_pairs.h).
//
// Prints per model the latency ratio and the kernels the runtime ran that
// the model has no group for (layout reorders, split groups); then the
// Spearman rank correlation of kernel times, median and 90th percentile of
// |ln(predicted / measured)|, and the share of pairs ordered as measured.
// Ratios only; no assertions.
//
// Usage: cost_validation [--profile cpu|detected|PROFILE.json] [--seconds S] [--models DIR]
//                        [--only NAME[,NAME...]] [--json FILE] [--stat median|min] [--threads N]
//                        [--clock wall|cpu]   (cpu: one thread's time on the core, see measure())
//                        [--no-rewrites | --rewrites-only]   (the suite's models only, or the rewrite pairs only)
//                        [--explain TEXT]   (per kernel, predicted against measured, on both sides of the
//                                            rewrite pairs whose name contains TEXT; for a model's
//                                            "NAME: unfused vs fused plan", each fused group against
//                                            its nodes run one by one)
// (--threads below the profile's units prices the model on that share of the
// host, cost::thread_share)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <tuple>
#include <nlohmann/json.hpp>

#include "bench/cost/rewrite_pairs.h"
#include "calibrate/host_identity.h"
#include "calibrate/prepare_device.h"
#include "cost/device_profile.h"
#include "cost/graph_cost.h"
#include "cost/kernel_model.h"
#include "graph/error.h"
#include "onnx_import/onnx_import.h"
#include "onnx_import/tensor_proto.h"
#include "runtime/runtime.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

struct Measured {
  double latency_s = 0;                      // median wall time per run
  std::map<std::string, double> kernel_s;    // root node -> time per run
  std::map<std::string, std::string> label;  // root node -> op label
};

std::vector<Tensor> seeded_inputs(const Graph& g) {
  std::vector<Tensor> out;
  for (ValueId v : g.inputs()) {
    const TensorType& t = g.type(v);
    std::vector<double> vals(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = is_float(t.dtype) ? ((i * 37) % 17) / 17.0 - 0.5 : (i % 2);
    out.push_back(Tensor::from_doubles(t.dtype, t.shape, vals));
  }
  return out;
}

// "median", or "min": the fastest run, for a machine shared with other
// work, where slower runs include time the threads spent descheduled.
double pick(std::vector<double> v, const std::string& stat) {
  std::sort(v.begin(), v.end());
  return stat == "min" ? v.front() : v[v.size() / 2];
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

Measured measure(const Graph& g, const std::vector<Tensor>& inputs, bool fuse, double seconds,
                 const std::string& stat, int threads, bool cpu_clock, const OneThreadLine& line) {
  runtime::RunOptions opt;
  opt.threads = threads;
  opt.one_thread_line = line;  // the profile's, as the model prices it
  // The thread count the profile describes, whatever the load.
  opt.one_thread_runs = runtime::RunOptions::OneThreadRuns::kNever;
  opt.profile = true;
  opt.fuse = fuse;
  runtime::ExecutablePlan plan = runtime::ExecutablePlan::compile(g, opt);
  plan.run(inputs);  // first touch, primitive creation
  Measured m;
  // Per run: wall time and each kernel's time (profile snapshots).
  std::map<std::string, double> before;
  std::map<std::string, std::vector<double>> per_kernel;
  for (const auto& k : plan.profile().kernels) before[k.node] += k.total_ms;
  std::vector<double> wall;
  // --clock cpu, one thread: a run's CPU time is its time on the core, the
  // time descheduled behind other work left out (this 2-core host runs two
  // builds besides); a kernel's is its wall time scaled by the run's share
  // on the core, its median over the runs (the scaling is right on average,
  // not run by run, so the fastest would be biased low).
  bool cpu = cpu_clock && threads == 1;
  std::map<std::string, std::vector<double>> per_kernel_cpu;
  auto start = std::chrono::steady_clock::now();
  while (wall.size() < 3 ||
         (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds && wall.size() < 200)) {
    double c0 = process_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    plan.run(inputs);
    double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double c = process_cpu_seconds() - c0;
    wall.push_back(cpu && c > 0 ? std::min(w, c) : w);  // c = 0: a clock that did not see the run
    std::map<std::string, double> now;
    for (const auto& k : plan.profile().kernels) {
      now[k.node] += k.total_ms;
      m.label[k.node] = k.op;
    }
    for (const auto& [node, ms] : now) {
      per_kernel[node].push_back((ms - before[node]) * 1e-3);
      per_kernel_cpu[node].push_back((ms - before[node]) * 1e-3 * (c > 0 ? std::min(1.0, c / w) : 1.0));
    }
    before = now;
  }
  m.latency_s = pick(wall, stat);
  for (auto& [node, v] : per_kernel) m.kernel_s[node] = cpu ? pick(per_kernel_cpu[node], "median") : pick(v, stat);
  return m;
}

// Latency of two programs (a graph and whether the runtime fuses it), in
// one process, in alternating blocks of runs, so that a change in the
// machine's load, or in the speed the guest runs this process at, falls on
// both alike. With one thread a block is as many runs as take about 20 ms
// (1 to 10), and its first run is left out of the statistic when it has
// others: the model prices a program run again and again (its weights in
// the last cache when they fit), not one whose caches the other program has
// just filled (on a Zen 4 guest, alternating run by run put Winograd F(2,3)
// at 256ch 14px 5% behind the direct convolution, against 5-8% ahead in
// blocks and alone). With more threads a block is one run: in blocks, the
// second program of a pair ran at half speed in about half the processes,
// both threads busy, on the same guest (2 vCPUs; the pair's rewrites at
// 64ch 56px: 2.4-2.6 ms against 1.2-1.3 ms run by run; the cause is not
// known).
std::pair<double, double> measure_pair(const Graph& a, bool fuse_a, const Graph& b, bool fuse_b, double seconds,
                                       const std::string& stat, int threads, bool cpu_clock, const OneThreadLine& line) {
  runtime::RunOptions opt;
  opt.threads = threads;
  opt.one_thread_line = line;  // the profile's, as the model prices it
  // The thread count the profile describes, whatever the load.
  opt.one_thread_runs = runtime::RunOptions::OneThreadRuns::kNever;
  runtime::RunOptions opt_b = opt;
  opt.fuse = fuse_a;
  opt_b.fuse = fuse_b;
  runtime::ExecutablePlan pa = runtime::ExecutablePlan::compile(a, opt), pb = runtime::ExecutablePlan::compile(b, opt_b);
  std::vector<Tensor> ia = seeded_inputs(a), ib = seeded_inputs(b);
  bool cpu = cpu_clock && threads == 1;  // as in measure()
  auto timed = [cpu](runtime::ExecutablePlan& p, const std::vector<Tensor>& in) {
    double c0 = process_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    p.run(in);
    double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double c = process_cpu_seconds() - c0;
    return cpu && c > 0 ? std::min(w, c) : w;
  };
  double first = std::max(timed(pa, ia), timed(pb, ib));  // first touch, primitive creation
  first = std::max(first, std::max(timed(pa, ia), timed(pb, ib)));
  int block = threads == 1 ? static_cast<int>(std::clamp(0.02 / std::max(first, 1e-9), 1.0, 10.0)) : 1;
  std::vector<double> ta, tb;
  auto run_block = [&](runtime::ExecutablePlan& p, const std::vector<Tensor>& in, std::vector<double>& out) {
    for (int i = 0; i < block; ++i) {
      double t = timed(p, in);
      if (block == 1 || i > 0) out.push_back(t);
    }
  };
  auto start = std::chrono::steady_clock::now();
  while (ta.size() < 3 ||
         (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds && ta.size() < 400)) {
    run_block(pa, ia, ta);
    run_block(pb, ib, tb);
  }
  return {pick(ta, stat), pick(tb, stat)};
}

// The runtime's groups (graph/fusion_groups.h, as the CPU compiler forms
// them), as node lists for the cost model.
std::vector<std::vector<NodeId>> runtime_groups(const Graph& g, bool fuse) { return cost::kernel_groups(g, fuse); }

// One program's kernels, predicted against measured, in program order.
void explain_kernels(const Graph& g, const cost::DeviceProfile& d, double seconds, const std::string& stat,
                     int threads, bool cpu_clock) {
  Measured m = measure(g, seeded_inputs(g), true, seconds, stat, threads, cpu_clock, cost::one_thread_line(d));
  cost::GraphCost c = cost::graph_cost(g, d, {}, runtime_groups(g, true));
  double pred = 0, meas = 0;
  for (size_t k = 0; k < c.groups.size(); ++k) {
    const std::string& node = g.node(c.groups[k][0]).name;
    auto it = m.kernel_s.find(node);
    double ms = it == m.kernel_s.end() ? 0 : it->second;
    pred += c.kernels[k].time_s;
    meas += ms;
    std::printf("    %-28s %-24s pred %9.1f us  meas %9.1f us  (%s)\n", node.c_str(), c.kernels[k].label.c_str(),
                c.kernels[k].time_s * 1e6, ms * 1e6, c.kernels[k].bound.c_str());
  }
  for (const auto& [node, s] : m.kernel_s) {
    bool modelled = false;
    for (const auto& grp : c.groups) modelled |= g.node(grp[0]).name == node;
    if (!modelled) std::printf("    %-28s %-24s unmodelled      meas %9.1f us\n", node.c_str(), m.label[node].c_str(), s * 1e6);
  }
  std::printf("    sum of kernels: pred %.1f us, meas %.1f us; graph_cost %.1f us, run %.1f us\n", pred * 1e6,
              meas * 1e6, c.time_s * 1e6, m.latency_s * 1e6);
}

// A model's fused plan against its unfused one, group by group: each fused
// group's predicted and measured time against the sum of its nodes' as
// single kernels, the largest measured differences first.
void explain_fusion(const Graph& g, const std::vector<Tensor>& inputs, const cost::DeviceProfile& d, double seconds,
                    const std::string& stat, int threads, bool cpu_clock) {
  Measured mu = measure(g, inputs, false, seconds, stat, threads, cpu_clock, cost::one_thread_line(d));
  Measured mf = measure(g, inputs, true, seconds, stat, threads, cpu_clock, cost::one_thread_line(d));
  cost::GraphCost cu = cost::graph_cost(g, d, {}, runtime_groups(g, false));
  cost::GraphCost cf = cost::graph_cost(g, d, {}, runtime_groups(g, true));
  std::map<std::string, double> pred_single;
  for (size_t k = 0; k < cu.groups.size(); ++k) pred_single[g.node(cu.groups[k][0]).name] += cu.kernels[k].time_s;
  struct Row {
    std::string node, label;
    double pu = 0, pf = 0, mu = 0, mf = 0;
  };
  std::vector<Row> rows;
  for (size_t k = 0; k < cf.groups.size(); ++k) {
    if (cf.groups[k].size() < 2) continue;
    Row r{g.node(cf.groups[k][0]).name, cf.kernels[k].label};
    r.pf = cf.kernels[k].time_s;
    auto it = mf.kernel_s.find(r.node);
    r.mf = it == mf.kernel_s.end() ? 0 : it->second;
    for (NodeId id : cf.groups[k]) {
      const std::string& n = g.node(id).name;
      r.pu += pred_single.count(n) ? pred_single[n] : 0;
      auto u = mu.kernel_s.find(n);
      r.mu += u == mu.kernel_s.end() ? 0 : u->second;
    }
    rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.mf - a.mu > b.mf - b.mu; });
  double pu = 0, pf = 0, su = 0, sf = 0;
  for (const Row& r : rows) pu += r.pu, pf += r.pf, su += r.mu, sf += r.mf;
  std::printf("    fused groups: %zu; predicted %.1f -> %.1f us, measured %.1f -> %.1f us (unfused -> fused)\n",
              rows.size(), pu * 1e6, pf * 1e6, su * 1e6, sf * 1e6);
  for (size_t i = 0; i < rows.size() && i < 12; ++i)
    std::printf("    %-36s %-28s pred %8.1f -> %8.1f us  meas %8.1f -> %8.1f us\n", rows[i].node.c_str(),
                rows[i].label.c_str(), rows[i].pu * 1e6, rows[i].pf * 1e6, rows[i].mu * 1e6, rows[i].mf * 1e6);
  std::printf("    whole runs (profiled): %.3f -> %.3f ms\n", mu.latency_s * 1e3, mf.latency_s * 1e3);
}

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> idx(v.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = (static_cast<double>(i) + static_cast<double>(j)) / 2.0;
    i = j + 1;
  }
  return r;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> ra = ranks(a), rb = ranks(b);
  double n = static_cast<double>(a.size()), ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += ra[i] / n, mb += rb[i] / n;
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    cov += (ra[i] - ma) * (rb[i] - mb);
    va += (ra[i] - ma) * (ra[i] - ma);
    vb += (rb[i] - mb) * (rb[i] - mb);
  }
  return cov / std::sqrt(va * vb);
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

struct KernelRow {
  std::string model, node, op;
  double predicted = 0, measured = 0;
  std::string bound;
};

struct PairRow {
  std::string name;
  double pred_before = 0, pred_after = 0, meas_before = 0, meas_after = 0;
  bool agree() const { return (pred_after < pred_before) == (meas_after < meas_before); }
  // Differences under 3% of the faster one are within this machine's noise.
  bool tie() const { return std::abs(meas_after - meas_before) < 0.03 * std::min(meas_after, meas_before); }
};

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cpu", models_dir = std::string(TESSERA_SOURCE_DIR) + "/bench/models/cache", only, json_out,
              stat = "median", explain;
  double seconds = 2.0;
  int threads = 0;
  bool cpu_clock = false, models = true, rewrites = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--profile") device = next();
    else if (a == "--seconds") seconds = std::stod(next());
    else if (a == "--models") models_dir = next();
    else if (a == "--only") only = next();
    else if (a == "--json") json_out = next();
    else if (a == "--stat") stat = next();
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--clock") cpu_clock = next() == "cpu";
    else if (a == "--no-rewrites") rewrites = false;
    else if (a == "--rewrites-only") models = false;
    else if (a == "--explain") explain = next();
    else {
      std::cerr << "usage: cost_validation [--profile cpu|detected|FILE] [--seconds S] [--models DIR] [--only NAME] [--json FILE] [--stat median|min] [--threads N] [--clock wall|cpu] [--no-rewrites | --rewrites-only] [--explain TEXT]\n";
      return 2;
    }
  }
  try {
    // "detected": the host as detection alone sees it (no cached profile);
    // "cpu": its cached profile, else detection (never calibrates here).
    calibrate::PrepareOptions prepare;
    prepare.calibrate = false;
    cost::DeviceProfile d =
        device == "detected" ? calibrate::detect_this_host() : calibrate::prepare_device(device, prepare);
    // Fewer threads than the profile's cores: priced on that share of the
    // host, as `tessera cost --threads` prices it.
    if (threads > 0 && threads < d.units) d = cost::thread_share(d, threads);
    std::printf("device: %s (%s)\n", d.name.c_str(), d.calibrated ? "calibrated" : "not calibrated");
    std::vector<KernelRow> kernels;
    std::vector<PairRow> pairs;
    std::vector<std::pair<std::string, std::pair<double, double>>> latency;  // model -> (pred, meas)
    // model -> the sum of its kernels' times (each the --stat of its runs):
    // with --stat min, on a machine shared with other work, what the model
    // takes when no kernel is descheduled.
    std::map<std::string, double> kernel_sum;
    std::vector<fs::path> dirs;
    for (const auto& e : fs::directory_iterator(models_dir))
      if (models && fs::exists(e.path() / "model.onnx") &&
          (only.empty() || ("," + only + ",").find("," + e.path().filename().string() + ",") != std::string::npos))
        dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path& dir : dirs) {
      std::string name = dir.filename().string();
      Graph g = import_onnx_file((dir / "model.onnx").string());
      std::vector<Tensor> inputs = seeded_inputs(g);
      double pred[2] = {0, 0}, meas[2] = {0, 0};
      pred[0] = cost::graph_cost(g, d, {}, runtime_groups(g, false)).time_s;
      {
        // The fused plan kernel by kernel (profiled), then both plans' whole
        // runs alternating (the pair, and the model's latency).
        Measured m = measure(g, inputs, true, seconds / 2, stat, threads, cpu_clock, cost::one_thread_line(d));
        std::tie(meas[1], meas[0]) =
            measure_pair(g, true, g, false, 1.5 * seconds, stat, threads, cpu_clock, cost::one_thread_line(d));
        // The model's latency: the fastest of both measurements with --stat
        // min, the alternated runs' figure otherwise (the profiled runs pay
        // the profiler). The pair keeps the alternated runs' figures alone.
        m.latency_s = stat == "min" ? std::min(meas[1], m.latency_s) : meas[1];
        cost::GraphCost c = cost::graph_cost(g, d, {}, runtime_groups(g, true));
        pred[1] = c.time_s;
        for (size_t k = 0; k < c.groups.size(); ++k) {
          const std::string& node = g.node(c.groups[k][0]).name;
          auto it = m.kernel_s.find(node);
          if (it == m.kernel_s.end() || c.kernels[k].time_s == 0) continue;  // aliases: no kernel runs
          kernels.push_back({name, node, c.kernels[k].label, c.kernels[k].time_s, it->second, c.kernels[k].bound});
        }
        latency.push_back({name, {c.time_s, m.latency_s}});
        for (const auto& [node, ks] : m.kernel_s) kernel_sum[name] += ks;
        std::printf("%-18s predicted %9.3f ms  measured %9.3f ms  ratio %.2f\n", name.c_str(), c.time_s * 1e3,
                    m.latency_s * 1e3, c.time_s / m.latency_s);
        // Kernels the runtime ran that the model has no group for (layout
        // reorders, groups oneDNN rejected and the runtime split), and the
        // model's groups the runtime did not run as kernels.
        std::map<std::string, size_t> roots;
        for (size_t k = 0; k < c.groups.size(); ++k) roots[g.node(c.groups[k][0]).name] = k;
        double extra_s = 0;
        std::map<std::string, std::pair<int, double>> extra;
        for (const auto& [node, s] : m.kernel_s)
          if (!roots.count(node)) {
            extra_s += s;
            auto& e = extra[m.label[node]];
            ++e.first;
            e.second += s;
          }
        int missing = 0;
        for (const auto& [node, k] : roots) missing += c.kernels[k].time_s > 0 && !m.kernel_s.count(node);
        std::printf("  unmodelled runtime kernels: %.3f ms;", extra_s * 1e3);
        for (const auto& [op, e] : extra) std::printf(" %s x%d %.3f ms;", op.c_str(), e.first, e.second * 1e3);
        std::printf(" modelled groups not run: %d\n", missing);
        std::fflush(stdout);
      }
      pairs.push_back({name + ": unfused vs fused plan", pred[0], pred[1], meas[0], meas[1]});
      if (!explain.empty() && pairs.back().name.find(explain) != std::string::npos) {
        std::printf("%s:\n", pairs.back().name.c_str());
        explain_fusion(g, inputs, d, seconds, stat, threads, cpu_clock);
      }
    }
    for (bench::RewritePair& p : rewrites ? bench::rewrite_pairs() : std::vector<bench::RewritePair>{}) {
      PairRow row{p.name};
      row.pred_before = cost::graph_cost(p.before, d, {}, runtime_groups(p.before, true)).time_s;
      row.pred_after = cost::graph_cost(p.after, d, {}, runtime_groups(p.after, true)).time_s;
      std::tie(row.meas_before, row.meas_after) =
          measure_pair(p.before, true, p.after, true, seconds, stat, threads, cpu_clock, cost::one_thread_line(d));
      pairs.push_back(row);
      if (!explain.empty() && p.name.find(explain) != std::string::npos)
        for (const Graph* side : {&p.before, &p.after}) {
          std::printf("%s, %s:\n", p.name.c_str(), side == &p.before ? "before" : "after");
          explain_kernels(*side, d, seconds, stat, threads, cpu_clock);
        }
    }

    std::vector<double> pv, mv, err;
    for (const KernelRow& k : kernels) {
      pv.push_back(k.predicted);
      mv.push_back(k.measured);
      err.push_back(std::abs(std::log(k.predicted / k.measured)));
    }
    std::printf("\nkernels: %zu over %zu models\n", kernels.size(), dirs.size());
    std::printf("spearman rank correlation (predicted vs measured): %.3f\n", kernels.size() > 2 ? spearman(pv, mv) : NAN);
    std::printf("|ln(pred/meas)|: median %.3f (x%.2f), p90 %.3f (x%.2f)\n", quantile(err, 0.5),
                std::exp(quantile(err, 0.5)), quantile(err, 0.9), std::exp(quantile(err, 0.9)));
    int within = 0;
    for (const auto& [m, pm] : latency) within += std::abs(pm.first / pm.second - 1) <= 0.25;
    std::printf("models within 25%% of measured latency: %d of %zu\n", within, latency.size());
    int agree = 0, decided = 0;
    std::printf("\npairs (before -> after; predicted ms | measured ms):\n");
    for (const PairRow& p : pairs) {
      std::printf("  %-52s %8.3f -> %8.3f | %8.3f -> %8.3f  %s\n", p.name.c_str(), p.pred_before * 1e3,
                  p.pred_after * 1e3, p.meas_before * 1e3, p.meas_after * 1e3,
                  p.tie() ? "tie" : (p.agree() ? "agree" : "DISAGREE"));
      if (!p.tie()) {
        ++decided;
        agree += p.agree();
      }
    }
    std::printf("pairs ordered as measured: %d of %d (ties within 3%% excluded: %zu)\n", agree, decided,
                pairs.size() - static_cast<size_t>(decided));
    // The worst kernels, to show where the model is off.
    std::vector<size_t> idx(kernels.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return err[a] > err[b]; });
    std::printf("\nlargest errors:\n");
    for (size_t i = 0; i < std::min<size_t>(12, idx.size()); ++i) {
      const KernelRow& k = kernels[idx[i]];
      std::printf("  %-14s %-22s pred %9.1f us  meas %9.1f us  (%s) %s\n", k.model.c_str(), k.op.c_str(),
                  k.predicted * 1e6, k.measured * 1e6, k.bound.c_str(), k.node.c_str());
    }
    if (!json_out.empty()) {
      nlohmann::json j;
      for (const KernelRow& k : kernels)
        j["kernels"].push_back({{"model", k.model}, {"node", k.node}, {"op", k.op}, {"predicted_us", k.predicted * 1e6},
                                {"measured_us", k.measured * 1e6}, {"bound", k.bound}});
      for (const auto& [m, pm] : latency)
        j["models"][m] = {{"predicted_ms", pm.first * 1e3},
                          {"measured_ms", pm.second * 1e3},
                          {"kernel_sum_ms", kernel_sum[m] * 1e3}};
      j["pairs"] = {{"agree", agree}, {"decided", decided}, {"total", pairs.size()}};
      for (const PairRow& p : pairs)
        j["pair_rows"].push_back({{"name", p.name},
                                  {"predicted_ms", {p.pred_before * 1e3, p.pred_after * 1e3}},
                                  {"measured_ms", {p.meas_before * 1e3, p.meas_after * 1e3}}});
      std::ofstream(json_out) << j.dump(1) << "\n";
    }
  } catch (const Error& e) {
    std::cerr << "cost_validation: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
