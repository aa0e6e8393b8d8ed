// The embedding API: what a framework, the CLI and the Python module call.
// Load a model, describe it, run it, export it. Everything below is the
// libraries of graph/, onnx_import/, cost/ and runtime/; this header is the
// small stable surface over them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/tensor.h"

namespace tessera::api {

struct LoadOptions {
  std::map<std::string, Shape> input_shapes;  // fixes dynamic dims by input name
};

// Imports an ONNX model file. Throws tessera::Error naming file, node and op.
Graph load(const std::string& path, const LoadOptions& options = {});

struct ValueSummary {
  std::string name;
  TensorType type;
};

struct ModelSummary {
  std::string name;
  std::vector<ValueSummary> inputs;
  std::vector<ValueSummary> outputs;
  std::map<std::string, int64_t> ops_by_kind;  // op name -> node count
  int64_t nodes = 0;
  int64_t parameters = 0;       // elements of float constants
  int64_t parameter_bytes = 0;  // bytes of all constants
  int64_t flops = 0;            // per run, multiply-add = 2
};

ModelSummary summarize(const Graph& g);

// Seeded random inputs for every graph input: floats uniform in [-1, 1),
// integers and bools in {0, 1} (valid as token ids, masks and indices alike).
std::vector<Tensor> random_inputs(const Graph& g, uint64_t seed);

struct RunConfig {
  std::string backend = "cpu";  // "cpu" | "cuda" | "reference"
  int threads = 0;              // 0: one per core
  int repeat = 0;               // > 0: one warm-up run, then `repeat` timed runs
  bool profile = false;         // time every kernel
  bool overlap = true;          // mesh plans: collectives run while independent kernels do
};

struct RunResult {
  std::vector<Tensor> outputs;
  std::vector<double> run_ms;  // the timed runs (repeat > 0), in order
  double median_ms = 0;        // of run_ms
  std::string profile_table;   // per-kernel table, slowest first (profile)
  // The plan's memory: the one arena of intermediates against the sum of all
  // intermediate tensors (what planning saved), weights as kernels hold them,
  // and the peak (arena + weights + inputs/outputs).
  int64_t arena_bytes = 0, intermediate_bytes = 0, weight_bytes = 0, peak_bytes = 0;
};

// Compiles the graph into an executable plan for the backend and runs it.
// Throws Error(kUsage) for an unknown or unavailable backend.
RunResult run(const Graph& g, const std::vector<Tensor>& inputs, const RunConfig& config);
// One run on the CPU backend.
std::vector<Tensor> run(const Graph& g, const std::vector<Tensor>& inputs);

// Writes the graph as an ONNX model, atomically.
void export_onnx(const Graph& g, const std::string& path);


// --- Optimization (tessera optimize) ---

struct OptimizeConfig {
  std::string device = "cpu";  // cpu | a100 | h100 | h200 | PROFILE.json
  double budget_s = 30;        // whole run; must be > 0
  uint64_t seed = 0;
  int threads = 0;             // search threads; 0: one per core
  bool partial = true;         // partially equivalent mutants (--no-partial)
  std::vector<std::string> disabled_rules;
  // For device cpu: time the original and the optimized model on the CPU
  // runtime (median of measure_runs runs each, more for a fast model: about
  // 0.2 s of runs, at most 100) and report the gain.
  bool measure = true;
  int measure_runs = 5;
  std::function<void(double)> progress;  // search progress in [0, 1]
  // Seconds of budget_s already spent before optimize() (loading the model):
  // the budget covers the whole command.
  double spent_s = 0;
  // A device mesh ("tp=4", "dp=2,tp=4"): the plan is one program per rank,
  // split as the annotations say and as propagation extends them. Empty or
  // one device: a single-device plan.
  std::string mesh;
  std::vector<std::string> shards;  // --shard GLOB[:inK|:outK]=PLACEMENTS
  std::string shard_file;           // --shard-file FILE.json
  // Mesh plans: the sharding search decides what annotations leave open,
  // and without annotations how many of the mesh's devices to use.
  // false: annotations and propagation only.
  bool shard_search = true;
  int64_t device_memory = 0;  // bytes per device; 0: the device profile's
  // Mesh plans: the graph the sharding search shards: "" (each rewrite it
  // knows and the graph as exported, compared under one cost), "none" (as
  // exported), or a rewrite's name (split-merged-projection,
  // permute-merged-projection).
  std::string shard_rewrite;
};

struct OptimizeSummary {
  std::string out_dir;
  int64_t nodes_before = 0, nodes_after = 0;
  int64_t mutations = 0;
  double predicted_before_s = 0, predicted_after_s = 0;
  double measured_before_ms = 0, measured_after_ms = 0;  // 0 when not measured
  double search_seconds = 0;
  int64_t generated = 0, verified = 0, partial_used = 0;
  std::string report_text;
  std::vector<std::string> files;  // written to out_dir (besides report.txt and report.json)
};

// Optimizes g and writes out_dir/{model.onnx, plan.json, report.txt,
// report.json} atomically (a temporary folder, then a rename); for a mesh,
// rank<i>.onnx per rank (its block of the weights, collectives in the
// `tessera` domain) instead of model.onnx. A plan that fails the end-to-end
// check is never written. Throws Error(kUsage) for a budget <= 0, an unknown
// rule or device, a bad mesh or --shard, or an out_dir that exists and is
// not a previous plan folder.
OptimizeSummary optimize(const Graph& g, const std::string& out_dir, const OptimizeConfig& config);

// The canonicalization passes and rules, one per line (--list-rules).
std::string list_rules();

// Whether path is a folder that optimize wrote (plan.json and model.onnx,
// or rank0.onnx for a mesh); load() of a single-device plan folder loads its
// model.onnx, so `tessera run OUT_DIR` runs the plan.
bool is_plan_folder(const std::string& path);
// Whether it is a plan folder for a mesh (rank<i>.onnx files).
bool is_sharded_plan_folder(const std::string& path);

// --- Mesh plans (tessera optimize --mesh): one program per rank ---

struct MeshPlan {
  std::string dir;
  std::string mesh;  // as plan.json gives it: "tp=2", "dp=2,tp=2"
  int64_t ranks = 0;
};

// Reads the plan.json of a plan folder for a mesh. Throws Error(kUsage) for
// a folder that is not one, Error(kParse) for a plan.json without a valid
// mesh or with a rank list that is not the mesh's size.
MeshPlan read_mesh_plan(const std::string& dir);
// Rank r's program (rank<r>.onnx): it takes the global inputs whole, holds
// its block of the weights and ends with the global outputs.
Graph load_rank(const MeshPlan& plan, int64_t rank, const LoadOptions& options = {});

// Whether this process was started by mpirun as one rank of a job (then
// run_mesh runs that rank here, with the MPI communicator).
bool launched_by_mpi();

struct MeshRunResult : RunResult {
  bool mpi = false;          // one rank of an mpirun job; else every rank ran here, as threads
  int64_t rank = 0;          // this process's rank under mpirun (its outputs are the global ones too)
  int threads_per_rank = 0;  // CPU threads each rank ran with
  // profile: rank 0's time per run in its collective kernels (part of
  // median_ms); 0 where the backend does not time kernels one by one (CUDA).
  double collective_ms = 0;
  // Rank 0's collectives, and how many of them run while other kernels do
  // (config.overlap; runtime::ExecutablePlan::collective_steps).
  int64_t collectives = 0, overlapped = 0;
};

// Runs every rank of a mesh plan, with outputs and timings as run() gives
// them for one device: rank 0's outputs (every rank's outputs are the
// global ones), its median over config.repeat timed runs, its profile.
// config.threads is per rank; 0: the cores shared among the ranks on this
// machine. Without mpirun the ranks are threads of this process; under
// mpirun every process calls it and runs its own rank. inputs(g) gives the
// global inputs for a rank's program. Errors name the rank that failed:
// under mpirun an mpirun -np that is not the plan's rank count is
// Error(kResource) on every rank, a rank failing before the first run makes
// every rank throw, and a rank failing during the runs prints its error and
// ends the job (MPI_Abort), since its peers wait in a collective.
MeshRunResult run_mesh(const MeshPlan& plan, const std::function<std::vector<Tensor>(const Graph&)>& inputs,
                       const RunConfig& config, const LoadOptions& load = {});

}  // namespace tessera::api
