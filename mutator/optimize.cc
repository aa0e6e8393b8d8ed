#include "mutator/optimize.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "cost/device_profile.h"
#include "cost/flops.h"
#include "cost/graph_cost.h"
#include "graph/error.h"
#include "graph/hash.h"
#include "mutator/rules/rule.h"

namespace tessera::mutator {

namespace {

// The reference interpreter runs whole models at about this rate (blocked
// GEMMs for Conv and MatMul, every core). Measured on this machine (2 cores,
// shared): one float run of ResNet-50 (8.2 GFLOP) in 0.2 s, BERT-base and
// GPT-2 (22 GFLOP each) in 0.8-1.0 s.
constexpr double kReferenceFlopsPerSecond = 20.0e9;
// Per-node overhead of the interpreter (allocation, dispatch), seconds.
constexpr double kReferenceNodeSeconds = 2e-4;

}  // namespace

double estimated_check_seconds(const Graph& original, int trials) {
  // Original and optimized graph each run once per trial; the optimized one
  // does no more work than the original (the cost model never accepts more).
  double one = static_cast<double>(graph_flops(original)) / kReferenceFlopsPerSecond +
               original.num_nodes() * kReferenceNodeSeconds;
  return 2.0 * trials * one;
}

Plan optimize(const Graph& g, const OptimizeOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  if (!(options.budget_s > 0))
    TESSERA_THROW(ErrorKind::kUsage, "--budget must be > 0 seconds, got " << options.budget_s);
  std::set<std::string> disabled;
  for (const std::string& name : options.disabled_rules) disabled.insert(find_rule(name).name);
  cost::DeviceProfile device = cost::resolve_device(options.device);

  Plan plan;
  plan.original = g;
  plan.device = device.name;
  plan.seed = options.seed;
  for (ValueId v : g.inputs()) plan.input_shapes[g.value(v).name] = g.type(v).shape;
  cost::GraphCost before = cost::graph_cost(g, device);
  plan.cost_before_s = before.time_s;
  plan.classes_before_s = kernel_class_times(g, before);
  Graph work = g;
  plan.canonical = canonicalize(work);
  plan.cost_canonical_s = cost::graph_cost(work, device).time_s;

  SearchOptions so;
  so.device = device;
  // The end-to-end check, and what the caller does next (reserve_s), come
  // after the search: the search gets what is left of the budget once they
  // are set aside, less a 5% margin for the final costing and assembly.
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The check is not optional, but it does not take the search's budget:
  // at most a quarter is set aside for it, and on the largest models (csrnet,
  // 41 GFLOP: ~4 s a set) it runs past --budget rather than leave the
  // search a fraction of a second; the report gives both times.
  plan.reserved_check_s = std::min(estimated_check_seconds(g, kCheckTrials), 0.25 * options.budget_s);
  so.budget_s = std::max(0.05, options.budget_s * 0.95 - elapsed - plan.reserved_check_s - options.reserve_s);
  so.seed = options.seed;
  so.threads = options.threads;
  so.disabled_rules = disabled;
  so.partial = options.partial;
  so.progress = options.progress;
  plan.search = search(work, so);
  plan.optimized = std::move(plan.search.graph);
  plan.search.graph = Graph();
  cost::GraphCost after = cost::graph_cost(plan.optimized, device);
  plan.cost_after_s = after.time_s;
  plan.classes_after_s = kernel_class_times(plan.optimized, after);
  if (plan.cost_after_s > plan.cost_before_s) {
    // The cost model prefers the original: keep it (a plan is never slower by the model).
    plan.optimized = g;
    plan.cost_after_s = plan.cost_before_s;
    plan.classes_after_s = plan.classes_before_s;
    plan.canonical.clear();
    plan.search.applied.clear();
    plan.search.stats.applied = 0;
  }

  verifier::EndToEndOptions check;
  check.seed = options.seed ^ 0x5eed;
  check.trials = kCheckTrials;
  check.given_inputs = options.check_inputs;
  auto check_start = std::chrono::steady_clock::now();
  if (structurally_equal(g, plan.optimized)) {
    // Nothing changed: there is nothing to check, and on the largest models
    // the reference run alone would take most of the budget (csrnet: ~25 s).
    plan.check.passed = true;
    plan.check.detail = "the plan is the original graph: nothing to check";
  } else {
    plan.check = verifier::check_end_to_end(verifier::Program(g), verifier::Program(plan.optimized), check);
  }
  plan.check_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - check_start).count();
  if (!plan.check.passed)
    TESSERA_THROW(ErrorKind::kInternal, "the optimized plan failed the end-to-end check ("
                                            << plan.check.summary() << "); nothing was written");
  plan.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return plan;
}

}  // namespace tessera::mutator
