// The superoptimizer's entry point: canonicalize, search, check end to end.
// Writing files and measuring on the runtime belong to tools/ (this library
// links neither the ONNX exporter nor the runtime).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cost/graph_cost.h"
#include "graph/graph.h"
#include "mutator/canonicalize.h"
#include "mutator/plan_files.h"
#include "mutator/search.h"
#include "verifier/plan_check.h"

namespace tessera::mutator {

// Written into every plan.json.
inline constexpr const char* kTesseraVersion = "0.1.0";

struct OptimizeOptions {
  std::string device = "cpu";  // cpu | a100 | h100 | h200 | PROFILE.json
  double budget_s = 30;
  uint64_t seed = 0;
  int threads = 0;
  bool partial = true;
  std::vector<std::string> disabled_rules;  // validated: unknown names throw Error(kUsage)
  std::function<void(double)> progress;
  // Seconds of the budget the caller needs once optimize returns (measuring
  // both graphs, writing the files): the search leaves them free so that the
  // whole run stays within budget_s.
  double reserve_s = 0;
  // The model's own input sets (one tensor per graph input), which the
  // end-to-end check runs after its random ones.
  std::vector<std::vector<Tensor>> check_inputs;
};

// Rough seconds the end-to-end check takes on the reference interpreter
// (double precision, one thread), from the graphs' FLOPs.
double estimated_check_seconds(const Graph& original, int trials);

// Seeded random input sets of the end-to-end check. Each mutation was already
// verified on its own; the check is what catches a wrong composition, so it
// runs more than one set (the reference interpreter takes ~2.4 s per set on
// BERT-base by the estimate below; a plan that changed nothing is not run).
inline constexpr int kCheckTrials = 3;

struct Plan {
  static constexpr int kFormatVersion = kPlanFormatVersion;
  Graph original;
  Graph optimized;
  std::string device;  // profile name
  std::map<std::string, Shape> input_shapes;
  std::vector<PassRecord> canonical;
  SearchResult search;  // search.graph is empty (moved to `optimized`)
  double cost_before_s = 0;  // predicted, original graph
  double cost_canonical_s = 0;
  double cost_after_s = 0;
  // Predicted seconds by kernel class (kernel_class_times), for the reports.
  std::map<std::string, double> classes_before_s, classes_after_s;
  verifier::EndToEndReport check;
  double reserved_check_s = 0;  // set aside from the budget for the check (estimate)
  double check_seconds = 0;     // what the check took
  double total_seconds = 0;
  uint64_t seed = 0;
};

// Predicted seconds of g's kernels (cost::graph_cost) summed by kernel
// class: the op of the kernel's root node ("Conv" for Conv+Add+Relu), and
// "layout copies" for the CPU's reorders into row-major form.
std::map<std::string, double> kernel_class_times(const Graph& g, const cost::GraphCost& cost);

// Throws Error(kUsage) for a budget <= 0 or an unknown rule, and
// Error(kInternal) when the optimized graph fails the end-to-end check (a
// plan that fails is never returned, so never written).
Plan optimize(const Graph& g, const OptimizeOptions& options);

// The plan as versioned JSON. `timing` false leaves out the fields that
// depend on the clock (for byte comparisons). The folder's file digests are
// added when the files are written (with_plan_files, plan_files.h).
std::string plan_json(const Plan& plan, bool timing = true);
// Measured gain, when the caller measured one.
struct Measurement {
  double before_ms = 0, after_ms = 0;
  int runs = 0;
  std::string backend;
};
std::string report_json(const Plan& plan, const Measurement* measured);
std::string report_text(const Plan& plan, const Measurement* measured);

// --list-rules: canonical passes, then rules with identity and obligation.
std::string rules_listing();

}  // namespace tessera::mutator
