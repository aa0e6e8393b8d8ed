// The superoptimizer's one driver, for one device and for a mesh alike:
// canonicalize, the rewrite search, then on a mesh the sharding search over
// the rewritten graph (one device among its points: the plan just found),
// SPMD partitioning, the rewrite search again on the ranks' programs at
// their local shapes, and the end-to-end check of what will be written.
// Writing files and measuring on the runtime belong to tools/ (this library
// links neither the ONNX exporter nor the runtime); the reports to report/.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cost/graph_cost.h"
#include "graph/graph.h"
#include "graph/progress.h"
#include "mutator/canonicalize.h"
#include "mutator/carry.h"
#include "mutator/plan_files.h"
#include "mutator/search.h"
#include "mutator/sharding/shard_search.h"
#include "verifier/plan_check.h"

namespace tessera::mutator {

// Written into every plan.json.
inline constexpr const char* kTesseraVersion = "0.1.0";

struct OptimizeOptions {
  // The device, resolved once at the API boundary (calibrate/
  // prepare_device.h): every stage prices on this value.
  cost::DeviceProfile device = cost::builtin_profile("cpu");
  double budget_s = 30;        // the whole optimization, divided by divide_budget
  uint64_t seed = 0;
  int threads = 0;
  bool partial = true;
  // Validated: unknown names throw Error(kUsage). Mesh rules among them are
  // not tried by the sharding search either.
  std::vector<std::string> disabled_rules;
  // Long work under way: "searching" (percent of the rewrite search's
  // subprograms), then "checking" (input sets).
  ProgressFn progress;
  // Seconds of the budget the caller needs once optimize returns (measuring
  // both graphs, writing the files): the search leaves them free so that the
  // whole run stays within budget_s.
  double reserve_s = 0;
  // The model's own input sets (one tensor per graph input), which the
  // end-to-end check runs after its random ones.
  std::vector<std::vector<Tensor>> check_inputs;
  // --input-range NAME=LO:HI for the end-to-end check's integer inputs.
  verifier::StatedRanges input_ranges;
  // --input-value NAME=VALUE: inputs the import fixed to constants
  // (recorded in plan.json beside the input shapes).
  std::map<std::string, std::string> input_values;

  // A device mesh. No axes, or one device: the plan is for one device, the
  // same plan whichever (tp=1 and no mesh write the same model).
  DeviceMesh mesh;
  std::vector<std::string> specs;  // --shard, then the --shard-file's
  // The sharding search decides what the annotations leave open, and with
  // none the degree too (one device included). false: the annotations and
  // propagation alone, on the whole mesh.
  bool shard_search = true;
  int64_t device_memory = 0;  // bytes per device; 0: the device profile's
  std::string shard_rewrite;  // ShardSearchOptions::rewrite
  // --carry OUT=IN (carry.h): outputs that feed inputs at the next step. On
  // a mesh both ends of a pair cross the boundary alike: an annotation on
  // one end is given to the other.
  std::vector<std::string> carry;
};

// How the search time is shared among the stages, in one place: each
// stage gets its share of what the stages before it left (a stage that
// finishes early hands the rest on). A rewrite search the budget cuts short
// depends on the clock: on a mesh it has less time than without one, so a
// mesh plan can then start from a slower single-device plan (the report
// says when the search's budget ran out).
struct BudgetShares {
  double rewrite = 1.0;       // the rewrite search on the whole graph
  double sharding = 0.0;      // the sharding search
  double rank_rewrite = 0.0;  // the rewrite search on the ranks' programs
};
BudgetShares divide_budget(bool mesh);

// Rough seconds the end-to-end check takes on the reference interpreter
// (double precision, one thread), from the graphs' FLOPs.
double estimated_check_seconds(const Graph& original, int trials);

// Seeded random input sets of the end-to-end check. Each mutation was already
// verified on its own; the check is what catches a wrong composition, so it
// runs more than one set (the reference interpreter takes ~2.4 s per set on
// BERT-base by the estimate below; a plan that changed nothing is not run).
inline constexpr int kCheckTrials = 3;
// The random input sets the check runs for `original`.
int check_trials(const Graph& original);

// A collective of rank 0's program, as the reports list it.
struct CollectiveRecord {
  std::string name, kind, mesh_axis;
  int64_t bytes = 0;      // the input tensor of one rank
  double predicted_s = 0;
};

struct RankRecord {
  int64_t rank = 0;
  std::vector<int64_t> coords;
  int64_t nodes = 0;
  int64_t weight_bytes = 0;           // its constants
  int64_t peak_activation_bytes = 0;  // live values at the worst step, in the program's order
  double compute_s = 0, comm_s = 0;   // predicted
};

// What the optimizer made, for one device or a mesh: one device is the mesh
// of one (no ranks; `optimized` is the program).
struct Plan {
  static constexpr int kFormatVersion = kPlanFormatVersion;
  Graph original;
  Graph optimized;  // the rewritten graph: the program on one device, what a mesh plan splits
  std::string device;  // profile name
  std::map<std::string, Shape> input_shapes;
  std::map<std::string, std::string> input_values;  // OptimizeOptions::input_values
  std::vector<PassRecord> canonical;
  std::vector<CarryPair> carry;  // carried state (OptimizeOptions::carry), resolved
  SearchResult search;  // the rewrite search on the whole graph (search.graph is moved to `optimized`)

  // The mesh stage (OptimizeOptions::mesh of two or more devices).
  DeviceMesh offered;   // the mesh asked for; no axes: none
  bool shard_searched = false;
  ShardSearchResult sharding_search;  // when searched (its graph and ranks moved into the plan)
  std::vector<ShardConstraint> constraints;  // annotations, then the search's pins
  DeviceMesh mesh;          // the mesh the plan runs on; no axes: one device
  ShardedGraph sharding;    // of `optimized`, on `mesh`
  std::vector<Graph> ranks;  // one program per rank; empty on one device
  // The rewrite search on the ranks' programs at their local shapes: rank
  // 0's record (every rank applied the same rewrites to its own blocks).
  SearchResult rank_search;
  std::vector<CollectiveRecord> collectives;  // rank 0's, in program order
  std::vector<RankRecord> rank_records;

  double cost_before_s = 0;     // predicted, the original on one device
  double cost_canonical_s = 0;  // the canonical graph on one device
  double cost_single_s = 0;     // the single-device plan (`optimized` on one device)
  double cost_after_s = 0;      // the plan: cost_single_s, or the ranks' critical path
  // Predicted seconds by kernel class (kernel_class_times), for the reports:
  // the original, and the plan (rank 0's program with its collectives).
  std::map<std::string, double> classes_before_s, classes_after_s;
  verifier::EndToEndReport check;
  double reserved_check_s = 0;  // set aside from the budget for the check (estimate)
  double check_seconds = 0;     // what the check took
  double total_seconds = 0;
  uint64_t seed = 0;

  bool is_mesh() const { return !ranks.empty(); }
};

// Predicted seconds of g's kernels (cost::graph_cost) summed by kernel
// class: the op of the kernel's root node ("Conv" for Conv+Add+Relu), and
// "layout copies" for the CPU's reorders into row-major form.
std::map<std::string, double> kernel_class_times(const Graph& g, const cost::GraphCost& cost);

// Throws Error(kUsage) for a budget <= 0, an unknown rule, a bad mesh or
// annotation, Error(kResource) when no sharding fits the device memory, and
// Error(kInternal) when the plan fails the end-to-end check (a plan that
// fails is never returned, so never written).
Plan optimize(const Graph& g, const OptimizeOptions& options);

// --list-rules: canonical passes, then rules with identity and obligation.
std::string rules_listing();

}  // namespace tessera::mutator
