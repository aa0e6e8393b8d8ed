// report.txt: what the optimizer did and why, for every plan. The mesh's
// sections (the sharding search's degree curve, the ranks, what each sends,
// the shardings) follow the rewrites when the plan has them.
#include <cstdio>
#include <map>
#include <sstream>

#include "mutator/sharding/propagate.h"
#include "report/report.h"
#include "report/report_svg.h"
#include "report/spatial_bands.h"

namespace tessera::report {

using namespace tessera::mutator;

namespace {

std::string megabytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

void applied_lines(std::ostringstream& os, const char* title, const SearchResult& s) {
  os << "\n" << title << " (" << s.applied.size() << "):\n";
  std::map<std::string, int> by_rule;
  for (const AppliedMutation& a : s.applied) {
    ++by_rule[a.rule];
    os << "  [" << a.rule << "] subprogram " << a.subprogram << ": " << a.description << " -- "
       << verification_status_name(a.verification.status) << " by " << a.verification.method << "\n";
  }
  if (by_rule.empty()) return;
  os << "by rule:\n";
  for (const auto& [rule, n] : by_rule) os << "  " << rule << ": " << n << "\n";
}

void search_line(std::ostringstream& os, const char* what, const SearchStats& s) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s: %d subprograms, %lld candidates generated, %lld verified, %lld rejected, "
                "%lld duplicates, %lld refused as cyclic, %lld applied, %lld partial, %.2f s%s\n",
                what, s.subprograms, (long long)s.generated, (long long)s.verified, (long long)s.rejected,
                (long long)s.duplicates, (long long)s.cyclic, (long long)s.applied, (long long)s.partial_used, s.seconds,
                s.budget_exhausted ? " (budget exhausted)" : "");
  os << buf;
}

void sharding_search_lines(std::ostringstream& os, const ShardSearchResult& r) {
  char buf[256];
  os << "\nsharding search: " << r.why << "\n";
  std::snprintf(buf, sizeof buf, "  %d weight roles over %lld weights, %lld plans evaluated in %.2f s%s\n", r.roles,
                (long long)r.weights_in_roles, (long long)r.evaluations, r.seconds,
                r.budget_exhausted ? " (budget ran out)" : "");
  os << buf;
  for (const std::string& w : r.rewrites) os << "  rewrite: " << w << "\n";
  os << "  degree curve (predicted per run, memory per device):\n";
  for (size_t k = 0; k < r.curve.size(); ++k) {
    const DegreePoint& d = r.curve[k];
    std::snprintf(buf, sizeof buf, "  %s %-10s %-32s %10.4g ms  (kernels %.4g + collectives %.4g)  %s%s%s\n",
                  k == r.chosen ? "*" : " ", d.mesh.num_devices() == 1 ? "1" : d.mesh.str().c_str(), d.graph.c_str(),
                  d.predicted_s * 1e3, d.compute_s * 1e3, d.comm_s * 1e3, megabytes(d.memory_bytes).c_str(),
                  d.fits ? "" : "  does not fit", d.fits && !d.priced_as_plan ? "  (search's estimate)" : "");
    os << buf;
  }
}

// Spatial splits (spatial_bands.h): per exchange, each rank's band of the
// tensor's rows and the halo rows it receives from each neighbour.
void spatial_lines(std::ostringstream& os, const Plan& p) {
  std::vector<SpatialExchange> ex = spatial_exchanges(p);
  if (ex.empty()) return;
  int64_t total = 0;
  for (const SpatialExchange& e : ex) total += e.total_bytes();
  os << "\nspatial splits: bands and halos (" << ex.size() << " HaloExchange, " << bytes_str(total)
     << " received by all ranks per run; rows [lo,hi) of the whole tensor):\n";
  for (const SpatialExchange& e : ex) {
    os << "  " << e.layer << " reads " << e.tensor << ": " << e.rows << " rows of dim " << e.dim << " in "
       << e.bands.size() << " bands over " << e.mesh_axis << ", " << bytes_str(e.total_bytes()) << "\n";
    for (const RankBand& b : e.bands) {
      os << "    rank " << b.coordinate << " rows " << str(b.band);
      if (!b.above.empty()) os << ", halo " << str(b.above) << " from rank " << b.coordinate - 1;
      if (!b.below.empty()) os << ", halo " << str(b.below) << " from rank " << b.coordinate + 1;
      os << ", receives " << bytes_str(b.bytes) << "\n";
    }
  }
}

void mesh_lines(std::ostringstream& os, const Plan& p) {
  char buf[256];
  os << "\nannotations and the search's pins (" << p.constraints.size() << " tensors):\n";
  std::map<std::string, int> per_spec;
  for (const ShardConstraint& c : p.constraints) ++per_spec[c.origin];
  for (const auto& [spec, n] : per_spec) os << "  " << spec << "  (" << n << " tensor" << (n == 1 ? "" : "s") << ")\n";
  int64_t total_weights = 0;
  for (ValueId v = 0; v < p.optimized.num_values(); ++v)
    if (p.optimized.value(v).constant) total_weights += p.optimized.type(v).nbytes();
  os << "\nper rank (every rank computes the same ops on its blocks; weights of " << megabytes(total_weights)
     << " in all):\n";
  for (const RankRecord& r : p.rank_records) {
    std::snprintf(buf, sizeof buf,
                  "  rank %lld %s: %lld ops, weights %s, peak activations %s, compute %.3g ms, collectives %.3g ms\n",
                  (long long)r.rank, rank_file(r.rank).c_str(), (long long)r.nodes, megabytes(r.weight_bytes).c_str(),
                  megabytes(r.peak_activation_bytes).c_str(), r.compute_s * 1e3, r.comm_s * 1e3);
    os << buf;
  }
  std::map<std::string, std::pair<int, int64_t>> sends;
  for (const CollectiveRecord& c : p.collectives) {
    auto& e = sends[c.kind + " over " + c.mesh_axis];
    ++e.first;
    e.second += c.bytes;
  }
  os << "\nwhat each rank sends (" << p.collectives.size() << " collectives):\n";
  for (const auto& [what, e] : sends) os << "  " << e.first << " x " << what << ", " << megabytes(e.second) << "\n";
  spatial_lines(os, p);
  applied_lines(os, "rewrites of the ranks' programs", p.rank_search);
  os << "\nshardings:\n" << describe(p.optimized, p.sharding);
}

}  // namespace

std::string report_text(const Plan& p, const Measurement* m) {
  std::ostringstream os;
  char buf[256];
  os << "Tessera optimization report (device " << p.device;
  if (p.is_mesh()) os << ", mesh " << p.mesh.str();
  os << ", seed " << p.seed << ")\n\n";
  const Graph& after = p.is_mesh() ? p.ranks[0] : p.optimized;
  os << "nodes: " << p.original.num_nodes() << " -> " << after.num_nodes() << (p.is_mesh() ? " (rank 0)" : "")
     << "\n";
  std::snprintf(buf, sizeof buf, "predicted time: %.4g ms -> %.4g ms (%.3fx)", p.cost_before_s * 1e3,
                p.cost_after_s * 1e3, speedup(p.cost_before_s, p.cost_after_s));
  os << buf;
  if (p.offered.num_devices() > 1) {
    std::snprintf(buf, sizeof buf, "; %.4g ms on one device, %.4g ms on %s", p.cost_single_s * 1e3,
                  p.cost_after_s * 1e3, p.is_mesh() ? p.mesh.str().c_str() : "one device (chosen)");
    os << buf;
  }
  os << "\n";
  if (m) {
    std::snprintf(buf, sizeof buf, "measured (%s, median of %d runs): %.3f ms -> %.3f ms (%.3fx)\n",
                  m->backend.c_str(), m->runs, m->before_ms, m->after_ms, speedup(m->before_ms, m->after_ms));
    os << buf;
  }
  os << "\ncanonicalization:\n";
  for (const PassRecord& r : p.canonical)
    if (r.times) os << "  " << r.pass << " (changed the graph in " << r.times << " round(s))\n";
  applied_lines(os, "search mutations applied", p.search);
  os << "\n";
  search_line(os, "search", p.search.stats);
  if (p.shard_searched) sharding_search_lines(os, p.sharding_search);
  if (p.is_mesh()) mesh_lines(os, p);
  os << "\nend-to-end check: " << p.check.summary() << "\n";
  std::snprintf(buf, sizeof buf, "time: %.2f s in all; the check took %.2f s (%.2f s set aside from the budget)\n",
                p.total_seconds, p.check_seconds, p.reserved_check_s);
  os << buf;
  return os.str();
}

}  // namespace tessera::report
