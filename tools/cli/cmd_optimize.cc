// tessera optimize MODEL -o OUT_DIR [--device D] [--budget S] [--seed N] [--threads N]
//                  [--no-partial] [--disable-rule NAME]... [--input-shape ...] [--input-value NAME=VALUE]...
//                  [--input NAME=FILE.pb]... [--input-range NAME=LO:HI]...
//                  [--list-rules] [--dump]
//                  [--mesh tp=4 [--shard GLOB[:inK|:outK]=PLACEMENTS]... [--shard-file FILE.json]]
//                  [--no-calibrate] [--profile-cache DIR]
#include <chrono>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <unistd.h>

#include "graph/error.h"
#include "graph/memory_limit.h"
#include "graph/text_form.h"
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"
#include "tools/cli/progress_bar.h"

namespace tessera::cli {

namespace {

struct OptimizeFlags {
  std::string model;
  std::string out_dir;
  LoadFlags load;
  std::vector<std::string> inputs;
  bool list_rules = false;
  bool dump = false;
  bool no_partial = false;
  bool no_shard_search = false;
  bool no_measure = false;
  bool no_calibrate = false;
  std::string profile_cache;
  std::string device_memory;
  api::OptimizeConfig config;
};

}  // namespace

Action add_optimize_command(CLI::App& app) {
  auto flags = std::make_shared<OptimizeFlags>();
  CLI::App* cmd = app.add_subcommand("optimize", "Search for a faster equivalent model and write it with its plan");
  cmd->footer(guide_footer("docs/cli.md#optimize, docs/sharding.md (--mesh, --shard), docs/plans.md, docs/checks.md"));
  cmd->add_option("model", flags->model, "ONNX model file");
  cmd->add_option("-o,--output", flags->out_dir, "Output folder: model.onnx or rank<i>.onnx, plan.json, report.{txt,json,html}");
  cmd->add_option("--device", flags->config.device, "cpu (default), a100, h100, h200, or a profile JSON file");
  cmd->add_flag("--no-calibrate", flags->no_calibrate,
                "--device cpu without a cached profile of this host: use the detected one instead of "
                "calibrating (a few seconds, once)");
  cmd->add_option("--profile-cache", flags->profile_cache,
                  "Folder of cached host CPU profiles (default: $XDG_CACHE_HOME/tessera or ~/.cache/tessera)");
  cmd->add_option("--budget", flags->config.budget_s, "Time budget in seconds (default 30)");
  cmd->add_option("--seed", flags->config.seed, "Seed for the search and the checks (default 0)");
  cmd->add_option("--threads", flags->config.threads, "Search threads (default: one per core)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-partial", flags->no_partial, "Turn off partially equivalent mutants");
  cmd->add_option("--disable-rule", flags->config.disabled_rules, "Turn off a rule by name (repeatable)");
  add_load_flags(cmd, flags->load);
  cmd->add_option("--input", flags->inputs,
                  "A test input for the plan's check: NAME=FILE.pb or FILE.pb (repeatable; one set, unbound "
                  "inputs random). test_data_set_<k>/input_<i>.pb beside the model are checked too");
  cmd->add_option("--input-range", flags->config.input_ranges,
                  "Check integer input NAME over [LO, HI): NAME=LO:HI (repeatable; default: from its use)");
  cmd->add_flag("--list-rules", flags->list_rules, "List the canonicalization passes and rules, then exit");
  cmd->add_flag("--dump", flags->dump, "Print the optimized graph in the text form");
  cmd->add_flag("--no-measure", flags->no_measure, "Skip the measured gain on the CPU runtime");
  cmd->add_option("--mesh", flags->config.mesh, "Device mesh: tp=4, or dp=2,tp=4 (writes rank<i>.onnx per rank)");
  cmd->add_option("--shard", flags->config.shards,
                  "Fix a sharding: GLOB[:inK|:outK]=PLACEMENTS, e.g. '*/fc1/MatMul:in1=[S(1)]' (repeatable)");
  cmd->add_option("--shard-file", flags->config.shard_file, "JSON object of GLOB[:inK|:outK] -> PLACEMENTS");
  cmd->add_option("--carry", flags->config.carry,
                  "Output feeding an input next step: OUT=IN, 'present.*=past_key_values.*' (repeatable)");
  cmd->add_flag("--no-shard-search", flags->no_shard_search,
                "Mesh plans: annotations and propagation only (no sharding search, the whole mesh)");
  cmd->add_option("--shard-rewrite", flags->config.shard_rewrite,
                  "Mesh plans: shard the graph as exported (none) or rewritten by one rule "
                  "(split-merged-projection, permute-merged-projection); default: compare them all")
      ->check(CLI::IsMember({"none", "split-merged-projection", "permute-merged-projection"}));
  cmd->add_option("--device-memory", flags->device_memory,
                  "Mesh plans: memory per device, e.g. 80G, 260M or bytes (default: the device profile's)");
  return [flags] {
    if (flags->list_rules) {
      std::cout << api::list_rules();
      return 0;
    }
    if (flags->model.empty()) TESSERA_THROW(ErrorKind::kUsage, "optimize needs a MODEL (or --list-rules)");
    if (flags->out_dir.empty()) TESSERA_THROW(ErrorKind::kUsage, "optimize needs an output folder: -o OUT_DIR");
    if (!(flags->config.budget_s > 0))
      TESSERA_THROW(ErrorKind::kUsage, "--budget must be > 0 seconds, got " << flags->config.budget_s);
    if (!flags->device_memory.empty()) {
      try {
        flags->config.device_memory = parse_bytes(flags->device_memory);
      } catch (const Error& e) {
        throw Error(ErrorKind::kUsage, "--device-memory: " + e.message());
      }
      if (flags->config.device_memory <= 0) TESSERA_THROW(ErrorKind::kUsage, "--device-memory must be positive");
    }
    flags->config.partial = !flags->no_partial;
    flags->config.shard_search = !flags->no_shard_search;
    flags->config.measure = !flags->no_measure;
    // Loading, searching, checking and writing on one line of stderr, on a terminal only.
    ProgressBar bar(stderr, ::isatty(STDERR_FILENO));
    flags->config.progress = bar.callback();
    api::LoadOptions load = load_options(flags->load);
    load.progress = bar.callback();
    auto start = std::chrono::steady_clock::now();
    flags->config.input_values = load.input_values;
    Graph g = api::load(flags->model, load);
    bar.clear();
    flags->config.check_inputs = test_data_sets(flags->model, g);
    if (!flags->inputs.empty()) flags->config.check_inputs.push_back(bind_input_files(g, flags->inputs, flags->config.seed));
    flags->config.spent_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The device is resolved inside api::optimize (calibrate::prepare_device),
    // as for every embedder: once the model and its inputs are read (a bad
    // path fails at once), and off the budget's clock (a first-use
    // calibration is not search time).
    flags->config.profile_cache = flags->profile_cache;
    flags->config.calibrate = !flags->no_calibrate;
    api::OptimizeSummary s = api::optimize(g, flags->out_dir, flags->config);
    bar.clear();
    std::cout << s.report_text;
    std::string files;
    for (const std::string& f : s.files) files += f + ", ";
    std::cout << "wrote " << s.out_dir << "/{" << files << "report.txt, report.json, report.html}\n";
    if (flags->dump) {
      // A mesh plan has no single model: rank 0's program stands for all.
      std::string dumped = api::is_sharded_plan_folder(s.out_dir) ? s.out_dir + "/rank0.onnx" : s.out_dir;
      std::cout << print_graph(api::load(dumped, load_options(flags->load)));
    }
    return 0;
  };
}

}  // namespace tessera::cli
