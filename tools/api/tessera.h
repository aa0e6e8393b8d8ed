// The embedding API: what a framework, the CLI and the Python module call.
// Load a model, describe it, optimize it (in memory, then save the plan if
// wanted), run it on one device or a mesh's ranks, verify, cost and export.
// Everything below is the libraries of graph/, onnx_import/, verifier/,
// cost/, mutator/ and runtime/; this header is the small stable surface over
// them. Installed as <tessera/tessera.h> (find_package(Tessera), target
// Tessera::tessera). Every error a caller can cause is a tessera::Error
// (graph/error.h) with a kind and the file, node and op it concerns.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/graph.h"
#include "graph/progress.h"
#include "graph/tensor.h"

namespace tessera::api {

struct LoadOptions {
  std::map<std::string, Shape> input_shapes;  // fixes dynamic dims by input name (or glob)
  std::map<std::string, std::string> input_values;  // fixes inputs to constants (ImportOptions)
  bool allow_unused_inputs = false;           // ImportOptions
  bool initializers_as_constants = false;     // ImportOptions
  ProgressFn progress;                        // ImportOptions: "loading", bytes read
};

// Imports an ONNX model file. Throws tessera::Error naming file, node and op.
Graph load(const std::string& path, const LoadOptions& options = {});
// Imports a serialized ONNX ModelProto held in memory (external data is not
// resolved: such a model must be loaded from its file). `name` names it in
// errors. Throws Error(kParse) for bytes that are not a model.
Graph load_bytes(const std::string& bytes, const std::string& name, const LoadOptions& options = {});

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

// A graph compiled once for a backend, to run many times: run() above
// compiles on every call (oneDNN primitives, packed weights: ~0.5 s for
// ResNet-18 here, against tens of ms per run). It holds its own copy of the
// weights as the kernels want them. Runs from several threads take turns.
class Executable {
 public:
  // Throws what run() throws for the config (unknown backend, bad threads).
  Executable(const Graph& g, const RunConfig& config);
  // As run(g, inputs, config) with the config given at construction.
  RunResult run(const std::vector<Tensor>& inputs) const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Writes the graph as an ONNX model, atomically.
void export_onnx(const Graph& g, const std::string& path);
// The graph as a serialized ONNX ModelProto, as export_onnx writes it for a
// model under 2 GiB. Throws Error(kResource) for a larger one (protobuf
// cannot serialize it in one message; export_onnx writes its weights aside).
std::string onnx_bytes(const Graph& g);

// --- Verification (tessera verify) ---

struct VerifyConfig {
  uint64_t seed = 0x7e55e7a;  // of the random trials
};

struct Box {
  std::vector<int64_t> lo, hi;  // half-open: [lo, hi) per dim
  std::string str() const;      // "[0:4, 2:3]"
};

struct DifferingOutput {
  int output = 0;    // index among the original's outputs
  std::string name;  // the original's output name
  std::vector<Box> boxes;
};

struct Verdict {
  std::string kind;    // "equivalent" | "differs" | "unknown"
  std::string method;  // how: multilinear, multilinear+uninterpreted, float-test, structural, rules (rederived by proven rules)
  int trials = 0;
  int64_t degree = 0;
  double error_bound = 1.0;  // equivalent: probability the programs differ nonetheless
  std::string reason;        // assumptions; for unknown, why
  int64_t sampled_boxes = 0;
  std::vector<DifferingOutput> differing;  // differs (and suspect regions for unknown)
  std::string summary;                     // one line

  bool equivalent() const { return kind == "equivalent"; }
};

// Whether candidate computes the original's outputs (the multilinear random
// test over Z_p, with the output boxes where they differ). Throws
// Error(kUsage) when the two do not take the same inputs.
Verdict verify(const Graph& original, const Graph& candidate, const VerifyConfig& config = {});

// --- Cost model (tessera cost) ---

struct CostConfig {
  std::string device = "cpu";  // cpu | a100 | h100 | h200 | PROFILE.json
  // Device cpu, resolved as optimize() resolves it (calibrate/
  // prepare_device.h): the cached profile in profile_cache (empty: the
  // default folder), else a quick calibration on first use (calibrate) or
  // the detected profile; threads > 0: priced on that many of its cores.
  std::string profile_cache;
  bool calibrate = true;
  int threads = 0;
  bool fuse = true;            // as the runtime fuses kernels (false: one kernel per node)
  bool cold = false;           // every kernel reads its operands from main memory
  int top = 10;                // bottlenecks listed
};

struct CostReport {
  std::string device;  // profile name
  double time_s = 0;   // predicted per run
  int64_t flops = 0;
  int64_t kernels = 0;
  std::string text;    // the table tessera cost prints
  std::string json;    // what tessera cost --json prints
};

// Throws Error(kUsage) for an unknown device.
CostReport cost(const Graph& g, const CostConfig& config = {});


// --- Optimization (tessera optimize) ---

struct OptimizeConfig {
  std::string device = "cpu";  // cpu | a100 | h100 | h200 | PROFILE.json
  // Device cpu: this host's cached profile in profile_cache (empty: the
  // default folder, $XDG_CACHE_HOME/tessera or ~/.cache/tessera); where
  // there is none, a quick calibration written there (calibrate, as the CLI
  // does), else the detected profile (--no-calibrate). The device is
  // resolved once, here (calibrate/prepare_device.h), so the CLI, this API
  // and the Python module plan alike on one host.
  std::string profile_cache;
  bool calibrate = true;
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
  // Long work under way: searching, checking, then writing (Plan::save's
  // bytes per rank file), for a progress bar; called on the calling thread.
  ProgressFn progress;
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
  // The model's own input sets (one tensor per graph input, in order): the
  // end-to-end check runs them after its seeded random sets.
  std::vector<std::vector<Tensor>> check_inputs;
  // --carry OUT=IN (repeatable; glob pairs such as present.*=past_key_values.*):
  // outputs that feed inputs at the next step (a KV cache). plan.json records
  // them for sessions; on a mesh both ends of a pair cross the boundary alike
  // (an annotation on one end is given to the other).
  std::vector<std::string> carry;
  // --input-range NAME=LO:HI (repeatable): the end-to-end check draws that
  // integer input from [LO, HI) instead of the range the model's use gives.
  std::vector<std::string> input_ranges;
  // --input-value NAME=VALUE given at load (LoadOptions::input_values):
  // recorded in plan.json.
  std::map<std::string, std::string> input_values;
};

// An output that feeds an input at the next step of a session.
struct CarryPair {
  std::string output, input;
};

struct OptimizeSummary {
  std::string out_dir;  // where save() wrote the plan; empty for a plan in memory
  int64_t nodes_before = 0, nodes_after = 0;  // a mesh plan: rank 0's program
  int64_t mutations = 0;
  double predicted_before_s = 0, predicted_after_s = 0;
  double measured_before_ms = 0, measured_after_ms = 0;  // 0 when not measured
  double search_seconds = 0;
  int64_t generated = 0, verified = 0, partial_used = 0;
  std::string report_text;
  std::vector<std::string> files;  // written to out_dir (besides report.txt and report.json)
};

// One rewrite the plan applied, as plan.json lists it.
struct Mutation {
  std::string stage;        // "canonicalize" (always-on passes), "search", "shard-search"
  std::string rule;         // kebab-case name (--disable-rule); shard-search: empty
  std::string description;  // search, shard-search: what it rewrote (plan.json's search.rewrites)
  int times = 1;            // canonicalize: the runs that changed the graph
  int subprogram = -1;      // search: the subprogram it rewrote
  bool partial = false;     // search: corrected on the output boxes where it is wrong
  std::string verification; // how it was checked (plan.json's verification.status)
};

class MeshExecutable;

// An optimized model in memory: everything `tessera optimize -o DIR` writes,
// built before anything is written. The plan has passed the end-to-end check
// (optimize returns no other).
struct Plan {
  Graph original;
  std::string mesh;           // a mesh plan: the mesh it uses ("tp=2"); else empty
  Graph model;                // one device: the optimized model
  std::vector<Graph> ranks;   // a mesh plan: rank r's program (its weights, collectives)
  // A mesh plan's boundary: how each graph input and output (by name)
  // crosses it, "[R]" whole or e.g. "[S(1)]" as each rank's block (--shard
  // on an input or output); rank programs take and give back their blocks.
  // A name not listed crosses whole.
  std::map<std::string, std::string> input_shardings, output_shardings;
  std::vector<CarryPair> carry;  // OptimizeConfig::carry, resolved (plan.json's carry)
  std::string plan_json;      // plan.json
  std::string report_json;    // report.json
  std::string report_text;    // report.txt
  std::string report_html;    // report.html
  std::vector<Mutation> mutations;
  OptimizeSummary summary;

  bool is_mesh() const { return !ranks.empty(); }
  // Run-time state, shared by copies: a mesh plan's ranks as the first
  // run_mesh compiled them (a MeshExecutable), reused by the next runs with
  // the same RunConfig.
  struct Compiled {
    std::mutex mutex;
    std::shared_ptr<MeshExecutable> mesh;
  };
  std::shared_ptr<Compiled> compiled_ = std::make_shared<Compiled>();
  // The files save() writes, in the order it writes them.
  std::vector<std::string> files() const;
  // Writes dir/{model.onnx | rank<i>.onnx..., plan.json (with each program
  // file's digest), report.json, report.txt, report.html}, byte for byte what `tessera optimize -o dir` writes, into a
  // temporary folder that is then renamed into place: nothing is left
  // half-written. Throws Error(kUsage) for a dir that exists and is neither
  // empty nor a previous plan folder (which it replaces), Error(kIo) when
  // writing fails.
  void save(const std::string& dir, const ProgressFn& progress = {}) const;
};

// Optimizes g in memory: canonicalization, the search, the end-to-end check
// and (config.measure, device cpu) the measured gain; for a mesh, the
// sharding and one program per rank. Nothing is written to disk. Throws
// Error(kUsage) for a budget <= 0, an unknown rule or device, a bad mesh or
// --shard, and Error(kInternal) when the result fails the end-to-end check.
Plan optimize(const Graph& g, const OptimizeConfig& config);

// optimize(g, config), then save(out_dir): what `tessera optimize -o
// out_dir` does. An out_dir that save() would refuse is refused before the
// search begins.
OptimizeSummary optimize(const Graph& g, const std::string& out_dir, const OptimizeConfig& config);

// The canonicalization passes and rules, one per line (--list-rules).
std::string list_rules();

struct RuleInfo {
  std::string name;        // kebab-case
  std::string kind;        // "canonical" (always on) | "rule" (--disable-rule NAME)
  std::string identity;    // what it rewrites
  std::string obligation;  // rules: "[proof: NAMES]" (Z3 obligations) or "[per instance: WHY]"
  bool mesh_only = false;  // proposed by the sharding search only
};
// The same list as data.
std::vector<RuleInfo> rules();

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
  // plan.json's sharding.inputs and .outputs (Plan::input_shardings).
  std::map<std::string, std::string> input_shardings, output_shardings;
  std::vector<CarryPair> carry;  // plan.json's carry
};

// Reads the plan.json of a plan folder for a mesh. Throws Error(kUsage) for
// a folder that is not one, Error(kParse) for a plan.json without a valid
// mesh or with a rank list that is not the mesh's size.
MeshPlan read_mesh_plan(const std::string& dir);
// Rank r's program (rank<r>.onnx): it takes the global inputs whole (its
// block of those with a boundary sharding), holds its block of the weights
// and ends with the global outputs (its block of the sharded ones).
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
  // profile: rank 0's HaloExchanges, those lowered overlapped with their
  // window op (runtime/cpu/halo_overlap.h), and its ms per run waiting for
  // halos (an overlapped one's wait after the interior; an unoverlapped
  // one's whole exchange kernel).
  int64_t halo_exchanges = 0, halo_overlapped = 0;
  double halo_wait_ms = 0;
  std::vector<std::string> output_names;  // of `outputs`, the graph's
};

// A mesh plan's ranks compiled once, as threads of this process, to run
// many times: what run_mesh and run keep in a Plan after its first run.
// Under mpirun each process runs its own rank (run_mesh) instead.
class MeshExecutable {
 public:
  struct State;
  // Throws what run_mesh throws before running (no GPU per rank, ranks
  // whose collectives differ), and Error(kUsage) under mpirun.
  MeshExecutable(const Plan& plan, const RunConfig& config);
  // Global inputs in, global outputs out: inputs with a boundary sharding
  // are cut into the ranks' blocks, sharded outputs assembled from them.
  MeshRunResult run(const std::vector<Tensor>& inputs) const;
  // Every rank's own inputs in (per rank, its blocks), every rank's outputs
  // out (its blocks): nothing is scattered or gathered.
  std::vector<std::vector<Tensor>> run_blocks(const std::vector<std::vector<Tensor>>& per_rank) const;
  const RunConfig& config() const;
  // Rank programs this process has compiled to run as threads: a counter
  // for tests (a plan's second run compiles none).
  static int64_t rank_programs_compiled();

 private:
  std::shared_ptr<State> state_;
};

// Runs every rank of a mesh plan, with outputs and timings as run() gives
// them for one device: rank 0's outputs (every rank's outputs are the
// global ones), its median over config.repeat timed runs, its profile.
// config.threads is per rank; 0: the cores shared among the ranks on this
// machine. Without mpirun the ranks are threads of this process; under
// mpirun every process calls it and runs its own rank. inputs(g) gives the
// global inputs, for a graph that has the plan's inputs as the single-device
// model takes them (global types; no nodes): a rank is fed its block of an
// input with a boundary sharding, and sharded outputs are assembled from
// the ranks' blocks (under mpirun by all-gathers between the processes).
// Errors name the rank that failed:
// under mpirun an mpirun -np that is not the plan's rank count is
// Error(kResource) on every rank, a rank failing before the first run makes
// every rank throw, and a rank failing during the runs prints its error and
// ends the job (MPI_Abort), since its peers wait in a collective.
MeshRunResult run_mesh(const MeshPlan& plan, const std::function<std::vector<Tensor>(const Graph&)>& inputs,
                       const RunConfig& config, const LoadOptions& load = {});
// The same for a mesh plan in memory (optimize's Plan, is_mesh()): its
// rank programs rather than a folder's files.
MeshRunResult run_mesh(const Plan& plan, const std::vector<Tensor>& inputs, const RunConfig& config);

// Runs a plan in memory on its inputs: the optimized model on one device,
// or every rank of a mesh plan (run_mesh) with rank 0's outputs.
RunResult run(const Plan& plan, const std::vector<Tensor>& inputs, const RunConfig& config = {});

// --- Sessions: a plan run step after step, its carried state kept ---

struct SessionOptions {
  RunConfig run;
  // Carried pairs besides the plan's own (plan.json's carry): --carry specs.
  std::vector<std::string> carry;
};

// A plan compiled once and run step after step (a decoder's prefill, then
// its decode steps). A carried input (CarryPair) is fed the previous step's
// output where that step left it: on a mesh each rank keeps its block of it
// in its own memory (nothing passes through rank 0 or is gathered), so a KV
// cache split by heads stays split between steps. A mesh plan runs its
// ranks as threads of this process, or under mpirun this process's rank
// (every process makes the same steps; every process gets the outputs).
// Where the plan computes a carried output in place over its input (a
// fixed-length cache written by ScatterElements/ScatterND at
// cache_position: ExecutablePlan::in_place_inputs), each rank holds one
// buffer per carried tensor for the whole session and a step writes only
// its new entries there. A tensor from state() or state_blocks() is a
// snapshot: while it is held, the next step writes a copy instead.
class Session {
 public:
  // A plan in memory (one device or a mesh).
  explicit Session(const Plan& plan, const SessionOptions& options = {});
  // A model file or a plan folder (one device or a mesh).
  static Session open(const std::string& path, const SessionOptions& options = {}, const LoadOptions& load = {});

  // One step. `feeds` by input name, global tensors: every input that is
  // not carried; a carried one only to set its state (before the first
  // step, whose carried inputs are otherwise zeros). Returns the outputs
  // that are not carried, by name, global. Throws Error(kUsage) naming the
  // input for a missing feed, an unknown name or a tensor of the wrong type.
  std::map<std::string, Tensor> step(const std::map<std::string, Tensor>& feeds);
  // One step, and the index of the largest value in the last row of
  // `output` (the next token of a decoder's logits; the lowest index on
  // ties, as one device's argmax). Split over the last dim at the boundary
  // (a vocab-parallel head: --shard logits=[S(2)]), each rank picks its
  // (max, index) pair and only the pairs are exchanged, never the logits.
  // The step's other outputs are not gathered.
  int64_t step_argmax(const std::map<std::string, Tensor>& feeds, const std::string& output);
  std::vector<std::string> output_names() const;  // those step returns: the outputs not carried
  // A carried input's state as the next step takes it, global (gathered
  // from the ranks; for inspection, not on the step's path).
  Tensor state(const std::string& input) const;
  // Every rank's block of a carried input's state, by rank (threads and one
  // device only; under mpirun this process's).
  std::vector<Tensor> state_blocks(const std::string& input) const;
  const std::vector<CarryPair>& carried() const;
  std::vector<std::string> input_names() const;
  int64_t steps() const;
  bool mpi() const;       // this process runs one rank of an mpirun job
  int64_t rank() const;   // under mpirun; else 0
  int64_t ranks() const;  // the plan's
  int threads_per_rank() const;
  // Per-kernel times of this process's first rank over the steps so far
  // (Profile::table), with RunConfig::profile; else empty.
  std::string profile_table() const;

  struct State;

 private:
  explicit Session(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace tessera::api
