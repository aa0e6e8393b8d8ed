#include "mutator/sharding/sharded_plan.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cost/collective_model.h"
#include "cost/device_profile.h"
#include "cost/graph_cost.h"
#include "cost/plan_cost.h"
#include "graph/error.h"
#include "mutator/optimize.h"
#include "mutator/sharding/annotations.h"

namespace tessera::mutator {
namespace {

using nlohmann::json;

int64_t weight_bytes(const Graph& g) {
  int64_t b = 0;
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).constant) b += g.type(v).nbytes();
  return b;
}

// Bytes of the non-constant values alive at the worst step when the program
// runs in its topological order (outputs of a step and the values it reads
// are both live while it runs).
int64_t peak_activation_bytes(const Graph& g) {
  std::vector<NodeId> order = g.topo_order();
  std::vector<int64_t> last(static_cast<size_t>(g.num_values()), -1);
  for (size_t k = 0; k < order.size(); ++k)
    for (ValueId v : g.node(order[k]).inputs)
      if (v != kNoValue) last[static_cast<size_t>(v)] = static_cast<int64_t>(k);
  for (ValueId v : g.outputs()) last[static_cast<size_t>(v)] = static_cast<int64_t>(order.size());
  int64_t live = 0, peak = 0;
  for (ValueId v : g.inputs()) live += g.type(v).nbytes();
  for (size_t k = 0; k < order.size(); ++k) {
    const Node& n = g.node(order[k]);
    for (ValueId v : n.outputs) live += g.type(v).nbytes();
    peak = std::max(peak, live);
    for (ValueId v : n.inputs)
      if (v != kNoValue && !g.value(v).constant && last[static_cast<size_t>(v)] == static_cast<int64_t>(k))
        live -= g.type(v).nbytes();
    for (ValueId v : n.outputs)
      if (last[static_cast<size_t>(v)] < 0) live -= g.type(v).nbytes();
  }
  return peak;
}

json sharding_json(const ShardedPlan& p) {
  // Values as their readers see them; a constant as its first reader reads it.
  json values = json::object();
  const Graph& g = p.global;
  std::vector<std::vector<NodeId>> users = g.users();
  for (ValueId v = 0; v < g.num_values(); ++v) {
    Sharding s = p.sharding.values[static_cast<size_t>(v)];
    if (g.value(v).constant && !users[static_cast<size_t>(v)].empty()) {
      const Node& u = g.node(users[static_cast<size_t>(v)][0]);
      for (size_t i = 0; i < u.inputs.size(); ++i)
        if (u.inputs[i] == v) s = p.sharding.nodes[static_cast<size_t>(users[static_cast<size_t>(v)][0])].inputs[i];
    }
    values[g.value(v).name] = s.str();
  }
  json nodes = json::object();
  for (NodeId n = 0; n < g.num_nodes(); ++n) nodes[g.node(n).name] = p.sharding.nodes[static_cast<size_t>(n)].str();
  return {{"tensors", values}, {"nodes", nodes}};
}

json ranks_json(const ShardedPlan& p) {
  json out = json::array();
  for (const RankRecord& r : p.rank_records)
    out.push_back({{"rank", r.rank},
                   {"coords", r.coords},
                   {"file", rank_file(r.rank)},
                   {"nodes", r.nodes},
                   {"weight_bytes", r.weight_bytes},
                   {"peak_activation_bytes", r.peak_activation_bytes},
                   {"predicted_compute_s", r.compute_s},
                   {"predicted_comm_s", r.comm_s}});
  return out;
}

json search_json(const ShardedPlan& p) {
  const ShardSearchResult& r = p.search;
  json curve = json::array();
  for (size_t k = 0; k < r.curve.size(); ++k) {
    const DegreePoint& d = r.curve[k];
    curve.push_back({{"mesh", d.mesh.str()}, {"devices", d.mesh.num_devices()}, {"graph", d.graph},
                     {"predicted_s", d.predicted_s}, {"compute_s", d.compute_s}, {"comm_s", d.comm_s},
                     {"memory_bytes", d.memory_bytes}, {"fits", d.fits}, {"moves", d.moves},
                     {"priced", d.priced_as_plan ? "plan" : "estimate"}, {"search_estimate_s", d.search_s},
                     {"chosen", k == r.chosen}});
  }
  return {{"offered_mesh", r.offered.str()},
          {"chosen_mesh", r.mesh.str()},
          {"why", r.why},
          {"rewrites", r.rewrites},
          {"device_memory_bytes", r.device_memory},
          {"weight_roles", r.roles},
          {"weights_in_roles", r.weights_in_roles},
          {"evaluations", r.evaluations},
          {"seconds", r.seconds},
          {"budget_exhausted", r.budget_exhausted},
          {"degree_curve", curve}};
}

json collectives_json(const ShardedPlan& p) {
  json out = json::array();
  for (const CollectiveRecord& c : p.collectives)
    out.push_back({{"name", c.name}, {"kind", c.kind}, {"mesh_axis", c.mesh_axis}, {"bytes", c.bytes},
                   {"predicted_s", c.predicted_s}});
  return out;
}

std::string mb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

}  // namespace

std::string rank_file(int64_t rank) { return "rank" + std::to_string(rank) + ".onnx"; }

ShardedPlan shard(const Graph& g, const ShardOptions& options) {
  if (options.mesh.num_devices() < 2)
    TESSERA_THROW(ErrorKind::kUsage, "a sharded plan needs a mesh of two or more devices, got " << options.mesh.str());
  cost::DeviceProfile device = cost::resolve_device(options.device);
  ShardedPlan p;
  p.original = g;
  p.device = device.name;
  p.seed = options.seed;
  p.global = g;
  p.canonical = canonicalize(p.global);
  p.constraints = resolve_annotations(p.global, options.mesh, options.specs);
  DeviceMesh mesh = options.mesh;
  if (options.search) {
    ShardSearchOptions so;
    so.mesh = options.mesh;
    so.constraints = p.constraints;
    so.specs = options.specs;
    so.rewrite = options.rewrite;
    so.device_memory = options.device_memory;
    so.budget_s = options.budget_s;
    so.threads = options.threads;
    p.search = search_shardings(p.global, device, so);
    p.searched = true;
    p.global = p.search.graph;
    p.constraints = p.search.constraints;
    mesh = p.search.mesh;
  }
  p.sharding = propagate(p.global, mesh, p.constraints, device);
  p.ranks = partition(p.global, p.sharding);

  verifier::ShardedProgram sp;
  sp.mesh = mesh;
  sp.per_rank = p.ranks.ranks;
  sp.input_shardings.assign(g.inputs().size(), Sharding::replicated(mesh));
  sp.output_shardings.assign(g.outputs().size(), Sharding::replicated(mesh));
  verifier::EndToEndOptions check;
  check.seed = options.seed ^ 0x5eed;
  check.trials = options.check_trials;
  check.given_inputs = options.check_inputs;
  p.check = verifier::check_end_to_end(verifier::Program(g), verifier::Program(sp), check);
  if (!p.check.passed)
    TESSERA_THROW(ErrorKind::kInternal, "the ranks' programs do not compute the model (" << p.check.summary()
                                                                                         << "); no plan is written");

  cost::GraphCost single = cost::graph_cost(p.global, device);
  p.single_s = single.time_s;
  p.classes_single_s = kernel_class_times(p.global, single);
  // Each rank on its share of the host where ranks share one (CPUs).
  const cost::DeviceProfile rank_device = cost::rank_share(device, cost::ranks_per_node(device, mesh.num_devices()));
  cost::PlanCost pc = cost::plan_cost(cost::rank_programs(p.ranks.ranks, mesh, rank_device));
  p.mesh_s = pc.time_s;
  for (int64_t r = 0; r < mesh.num_devices(); ++r) {
    const Graph& rg = p.ranks.ranks[static_cast<size_t>(r)];
    p.rank_records.push_back({r, mesh.coords(r), rg.num_nodes(), weight_bytes(rg), peak_activation_bytes(rg),
                              pc.compute_s[static_cast<size_t>(r)], pc.comm_s[static_cast<size_t>(r)]});
  }
  const Graph& r0 = p.ranks.ranks[0];
  cost::CostOptions on_mesh;
  on_mesh.mesh = &mesh;
  p.classes_rank0_s = kernel_class_times(r0, cost::graph_cost(r0, rank_device, on_mesh));
  for (NodeId n : r0.topo_order()) {
    const Node& node = r0.node(n);
    if (!op_def(node.kind).is_collective()) continue;
    p.collectives.push_back({node.name, op_name(node.kind), node.attrs.s("mesh_axis"), r0.type(node.inputs[0]).nbytes(),
                             cost::collective_node_cost(r0, node, rank_device, &mesh).time_s});
  }
  return p;
}

std::string sharded_plan_json(const ShardedPlan& p) {
  json shapes = json::object();
  for (ValueId v : p.original.inputs()) shapes[p.original.value(v).name] = p.original.type(v).shape;
  json annotations = json::array();
  for (const ShardConstraint& c : p.constraints)
    annotations.push_back({{"spec", c.origin}, {"tensor", p.global.value(c.value).name}, {"sharding", c.sharding.str()}});
  json j = {{"format_version", ShardedPlan::kFormatVersion},
            {"tessera_version", kTesseraVersion},
            {"device", p.device},
            {"mesh", p.sharding.mesh.str()},
            {"seed", p.seed},
            {"input_shapes", shapes},
            {"annotations", annotations},
            {"sharding", sharding_json(p)},
            {"collectives", collectives_json(p)},
            {"search", p.searched ? search_json(p) : json(nullptr)},
            {"ranks", ranks_json(p)},
            {"predicted_cost", {{"single_device_s", p.single_s}, {"mesh_s", p.mesh_s},
                                {"speedup", p.mesh_s > 0 ? p.single_s / p.mesh_s : 1.0}}},
            {"end_to_end_check",
             {{"passed", p.check.passed}, {"trials", p.check.trials}, {"given", p.check.given},
              {"integer_inputs", p.check.integer_inputs}, {"rtol", p.check.rtol},
              {"atol", p.check.atol}, {"scale_rtol", p.check.scale_rtol}, {"max_abs_error", p.check.max_abs_error}}}};
  return j.dump(2) + "\n";
}

std::string sharded_report_json(const ShardedPlan& p) {
  json j = json::parse(sharded_plan_json(p));
  std::map<std::string, int64_t> kinds;
  for (const CollectiveRecord& c : p.collectives) kinds[c.kind] += 1;
  j["collective_counts"] = kinds;
  j["predicted_by_kernel_class"] = {{"single_device_s", p.classes_single_s}, {"rank0_s", p.classes_rank0_s}};
  j["propagation"] = {{"sweeps", p.sharding.sweeps}, {"reshard_s", p.sharding.reshard_seconds}};
  return j.dump(2) + "\n";
}

std::string sharded_report_text(const ShardedPlan& p) {
  std::ostringstream os;
  char buf[256];
  os << "Tessera sharded plan (device " << p.device << ", mesh " << p.sharding.mesh.str() << ", seed " << p.seed
     << ")\n\n";
  if (p.searched) {
    const ShardSearchResult& r = p.search;
    os << "sharding search: " << r.why << "\n";
    std::snprintf(buf, sizeof buf, "  %d weight roles over %lld weights, %lld plans evaluated in %.2f s%s\n", r.roles,
                  (long long)r.weights_in_roles, (long long)r.evaluations, r.seconds,
                  r.budget_exhausted ? " (budget ran out)" : "");
    os << buf;
    for (const std::string& w : r.rewrites) os << "  rewrite: " << w << "\n";
    os << "  degree curve (predicted per run, memory per device):\n";
    for (size_t k = 0; k < r.curve.size(); ++k) {
      const DegreePoint& d = r.curve[k];
      std::snprintf(buf, sizeof buf, "  %s %-10s %-32s %10.4g ms  (kernels %.4g + collectives %.4g)  %s%s%s\n",
                    k == r.chosen ? "*" : " ", d.mesh.str().c_str(), d.graph.c_str(), d.predicted_s * 1e3,
                    d.compute_s * 1e3, d.comm_s * 1e3, mb(d.memory_bytes).c_str(), d.fits ? "" : "  does not fit",
                    d.fits && !d.priced_as_plan ? "  (search's estimate)" : "");
      os << buf;
    }
    os << "\n";
  }
  os << "annotations and the search's pins (" << p.constraints.size() << " tensors):\n";
  std::map<std::string, int> per_spec;
  for (const ShardConstraint& c : p.constraints) ++per_spec[c.origin];
  for (const auto& [spec, n] : per_spec) os << "  " << spec << "  (" << n << " tensor" << (n == 1 ? "" : "s") << ")\n";
  std::snprintf(buf, sizeof buf, "\npredicted time: %.4g ms on one device -> %.4g ms on the mesh (%.2fx)\n",
                p.single_s * 1e3, p.mesh_s * 1e3, p.mesh_s > 0 ? p.single_s / p.mesh_s : 1.0);
  os << buf;
  int64_t total_weights = 0;
  for (ValueId v = 0; v < p.global.num_values(); ++v)
    if (p.global.value(v).constant) total_weights += p.global.type(v).nbytes();
  os << "\nper rank (every rank computes the same ops on its blocks; weights of " << mb(total_weights)
     << " in all):\n";
  for (const RankRecord& r : p.rank_records) {
    std::snprintf(buf, sizeof buf, "  rank %lld %s: %lld ops, weights %s, peak activations %s, compute %.3g ms, "
                  "collectives %.3g ms\n",
                  (long long)r.rank, rank_file(r.rank).c_str(), (long long)r.nodes, mb(r.weight_bytes).c_str(),
                  mb(r.peak_activation_bytes).c_str(), r.compute_s * 1e3, r.comm_s * 1e3);
    os << buf;
  }
  std::map<std::string, std::pair<int, int64_t>> sends;
  for (const CollectiveRecord& c : p.collectives) {
    auto& e = sends[c.kind + " over " + c.mesh_axis];
    ++e.first;
    e.second += c.bytes;
  }
  os << "\nwhat each rank sends (" << p.collectives.size() << " collectives):\n";
  for (const auto& [what, e] : sends) os << "  " << e.first << " x " << what << ", " << mb(e.second) << "\n";
  os << "\nshardings:\n" << describe(p.global, p.sharding);
  os << "\nend-to-end check: " << p.check.summary() << "\n";
  return os.str();
}

}  // namespace tessera::mutator
