// tessera run MODEL|PLAN_DIR [--input NAME=FILE.pb]... [--output-dir DIR] [--seed N]
//                   [--backend cpu|cuda|reference] [--threads N] [--repeat N] [--profile]
//                   [--no-overlap]
// A plan folder for a mesh runs every rank: as threads of this process, or
// one rank per process under `mpirun -np N`.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "graph/error.h"
#include "onnx_import/tensor_proto.h"
#include "tools/api/interrupt.h"
#include "tools/cli/cli_util.h"
#include "tools/cli/commands.h"

namespace tessera::cli {

namespace {

struct RunFlags {
  std::string model;
  std::vector<std::string> inputs;
  LoadFlags load;
  std::string output_dir;
  uint64_t seed = 0;
  api::RunConfig config;
};

void write_outputs(const std::vector<std::string>& names, const std::vector<Tensor>& outputs, const std::string& dir) {
  api::HoldInterrupts hold;  // an interrupt waits until the files are whole, or removed
  std::filesystem::path root(dir);
  std::error_code ec;
  bool created = !std::filesystem::exists(root) && std::filesystem::create_directories(root, ec);
  if (ec) TESSERA_THROW(ErrorKind::kIo, "cannot create output folder '" << dir << "': " << ec.message());
  std::vector<std::filesystem::path> written;
  try {
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::filesystem::path p = root / ("output_" + std::to_string(i) + ".pb");
      write_tensor_file(outputs[i], names[i], p.string());
      written.push_back(p);
    }
  } catch (...) {
    // Leave nothing half-written: remove what this run wrote.
    for (const auto& p : written) std::filesystem::remove(p, ec);
    if (created) std::filesystem::remove(root, ec);
    throw;
  }
}

std::vector<std::string> output_names(const Graph& g) {
  std::vector<std::string> names;
  for (ValueId v : g.outputs()) names.push_back(g.value(v).name);
  return names;
}

// Outputs (written and summarized), then the timing line `how` describes
// and the profile.
void report(const std::vector<std::string>& names, const api::RunResult& result, const RunFlags& flags,
            const std::string& how) {
  const std::vector<Tensor>& outputs = result.outputs;
  if (!flags.output_dir.empty()) write_outputs(names, outputs, flags.output_dir);
  for (size_t i = 0; i < outputs.size(); ++i) {
    double sum = 0, abs_sum = 0;
    for (int64_t k = 0; k < outputs[i].numel(); ++k) {
      double v = outputs[i].get_double(k);
      sum += v;
      abs_sum += std::fabs(v);
    }
    std::printf("output %zu '%s': %s sum=%.9g abs_sum=%.9g\n", i, names[i].c_str(), type_str(outputs[i].type()).c_str(),
                sum, abs_sum);
  }
  if (!result.run_ms.empty())
    std::printf("median latency: %.3f ms over %zu runs (%s)\n", result.median_ms, result.run_ms.size(), how.c_str());
  if (flags.config.profile) {
    std::printf("%s", result.profile_table.c_str());
    auto mb = [](int64_t b) { return static_cast<double>(b) / (1 << 20); };
    std::printf("memory: arena %.1f MiB for %.1f MiB of intermediates, weights %.1f MiB, peak %.1f MiB\n",
                mb(result.arena_bytes), mb(result.intermediate_bytes), mb(result.weight_bytes), mb(result.peak_bytes));
  }
}

int run_model(const RunFlags& flags) {
  Graph g = api::load(flags.model, load_options(flags.load));
  std::vector<Tensor> inputs = bind_input_files(g, flags.inputs, flags.seed);
  api::RunResult result = api::run(g, inputs, flags.config);
  int threads = flags.config.threads > 0 ? flags.config.threads : static_cast<int>(std::thread::hardware_concurrency());
  report(output_names(g), result, flags, "backend " + flags.config.backend + ", threads " + std::to_string(threads));
  return 0;
}

// A plan folder for a mesh: every rank, as threads here or one per process
// under mpirun; rank 0 reports (every rank's outputs are the global ones).
int run_mesh_plan(const RunFlags& flags) {
  api::MeshPlan plan = api::read_mesh_plan(flags.model);
  // Global tensor files: run_mesh cuts a sharded input into the ranks'
  // blocks and assembles a sharded output from theirs.
  auto inputs = [&](const Graph& g) { return bind_input_files(g, flags.inputs, flags.seed); };
  api::MeshRunResult result = api::run_mesh(plan, inputs, flags.config, load_options(flags.load));
  if (result.rank != 0) return 0;
  const std::vector<std::string>& names = result.output_names;
  std::string how = "backend " + flags.config.backend + ", mesh " + plan.mesh + ", " + std::to_string(plan.ranks) +
                    (result.mpi ? " MPI processes" : " ranks as threads") + ", threads " +
                    std::to_string(result.threads_per_rank) + " per rank; rank 0's";
  report(names, result, flags, how);
  if (flags.config.profile && result.collective_ms > 0)
    std::printf("collectives: %.3f ms per run on rank 0 (the kernels marked 'collective' above); %lld of %lld "
                "overlap other kernels\n",
                result.collective_ms, static_cast<long long>(result.overlapped),
                static_cast<long long>(result.collectives));
  if (flags.config.profile && result.halo_exchanges > 0)
    std::printf("halo: %.3f ms per run waiting on rank 0 over %lld HaloExchange (%lld overlapped with their window "
                "op's interior rows)\n",
                result.halo_wait_ms, static_cast<long long>(result.halo_exchanges),
                static_cast<long long>(result.halo_overlapped));
  return 0;
}

}  // namespace

Action add_run_command(CLI::App& app) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model on given or seeded random inputs");
  cmd->footer(guide_footer("docs/cli.md#run, docs/sharding.md#running-the-ranks (mesh plans, mpirun)"));
  cmd->add_option("model", flags->model, "ONNX model file, or a plan folder (for a mesh: every rank, or this process's under mpirun)")->required();
  cmd->add_option("--input", flags->inputs, "Input tensor: NAME=FILE.pb or FILE.pb (TensorProto; repeatable)");
  add_load_flags(cmd, flags->load);
  cmd->add_option("--output-dir", flags->output_dir, "Write outputs as output_0.pb, output_1.pb, ...");
  cmd->add_option("--seed", flags->seed, "Seed for random inputs (default 0)");
  cmd->add_option("--backend", flags->config.backend, "Backend: cpu (default), cuda or reference")
      ->check(CLI::IsMember({"cpu", "cuda", "reference"}));
  cmd->add_option("--threads", flags->config.threads, "CPU threads (per rank for a mesh plan; default: the cores, shared among the ranks here)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--repeat", flags->config.repeat, "Time N runs after one warm-up and print the median latency (rank 0's for a mesh plan)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--profile", flags->config.profile, "Print a per-kernel time table, slowest first (rank 0's, with its time in collectives)");
  cmd->add_flag("--overlap,!--no-overlap", flags->config.overlap,
                "Mesh plans: run collectives while the kernels that do not depend on them run (default), or block "
                "each rank in every collective");
  return [flags] { return api::is_sharded_plan_folder(flags->model) ? run_mesh_plan(*flags) : run_model(*flags); };
}

}  // namespace tessera::cli
