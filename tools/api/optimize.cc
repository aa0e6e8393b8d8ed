// api::optimize: runs the mutator and measures on the CPU runtime, in memory
// (a Plan); Plan::save writes the plan folder atomically.
#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>

#include "cost/device_profile.h"
#include "cost/graph_cost.h"
#include "graph/error.h"
#include "mutator/optimize.h"
#include "mutator/plan_files.h"
#include "mutator/report_html.h"
#include "mutator/rules/rule.h"
#include "mutator/sharding/annotations.h"
#include "mutator/sharding/sharded_plan.h"
#include "onnx_import/onnx_export.h"
#include "tools/api/interrupt.h"
#include "tools/api/tessera.h"

namespace tessera::api {

namespace fs = std::filesystem;

namespace {

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) TESSERA_THROW(ErrorKind::kIo, "cannot write " << path.string());
}

// Moves the finished temporary folder into place. A folder already there is
// replaced only when it is a previous plan folder.
void publish(const fs::path& tmp, const fs::path& dest) {
  std::error_code ec;
  fs::path old;
  if (fs::exists(dest)) {
    old = dest.string() + ".old-" + std::to_string(::getpid());
    fs::rename(dest, old, ec);
    if (ec) TESSERA_THROW(ErrorKind::kIo, "cannot replace " << dest.string() << ": " << ec.message());
  }
  fs::rename(tmp, dest, ec);
  if (ec) {
    if (!old.empty()) fs::rename(old, dest);
    TESSERA_THROW(ErrorKind::kIo, "cannot write " << dest.string() << ": " << ec.message());
  }
  if (!old.empty()) fs::remove_all(old, ec);
}

}  // namespace

bool is_plan_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "plan.json", ec) &&
         (fs::exists(fs::path(path) / "model.onnx", ec) || fs::exists(fs::path(path) / mutator::rank_file(0), ec));
}

bool is_sharded_plan_folder(const std::string& path) {
  std::error_code ec;
  return is_plan_folder(path) && fs::exists(fs::path(path) / mutator::rank_file(0), ec);
}

namespace {

// Writes the files `write` makes into a temporary folder next to dest, then
// moves it into place; nothing is left half-written on failure.
void write_folder(const fs::path& dest, const std::function<void(const fs::path&)>& write) {
  HoldInterrupts hold;  // an interrupt now waits until the folder is whole, or removed
  std::error_code ec;
  fs::path tmp = dest.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) TESSERA_THROW(ErrorKind::kIo, "cannot create " << tmp.string() << ": " << ec.message());
  try {
    write(tmp);
    publish(tmp, dest);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

std::vector<Mutation> canonical_mutations(const std::vector<mutator::PassRecord>& passes) {
  std::vector<Mutation> out;
  for (const mutator::PassRecord& r : passes)
    if (r.times > 0) out.push_back({"canonicalize", r.pass, "", r.times, -1, false, "checked-end-to-end"});
  return out;
}

Plan optimize_sharded(const Graph& g, const OptimizeConfig& config, const DeviceMesh& mesh) {
  mutator::ShardOptions o;
  o.device = config.device;
  o.mesh = mesh;
  o.seed = config.seed;
  o.specs = config.shards;
  o.search = config.shard_search;
  o.device_memory = config.device_memory;
  o.rewrite = config.shard_rewrite;
  o.budget_s = std::max(1.0, config.budget_s - config.spent_s);
  o.threads = config.threads;
  o.check_inputs = config.check_inputs;
  if (!config.shard_file.empty())
    for (std::string& s : mutator::read_shard_file(config.shard_file)) o.specs.push_back(std::move(s));
  mutator::ShardedPlan plan = mutator::shard(g, o);
  Plan p;
  p.mesh = plan.sharding.mesh.str();
  p.plan_json = mutator::sharded_plan_json(plan);
  p.report_json = mutator::sharded_report_json(plan);
  p.report_text = mutator::sharded_report_text(plan);
  p.report_html = mutator::sharded_report_html(plan);
  p.mutations = canonical_mutations(plan.canonical);
  if (plan.searched)
    for (const std::string& r : plan.search.rewrites)
      p.mutations.push_back({"shard-search", "", r, 1, -1, false, "checked-end-to-end"});
  OptimizeSummary& s = p.summary;
  s.nodes_before = g.num_nodes();
  s.nodes_after = plan.ranks.ranks[0].num_nodes();
  s.predicted_before_s = plan.single_s;
  s.predicted_after_s = plan.mesh_s;
  s.report_text = p.report_text;
  s.files.push_back("plan.json");
  for (size_t r = 0; r < plan.ranks.ranks.size(); ++r) s.files.push_back(mutator::rank_file(static_cast<int64_t>(r)));
  p.original = g;
  p.ranks = std::move(plan.ranks.ranks);
  return p;
}

// What save() accepts as a destination: a new path, an empty folder or a
// previous plan folder.
fs::path destination(const std::string& out_dir) {
  if (out_dir.empty()) TESSERA_THROW(ErrorKind::kUsage, "an output folder is required (-o OUT_DIR)");
  fs::path dest = fs::absolute(out_dir).lexically_normal();
  std::error_code ec;
  if (fs::exists(dest, ec) && !is_plan_folder(dest.string()) && !(fs::is_directory(dest) && fs::is_empty(dest)))
    TESSERA_THROW(ErrorKind::kUsage, "output folder " << out_dir
                                         << " exists and is not a Tessera plan folder; choose another or remove it");
  return dest;
}

}  // namespace

std::string list_rules() { return mutator::rules_listing(); }

std::vector<RuleInfo> rules() {
  std::vector<RuleInfo> out;
  for (const auto& [name, identity] : mutator::canonical_pass_list()) out.push_back({name, "canonical", identity, "", false});
  for (const mutator::Rule& r : mutator::all_rules())
    out.push_back({r.name, "rule", r.identity, mutator::check_text(r), r.mesh_only});
  return out;
}

std::vector<std::string> Plan::files() const {
  std::vector<std::string> f;
  if (is_mesh())
    for (size_t r = 0; r < ranks.size(); ++r) f.push_back(mutator::rank_file(static_cast<int64_t>(r)));
  else
    f.push_back("model.onnx");
  f.insert(f.end(), {"plan.json", "report.json", "report.txt", "report.html"});
  return f;
}

void Plan::save(const std::string& dir) const {
  fs::path dest = destination(dir);
  write_folder(dest, [&](const fs::path& tmp) {
    std::vector<std::string> programs;
    if (is_mesh()) {
      for (size_t r = 0; r < ranks.size(); ++r) {
        programs.push_back(mutator::rank_file(static_cast<int64_t>(r)));
        export_onnx(ranks[r], (tmp / programs.back()).string());
      }
    } else {
      programs.push_back("model.onnx");
      export_onnx(model, (tmp / programs.back()).string());
    }
    // plan.json records each program file's size and digest as written.
    write_text(tmp / "plan.json", mutator::with_plan_files(plan_json, mutator::describe_plan_files(tmp.string(), programs)));
    write_text(tmp / "report.json", report_json);
    write_text(tmp / "report.txt", report_text);
    write_text(tmp / "report.html", report_html);
  });
}

Plan optimize(const Graph& g, const OptimizeConfig& config) {
  if (!(config.budget_s > 0)) TESSERA_THROW(ErrorKind::kUsage, "--budget must be > 0 seconds, got " << config.budget_s);
  DeviceMesh mesh = DeviceMesh::parse(config.mesh);
  if (mesh.num_devices() > 1) return optimize_sharded(g, config, mesh);
  if (!config.shards.empty() || !config.shard_file.empty())
    TESSERA_THROW(ErrorKind::kUsage, "--shard and --shard-file need a mesh of two or more devices (--mesh tp=2)");
  mutator::OptimizeOptions options;
  options.device = config.device;
  options.budget_s = config.budget_s;
  options.seed = config.seed;
  options.threads = config.threads;
  options.partial = config.partial;
  options.disabled_rules = config.disabled_rules;
  options.progress = config.progress;
  options.check_inputs = config.check_inputs;
  bool measured = config.measure && config.measure_runs > 0;
  int runs = config.measure_runs;
  if (measured && config.device == "cpu") {
    // A fast model gets more runs (up to 100, about 0.2 s of them), or its
    // median is mostly the machine's noise. The measurement below runs both
    // graphs (compile, warm-up, the runs): its predicted time is set aside
    // from the budget, with a 1.5x margin over the CPU cost model and half a
    // second for compiling.
    double one = cost::graph_cost(g, cost::resolve_device("cpu")).time_s;
    if (one > 0) runs = std::max(runs, static_cast<int>(std::min(100.0, 0.2 / one)));
    options.reserve_s = 0.5 + 1.5 * 2.0 * (runs + 1) * one;
  }
  // What was spent before, and writing the files: the model is serialized
  // at about 150 MB/s here (vgg16's 667 MB: 4 s), and a rewrite may grow the
  // weights (Winograd's transformed filters are (m+2)^2/9 times larger).
  double export_s = 0.2 + 1.5 * static_cast<double>(g.parameter_bytes()) / 150e6;
  options.budget_s = config.budget_s - config.spent_s;
  options.reserve_s += export_s;
  if (!(options.budget_s > 0))
    TESSERA_THROW(ErrorKind::kUsage, "--budget " << config.budget_s << " s was spent before the search began ("
                                                 << config.spent_s << " s loading the model)");
  mutator::Plan plan = mutator::optimize(g, options);

  mutator::Measurement m;
  measured = measured && plan.device == "cpu";
  if (measured) {
    std::vector<Tensor> inputs = random_inputs(g, config.seed);
    RunConfig rc;
    rc.repeat = runs;
    m.before_ms = run(plan.original, inputs, rc).median_ms;
    m.after_ms = run(plan.optimized, inputs, rc).median_ms;
    m.runs = runs;
    m.backend = "cpu";
  }

  Plan p;
  p.plan_json = mutator::plan_json(plan);
  p.report_json = mutator::report_json(plan, measured ? &m : nullptr);
  p.report_text = mutator::report_text(plan, measured ? &m : nullptr);
  p.report_html = mutator::report_html(plan, measured ? &m : nullptr);
  p.mutations = canonical_mutations(plan.canonical);
  for (const mutator::AppliedMutation& a : plan.search.applied)
    p.mutations.push_back({"search", a.rule, a.description, 1, a.subprogram, a.partial,
                           mutator::verification_status_name(a.verification.status)});
  OptimizeSummary& s = p.summary;
  s.nodes_before = plan.original.num_nodes();
  s.nodes_after = plan.optimized.num_nodes();
  s.mutations = static_cast<int64_t>(plan.search.applied.size());
  s.predicted_before_s = plan.cost_before_s;
  s.predicted_after_s = plan.cost_after_s;
  s.measured_before_ms = measured ? m.before_ms : 0;
  s.measured_after_ms = measured ? m.after_ms : 0;
  s.search_seconds = plan.search.stats.seconds;
  s.generated = plan.search.stats.generated;
  s.verified = plan.search.stats.verified;
  s.partial_used = plan.search.stats.partial_used;
  s.report_text = p.report_text;
  s.files = {"model.onnx", "plan.json"};
  p.original = std::move(plan.original);
  p.model = std::move(plan.optimized);
  return p;
}

OptimizeSummary optimize(const Graph& g, const std::string& out_dir, const OptimizeConfig& config) {
  fs::path dest = destination(out_dir);
  Plan plan = optimize(g, config);
  plan.save(dest.string());
  OptimizeSummary s = std::move(plan.summary);
  s.out_dir = dest.string();
  return s;
}

}  // namespace tessera::api
