#include "tools/api/tessera.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include "onnx/onnx_pb.h"
#include <random>

#include "calibrate/prepare_device.h"
#include "cost/flops.h"
#include "cost/kernel_model.h"
#include "graph/error.h"
#include "mutator/plan_files.h"
#include "onnx_import/onnx_export.h"
#include "onnx_import/onnx_import.h"
#include "runtime/runtime.h"
#include "tools/api/run_detail.h"

namespace tessera::api {

namespace {

ImportOptions import_options(const LoadOptions& options) {
  ImportOptions import;
  import.input_shapes = options.input_shapes;
  import.input_values = options.input_values;
  import.allow_unused_inputs = options.allow_unused_inputs;
  import.initializers_as_constants = options.initializers_as_constants;
  import.progress = options.progress;
  return import;
}

}  // namespace

Graph load(const std::string& path, const LoadOptions& options) {
  ImportOptions import = import_options(options);
  if (mutator::has_plan_json(path)) mutator::check_plan_folder(path);
  if (is_sharded_plan_folder(path))
    TESSERA_THROW(ErrorKind::kUsage, path << " is a plan for a device mesh (rank<i>.onnx): run it with `tessera run "
                                          << path << "`, or load one rank's file");
  if (is_plan_folder(path)) return import_onnx_file(path + "/model.onnx", import);
  return import_onnx_file(path, import);
}

Graph load_bytes(const std::string& bytes, const std::string& name, const LoadOptions& options) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes))
    throw Error(ErrorKind::kParse, "not a serialized ONNX ModelProto", {name, "", ""});
  ImportOptions import = import_options(options);
  return import_onnx_model(model, import, "", name);
}

ModelSummary summarize(const Graph& g) {
  ModelSummary s;
  s.name = g.name;
  for (ValueId v : g.inputs()) s.inputs.push_back({g.value(v).name, g.type(v)});
  for (ValueId v : g.outputs()) s.outputs.push_back({g.value(v).name, g.type(v)});
  for (NodeId n = 0; n < g.num_nodes(); ++n) ++s.ops_by_kind[op_name(g.node(n).kind)];
  s.nodes = g.num_nodes();
  s.parameters = g.parameter_count();
  s.parameter_bytes = g.parameter_bytes();
  s.flops = graph_flops(g);
  return s;
}

std::vector<Tensor> random_inputs(const Graph& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> out;
  for (ValueId v : g.inputs()) {
    const TensorType& type = g.type(v);
    Tensor t(type.dtype, type.shape);
    if (is_float(type.dtype)) {
      std::uniform_real_distribution<double> dist(-1.0, 1.0);
      for (int64_t i = 0; i < t.numel(); ++i) t.set_double(i, dist(rng));
    } else {
      std::uniform_int_distribution<int64_t> dist(0, 1);
      for (int64_t i = 0; i < t.numel(); ++i) t.set_int(i, dist(rng));
    }
    out.push_back(std::move(t));
  }
  return out;
}

namespace detail {

OneThreadLine host_one_thread_line(int threads) {
  // This host's cached profile, else the detected one: a run never waits
  // for a calibration.
  calibrate::PrepareOptions prepare;
  prepare.calibrate = false;
  prepare.threads = threads;
  return cost::one_thread_line(calibrate::prepare_device("cpu", prepare));
}

runtime::RunOptions run_options(const RunConfig& config) {
  if (config.threads < 0) TESSERA_THROW(ErrorKind::kUsage, "--threads must be >= 0, got " << config.threads);
  if (config.repeat < 0) TESSERA_THROW(ErrorKind::kUsage, "--repeat must be >= 0, got " << config.repeat);
  runtime::RunOptions options;
  options.backend = runtime::backend_from_name(config.backend);
  options.threads = config.threads;
  options.profile = config.profile;
  options.overlap = config.overlap;
  if (options.backend == runtime::Backend::kCpu) options.one_thread_line = host_one_thread_line(config.threads);
  return options;
}

RunResult run_compiled(runtime::ExecutablePlan& plan, const std::vector<Tensor>& inputs, const RunConfig& config) {
  RunResult r;
  r.outputs = plan.run(inputs);  // the warm-up when timing
  for (int i = 0; i < config.repeat; ++i) {
    r.outputs.clear();  // lets the plan write this run's outputs into the last run's storage
    auto t0 = std::chrono::steady_clock::now();
    r.outputs = plan.run(inputs);
    r.run_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (!r.run_ms.empty()) {
    std::vector<double> sorted = r.run_ms;
    std::sort(sorted.begin(), sorted.end());
    size_t n = sorted.size();
    r.median_ms = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  }
  if (config.profile) r.profile_table = plan.profile().table();
  runtime::MemoryReport m = plan.memory();
  r.arena_bytes = m.arena_bytes;
  r.intermediate_bytes = m.intermediate_bytes;
  r.weight_bytes = m.weight_bytes;
  r.peak_bytes = m.peak_bytes;
  return r;
}

std::string human_count(double value, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int p = 0;
  while (value >= 1000.0 && p < 5) {
    value /= 1000.0;
    ++p;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), p == 0 ? "%.0f %s%s" : "%.2f %s%s", value, prefixes[p], unit);
  return buf;
}

}  // namespace detail

RunResult run(const Graph& g, const std::vector<Tensor>& inputs, const RunConfig& config) {
  runtime::ExecutablePlan plan = runtime::ExecutablePlan::compile(g, detail::run_options(config));
  return detail::run_compiled(plan, inputs, config);
}

std::vector<Tensor> run(const Graph& g, const std::vector<Tensor>& inputs) {
  return run(g, inputs, RunConfig{}).outputs;
}

struct Executable::State {
  runtime::ExecutablePlan plan;
  RunConfig config;
  std::mutex mutex;  // one run at a time: the plan's buffers are shared by its runs
};

Executable::Executable(const Graph& g, const RunConfig& config)
    : state_(new State{runtime::ExecutablePlan::compile(g, detail::run_options(config)), config, {}}) {}

RunResult Executable::run(const std::vector<Tensor>& inputs) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return detail::run_compiled(state_->plan, inputs, state_->config);
}

void export_onnx(const Graph& g, const std::string& path) { save_onnx_file(g, path); }

std::string onnx_bytes(const Graph& g) {
  onnx::ModelProto model = tessera::export_onnx(g);
  // protobuf's limit for one message.
  constexpr size_t kMaxBytes = (size_t{2} << 30) - 1;
  size_t size = model.ByteSizeLong();
  if (size > kMaxBytes)
    TESSERA_THROW(ErrorKind::kResource, "the model is " << size / (1 << 20)
                                                        << " MiB, over protobuf's 2 GiB for one message: save it "
                                                           "to a file (export_onnx or Plan::save) instead");
  return model.SerializeAsString();
}

RunResult run(const Plan& plan, const std::vector<Tensor>& inputs, const RunConfig& config) {
  if (plan.is_mesh()) return run_mesh(plan, inputs, config);
  return run(plan.model, inputs, config);
}

}  // namespace tessera::api
