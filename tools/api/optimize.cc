// api::optimize: runs the mutator and measures on the CPU runtime, in memory
// (a Plan); Plan::save writes the plan folder atomically.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <unistd.h>

#include "calibrate/prepare_device.h"
#include "cost/device_profile.h"
#include "cost/graph_cost.h"
#include "graph/error.h"
#include "mutator/optimize.h"
#include "mutator/plan_files.h"
#include "mutator/rules/rule.h"
#include "mutator/sharding/annotations.h"
#include "onnx_import/onnx_export.h"
#include "report/report.h"
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

// A mesh plan whose ranks would hold this many bytes of copies of one
// another's weights writes those weights once, to shared.data, which every
// rank file points at (ONNX external data): plans that split activations
// replicate every weight, and four copies of GPT-2-small were 1.5 GB more
// to write (at ~150 MB/s) and to keep in the page cache of a host running
// its ranks. Below it (a plan of small weights, or one that splits them
// all), each rank file holds its own.
constexpr int64_t kShareReplicatedAbove = int64_t{1} << 20;

// The weights of 1 KiB or more (below that the exporter keeps them in the
// proto) that two or more ranks hold the same bytes of, in rank and value
// order, and the bytes their copies beyond the first add up to.
struct SharedWeights {
  std::vector<Tensor> tensors;
  int64_t duplicated_bytes = 0;
};

SharedWeights replicated_weights(const std::vector<Graph>& ranks) {
  std::map<std::pair<const void*, int64_t>, std::pair<size_t, int>> seen;  // -> (index, ranks holding it)
  std::vector<Tensor> all;
  for (const Graph& g : ranks) {
    std::set<std::pair<const void*, int64_t>> mine;
    std::vector<std::vector<NodeId>> users = g.users();
    for (ValueId v = 0; v < g.num_values(); ++v) {
      const Value& val = g.value(v);
      if (!val.constant || val.constant->nbytes() < 1024 || users[static_cast<size_t>(v)].empty()) continue;
      std::pair<const void*, int64_t> key{val.constant->bytes_identity(), val.constant->nbytes()};
      if (!mine.insert(key).second) continue;
      auto [it, fresh] = seen.try_emplace(key, all.size(), 0);
      if (fresh) all.push_back(*val.constant);
      ++it->second.second;
    }
  }
  SharedWeights out;
  for (const auto& [key, use] : seen)
    if (use.second > 1) out.duplicated_bytes += (use.second - 1) * key.second;
  std::vector<size_t> keep;
  for (const auto& [key, use] : seen)
    if (use.second > 1) keep.push_back(use.first);
  std::sort(keep.begin(), keep.end());
  for (size_t i : keep) out.tensors.push_back(all[i]);
  return out;
}

std::vector<Mutation> canonical_mutations(const std::vector<mutator::PassRecord>& passes) {
  std::vector<Mutation> out;
  for (const mutator::PassRecord& r : passes)
    if (r.times > 0) out.push_back({"canonicalize", r.pass, "", r.times, -1, false, "checked-end-to-end"});
  return out;
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

void Plan::save(const std::string& dir, const ProgressFn& progress) const {
  fs::path dest = destination(dir);
  write_folder(dest, [&](const fs::path& tmp) {
    // Every file written, with the digest of its bytes as they were
    // written: the programs and their external data (rank<i>.onnx.data).
    std::vector<mutator::PlanFile> files;
    // "writing rank 3/4  0.9/1.1 GB": the bytes of the file under way.
    auto write = [&](const Graph& g, const std::string& name, const std::string& item,
                     const std::map<std::pair<const void*, int64_t>, ExternalBytes>& placed) {
      ExportOptions options;
      if (!placed.empty())
        options.shared = [&placed](const Tensor& t) -> const ExternalBytes* {
          auto it = placed.find({t.bytes_identity(), t.nbytes()});
          return it == placed.end() ? nullptr : &it->second;
        };
      if (progress) options.written = [&](int64_t done, int64_t total) { progress({"writing", item, done, total, true}); };
      options.digest = [&](const std::string& file, const std::string& sha256, int64_t bytes) {
        files.push_back({file, sha256, bytes});
      };
      save_onnx_file(g, (tmp / name).string(), options);
    };
    if (is_mesh()) {
      SharedWeights shared = replicated_weights(ranks);
      std::map<std::pair<const void*, int64_t>, ExternalBytes> placed;
      if (shared.duplicated_bytes >= kShareReplicatedAbove) {
        ExportOptions options;
        if (progress)
          options.written = [&](int64_t done, int64_t total) { progress({"writing", "shared weights", done, total, true}); };
        options.digest = [&](const std::string& file, const std::string& sha256, int64_t bytes) {
          files.push_back({file, sha256, bytes});
        };
        std::vector<ExternalBytes> where =
            save_shared_data(shared.tensors, (tmp / mutator::kSharedDataFile).string(), options);
        for (size_t i = 0; i < where.size(); ++i)
          placed[{shared.tensors[i].bytes_identity(), shared.tensors[i].nbytes()}] = where[i];
      }
      for (size_t r = 0; r < ranks.size(); ++r)
        write(ranks[r], mutator::rank_file(static_cast<int64_t>(r)),
              "rank " + std::to_string(r + 1) + "/" + std::to_string(ranks.size()), placed);
    } else {
      write(model, "model.onnx", "", {});
    }
    // plan.json records each program file's size and digest as written.
    write_text(tmp / "plan.json", mutator::with_plan_files(plan_json, files));
    write_text(tmp / "report.json", report_json);
    write_text(tmp / "report.txt", report_text);
    write_text(tmp / "report.html", report_html);
  });
}

Plan optimize(const Graph& g, const OptimizeConfig& config) {
  if (!(config.budget_s > 0)) TESSERA_THROW(ErrorKind::kUsage, "--budget must be > 0 seconds, got " << config.budget_s);
  mutator::OptimizeOptions options;
  calibrate::PrepareOptions prepare;
  prepare.cache_dir = config.profile_cache;
  prepare.calibrate = config.calibrate;
  prepare.log = &std::cerr;
  options.device = calibrate::prepare_device(config.device, prepare);
  options.seed = config.seed;
  options.threads = config.threads;
  options.partial = config.partial;
  options.disabled_rules = config.disabled_rules;
  options.progress = config.progress;
  options.check_inputs = config.check_inputs;
  options.mesh = DeviceMesh::parse(config.mesh);
  options.specs = config.shards;
  options.carry = config.carry;
  options.input_ranges = verifier::parse_input_ranges(g, config.input_ranges);
  options.input_values = config.input_values;
  if (!config.shard_file.empty())
    for (std::string& s : mutator::read_shard_file(config.shard_file)) options.specs.push_back(std::move(s));
  options.shard_search = config.shard_search;
  options.device_memory = config.device_memory;
  options.shard_rewrite = config.shard_rewrite;
  const bool on_mesh = options.mesh.num_devices() > 1;
  if (!on_mesh && !config.shard_search)
    TESSERA_THROW(ErrorKind::kUsage, "--no-shard-search needs a mesh of two or more devices (--mesh tp=2)");
  if (!on_mesh && config.device_memory > 0)
    TESSERA_THROW(ErrorKind::kUsage, "--device-memory needs a mesh of two or more devices (--mesh tp=2)");
  bool measured = config.measure && config.measure_runs > 0 && config.device == "cpu";
  int runs = config.measure_runs;
  double one = 0;
  if (measured) {
    // A fast model gets more runs (up to 100, about 0.2 s of them), or its
    // median is mostly the machine's noise. The measurement below runs both
    // graphs (compile, warm-up, the runs): its predicted time is set aside
    // from the budget, with a 1.5x margin over the CPU cost model and half a
    // second for compiling.
    one = cost::graph_cost(g, options.device).time_s;
    if (one > 0) runs = std::max(runs, static_cast<int>(std::min(100.0, 0.2 / one)));
    options.reserve_s = 0.5 + 1.5 * 2.0 * (runs + 1) * one;
  }
  // What was spent before, and writing the files: the model is serialized
  // at about 150 MB/s here (vgg16's 667 MB: 4 s), and a rewrite may grow the
  // weights (Winograd's transformed filters are (m+2)^2/9 times larger). As
  // with the check, at most a quarter of the budget is set aside for it:
  // Llama-2-7B's 13.5 GB would take 135 s of a 30 s budget and leave the
  // searches nothing (its sharding search priced 28 plans in 0.13 s and
  // kept tp=2 of tp=4); the writing runs past --budget instead.
  double export_s = std::min(0.2 + 1.5 * static_cast<double>(g.parameter_bytes()) / 150e6, 0.25 * config.budget_s);
  options.budget_s = config.budget_s - config.spent_s;
  options.reserve_s += export_s;
  if (!(options.budget_s > 0))
    TESSERA_THROW(ErrorKind::kUsage, "--budget " << config.budget_s << " s was spent before the search began ("
                                                 << config.spent_s << " s loading the model)");
  mutator::Plan plan = mutator::optimize(g, options);

  // The measured gain of a plan for one device (a mesh plan is measured
  // under mpirun: bench/sharding).
  report::Measurement m;
  measured = measured && plan.device == "cpu" && !plan.is_mesh();
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
  p.plan_json = report::plan_json(plan);
  p.report_json = report::report_json(plan, measured ? &m : nullptr);
  p.report_text = report::report_text(plan, measured ? &m : nullptr);
  p.report_html = report::report_html(plan, measured ? &m : nullptr);
  p.mutations = canonical_mutations(plan.canonical);
  for (const mutator::AppliedMutation& a : plan.search.applied)
    p.mutations.push_back({"search", a.rule, a.description, 1, a.subprogram, a.partial,
                           mutator::verification_status_name(a.verification.status)});
  if (plan.is_mesh()) {
    for (const std::string& r : plan.sharding_search.rewrites)
      p.mutations.push_back({"shard-search", "", r, 1, -1, false, "checked-end-to-end"});
    for (const mutator::AppliedMutation& a : plan.rank_search.applied)
      p.mutations.push_back({"rank-search", a.rule, a.description, 1, a.subprogram, a.partial,
                             mutator::verification_status_name(a.verification.status)});
  }
  OptimizeSummary& s = p.summary;
  s.nodes_before = plan.original.num_nodes();
  s.nodes_after = plan.is_mesh() ? plan.ranks[0].num_nodes() : plan.optimized.num_nodes();
  s.mutations = static_cast<int64_t>(plan.search.applied.size() + plan.rank_search.applied.size());
  s.predicted_before_s = plan.cost_before_s;
  s.predicted_after_s = plan.cost_after_s;
  s.measured_before_ms = measured ? m.before_ms : 0;
  s.measured_after_ms = measured ? m.after_ms : 0;
  s.search_seconds = plan.search.stats.seconds;
  s.generated = plan.search.stats.generated;
  s.verified = plan.search.stats.verified;
  s.partial_used = plan.search.stats.partial_used;
  s.report_text = p.report_text;
  for (const mutator::CarryPair& c : plan.carry) p.carry.push_back({c.output, c.input});
  p.original = std::move(plan.original);
  if (plan.is_mesh()) {
    p.mesh = plan.mesh.str();
    p.ranks = std::move(plan.ranks);
    const Graph& g = plan.optimized;
    for (size_t k = 0; k < plan.sharding.inputs.size(); ++k)
      p.input_shardings[g.value(g.inputs()[k]).name] = plan.sharding.inputs[k].str();
    for (size_t k = 0; k < plan.sharding.outputs.size(); ++k)
      p.output_shardings[g.value(g.outputs()[k]).name] = plan.sharding.outputs[k].str();
  } else {
    p.model = std::move(plan.optimized);
  }
  // The program files and plan.json (the CLI names the reports after them).
  for (const std::string& f : p.files())
    if (f.find(".onnx") != std::string::npos || f == "plan.json") s.files.push_back(f);
  return p;
}

OptimizeSummary optimize(const Graph& g, const std::string& out_dir, const OptimizeConfig& config) {
  fs::path dest = destination(out_dir);
  Plan plan = optimize(g, config);
  plan.save(dest.string(), config.progress);
  OptimizeSummary s = std::move(plan.summary);
  s.out_dir = dest.string();
  return s;
}

}  // namespace tessera::api
