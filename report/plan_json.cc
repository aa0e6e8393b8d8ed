// plan.json and report.json: one writer for every plan. A plan on one
// device names its model.onnx; a plan on a mesh adds the mesh, the
// sharding of every tensor, the collectives and the ranks. Both list the
// mutations, the searches and the end-to-end check.
#include <map>
#include <nlohmann/json.hpp>

#include "graph/hash.h"
#include "mutator/rules/rule.h"
#include "report/report.h"
#include "report/spatial_bands.h"
#include "report/report_svg.h"

namespace tessera::report {

using namespace tessera::mutator;

namespace {

using nlohmann::json;

std::map<std::string, int64_t> op_counts(const Graph& g) {
  std::map<std::string, int64_t> c;
  for (NodeId n = 0; n < g.num_nodes(); ++n) ++c[op_name(g.node(n).kind)];
  return c;
}

json applied_json(const AppliedMutation& m, const char* stage) {
  return {{"stage", stage},
          {"rule", m.rule},
          {"subprogram", m.subprogram},
          {"description", m.description},
          {"partial", m.partial},
          {"verification",
           {{"status", verification_status_name(m.verification.status)},
            {"method", m.verification.method},
            {"bound", m.verification.error_bound}}}};
}

// In the order they were made: canonicalization, the rewrite search on the
// whole graph, the sharding search's rewrites, the rewrite search on the
// ranks' programs.
json mutations_json(const Plan& p) {
  json out = json::array();
  for (const PassRecord& r : p.canonical) {
    if (r.times == 0) continue;
    out.push_back({{"stage", "canonicalize"},
                   {"rule", r.pass},
                   {"times", r.times},
                   {"verification",
                    {{"status", "checked-end-to-end"},
                     {"method", r.obligation.empty() ? "end-to-end" : "end-to-end+z3:" + r.obligation}}}});
  }
  for (const AppliedMutation& m : p.search.applied) out.push_back(applied_json(m, "search"));
  if (p.is_mesh())
    for (const std::string& w : p.sharding_search.rewrites)
      out.push_back({{"stage", "shard-search"},
                     {"description", w},
                     {"verification", {{"status", "checked-end-to-end"}, {"method", "end-to-end"}}}});
  for (const AppliedMutation& m : p.rank_search.applied) out.push_back(applied_json(m, "rank-search"));
  return out;
}

json stats_json(const SearchStats& s, bool timing) {
  json j = {{"subprograms", s.subprograms}, {"generated", s.generated}, {"verified", s.verified},
            {"rejected", s.rejected},       {"duplicates", s.duplicates}, {"cyclic", s.cyclic},
            {"skipped_slow", s.skipped_slow}, {"expansions", s.expansions},
            {"applied", s.applied},         {"partial_used", s.partial_used}};
  if (timing) {
    j["seconds"] = s.seconds;
    j["budget_exhausted"] = s.budget_exhausted;
  }
  return j;
}

json check_json(const verifier::EndToEndReport& c) {
  return {{"passed", c.passed}, {"trials", c.trials}, {"given", c.given}, {"integer_inputs", c.integer_inputs},
          {"rtol", c.rtol}, {"atol", c.atol}, {"scale_rtol", c.scale_rtol}, {"max_abs_error", c.max_abs_error}};
}

json sharding_search_json(const ShardSearchResult& r, bool timing) {
  json curve = json::array();
  for (size_t k = 0; k < r.curve.size(); ++k) {
    const DegreePoint& d = r.curve[k];
    curve.push_back({{"mesh", d.mesh.str()}, {"devices", d.mesh.num_devices()}, {"graph", d.graph},
                     {"predicted_s", d.predicted_s}, {"compute_s", d.compute_s}, {"comm_s", d.comm_s},
                     {"memory_bytes", d.memory_bytes}, {"fits", d.fits}, {"moves", d.moves},
                     {"priced", d.priced_as_plan ? "plan" : "estimate"}, {"search_estimate_s", d.search_s},
                     {"chosen", k == r.chosen}});
  }
  json j = {{"offered_mesh", r.offered.str()},
            {"chosen_mesh", r.mesh.num_devices() == 1 ? "1" : r.mesh.str()},
            {"why", r.why},
            {"rewrites", r.rewrites},
            {"device_memory_bytes", r.device_memory},
            {"weight_roles", r.roles},
            {"weights_in_roles", r.weights_in_roles},
            {"evaluations", r.evaluations},
            {"degree_curve", curve}};
  if (timing) {
    j["seconds"] = r.seconds;
    j["budget_exhausted"] = r.budget_exhausted;
  }
  return j;
}

// Values as their readers see them; a constant as its first reader reads it.
json sharding_json(const Plan& p) {
  json values = json::object();
  const Graph& g = p.optimized;
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
  // The plan's boundary: how each graph input and output crosses it (a
  // rank file's input or output is its block of a sharded one).
  auto boundary = [&](const std::vector<ValueId>& edge, const std::vector<Sharding>& shardings) {
    json b = json::object();
    for (size_t k = 0; k < edge.size(); ++k)
      b[g.value(edge[k]).name] = (k < shardings.size() ? shardings[k] : Sharding::replicated(p.mesh)).str();
    return b;
  };
  return {{"tensors", values},
          {"nodes", nodes},
          {"inputs", boundary(g.inputs(), p.sharding.inputs)},
          {"outputs", boundary(g.outputs(), p.sharding.outputs)}};
}

void add_mesh(json& j, const Plan& p) {
  json annotations = json::array();
  for (const ShardConstraint& c : p.constraints)
    annotations.push_back({{"spec", c.origin}, {"tensor", p.optimized.value(c.value).name}, {"sharding", c.sharding.str()}});
  json collectives = json::array();
  for (const CollectiveRecord& c : p.collectives)
    collectives.push_back({{"name", c.name}, {"kind", c.kind}, {"mesh_axis", c.mesh_axis}, {"bytes", c.bytes},
                           {"predicted_s", c.predicted_s}});
  json ranks = json::array();
  for (const RankRecord& r : p.rank_records)
    ranks.push_back({{"rank", r.rank},
                     {"coords", r.coords},
                     {"file", rank_file(r.rank)},
                     {"nodes", r.nodes},
                     {"weight_bytes", r.weight_bytes},
                     {"peak_activation_bytes", r.peak_activation_bytes},
                     {"predicted_compute_s", r.compute_s},
                     {"predicted_comm_s", r.comm_s}});
  j["mesh"] = p.mesh.str();
  j["annotations"] = annotations;
  j["sharding"] = sharding_json(p);
  j["collectives"] = collectives;
  j["ranks"] = ranks;
  j["rank_search"] = stats_json(p.rank_search.stats, false);
}

}  // namespace

std::string plan_json(const Plan& p, bool timing) {
  json shapes = json::object();
  for (const auto& [name, shape] : p.input_shapes) shapes[name] = shape;
  json values = json::object();
  for (const auto& [name, value] : p.input_values) values[name] = value;
  json carry = json::array();
  for (const CarryPair& c : p.carry) carry.push_back({{"output", c.output}, {"input", c.input}});
  json j = {{"format_version", Plan::kFormatVersion},
            {"tessera_version", kTesseraVersion},
            {"device", p.device},
            {"seed", p.seed},
            {"input_shapes", shapes},
            {"input_values", values},
            {"carry", carry},
            {"mutations", mutations_json(p)},
            {"predicted_cost",
             {{"before_s", p.cost_before_s},
              {"single_device_s", p.cost_single_s},
              {"after_s", p.cost_after_s},
              {"speedup", speedup(p.cost_before_s, p.cost_after_s)}}},
            {"search", stats_json(p.search.stats, timing)},
            {"sharding_search", p.shard_searched ? sharding_search_json(p.sharding_search, timing) : json(nullptr)},
            {"end_to_end_check", check_json(p.check)}};
  if (p.is_mesh())
    add_mesh(j, p);
  else
    j["model"] = "model.onnx";
  if (timing) {
    j["total_seconds"] = p.total_seconds;
    j["check_seconds"] = {{"reserved", p.reserved_check_s}, {"took", p.check_seconds}};
  }
  return j.dump(2) + "\n";
}

std::string report_json(const Plan& p, const Measurement* m) {
  json j = json::parse(plan_json(p, true));
  const Graph& after = p.is_mesh() ? p.ranks[0] : p.optimized;
  // The search kept nothing and canonicalization changed nothing.
  j["unchanged"] = !p.is_mesh() && structurally_equal(p.original, p.optimized);
  j["ops_before"] = op_counts(p.original);
  j["ops_after"] = op_counts(after);
  j["nodes_before"] = p.original.num_nodes();
  j["nodes_after"] = after.num_nodes();
  j["predicted_by_kernel_class"] = {{"before_s", p.classes_before_s}, {"after_s", p.classes_after_s}};
  if (p.is_mesh()) {
    std::map<std::string, int64_t> kinds;
    for (const CollectiveRecord& c : p.collectives) kinds[c.kind] += 1;
    j["collective_counts"] = kinds;
    j["propagation"] = {{"sweeps", p.sharding.sweeps}, {"reshard_s", p.sharding.reshard_seconds}};
    // Spatial splits (spatial_bands.h): rows as [lo, hi) of the whole tensor.
    json spatial = json::array();
    auto rows = [](const RowRange& r) { return json::array({r.lo, r.hi}); };
    for (const SpatialExchange& e : spatial_exchanges(p)) {
      json bands = json::array();
      for (const RankBand& b : e.bands)
        bands.push_back({{"coordinate", b.coordinate}, {"band", rows(b.band)}, {"halo_above", rows(b.above)},
                         {"halo_below", rows(b.below)}, {"bytes", b.bytes}});
      spatial.push_back({{"exchange", e.name}, {"tensor", e.tensor}, {"layer", e.layer}, {"mesh_axis", e.mesh_axis},
                         {"dim", e.dim}, {"rows", e.rows}, {"bytes", e.total_bytes()}, {"bands", bands}});
    }
    j["spatial_splits"] = spatial;
  }
  if (m)
    j["measured"] = {{"backend", m->backend}, {"runs", m->runs}, {"before_ms", m->before_ms},
                     {"after_ms", m->after_ms}, {"speedup", speedup(m->before_ms, m->after_ms)}};
  return j.dump(2) + "\n";
}

}  // namespace tessera::report
