// tessera cost MODEL [--device cpu|a100|h100|h200|PROFILE.json] [--json] [--top N] [--threads N]
//                    [--no-calibrate] [--profile-cache DIR]
// tessera cost --calibrate [--threads N] [--seconds S] [--output PROFILE.json] [--profile-cache DIR]
// tessera cost --calibrate --device a100|h100|h200 --output PROFILE.json
//
// The first form prints the cost model's view of a model: per kernel (as the
// runtime fuses them) the predicted time, FLOPs, bytes per memory level and
// what bounds it, then the total and the top bottlenecks. The second runs
// microbenchmarks through the runtime's CPU kernels and writes the fitted
// host profile (by default into the host profile cache, where --device cpu
// finds it; calibrate/host_profile_cache.h); the third fits a GPU profile
// through the CUDA backend (calibrate/calibrate.h).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "calibrate/calibrate.h"
#include "calibrate/host_identity.h"
#include "calibrate/host_profile_cache.h"
#include "cost/device_profile.h"
#include "graph/error.h"
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

namespace tessera::cli {

namespace {

struct CostFlags {
  std::string model;
  std::string device = "cpu";
  bool json = false;
  bool no_fuse = false;
  bool cold = false;
  int top = 10;
  LoadFlags load;
  bool calibrate = false;
  std::string output;
  double calibrate_seconds = 30;
  int threads = 0;
  bool no_calibrate = false;
  std::string profile_cache;
};

}  // namespace

Action add_cost_command(CLI::App& app) {
  auto flags = std::make_shared<CostFlags>();
  CLI::App* cmd = app.add_subcommand("cost", "Predict a model's run time per kernel with the cost model");
  cmd->footer(guide_footer("docs/cli.md#cost, docs/cli.md#the-host-cpu-profile---device-cpu"));
  cmd->add_option("model", flags->model, "ONNX model file");
  cmd->add_option("--device", flags->device,
                  "cpu (this machine, calibrated profile if present), a100, h100, h200, or a profile .json; "
                  "with --calibrate: the GPU profile to fit through the CUDA backend")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print JSON instead of text");
  cmd->add_option("--top", flags->top, "Bottlenecks to list")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-fuse", flags->no_fuse, "Cost every node as its own kernel (no post-op fusion)");
  cmd->add_flag("--cold", flags->cold, "Every kernel reads its operands from main memory");
  add_load_flags(cmd, flags->load);
  cmd->add_flag("--calibrate", flags->calibrate, "Measure this CPU through the runtime and write its profile");
  cmd->add_option("--output", flags->output, "With --calibrate: profile file to write (default: the host cache)");
  cmd->add_option("--seconds", flags->calibrate_seconds, "With --calibrate: time budget")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", flags->threads,
                  "Runtime threads (default: one per core): with --calibrate, the threads measured with; "
                  "with --device cpu, the cores the model is priced on")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-calibrate", flags->no_calibrate,
                "--device cpu without a cached profile of this host: use the detected one instead of "
                "calibrating (a few seconds, once)");
  cmd->add_option("--profile-cache", flags->profile_cache,
                  "Folder of cached host CPU profiles (default: $XDG_CACHE_HOME/tessera or ~/.cache/tessera)");
  return [flags] {
    if (flags->calibrate) {
      if (!flags->model.empty()) TESSERA_THROW(ErrorKind::kUsage, "--calibrate takes no model");
      bool gpu = flags->device != "cpu";
      if (gpu && flags->output.empty()) TESSERA_THROW(ErrorKind::kUsage, "--calibrate --device GPU needs --output");
      if (gpu) {
        cost::save_profile(calibrate::calibrate_gpu(flags->device, flags->calibrate_seconds, std::cerr), flags->output);
        std::cerr << "wrote " << flags->output << "\n";
        return 0;
      }
      calibrate::CalibrationOptions o;
      o.seconds = flags->calibrate_seconds;
      o.threads = flags->threads;
      std::string dir = flags->profile_cache.empty() ? calibrate::default_profile_cache_dir() : flags->profile_cache;
      std::string path = flags->output;
      // The cache holds profiles of whole hosts (what --device cpu prices on).
      if (path.empty() && o.threads > 0 && o.threads < calibrate::read_host_identity().cores())
        TESSERA_THROW(ErrorKind::kUsage, "--calibrate --threads " << o.threads
                                             << " describes part of this host: write it with --output FILE");
      cost::DeviceProfile p = calibrate::calibrate_host(o, std::cerr);
      if (path.empty()) path = calibrate::save_cached_profile(p, dir, calibrate::read_host_identity());
      else cost::save_profile(p, path);
      std::cerr << "wrote " << path << "\n";
      return 0;
    }
    if (flags->model.empty()) TESSERA_THROW(ErrorKind::kUsage, "cost needs a MODEL (or --calibrate)");
    if (!flags->output.empty()) TESSERA_THROW(ErrorKind::kUsage, "--output goes with --calibrate");
    api::CostConfig config;
    config.device = flags->device;
    config.fuse = !flags->no_fuse;
    config.cold = flags->cold;
    config.top = flags->top;
    // Device cpu: resolved in api::cost as api::optimize resolves it
    // (calibrate::prepare_device); --threads prices it on that many cores.
    config.profile_cache = flags->profile_cache;
    config.calibrate = !flags->no_calibrate;
    config.threads = flags->threads;
    // An unknown device, then a model that cannot be read, fail before a
    // first-use calibration spends its seconds.
    if (config.device != "cpu") cost::resolve_device(config.device);
    Graph g = api::load(flags->model, load_options(flags->load));
    api::CostReport r = api::cost(g, config);
    std::cout << (flags->json ? r.json + "\n" : r.text);
    return 0;
  };
}

}  // namespace tessera::cli
