// api::cost: the cost model's view of a model, per kernel as the runtime
// fuses them, as the table and the JSON that `tessera cost` prints.
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "calibrate/prepare_device.h"
#include "cost/device_profile.h"
#include "cost/graph_cost.h"
#include "tools/api/run_detail.h"
#include "tools/api/tessera.h"

namespace tessera::api {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// printf into a string (the table's columns).
void appendf(std::string& out, const char* f, ...) {
  char buf[512];
  va_list args;
  va_start(args, f);
  std::vsnprintf(buf, sizeof(buf), f, args);
  va_end(args);
  out += buf;
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

std::string cost_text(const Graph& g, const cost::DeviceProfile& d, const cost::GraphCost& c, int top) {
  using detail::human_count;
  std::ostringstream os;
  os << "model: " << g.name << "\n";
  os << "device: " << d.name << " (" << d.description << (d.calibrated ? ", calibrated" : "") << ")\n";
  std::string table;
  appendf(table, "%-40s %-26s %11s %11s", "kernel", "op", "time", "FLOP");
  for (const auto& m : d.memory) appendf(table, " %10s", (m.name + " B").c_str());
  appendf(table, "  %s\n", "bound");
  for (size_t i = 0; i < c.kernels.size(); ++i) {
    const auto& k = c.kernels[i];
    appendf(table, "%-40.40s %-26.26s %11s %11s", kernel_name(g, c.groups[i]).c_str(), k.label.c_str(),
            time_str(k.time_s).c_str(), human_count(static_cast<double>(k.total_flops()), "").c_str());
    for (double b : k.level_bytes) appendf(table, " %10s", human_count(b, "").c_str());
    appendf(table, "  %s\n", k.bound.c_str());
  }
  os << table;
  if (!c.reorders.empty()) {
    double t = 0;
    for (const auto& k : c.reorders) t += k.time_s;
    os << "layout reorders (blocked to row-major): " << c.reorders.size() << ", " << time_str(t) << "\n";
  }
  os << "total: " << time_str(c.time_s) << ", " << c.kernels.size() << " kernels, "
     << human_count(static_cast<double>(c.flops), "FLOP");
  for (size_t i = 0; i < d.memory.size(); ++i) os << ", " << d.memory[i].name << " " << human_count(c.level_bytes[i], "B");
  os << "\n";
  os << "time by bound:";
  for (const auto& [bound, t] : by_bound(c)) os << " " << bound << " " << fmt("%.1f%%", 100 * t / c.time_s);
  os << "\n";
  os << "top bottlenecks:\n";
  for (size_t i : slowest(c, top)) {
    const auto& k = c.kernels[i];
    os << "  " << fmt("%5.1f%%", 100 * k.time_s / c.time_s) << "  " << time_str(k.time_s) << "  " << k.label << " '"
       << kernel_name(g, c.groups[i]) << "' (" << k.bound << "-bound)\n";
  }
  return os.str();
}

nlohmann::json cost_json(const Graph& g, const cost::DeviceProfile& d, const cost::GraphCost& c, int top) {
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
  nlohmann::json reorders = {{"count", c.reorders.size()}, {"time_us", 0.0}};
  for (const auto& k : c.reorders) reorders["time_us"] = reorders["time_us"].get<double>() + k.time_s * 1e6;
  return {{"model", g.name},
          {"device", {{"name", d.name}, {"description", d.description}, {"calibrated", d.calibrated}}},
          {"kernels", kernels},
          {"reorders", reorders},
          {"total_us", c.time_s * 1e6},
          {"flops", c.flops},
          {"bytes", level_bytes},
          {"time_by_bound_us", bound},
          {"top", top_kernels}};
}

}  // namespace

CostReport cost(const Graph& g, const CostConfig& config) {
  calibrate::PrepareOptions prepare;
  prepare.cache_dir = config.profile_cache;
  prepare.calibrate = config.calibrate;
  prepare.threads = config.threads;
  prepare.log = &std::cerr;
  cost::DeviceProfile device = calibrate::prepare_device(config.device, prepare);
  cost::CostOptions options;
  options.warm_cache = !config.cold;
  cost::GraphCost c = cost::graph_cost(g, device, options, config.fuse);
  CostReport r;
  r.device = device.name;
  r.time_s = c.time_s;
  r.flops = c.flops;
  r.kernels = static_cast<int64_t>(c.kernels.size());
  r.text = cost_text(g, device, c, config.top);
  r.json = cost_json(g, device, c, config.top).dump(2);
  return r;
}

}  // namespace tessera::api
