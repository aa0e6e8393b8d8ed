// tessera cost MODEL [--device cpu|a100|h100|h200|PROFILE.json] [--json] [--top N]
// tessera cost --calibrate [--threads N] [--output PROFILE.json]
// tessera cost --calibrate --device a100|h100|h200 --output PROFILE.json
//
// The first form prints the cost model's view of a model: per kernel (as the
// runtime fuses them) the predicted time, FLOPs, bytes per memory level and
// what bounds it, then the total and the top bottlenecks. The second runs
// microbenchmarks through the runtime's CPU kernels and writes the fitted
// host profile; the third fits a GPU profile through the CUDA backend
// (cost_calibration.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cost/device_profile.h"
#include "cost/graph_cost.h"
#include "graph/error.h"
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"
#include "tools/cli/cost_calibration.h"

namespace tessera::cli {

namespace {

struct CostFlags {
  std::string model;
  std::string device = "cpu";
  bool json = false;
  bool no_fuse = false;
  bool cold = false;
  int top = 10;
  std::vector<std::string> input_shapes;
  bool calibrate = false;
  std::string output;
  double calibrate_seconds = 60;
  int threads = 0;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string time_str(double s) {
  if (s >= 1) return fmt("%.3f s", s);
  if (s >= 1e-3) return fmt("%.3f ms", s * 1e3);
  return fmt("%.1f us", s * 1e6);
}

std::string kernel_name(const Graph& g, const std::vector<NodeId>& group) {
  const std::string& n = g.node(group[0]).name;
  return n.empty() ? "(unnamed)" : n;
}

// Time per bound kind: which resource the model spends its time on.
std::vector<std::pair<std::string, double>> by_bound(const cost::GraphCost& c) {
  std::map<std::string, double> m;
  for (const auto& k : c.kernels) m[k.bound] += k.time_s;
  std::vector<std::pair<std::string, double>> v(m.begin(), m.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return v;
}

std::vector<size_t> slowest(const cost::GraphCost& c, int top) {
  std::vector<size_t> idx(c.kernels.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return c.kernels[a].time_s > c.kernels[b].time_s; });
  idx.resize(std::min(idx.size(), static_cast<size_t>(std::max(top, 0))));
  return idx;
}

void print_text(const Graph& g, const cost::DeviceProfile& d, const cost::GraphCost& c, int top) {
  std::cout << "model: " << g.name << "\n";
  std::cout << "device: " << d.name << " (" << d.description << (d.calibrated ? ", calibrated" : "") << ")\n";
  std::printf("%-40s %-26s %11s %11s", "kernel", "op", "time", "FLOP");
  for (const auto& m : d.memory) std::printf(" %10s", (m.name + " B").c_str());
  std::printf("  %s\n", "bound");
  for (size_t i = 0; i < c.kernels.size(); ++i) {
    const auto& k = c.kernels[i];
    std::printf("%-40.40s %-26.26s %11s %11s", kernel_name(g, c.groups[i]).c_str(), k.label.c_str(),
                time_str(k.time_s).c_str(), human_count(static_cast<double>(k.total_flops()), "").c_str());
    for (double b : k.level_bytes) std::printf(" %10s", human_count(b, "").c_str());
    std::printf("  %s\n", k.bound.c_str());
  }
  if (!c.reorders.empty()) {
    double t = 0;
    for (const auto& k : c.reorders) t += k.time_s;
    std::cout << "layout reorders (blocked to row-major): " << c.reorders.size() << ", " << time_str(t) << "\n";
  }
  std::cout << "total: " << time_str(c.time_s) << ", " << c.kernels.size() << " kernels, "
            << human_count(static_cast<double>(c.flops), "FLOP");
  for (size_t i = 0; i < d.memory.size(); ++i)
    std::cout << ", " << d.memory[i].name << " " << human_count(c.level_bytes[i], "B");
  std::cout << "\n";
  std::cout << "time by bound:";
  for (const auto& [bound, t] : by_bound(c)) std::cout << " " << bound << " " << fmt("%.1f%%", 100 * t / c.time_s);
  std::cout << "\n";
  std::cout << "top bottlenecks:\n";
  for (size_t i : slowest(c, top)) {
    const auto& k = c.kernels[i];
    std::cout << "  " << fmt("%5.1f%%", 100 * k.time_s / c.time_s) << "  " << time_str(k.time_s) << "  " << k.label
              << " '" << kernel_name(g, c.groups[i]) << "' (" << k.bound << "-bound)\n";
  }
}

nlohmann::json to_json(const Graph& g, const cost::DeviceProfile& d, const cost::GraphCost& c, int top) {
  nlohmann::json kernels = nlohmann::json::array();
  for (size_t i = 0; i < c.kernels.size(); ++i) {
    const auto& k = c.kernels[i];
    nlohmann::json bytes = nlohmann::json::object(), level_us = nlohmann::json::object(), flops = nlohmann::json::object();
    for (size_t l = 0; l < d.memory.size(); ++l) {
      bytes[d.memory[l].name] = k.level_bytes[l];
      level_us[d.memory[l].name] = k.level_s[l] * 1e6;
    }
    for (const auto& [t, f] : k.flops) flops[dtype_name(t)] = f;
    nlohmann::json nodes = nlohmann::json::array();
    for (NodeId n : c.groups[i]) nodes.push_back(g.node(n).name);
    kernels.push_back({{"node", kernel_name(g, c.groups[i])},
                       {"nodes", nodes},
                       {"op", k.label},
                       {"time_us", k.time_s * 1e6},
                       {"compute_us", k.compute_s * 1e6},
                       {"memory_us", level_us},
                       {"comm_us", k.comm_s * 1e6},
                       {"launch_us", k.launch_s * 1e6},
                       {"flops", flops},
                       {"bytes", bytes},
                       {"bound", k.bound}});
  }
  nlohmann::json bound = nlohmann::json::object();
  for (const auto& [b, t] : by_bound(c)) bound[b] = t * 1e6;
  nlohmann::json top_kernels = nlohmann::json::array();
  for (size_t i : slowest(c, top)) top_kernels.push_back(i);
  nlohmann::json level_bytes = nlohmann::json::object();
  for (size_t l = 0; l < d.memory.size(); ++l) level_bytes[d.memory[l].name] = c.level_bytes[l];
  return {{"model", g.name},
          {"device", {{"name", d.name}, {"description", d.description}, {"calibrated", d.calibrated}}},
          {"kernels", kernels},
          {"reorders", [&] {
             nlohmann::json r = {{"count", c.reorders.size()}, {"time_us", 0.0}};
             for (const auto& k : c.reorders) r["time_us"] = r["time_us"].get<double>() + k.time_s * 1e6;
             return r;
           }()},
          {"total_us", c.time_s * 1e6},
          {"flops", c.flops},
          {"bytes", level_bytes},
          {"time_by_bound_us", bound},
          {"top", top_kernels}};
}

}  // namespace

Action add_cost_command(CLI::App& app) {
  auto flags = std::make_shared<CostFlags>();
  CLI::App* cmd = app.add_subcommand("cost", "Predict a model's run time per kernel with the cost model");
  cmd->add_option("model", flags->model, "ONNX model file");
  cmd->add_option("--device", flags->device,
                  "cpu (this machine, calibrated profile if present), a100, h100, h200, or a profile .json; "
                  "with --calibrate: the GPU profile to fit through the CUDA backend")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print JSON instead of text");
  cmd->add_option("--top", flags->top, "Bottlenecks to list")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-fuse", flags->no_fuse, "Cost every node as its own kernel (no post-op fusion)");
  cmd->add_flag("--cold", flags->cold, "Every kernel reads its operands from main memory");
  cmd->add_option("--input-shape", flags->input_shapes, "Fix an input's shape: NAME=1x3x224x224 (repeatable)");
  cmd->add_flag("--calibrate", flags->calibrate, "Measure this CPU through the runtime and write its profile");
  cmd->add_option("--output", flags->output, "With --calibrate: profile file to write (default: the host cache)");
  cmd->add_option("--seconds", flags->calibrate_seconds, "With --calibrate: time budget")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", flags->threads, "With --calibrate: runtime threads (default: one per core)")
      ->check(CLI::NonNegativeNumber);
  return [flags] {
    if (flags->calibrate) {
      if (!flags->model.empty()) TESSERA_THROW(ErrorKind::kUsage, "--calibrate takes no model");
      bool gpu = flags->device != "cpu";
      if (gpu && flags->output.empty()) TESSERA_THROW(ErrorKind::kUsage, "--calibrate --device GPU needs --output");
      std::string path = flags->output.empty() ? cost::host_profile_cache_path() : flags->output;
      cost::DeviceProfile p = gpu ? calibrate_gpu(flags->device, flags->calibrate_seconds, std::cerr)
                                  : calibrate_host(flags->calibrate_seconds, flags->threads, std::cerr);
      cost::save_profile(p, path);
      std::cerr << "wrote " << path << "\n";
      return 0;
    }
    if (flags->model.empty()) TESSERA_THROW(ErrorKind::kUsage, "cost needs a MODEL (or --calibrate)");
    if (!flags->output.empty()) TESSERA_THROW(ErrorKind::kUsage, "--output goes with --calibrate");
    cost::DeviceProfile device = cost::resolve_device(flags->device);
    Graph g = api::load(flags->model, load_options(flags->input_shapes));
    cost::CostOptions options;
    options.warm_cache = !flags->cold;
    cost::GraphCost c = cost::graph_cost(g, device, options, !flags->no_fuse);
    if (flags->json) std::cout << to_json(g, device, c, flags->top).dump(2) << "\n";
    else print_text(g, device, c, flags->top);
    return 0;
  };
}

}  // namespace tessera::cli
