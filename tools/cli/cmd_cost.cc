// tessera cost MODEL [--device cpu|a100|h100|h200|PROFILE.json] [--json] [--top N]
// tessera cost --calibrate [--threads N] [--output PROFILE.json]
// tessera cost --calibrate --device a100|h100|h200 --output PROFILE.json
//
// The first form prints the cost model's view of a model: per kernel (as the
// runtime fuses them) the predicted time, FLOPs, bytes per memory level and
// what bounds it, then the total and the top bottlenecks. The second runs
// microbenchmarks through the runtime's CPU kernels and writes the fitted
// host profile; the third fits a GPU profile through the CUDA backend
// (cost_calibration.h).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "cost/device_profile.h"
#include "graph/error.h"
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"
#include "tools/cli/cost_calibration.h"

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
  double calibrate_seconds = 60;
  int threads = 0;
};

}  // namespace

Action add_cost_command(CLI::App& app) {
  auto flags = std::make_shared<CostFlags>();
  CLI::App* cmd = app.add_subcommand("cost", "Predict a model's run time per kernel with the cost model");
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
  cmd->add_option("--threads", flags->threads, "With --calibrate: runtime threads (default: one per core)")
      ->check(CLI::NonNegativeNumber);
  return [flags] {
    if (flags->calibrate) {
      if (!flags->model.empty()) TESSERA_THROW(ErrorKind::kUsage, "--calibrate takes no model");
      bool gpu = flags->device != "cpu";
      if (gpu && flags->output.empty()) TESSERA_THROW(ErrorKind::kUsage, "--calibrate --device GPU needs --output");
      std::string path = flags->output.empty() ? cost::host_profile_cache_path() : flags->output;
      cost::DeviceProfile p = gpu ? calibrate_gpu(flags->device, flags->calibrate_seconds, std::cerr)
                                  : calibrate_host(flags->calibrate_seconds, flags->threads, std::cerr);
      cost::save_profile(p, path);
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
    cost::resolve_device(config.device);  // an unknown device fails before the model is read
    api::CostReport r = api::cost(api::load(flags->model, load_options(flags->load)), config);
    std::cout << (flags->json ? r.json + "\n" : r.text);
    return 0;
  };
}

}  // namespace tessera::cli
