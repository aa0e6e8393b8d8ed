// plan.json, report.json and report.txt: what the optimizer did and why.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "graph/hash.h"
#include "mutator/optimize.h"
#include "mutator/rules/rule.h"

namespace tessera::mutator {

namespace {

using nlohmann::json;

std::map<std::string, int64_t> op_counts(const Graph& g) {
  std::map<std::string, int64_t> c;
  for (NodeId n = 0; n < g.num_nodes(); ++n) ++c[op_name(g.node(n).kind)];
  return c;
}

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
  for (const AppliedMutation& m : p.search.applied)
    out.push_back({{"stage", "search"},
                   {"rule", m.rule},
                   {"subprogram", m.subprogram},
                   {"description", m.description},
                   {"partial", m.partial},
                   {"verification",
                    {{"status", verification_status_name(m.verification.status)},
                     {"method", m.verification.method},
                     {"bound", m.verification.error_bound}}}});
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
  return {{"passed", c.passed}, {"trials", c.trials}, {"given", c.given}, {"integer_inputs", c.integer_inputs}, {"rtol", c.rtol}, {"atol", c.atol}, {"scale_rtol", c.scale_rtol},
          {"max_abs_error", c.max_abs_error}};
}

double speedup(double before, double after) { return after > 0 ? before / after : 1.0; }

}  // namespace

std::map<std::string, double> kernel_class_times(const Graph& g, const cost::GraphCost& cost) {
  std::map<std::string, double> out;
  for (size_t k = 0; k < cost.groups.size(); ++k)
    if (!cost.groups[k].empty()) out[op_name(g.node(cost.groups[k][0]).kind)] += cost.kernels[k].time_s;
  for (const cost::KernelCost& r : cost.reorders) out["layout copies"] += r.time_s;
  return out;
}

std::string plan_json(const Plan& p, bool timing) {
  json shapes = json::object();
  for (const auto& [name, shape] : p.input_shapes) shapes[name] = shape;
  json j = {{"format_version", Plan::kFormatVersion},
            {"tessera_version", kTesseraVersion},
            {"device", p.device},
            {"seed", p.seed},
            {"input_shapes", shapes},
            {"mutations", mutations_json(p)},
            {"predicted_cost",
             {{"before_s", p.cost_before_s}, {"after_s", p.cost_after_s},
              {"speedup", speedup(p.cost_before_s, p.cost_after_s)}}},
            {"search", stats_json(p.search.stats, timing)},
            {"end_to_end_check", check_json(p.check)},
            {"model", "model.onnx"}};
  if (timing) {
    j["total_seconds"] = p.total_seconds;
    j["check_seconds"] = {{"reserved", p.reserved_check_s}, {"took", p.check_seconds}};
  }
  return j.dump(2) + "\n";
}

std::string report_json(const Plan& p, const Measurement* m) {
  json j = json::parse(plan_json(p, true));
  // The search kept nothing and canonicalization changed nothing.
  j["unchanged"] = structurally_equal(p.original, p.optimized);
  j["ops_before"] = op_counts(p.original);
  j["ops_after"] = op_counts(p.optimized);
  j["nodes_before"] = p.original.num_nodes();
  j["nodes_after"] = p.optimized.num_nodes();
  j["predicted_by_kernel_class"] = {{"before_s", p.classes_before_s}, {"after_s", p.classes_after_s}};
  if (m)
    j["measured"] = {{"backend", m->backend}, {"runs", m->runs}, {"before_ms", m->before_ms},
                     {"after_ms", m->after_ms}, {"speedup", speedup(m->before_ms, m->after_ms)}};
  return j.dump(2) + "\n";
}

std::string report_text(const Plan& p, const Measurement* m) {
  std::ostringstream os;
  char buf[256];
  os << "Tessera optimization report (device " << p.device << ", seed " << p.seed << ")\n\n";
  os << "nodes: " << p.original.num_nodes() << " -> " << p.optimized.num_nodes() << "\n";
  std::snprintf(buf, sizeof buf, "predicted time: %.4g ms -> %.4g ms (%.3fx)\n", p.cost_before_s * 1e3,
                p.cost_after_s * 1e3, speedup(p.cost_before_s, p.cost_after_s));
  os << buf;
  if (m) {
    std::snprintf(buf, sizeof buf, "measured (%s, median of %d runs): %.3f ms -> %.3f ms (%.3fx)\n",
                  m->backend.c_str(), m->runs, m->before_ms, m->after_ms, speedup(m->before_ms, m->after_ms));
    os << buf;
  }
  os << "\ncanonicalization:\n";
  for (const PassRecord& r : p.canonical)
    if (r.times) os << "  " << r.pass << " (changed the graph in " << r.times << " round(s))\n";
  os << "\nsearch mutations applied (" << p.search.applied.size() << "):\n";
  std::map<std::string, int> by_rule;
  for (const AppliedMutation& a : p.search.applied) {
    ++by_rule[a.rule];
    os << "  [" << a.rule << "] subprogram " << a.subprogram << ": " << a.description << " -- "
       << verification_status_name(a.verification.status) << " by " << a.verification.method << "\n";
  }
  os << "\nby rule:\n";
  for (const auto& [rule, n] : by_rule) os << "  " << rule << ": " << n << "\n";
  const SearchStats& s = p.search.stats;
  std::snprintf(buf, sizeof buf,
                "\nsearch: %d subprograms, %lld candidates generated, %lld verified, %lld rejected, "
                "%lld duplicates, %lld refused as cyclic, %lld applied, %lld partial, %.2f s%s\n",
                s.subprograms, (long long)s.generated, (long long)s.verified, (long long)s.rejected,
                (long long)s.duplicates, (long long)s.cyclic, (long long)s.applied, (long long)s.partial_used, s.seconds,
                s.budget_exhausted ? " (budget exhausted)" : "");
  os << buf;
  os << "end-to-end check: " << p.check.summary() << "\n";
  std::snprintf(buf, sizeof buf, "time: %.2f s in all; the check took %.2f s (%.2f s set aside from the budget)\n",
                p.total_seconds, p.check_seconds, p.reserved_check_s);
  os << buf;
  return os.str();
}

std::string rules_listing() {
  std::ostringstream os;
  os << "canonicalization passes (always on):\n";
  for (const auto& [name, identity] : canonical_pass_list()) os << "  " << name << "  " << identity << "\n";
  os << "rules (--disable-rule NAME):\n";
  for (const Rule& r : all_rules())
    os << "  " << r.name << "  " << r.identity << "  " << check_text(r)
       << (r.mesh_only ? "  (sharding search only)" : "") << "\n";
  return os.str();
}

}  // namespace tessera::mutator
