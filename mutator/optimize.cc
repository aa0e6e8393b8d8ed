#include "mutator/optimize.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <set>

#include "cost/collective_model.h"
#include "cost/device_profile.h"
#include "cost/flops.h"
#include "cost/graph_cost.h"
#include "cost/plan_cost.h"
#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/hash.h"
#include "graph/liveness.h"
#include "mutator/rules/rule.h"
#include "mutator/sharding/annotations.h"
#include "mutator/sharding/partition.h"

namespace tessera::mutator {

namespace {

using Clock = std::chrono::steady_clock;

// The reference interpreter runs whole models at about this rate (blocked
// GEMMs for Conv and MatMul, every core). Measured on this machine (2 cores,
// shared): one float run of ResNet-50 (8.2 GFLOP) in 0.2 s, BERT-base and
// GPT-2 (22 GFLOP each) in 0.8-1.0 s.
constexpr double kReferenceFlopsPerSecond = 20.0e9;
// Per-node overhead of the interpreter (allocation, dispatch), seconds.
constexpr double kReferenceNodeSeconds = 2e-4;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int64_t weight_bytes(const Graph& g) {
  int64_t b = 0;
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).constant) b += g.type(v).nbytes();
  return b;
}

// Bytes of the non-constant values alive at the worst step when the program
// runs in its topological order (graph/liveness.h).
int64_t peak_activation_bytes(const Graph& g) {
  return peak_live_bytes(g, g.topo_order(), [&](ValueId v) { return g.value(v).is_constant() ? 0 : g.type(v).nbytes(); });
}

// Whether a and b are one program over different constants: the same nodes
// (kind, attributes, operands) on values of the same types, in the same
// order. SPMD ranks must be, to run in lockstep.
bool same_program(const Graph& a, const Graph& b) {
  if (a.num_nodes() != b.num_nodes() || a.num_values() != b.num_values() || a.inputs() != b.inputs() ||
      a.outputs() != b.outputs())
    return false;
  for (ValueId v = 0; v < a.num_values(); ++v)
    if (!(a.type(v) == b.type(v)) || a.value(v).constant.has_value() != b.value(v).constant.has_value())
      return false;
  for (NodeId n = 0; n < a.num_nodes(); ++n) {
    const Node &x = a.node(n), &y = b.node(n);
    if (x.kind != y.kind || x.inputs != y.inputs || x.outputs != y.outputs || !(x.attrs == y.attrs)) return false;
  }
  return true;
}

// The stages' shared clock: each stage gets its share of what is left.
class Budget {
 public:
  Budget(Clock::time_point start, double total_s) : start_(start), total_s_(total_s) {}
  double take(double share) const { return std::max(0.05, (total_s_ - since(start_)) * share); }
  // Its share of what is left, but at least `floor` of the whole: a stage
  // that must not be starved by an earlier one's overrun (the sharding
  // search after the rewrite search on a Llama-2-7B-shaped decoder at tp=4
  // with --budget 60: 44 s of rewrite search and the import left it 0.05 s,
  // the whole mesh never searched, attention kept whole).
  double take_at_least(double share, double floor) const { return std::max(take(share), total_s_ * floor); }

 private:
  Clock::time_point start_;
  double total_s_;
};

// The least share of the whole budget the sharding search gets, whatever
// the stages before it took.
constexpr double kShardSearchFloor = 0.2;

// The rewrite search on every rank's program at its local shapes (a rewrite
// that pays on the whole tensor may not on a rank's block, and the
// reverse). Kept when every rank applied the same rewrites to its own
// blocks, so that the ranks still run one program in lockstep, and the
// plan is predicted faster.
bool rewrite_ranks(Plan& p, SearchOptions so, const cost::DeviceProfile& rank_device, cost::PlanCost& priced) {
  std::vector<Graph> out;
  so.budget_s /= static_cast<double>(p.ranks.size());
  so.progress = nullptr;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    SearchResult s = search(p.ranks[r], so);
    if (s.applied.empty() || (r > 0 && !same_program(out[0], s.graph))) return false;
    out.push_back(std::move(s.graph));
    if (r == 0) p.rank_search = std::move(s);
  }
  cost::PlanCost pc = cost::plan_cost(cost::spmd_rank_programs(out[0], p.mesh, rank_device, cost::runtime_cost_options(rank_device)));
  if (!(pc.time_s < priced.time_s)) {
    p.rank_search = SearchResult();
    return false;
  }
  p.rank_search.graph = Graph();
  p.ranks = std::move(out);
  priced = std::move(pc);
  return true;
}

// Resolves the annotations on the rewritten graph; where the rewrites
// removed a tensor they name, the mesh splits the canonical graph instead
// (what the annotations were written against) and the rewrites are dropped.
std::vector<ShardConstraint> annotations_on(Plan& p, const Graph& canonical, const OptimizeOptions& o) {
  if (o.specs.empty()) return {};
  try {
    return resolve_annotations(p.optimized, o.mesh, o.specs);
  } catch (const Error&) {
    std::vector<ShardConstraint> c = resolve_annotations(canonical, o.mesh, o.specs);  // throws the user's error
    p.optimized = canonical;
    p.search.applied.clear();
    p.search.stats.applied = 0;
    return c;
  }
}

// Carried pairs that no annotation (nor the sharding search, which
// chooses them among its moves) places: under annotations alone
// (--no-shard-search) the boundary sharding both ends cross with is chosen
// here, among whole ([R]) and each sharding that a
// reader of the carried input can take it in (its strategies, graph/
// strategy.h), by the predicted time of the partitioned plan, the one
// already made first on ties. A cache split by heads then stays split from
// one step to the next instead of being gathered at the output and cut
// again at the input every step. Returns whether it re-partitioned.
bool choose_carried_boundary(Plan& p, const DeviceMesh& mesh, const cost::DeviceProfile& device,
                             const cost::DeviceProfile& rank_device, cost::PlanCost& priced) {
  auto annotated = [&](ValueId v) {
    return std::any_of(p.constraints.begin(), p.constraints.end(),
                       [&](const ShardConstraint& c) { return c.value == v && c.boundary; });
  };
  std::vector<std::pair<ValueId, ValueId>> open;  // (output, input)
  for (const CarryPair& c : p.carry) {
    std::optional<ValueId> out = p.optimized.find_value(c.output), in = p.optimized.find_value(c.input);
    if (out && in && !annotated(*out) && !annotated(*in)) open.emplace_back(*out, *in);
  }
  if (open.empty()) return false;
  std::vector<Sharding> options;
  std::vector<std::vector<NodeId>> users = p.optimized.users();
  for (const auto& [out, in] : open)
    for (NodeId u : users[static_cast<size_t>(in)]) {
      const Node& node = p.optimized.node(u);
      for (const Strategy& st : strategies(p.optimized, node, mesh))
        for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
          if (node.inputs[slot] != in) continue;
          const Sharding& s = st.inputs[slot];
          bool split = false, partial = false;
          for (const Placement& pl : s.placements) {
            split |= pl.is_shard();
            partial |= pl.kind == Placement::Kind::kPartial;
          }
          if (split && !partial && std::find(options.begin(), options.end(), s) == options.end()) options.push_back(s);
        }
    }
  struct Choice {
    std::vector<ShardConstraint> constraints;
    ShardedGraph sharding;
    std::vector<Graph> ranks;
    cost::PlanCost cost;
  };
  std::optional<Choice> best;
  for (const Sharding& s : options) {
    Choice c{p.constraints, {}, {}, {}};
    for (const auto& [out, in] : open) {
      try {
        s.validate(mesh, p.optimized.type(in));
      } catch (const Error&) {
        continue;  // a pair this split does not fit stays whole
      }
      std::string origin = "carry: " + p.optimized.value(out).name + "=" + p.optimized.value(in).name + " crosses " +
                           s.str() + " (chosen by predicted time)";
      c.constraints.push_back({out, s, origin, true});
      c.constraints.push_back({in, s, origin, true});
    }
    if (c.constraints.size() == p.constraints.size()) continue;
    c.sharding = propagate(p.optimized, mesh, c.constraints, device);
    c.ranks = partition(p.optimized, c.sharding).ranks;
    c.cost = cost::plan_cost(cost::spmd_rank_programs(c.ranks[0], mesh, rank_device, cost::runtime_cost_options(rank_device)));
    if (c.cost.time_s < (best ? best->cost.time_s : priced.time_s) * (1 - 1e-9)) best = std::move(c);
  }
  if (!best) return false;
  p.constraints = std::move(best->constraints);
  p.sharding = std::move(best->sharding);
  p.ranks = std::move(best->ranks);
  priced = std::move(best->cost);
  return true;
}

// The mesh stage: the sharding search over the rewritten graph (or the
// annotations alone), partitioning, the rewrite search on the ranks, and
// what the reports list of them.
void plan_on_mesh(Plan& p, const Graph& canonical, const OptimizeOptions& o, const cost::DeviceProfile& device,
                  const Budget& budget, const BudgetShares& shares, SearchOptions rank_so) {
  p.offered = o.mesh;
  p.constraints = annotations_on(p, canonical, o);
  DeviceMesh mesh = o.mesh;
  cost::PlanCost priced;
  if (o.shard_search) {
    ShardSearchOptions so;
    so.mesh = o.mesh;
    so.constraints = p.constraints;
    so.specs = o.specs;
    so.rewrite = o.shard_rewrite;
    so.device_memory = o.device_memory;
    so.budget_s = budget.take_at_least(shares.sharding, kShardSearchFloor);
    so.threads = o.threads;
    so.disabled_rules = rank_so.disabled_rules;
    so.carry = p.carry;
    p.sharding_search = search_shardings(p.optimized, device, so);
    p.shard_searched = true;
    if (p.sharding_search.mesh.num_devices() == 1) return;  // one device: the plan found so far
    mesh = p.sharding_search.mesh;
    p.optimized = std::move(p.sharding_search.graph);
    p.sharding_search.graph = Graph();
    p.constraints = p.sharding_search.constraints;
    p.sharding = std::move(p.sharding_search.sharding);
    p.ranks = std::move(p.sharding_search.ranks);
    priced = std::move(p.sharding_search.plan_cost);
  } else {
    p.sharding = propagate(p.optimized, mesh, p.constraints, device);
    p.ranks = partition(p.optimized, p.sharding).ranks;
  }
  p.mesh = mesh;
  // Each rank on its share of the host where ranks share one (CPUs).
  const cost::DeviceProfile rank_device = cost::rank_share(device, cost::ranks_per_node(device, mesh.num_devices()));
  if (!o.shard_search) priced = cost::plan_cost(cost::spmd_rank_programs(p.ranks[0], mesh, rank_device, cost::runtime_cost_options(rank_device)));
  choose_carried_boundary(p, mesh, device, rank_device, priced);
  rank_so.device = rank_device;
  rank_so.budget_s = budget.take(shares.rank_rewrite);
  rewrite_ranks(p, rank_so, rank_device, priced);

  p.cost_after_s = priced.time_s;
  for (int64_t r = 0; r < mesh.num_devices(); ++r) {
    const Graph& rg = p.ranks[static_cast<size_t>(r)];
    p.rank_records.push_back({r, mesh.coords(r), rg.num_nodes(), weight_bytes(rg), peak_activation_bytes(rg),
                              priced.compute_s[static_cast<size_t>(r)], priced.comm_s[static_cast<size_t>(r)]});
  }
  const Graph& r0 = p.ranks[0];
  cost::CostOptions on_mesh;
  on_mesh.mesh = &p.mesh;
  p.classes_after_s = kernel_class_times(r0, cost::graph_cost(r0, rank_device, on_mesh));
  for (NodeId n : r0.topo_order()) {
    const Node& node = r0.node(n);
    if (!op_def(node.kind).is_collective()) continue;
    p.collectives.push_back({node.name, op_name(node.kind), CollectiveAttrs::of(node).mesh_axis,
                             r0.type(node.inputs[0]).nbytes(),
                             cost::collective_node_cost(r0, node, rank_device, &p.mesh).time_s});
  }
}

}  // namespace

int check_trials(const Graph&) {
  // The sets run in lockstep (verifier::Program::run_sets): each weight is
  // read and converted once for all of them, so a larger model costs more
  // sets no more reading. Llama-2-7B in bf16 ran one set above 8 GiB of
  // weights while each set read every weight again (3 took 220 s here).
  return kCheckTrials;
}

namespace {

verifier::EndToEndReport check_plan(const Plan& p, const OptimizeOptions& o) {
  verifier::EndToEndOptions check;
  check.seed = o.seed ^ 0x5eed;
  check.progress = o.progress;
  check.trials = check_trials(p.original);
  check.given_inputs = o.check_inputs;
  check.input_ranges = o.input_ranges;
  if (p.is_mesh()) {
    verifier::ShardedProgram sp;
    sp.mesh = p.mesh;
    sp.per_rank = p.ranks;
    // Fed and read as the plan's boundary says: a sharded input is
    // scattered to the ranks' blocks, a sharded output gathered from them.
    sp.input_shardings = p.sharding.inputs;
    sp.output_shardings = p.sharding.outputs;
    return verifier::check_end_to_end(verifier::Program(p.original), verifier::Program(sp), check);
  }
  if (structurally_equal(p.original, p.optimized)) {
    // Nothing changed: there is nothing to check, and on the largest models
    // the reference run alone would take most of the budget (csrnet: ~25 s).
    verifier::EndToEndReport r;
    r.passed = true;
    r.detail = "the plan is the original graph: nothing to check";
    return r;
  }
  return verifier::check_end_to_end(verifier::Program(p.original), verifier::Program(p.optimized), check);
}

// fnmatch's escapes: a tensor named exactly, whatever its characters.
std::string exact_glob(const std::string& name) {
  std::string out;
  for (char c : name) {
    if (c == '*' || c == '?' || c == '[' || c == '\\' || c == ':' || c == '=') out += '\\';
    out += c;
  }
  return out;
}

// The annotations, with each carried pair's two ends crossing the boundary
// alike: the state a step leaves on the ranks is what the next step takes.
std::vector<std::string> specs_with_carry(const Graph& g, const OptimizeOptions& o, const std::vector<CarryPair>& carry) {
  std::vector<std::string> specs = o.specs;
  if (carry.empty() || o.mesh.num_devices() < 2) return specs;
  std::vector<ShardConstraint> given = resolve_annotations(g, o.mesh, o.specs);
  auto boundary_of = [&](const std::string& name) -> const ShardConstraint* {
    for (const ShardConstraint& c : given)
      if (c.boundary && g.value(c.value).name == name) return &c;
    return nullptr;
  };
  for (const CarryPair& p : carry) {
    const ShardConstraint* out = boundary_of(p.output);
    const ShardConstraint* in = boundary_of(p.input);
    if (out && in && out->sharding != in->sharding)
      TESSERA_THROW(ErrorKind::kInvalidGraph, "carried tensor '" << p.output << "' is annotated " << out->sharding.str()
                                                                 << " but its input '" << p.input << "' "
                                                                 << in->sharding.str()
                                                                 << ": both ends of carried state cross alike");
    if (out && !in) specs.push_back(exact_glob(p.input) + "=" + out->sharding.str());
    if (in && !out) specs.push_back(exact_glob(p.output) + "=" + in->sharding.str());
  }
  return specs;
}

}  // namespace

double estimated_check_seconds(const Graph& original, int trials) {
  // Original and optimized graph each run once per trial; the optimized one
  // does no more work than the original (the cost model never accepts more).
  double one = static_cast<double>(graph_flops(original)) / kReferenceFlopsPerSecond +
               original.num_nodes() * kReferenceNodeSeconds;
  return 2.0 * trials * one;
}

BudgetShares divide_budget(bool mesh) {
  // On a mesh, 70% to the rewrite search, so that it still completes where
  // it does without a mesh (vgg16: 8.4 s of search, about 15.5 s of a 30 s
  // budget left once the check and the export are set aside), then two
  // thirds of what is left to the sharding search (GPT-2 on H100 tp=4: 5.3
  // s), the rest to the ranks' rewrites, one search per rank. A stage that
  // finishes early hands its time on.
  if (!mesh) return {1.0, 0.0, 0.0};
  return {0.7, 0.67, 1.0};
}

Plan optimize(const Graph& g, const OptimizeOptions& given) {
  auto t0 = Clock::now();
  std::vector<CarryPair> carry = resolve_carry(g, given.carry);
  OptimizeOptions options = given;
  options.specs = specs_with_carry(g, given, carry);
  if (!(options.budget_s > 0))
    TESSERA_THROW(ErrorKind::kUsage, "--budget must be > 0 seconds, got " << options.budget_s);
  const bool on_mesh = options.mesh.num_devices() > 1;
  if (!on_mesh && !options.specs.empty())
    TESSERA_THROW(ErrorKind::kUsage, "--shard and --shard-file need a mesh of two or more devices (--mesh tp=2)");
  std::set<std::string> disabled;
  for (const std::string& name : options.disabled_rules) disabled.insert(find_rule(name).name);
  if (!options.shard_rewrite.empty() && !on_mesh)
    TESSERA_THROW(ErrorKind::kUsage, "--shard-rewrite needs a mesh of two or more devices (--mesh tp=2)");
  const cost::DeviceProfile& device = options.device;

  Plan plan;
  plan.original = g;
  plan.carry = std::move(carry);
  plan.device = device.name;
  plan.seed = options.seed;
  for (ValueId v : g.inputs()) plan.input_shapes[g.value(v).name] = g.type(v).shape;
  plan.input_values = options.input_values;
  cost::GraphCost before = cost::graph_cost(g, device);
  plan.cost_before_s = before.time_s;
  plan.classes_before_s = kernel_class_times(g, before);
  Graph work = g;
  plan.canonical = canonicalize(work);
  plan.cost_canonical_s = cost::graph_cost(work, device).time_s;
  // Bad annotations fail before any search time is spent.
  if (on_mesh) resolve_annotations(work, options.mesh, options.specs);

  // The end-to-end check, and what the caller does next (reserve_s), come
  // after the searches: they get what is left of the budget once those are
  // set aside, less a 5% margin for the final costing and assembly. The
  // check is not optional, but it does not take the search's budget: at
  // most a quarter is set aside for it, and on the largest models (csrnet,
  // 41 GFLOP: ~4 s a set) it runs past --budget rather than leave the
  // search a fraction of a second; the report gives both times.
  plan.reserved_check_s = std::min(estimated_check_seconds(g, check_trials(g)), 0.25 * options.budget_s);
  const Budget budget(t0, options.budget_s * 0.95 - plan.reserved_check_s - options.reserve_s);
  const BudgetShares shares = divide_budget(on_mesh);

  SearchOptions so;
  so.device = device;
  so.budget_s = budget.take(shares.rewrite);
  so.seed = options.seed;
  so.threads = options.threads;
  so.disabled_rules = disabled;
  so.partial = options.partial;
  if (options.progress)
    so.progress = [&](double f) { options.progress({"searching", "", std::llround(f * 100), 100, false}); };
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
  plan.cost_single_s = plan.cost_after_s;
  if (on_mesh) plan_on_mesh(plan, work, options, device, budget, shares, so);

  auto check_start = Clock::now();
  plan.check = check_plan(plan, options);
  plan.check_seconds = since(check_start);
  if (!plan.check.passed)
    TESSERA_THROW(ErrorKind::kInternal, "the " << (plan.is_mesh() ? "ranks' programs" : "optimized plan")
                                               << " failed the end-to-end check (" << plan.check.summary()
                                               << "); nothing was written");
  plan.total_seconds = since(t0);
  return plan;
}

std::map<std::string, double> kernel_class_times(const Graph& g, const cost::GraphCost& cost) {
  std::map<std::string, double> out;
  for (size_t k = 0; k < cost.groups.size(); ++k)
    if (!cost.groups[k].empty()) out[op_name(g.node(cost.groups[k][0]).kind)] += cost.kernels[k].time_s;
  for (const cost::KernelCost& r : cost.reorders) out["layout copies"] += r.time_s;
  return out;
}

std::string rules_listing() {
  std::string out = "canonicalization passes (always on):\n";
  for (const auto& [name, identity] : canonical_pass_list()) out += "  " + name + "  " + identity + "\n";
  out += "rules (--disable-rule NAME):\n";
  for (const Rule& r : all_rules())
    out += "  " + r.name + "  " + r.identity + "  " + check_text(r) + (r.mesh_only ? "  (sharding search only)" : "") +
           "\n";
  return out;
}

}  // namespace tessera::mutator
