// report.html: the report a person reads, one self-contained file (inline
// SVG and CSS, no script, nothing fetched), for every plan. It shows the
// picture of the plan (plan_picture.h: the changed subprograms highlighted
// and labelled with their mutations; on a mesh the ranks side by side with
// the collectives between them), the predicted time per kernel class
// before and after, the sharding search's degree curve where it ran, the
// mutation table with each mutation's verification and bound, and the
// end-to-end check with its tolerance. Made from the same plan data as
// plan.json and report.txt.
#include "report/report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "report/plan_picture.h"
#include "report/report_svg.h"
#include "report/spatial_bands.h"
#include "graph/attr_views.h"

namespace tessera::report {

using namespace tessera::mutator;

namespace {

constexpr const char* kStyle = R"(
body { font-family: sans-serif; font-size: 14px; margin: 20px; color: #1d2733; max-width: 1400px; }
h1 { font-size: 22px; margin: 0 0 6px; } h2 { font-size: 17px; margin: 26px 0 8px; border-bottom: 1px solid #d5dce4; }
.summary { font-size: 14px; line-height: 1.6; } .summary b { font-size: 16px; }
table { border-collapse: collapse; font-size: 12px; margin: 4px 0; }
th, td { border: 1px solid #d5dce4; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #eef2f7; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.proven { color: #13795b; font-weight: bold; } .tested { color: #1f5fae; font-weight: bold; }
.checked-end-to-end { color: #13795b; } .passed { color: #13795b; font-weight: bold; }
.failed { color: #b3261e; font-weight: bold; } .note { color: #5b6775; font-size: 12px; }
.legend span { display: inline-block; padding: 1px 8px; margin-right: 10px; border-radius: 3px; font-size: 12px; }
svg text { font-family: sans-serif; font-size: 10px; fill: #1d2733; }
svg .op rect { fill: #eef2f7; stroke: #8a9bb0; stroke-width: 0.8; }
svg .op.changed rect { fill: #fde2c4; stroke: #e8710a; stroke-width: 1.2; }
svg .op.collective rect { fill: #e9d8fd; stroke: #7b3fc4; stroke-width: 1.2; }
svg .collective-bar { fill: #c9a8f5; }
svg .collective-arrow { stroke: #7b3fc4; stroke-width: 2; marker-start: url(#arrow); marker-end: url(#arrow); }
svg .mutation-label { fill: #b35300; font-weight: bold; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
svg .repeat { fill: #f6f8fb; stroke: #5b8bd0; stroke-width: 1.2; stroke-dasharray: 5 3; }
svg .repeat-title { fill: #2f5fa6; font-weight: bold; paint-order: stroke; stroke: #f6f8fb; stroke-width: 3px; } svg .lane-title { font-weight: bold; font-size: 11px; }
svg .edge { stroke: #8a9bb0; stroke-width: 1; fill: none; } svg .edge.skip { stroke: #a8b6c6; stroke-width: 0.8; }
svg .series0 { fill: #9aa8b8; } svg .series1 { fill: #2f7bd8; }
svg .bar-value, svg .axis-label { fill: #5b6775; } svg .axis, svg .curve { stroke: #1d2733; fill: none; }
svg .grid { stroke: #e3e8ee; } svg .curve { stroke: #2f7bd8; stroke-width: 2; }
svg .point circle { fill: #2f7bd8; } svg .point.chosen circle { fill: #e8710a; } svg .point.no-fit circle { fill: #b3261e; }
svg .point-label { fill: #1d2733; font-weight: bold; } svg .axis-title { fill: #5b6775; font-size: 11px; }
)";

std::string page_start(const std::string& title) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + xml_escape(title) +
         "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n<h1>" + xml_escape(title) + "</h1>\n";
}

std::string td(const std::string& s, const std::string& cls = "") {
  return "<td" + (cls.empty() ? "" : " class=\"" + cls + "\"") + ">" + xml_escape(s) + "</td>";
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Kernel classes by the larger of their two times, the smallest merged into
// "other" so that the chart stays short.
std::vector<BarGroup> class_groups(const std::map<std::string, double>& a, const std::map<std::string, double>& b) {
  std::set<std::string> names;
  for (const auto& [n, s] : a) names.insert(n);
  for (const auto& [n, s] : b) names.insert(n);
  std::vector<BarGroup> groups;
  for (const std::string& n : names)
    groups.push_back({n, {a.count(n) ? a.at(n) : 0.0, b.count(n) ? b.at(n) : 0.0}});
  std::sort(groups.begin(), groups.end(), [](const BarGroup& x, const BarGroup& y) {
    double mx = std::max(x.values[0], x.values[1]), my = std::max(y.values[0], y.values[1]);
    return mx != my ? mx > my : x.label < y.label;
  });
  constexpr size_t kShown = 14;
  if (groups.size() > kShown + 1) {
    BarGroup other{std::to_string(groups.size() - kShown) + " other classes", {0, 0}};
    for (size_t i = kShown; i < groups.size(); ++i)
      for (int k = 0; k < 2; ++k) other.values[static_cast<size_t>(k)] += groups[i].values[static_cast<size_t>(k)];
    groups.resize(kShown);
    groups.push_back(other);
  }
  return groups;
}

std::string check_section(const verifier::EndToEndReport& c) {
  std::ostringstream os;
  os << "<h2>End-to-end check</h2>\n";
  if (c.trials == 0) {
    // The plan is the model itself (optimize.cc): nothing ran.
    os << "<p><span class=\"passed\">passed</span>: " << xml_escape(c.detail) << ".</p>\n";
    return os.str();
  }
  os << "<p>The reference interpreter ran the original model and the plan on " << c.trials
     << " seeded random input set" << (c.trials == 1 ? "" : "s")
     << " and compared every output: an element passes when |plan - original| &le; atol + rtol &middot; |original| "
        "+ scale_rtol &middot; (the output's largest magnitude).</p>\n<table>\n<tr><th>result</th><th>trials</th>"
        "<th>atol</th><th>rtol</th><th>scale_rtol</th><th>max abs error</th><th>positions beyond</th></tr>\n<tr>"
     << td(c.passed ? "passed" : "FAILED", c.passed ? "passed" : "failed") << td(std::to_string(c.trials), "num")
     << td(fmt("%.3g", c.atol), "num") << td(fmt("%.3g", c.rtol), "num") << td(fmt("%.3g", c.scale_rtol), "num")
     << td(fmt("%.3g", c.max_abs_error), "num") << td(std::to_string(c.mismatches), "num") << "</tr>\n</table>\n";
  if (!c.detail.empty()) os << "<p class=\"note\">" << xml_escape(c.detail) << "</p>\n";
  return os.str();
}

// The picture's mark for each rewritten subprogram: the table number of its
// first mutation and its rules.
std::map<int, PictureInput::Mark> subprogram_marks(const Plan& p, int first_number) {
  std::map<int, PictureInput::Mark> marks;
  for (size_t i = 0; i < p.search.applied.size(); ++i) {
    const AppliedMutation& a = p.search.applied[i];
    auto [it, fresh] = marks.try_emplace(a.subprogram, PictureInput::Mark{first_number + static_cast<int>(i), a.rule});
    if (!fresh && (", " + it->second.rules + ", ").find(", " + a.rule + ", ") == std::string::npos)
      it->second.rules += ", " + a.rule;
  }
  return marks;
}

std::string applied_row(int n, const char* stage, const AppliedMutation& a) {
  std::ostringstream os;
  std::string status = verification_status_name(a.verification.status);
  os << "<tr id=\"m" << n << "\">" << td(std::to_string(n), "num") << td(stage) << td(a.rule)
     << td(std::to_string(a.subprogram), "num") << td(a.description + (a.partial ? " (partial, corrected)" : ""))
     << td(status, status) << td(a.verification.method)
     << td(a.verification.status == Verification::kProven ? "proof" : fmt("%.3g", a.verification.error_bound), "num")
     << "</tr>\n";
  return os.str();
}

std::string mutation_table(const Plan& p) {
  std::ostringstream os;
  os << "<h2>Mutations</h2>\n<table>\n<tr><th>#</th><th>stage</th><th>rule</th><th>subprogram</th><th>what</th>"
        "<th>verification</th><th>method</th><th>bound</th></tr>\n";
  int n = 0;
  for (const PassRecord& r : p.canonical) {
    if (r.times == 0) continue;
    os << "<tr>" << td(std::to_string(++n), "num") << td("canonicalize") << td(r.pass) << td("whole graph")
       << td("changed the graph in " + std::to_string(r.times) + " round(s)")
       << td("checked-end-to-end", "checked-end-to-end")
       << td(r.obligation.empty() ? "end-to-end" : "end-to-end + z3:" + r.obligation) << td("") << "</tr>\n";
  }
  for (const AppliedMutation& a : p.search.applied) os << applied_row(++n, "search", a);
  if (p.is_mesh()) {
    for (const std::string& w : p.sharding_search.rewrites)
      os << "<tr>" << td(std::to_string(++n), "num") << td("sharding search") << td("") << td("whole graph") << td(w)
         << td("checked-end-to-end", "checked-end-to-end") << td("end-to-end") << td("") << "</tr>\n";
    os << "<tr>" << td(std::to_string(++n), "num") << td("partition") << td("SPMD lowering") << td("whole graph")
       << td(std::to_string(p.ranks.size()) + " rank programs, " + std::to_string(p.collectives.size()) +
             " collectives each")
       << td("checked-end-to-end", "checked-end-to-end") << td("end-to-end") << td("") << "</tr>\n";
    for (const AppliedMutation& a : p.rank_search.applied) os << applied_row(++n, "rank programs", a);
  }
  if (n == 0) os << "<tr><td colspan=\"8\">none: the plan is the original graph</td></tr>\n";
  os << "</table>\n<p class=\"note\">bound: the probability that a tested mutation is wrong although the "
        "multilinear test passed (Schwartz&ndash;Zippel over Z_p); a proven one has none.</p>\n";
  return os.str();
}

std::string legend(bool mesh) {
  std::string s = "<p class=\"legend\">";
  if (!mesh)
    s += "<span style=\"background:#fde2c4;border:1px solid #e8710a\">op written by a mutation</span>";
  else
    s += "<span style=\"background:#e9d8fd;border:1px solid #7b3fc4\">collective between the ranks</span>";
  s += "<span style=\"background:#eef2f7;border:1px solid #8a9bb0\">op</span>"
       "<span style=\"border:1px dashed #5b8bd0\">repeated block, drawn once</span></p>\n"
       "<p class=\"note\">Ops in topological order, top to bottom, column by column; a line joins an op to an "
       "earlier one in the same column that it reads. Hover an op for its name, inputs and outputs.</p>\n";
  return s;
}

// Canonicalization rewrites the whole graph before the search: said once
// above the picture, since its changes are not one subprogram's.
std::string canonical_note(const std::vector<PassRecord>& passes) {
  std::string names;
  for (const PassRecord& r : passes)
    if (r.times > 0) names += (names.empty() ? "" : ", ") + r.pass;
  if (names.empty()) return "";
  return "<p class=\"note\">Before the search, canonicalization rewrote the whole graph (" + xml_escape(names) +
         "); the ops highlighted below are the ones the search's mutations wrote.</p>\n";
}

const char* kArrowDefs =
    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"0\" height=\"0\" style=\"position:absolute\"><defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" "
    "refX=\"5\" refY=\"5\" markerWidth=\"5\" markerHeight=\"5\" orient=\"auto-start-reverse\"><path d=\"M0 0 L10 5 "
    "L0 10 z\" fill=\"#7b3fc4\"/></marker></defs></svg>\n";


std::string degree_curve_section(const ShardSearchResult& r) {
  // One point per degree: the chosen plan at its degree, elsewhere the
  // fastest that fits (or the fastest); the table lists every variant.
  std::map<int64_t, CurvePoint> best;
  for (size_t k = 0; k < r.curve.size(); ++k) {
    const DegreePoint& d = r.curve[k];
    CurvePoint pt{d.mesh.num_devices() == 1 ? "1" : d.mesh.str(), static_cast<double>(d.mesh.num_devices()),
                  d.predicted_s, k == r.chosen, d.fits};
    auto [it, fresh] = best.try_emplace(d.mesh.num_devices(), pt);
    const CurvePoint& have = it->second;
    bool better = pt.chosen || (!have.chosen && (pt.fits > have.fits || (pt.fits == have.fits && pt.seconds < have.seconds)));
    if (!fresh && better) it->second = pt;
  }
  std::vector<CurvePoint> pts;
  for (const auto& [devices, pt] : best) pts.push_back(pt);
  std::ostringstream os;
  os << "<h2>Degree curve</h2>\n<p>" << xml_escape(r.why) << "</p>\n<p class=\"note\">Predicted time of the best plan "
        "the search found for each number of devices (plan.json: sharding_search.degree_curve); one device is the "
        "single-device plan; the table lists every graph it tried.</p>\n"
     << degree_curve_svg(pts) << "<table>\n<tr><th>mesh</th><th>graph</th><th>predicted</th><th>kernels</th>"
     << "<th>collectives</th><th>memory per device</th><th></th></tr>\n";
  for (size_t k = 0; k < r.curve.size(); ++k) {
    const DegreePoint& d = r.curve[k];
    os << "<tr>" << td(d.mesh.num_devices() == 1 ? "1" : d.mesh.str()) << td(d.graph) << td(time_str(d.predicted_s), "num")
       << td(time_str(d.compute_s), "num") << td(time_str(d.comm_s), "num") << td(bytes_str(d.memory_bytes), "num")
       << td(std::string(k == r.chosen ? "chosen" : "") + (d.fits ? "" : " does not fit")) << "</tr>\n";
  }
  os << "</table>\n";
  return os.str();
}

std::string mesh_tables(const Plan& p) {
  std::ostringstream os;
  os << "<h2>Collectives (rank 0, in program order)</h2>\n<table>\n<tr><th>#</th><th>name</th><th>kind</th>"
        "<th>mesh axis</th><th>bytes</th><th>predicted</th></tr>\n";
  for (size_t i = 0; i < p.collectives.size(); ++i) {
    const CollectiveRecord& c = p.collectives[i];
    os << "<tr>" << td(std::to_string(i + 1), "num") << td(c.name) << td(c.kind) << td(c.mesh_axis)
       << td(bytes_str(c.bytes), "num") << td(time_str(c.predicted_s), "num") << "</tr>\n";
  }
  if (p.collectives.empty()) os << "<tr><td colspan=\"6\">none</td></tr>\n";
  os << "</table>\n<h2>Ranks</h2>\n<table>\n<tr><th>rank</th><th>file</th><th>ops</th><th>weights</th>"
        "<th>peak activations</th><th>kernels</th><th>collectives</th></tr>\n";
  for (const RankRecord& r : p.rank_records)
    os << "<tr>" << td(std::to_string(r.rank), "num") << td(rank_file(r.rank)) << td(std::to_string(r.nodes), "num")
       << td(bytes_str(r.weight_bytes), "num") << td(bytes_str(r.peak_activation_bytes), "num")
       << td(time_str(r.compute_s), "num") << td(time_str(r.comm_s), "num") << "</tr>\n";
  os << "</table>\n";
  return os.str();
}

// Spatial splits (spatial_bands.h): per HaloExchange, the exchanged
// tensor's rows as a bar with each rank's band and the halo rows it
// receives, and a table of the same numbers.
std::string spatial_section(const Plan& p) {
  std::vector<SpatialExchange> ex = spatial_exchanges(p);
  if (ex.empty()) return "";
  int64_t total = 0;
  for (const SpatialExchange& e : ex) total += e.total_bytes();
  std::ostringstream os;
  os << "<h2>Spatial splits: bands and halos</h2>\n<p class=\"note\">Each rank computes a band of rows of the "
        "image (the plan's sharding of each tensor: uneven bands give the first ranks one row more); before a "
        "windowed layer it receives the halo, the rows its windows reach in its neighbours' bands (hatched, drawn "
        "where those rows lie: over the neighbour's band, at least 3 px however few). "
     << ex.size() << " exchange" << (ex.size() == 1 ? "" : "s") << ", " << bytes_str(total)
     << " received by all ranks per run.</p>\n"
     << spatial_defs_svg() << "<div style=\"display:flex;flex-wrap:wrap;gap:6px 18px\">\n";
  for (const SpatialExchange& e : ex)
    os << "<figure style=\"margin:0\"><figcaption class=\"note\">" << xml_escape(e.layer) << " reads <b>"
       << xml_escape(e.tensor) << "</b>: " << e.rows << " rows of dim " << e.dim << " in " << e.bands.size()
       << " bands over " << xml_escape(e.mesh_axis) << ", " << bytes_str(e.total_bytes()) << "</figcaption>"
       << spatial_exchange_svg(e) << "</figure>\n";
  os << "</div>\n<table>\n<tr><th>layer</th><th>tensor</th><th>dim</th><th>rows</th><th>rank</th><th>band</th>"
        "<th>halo from above</th><th>halo from below</th><th>bytes received</th></tr>\n";
  for (const SpatialExchange& e : ex) {
    for (const RankBand& b : e.bands) {
      std::string lead = b.coordinate == 0 ? td(e.layer) + td(e.tensor) + td(std::to_string(e.dim), "num") +
                                                 td(std::to_string(e.rows), "num")
                                           : "<td colspan=\"4\"></td>";
      os << "<tr>" << lead << td(std::to_string(b.coordinate), "num") << td(str(b.band))
         << td(b.above.empty() ? "" : str(b.above)) << td(b.below.empty() ? "" : str(b.below))
         << td(bytes_str(b.bytes), "num") << "</tr>\n";
    }
  }
  os << "</table>\n";
  return os.str();
}

}  // namespace

std::string report_html(const Plan& p, const Measurement* m) {
  std::ostringstream os;
  const Graph& after = p.is_mesh() ? p.ranks[0] : p.optimized;
  os << page_start(p.is_mesh() ? "Tessera mesh plan: " + p.original.name + " on " + p.mesh.str()
                               : "Tessera plan: " + p.optimized.name);
  double speed = p.cost_after_s > 0 ? p.cost_before_s / p.cost_after_s : 1.0;
  os << "<p class=\"summary\">device <b>" << xml_escape(p.device) << "</b>";
  if (p.is_mesh()) os << ", mesh <b>" << xml_escape(p.mesh.str()) << "</b>";
  if (p.offered.num_devices() > 1) os << " (offered " << xml_escape(p.offered.str()) << ")";
  os << ", seed " << p.seed << "<br>predicted <b>" << time_str(p.cost_before_s) << " &rarr; "
     << time_str(p.cost_after_s) << "</b> (" << fmt("%.3f", speed) << "x)";
  if (p.offered.num_devices() > 1) os << "; the single-device plan " << time_str(p.cost_single_s);
  os << "; ops " << p.original.num_nodes() << " &rarr; " << after.num_nodes() << (p.is_mesh() ? " per rank" : "")
     << "; " << p.search.applied.size() << " search mutation" << (p.search.applied.size() == 1 ? "" : "s") << " in "
     << p.search.stats.subprograms << " subprograms";
  if (p.is_mesh()) os << "; " << p.collectives.size() << " collectives per rank";
  if (m)
    os << "<br>measured (" << xml_escape(m->backend) << ", median of " << m->runs << " runs): " << fmt("%.3f", m->before_ms)
       << " ms &rarr; " << fmt("%.3f", m->after_ms) << " ms";
  if (p.shard_searched) os << "<br>" << xml_escape(p.sharding_search.why);
  os << "<br>end-to-end check: <span class=\"" << (p.check.passed ? "passed" : "failed") << "\">"
     << (p.check.passed ? "passed" : "FAILED") << "</span></p>\n";

  PictureInput pic;
  if (p.is_mesh()) {
    for (size_t r = 0; r < p.ranks.size(); ++r) {
      pic.lanes.push_back(&p.ranks[r]);
      pic.lane_titles.push_back("rank " + std::to_string(r) + " (" + rank_file(static_cast<int64_t>(r)) + ")");
    }
    os << "<h2>The plan: one program per rank</h2>\n" << kArrowDefs << legend(true) << plan_svg(pic);
  } else {
    int canonical_rows = 0;
    for (const PassRecord& r : p.canonical) canonical_rows += r.times > 0;
    pic.lanes = {&p.optimized};
    pic.lane_titles = {"plan"};
    pic.subprograms = subprogram_marks(p, canonical_rows + 1);
    os << "<h2>The plan</h2>\n" << legend(false) << canonical_note(p.canonical) << plan_svg(pic);
  }

  os << "<h2>Predicted time by kernel class</h2>\n<p class=\"note\">The cost model's time of each kernel (an op with "
        "the element-wise ops fused into it) on "
     << xml_escape(p.device) << ", summed by the kernel's first op"
     << (p.is_mesh() ? ": the original on one device, and rank 0's program with its collectives (the mesh's time, " +
                           time_str(p.cost_after_s) + ", is the ranks' critical path)"
                     : "")
     << ".</p>\n"
     << bar_chart_svg(class_groups(p.classes_before_s, p.classes_after_s),
                      {"original model", p.is_mesh() ? "rank 0 on the mesh" : "plan"});
  if (p.shard_searched && !p.sharding_search.curve.empty()) os << degree_curve_section(p.sharding_search);
  if (p.is_mesh()) os << mesh_tables(p) << spatial_section(p);
  os << mutation_table(p) << check_section(p.check) << "</body>\n</html>\n";
  return os.str();
}

}  // namespace tessera::report
