#include "mutator/sharding/shard_search.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "cost/graph_cost.h"
#include "cost/plan_cost.h"
#include "graph/error.h"
#include "mutator/rules/rule.h"
#include "mutator/sharding/annotations.h"
#include "mutator/sharding/partition.h"
#include "mutator/sharding/sharded_cost.h"
#include "mutator/sharding/structure.h"

namespace tessera::mutator {
namespace {

using Clock = std::chrono::steady_clock;

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g ms", s * 1e3);
  return buf;
}

std::string gb(int64_t bytes) {
  char buf[32];
  auto b = static_cast<double>(bytes);
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.3g GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.3g MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.3g kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  return buf;
}

// Pin a weight role, or reduce a role of Partial values there.
enum class DecisionKind { kPinWeight, kReduceAt };

// One decision: a role and the shardings it may be pinned to (index 0 of
// the state is "not pinned").
struct Decision {
  DecisionKind kind;
  int role;
  std::vector<Sharding> options;
  bool product = false;  // the weight of a matrix product, convolution or embedding
};

struct Eval {
  bool ok = false;
  ShardedCost cost;
  int64_t excess = 0;  // bytes over the device memory
  double time() const { return cost.time_s(); }
};

// a strictly better than b: less memory over the limit, then faster by more
// than rounding.
bool better(const Eval& a, const Eval& b) {
  if (!a.ok) return false;
  if (!b.ok) return true;
  if (a.excess != b.excess) return a.excess < b.excess;
  return a.time() < b.time() * (1 - 1e-9);
}

class MeshSearch {
 public:
  MeshSearch(const Graph& g, const DeviceMesh& mesh, const cost::DeviceProfile& device,
             const std::vector<ShardConstraint>& fixed, int64_t memory, int threads, Clock::time_point deadline)
      : g_(g), mesh_(mesh), device_(device), fixed_(fixed), memory_(memory), threads_(threads), deadline_(deadline),
        table_(strategy_table(g, mesh)), model_(g, mesh, device) {
    for (const ShardConstraint& c : fixed) annotated_.insert(c.value);
    weight_roles_ = weight_roles(g);
    for (size_t r = 0; r < weight_roles_.size(); ++r) {
      const Role& role = weight_roles_[r];
      if (taken(role)) continue;
      std::vector<Sharding> opts;
      for (const Strategy& s : table_[static_cast<size_t>(role.reader)]) {
        const Sharding& in = s.inputs[static_cast<size_t>(role.slot)];
        if (in == Sharding::replicated(mesh_) || std::find(opts.begin(), opts.end(), in) != opts.end()) continue;
        opts.push_back(in);
      }
      OpKind k = g.node(role.reader).kind;
      bool product = op_def(k).family == OpFamily::kNn || k == OpKind::kGather;
      if (!opts.empty())
        decisions_.push_back({DecisionKind::kPinWeight, static_cast<int>(r), std::move(opts), product});
    }
    find_siblings();
  }

  int weight_decisions() const { return static_cast<int>(decisions_.size()); }
  const std::vector<Role>& weight_roles_list() const { return weight_roles_; }
  int64_t evaluations() const { return evaluations_; }
  bool exhausted() const { return exhausted_; }

  DegreePoint run(std::vector<ShardConstraint>& pins) {
    // Two starts, the better end wins: the products' weights first, then
    // every decision (where Megatron-style plans are: a split of fc1 alone
    // pays, a split of the tokens would lead elsewhere first); and every
    // decision from the start (where splitting the tokens is).
    const std::vector<int> replicated(decisions_.size(), 0);
    std::vector<int> state = replicated;
    Eval best = evaluate(state);
    if (mesh_.num_devices() == 1) return point(state, best, pins);  // nothing to split over
    descend(state, best, true);
    descend(state, best, false);
    std::vector<std::string> first = taken_;
    taken_.clear();
    std::vector<int> other = replicated;
    Eval other_best = evaluate(other);
    descend(other, other_best, false);
    if (better(other_best, best)) {
      state = other;
      best = other_best;
    } else {
      taken_ = first;
    }
    // Where Partials are reduced: offered for the values still Partial.
    if (add_reduce_decisions(state)) {
      state.resize(decisions_.size(), 0);
      descend(state, best, false);
    }
    return point(state, best, pins);
  }

  DegreePoint point(const std::vector<int>& state, const Eval& best, std::vector<ShardConstraint>& pins) {
    DegreePoint p;
    p.mesh = mesh_;
    p.predicted_s = best.time();
    p.compute_s = best.cost.compute_s;
    p.comm_s = best.cost.comm_s;
    p.memory_bytes = best.cost.memory_bytes();
    p.fits = best.ok && best.excess == 0;
    p.evaluations = evaluations_;
    pins = constraints(state, true);
    p.moves = taken_;
    return p;
  }

 private:
  bool taken(const Role& role) const {
    return std::any_of(role.values.begin(), role.values.end(), [&](ValueId v) { return annotated_.count(v) > 0; });
  }
  const Role& role_of(size_t d) const {
    const Decision& dec = decisions_[d];
    return dec.kind == DecisionKind::kPinWeight ? weight_roles_[static_cast<size_t>(dec.role)]
                                                   : value_roles_[static_cast<size_t>(dec.role)];
  }

  std::string describe_move(size_t d, int option) const {
    const Decision& dec = decisions_[d];
    const Role& role = role_of(d);
    const Sharding& s = dec.options[static_cast<size_t>(option - 1)];
    std::string what = dec.kind == DecisionKind::kPinWeight ? "pin " : "reduce ";
    return what + role.label + " (" + g_.value(role.values[0]).name + (role.values.size() > 1 ? ", ..." : "") +
           ") to " + s.str();
  }

  std::vector<ShardConstraint> constraints(const std::vector<int>& state, bool with_origin) const {
    std::vector<ShardConstraint> out = fixed_;
    for (size_t d = 0; d < state.size(); ++d) {
      if (state[d] == 0) continue;
      const Sharding& s = decisions_[d].options[static_cast<size_t>(state[d] - 1)];
      std::string origin = with_origin ? "search: " + describe_move(d, state[d]) : "";
      for (ValueId v : role_of(d).values) out.push_back({v, s, origin});
    }
    return out;
  }

  Eval evaluate(const std::vector<int>& state) { return evaluate_threadsafe(state); }

  // Best-improvement descent: every single move from `state`, evaluated on
  // the threads, the best taken; ties to the first in decision order.
  // A move sets some decisions to options (0: unpinned). Single moves
  // change one decision; sibling moves pin every weight role read from the
  // same activation alike (Q, K and V; gate and up), since one of them
  // alone rarely pays for the collective they share.
  using Move = std::vector<std::pair<size_t, int>>;

  std::vector<Move> moves_from(const std::vector<int>& state, bool products_only) const {
    std::vector<Move> moves;
    for (size_t d = 0; d < decisions_.size(); ++d)
      for (int o = 0; !(products_only && !decisions_[d].product) && o <= static_cast<int>(decisions_[d].options.size()); ++o)
        if (o != state[d]) moves.push_back({{d, o}});
    for (const std::vector<size_t>& group : siblings_) {
      if (products_only && !decisions_[group[0]].product) continue;
      for (size_t o = 0; o < decisions_[group[0]].options.size(); ++o) {
        const Sharding& want = decisions_[group[0]].options[o];
        Move m;
        bool changes = false;
        for (size_t d : group) {
          const std::vector<Sharding>& opts = decisions_[d].options;
          auto it = std::find(opts.begin(), opts.end(), want);
          if (it == opts.end()) {
            m.clear();
            break;
          }
          int idx = static_cast<int>(it - opts.begin()) + 1;
          changes |= state[d] != idx;
          m.push_back({d, idx});
        }
        if (m.size() == group.size() && changes) moves.push_back(std::move(m));
      }
    }
    return moves;
  }

  std::string describe(const Move& m) const {
    std::string out;
    for (const auto& [d, o] : m) {
      if (!out.empty()) out += " + ";
      out += o ? describe_move(d, o) : "unpin " + role_of(d).label;
    }
    return out;
  }

  // Best-improvement descent: every move from `state`, evaluated on the
  // threads, the best taken; ties to the first in move order.
  void descend(std::vector<int>& state, Eval& best, bool products_only) {
    while (Clock::now() < deadline_) {
      std::vector<Move> moves = moves_from(state, products_only);
      if (moves.empty()) return;
      std::vector<Eval> results(moves.size());
      std::atomic<size_t> next{0};
      std::atomic<bool> late{false};
      auto work = [&] {
        for (size_t k; (k = next.fetch_add(1)) < moves.size();) {
          if (Clock::now() >= deadline_) {
            late = true;
            return;
          }
          std::vector<int> s = state;
          for (const auto& [d, o] : moves[k]) s[d] = o;
          results[k] = evaluate_threadsafe(s);
        }
      };
      std::vector<std::thread> pool;
      for (int t = 1; t < threads_; ++t) pool.emplace_back(work);
      work();
      for (std::thread& t : pool) t.join();
      if (late) exhausted_ = true;
      if (std::getenv("TESSERA_SHARD_TRACE"))
        for (size_t k = 0; k < moves.size(); ++k)
          std::fprintf(stderr, "  [%s] %s: %s (kernels %s, comm %s, mem %lld)\n", mesh_.str().c_str(),
                       describe(moves[k]).c_str(), results[k].ok ? ms(results[k].time()).c_str() : "invalid",
                       ms(results[k].cost.compute_s).c_str(), ms(results[k].cost.comm_s).c_str(),
                       (long long)results[k].cost.memory_bytes());
      size_t pick = moves.size();
      for (size_t k = 0; k < moves.size(); ++k)
        if (better(results[k], pick == moves.size() ? best : results[pick])) pick = k;
      if (pick == moves.size()) return;
      for (const auto& [d, o] : moves[pick]) state[d] = o;
      best = results[pick];
      taken_.push_back(describe(moves[pick]));
    }
    exhausted_ = true;
  }

  // Weight decisions whose roles' first readers read the same activation.
  void find_siblings() {
    std::map<ValueId, std::vector<size_t>> by_input;
    for (size_t d = 0; d < decisions_.size(); ++d) {
      const Role& role = role_of(d);
      const Node& n = g_.node(role.reader);
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (static_cast<int>(i) != role.slot && n.inputs[i] != kNoValue && !g_.value(n.inputs[i]).constant) {
          by_input[n.inputs[i]].push_back(d);
          break;
        }
    }
    for (auto& [v, group] : by_input)
      if (group.size() > 1) siblings_.push_back(group);
  }

  Eval evaluate_threadsafe(const std::vector<int>& state) {
    Eval e;
    evaluations_.fetch_add(1);
    try {
      ShardedGraph s = propagate(g_, mesh_, constraints(state, false), device_, &table_);
      e.cost = model_(s);
      e.ok = true;
      e.excess = std::max<int64_t>(0, e.cost.memory_bytes() - memory_);
    } catch (const Error&) {
      e.ok = false;
    }
    return e;
  }

  // Roles of the values the current plan leaves Partial, each offered as R
  // (AllReduce there) or S(d) along a dim the axes divide (ReduceScatter).
  bool add_reduce_decisions(const std::vector<int>& state) {
    ShardedGraph s = propagate(g_, mesh_, constraints(state, false), device_, &table_);
    std::vector<ValueId> partial;
    for (ValueId v = 0; v < g_.num_values(); ++v) {
      if (g_.value(v).constant || annotated_.count(v)) continue;
      const Sharding& sh = s.values[static_cast<size_t>(v)];
      if (std::any_of(sh.placements.begin(), sh.placements.end(),
                      [](const Placement& p) { return p.kind == Placement::Kind::kPartial; }))
        partial.push_back(v);
    }
    if (partial.empty()) return false;
    value_roles_ = value_roles(g_, partial);
    for (size_t r = 0; r < value_roles_.size(); ++r) {
      ValueId v = value_roles_[r].values[0];
      const Sharding& sh = s.values[static_cast<size_t>(v)];
      std::vector<Sharding> opts;
      Sharding reduced = sh;
      for (Placement& p : reduced.placements)
        if (p.kind == Placement::Kind::kPartial) p = Placement::replicate();
      opts.push_back(reduced);
      for (int64_t d = 0; d < g_.type(v).rank(); ++d) {
        Sharding scattered = sh;
        for (Placement& p : scattered.placements)
          if (p.kind == Placement::Kind::kPartial) p = Placement::shard(d);
        try {
          scattered.validate(mesh_, g_.type(v));
          opts.push_back(scattered);
        } catch (const Error&) {
        }
      }
      decisions_.push_back({DecisionKind::kReduceAt, static_cast<int>(r), std::move(opts), false});
    }
    return true;
  }

  const Graph& g_;
  DeviceMesh mesh_;
  const cost::DeviceProfile& device_;
  std::vector<ShardConstraint> fixed_;
  int64_t memory_;
  int threads_;
  Clock::time_point deadline_;
  StrategyTable table_;
  ShardedCostModel model_;
  std::set<ValueId> annotated_;
  std::vector<Role> weight_roles_, value_roles_;
  std::vector<Decision> decisions_;
  std::vector<std::vector<size_t>> siblings_;
  std::vector<std::string> taken_;
  std::atomic<int64_t> evaluations_{0};
  bool exhausted_ = false;
};

// Every instance of a rewrite the graph has (a rule at each Split),
// applied together.
Graph rewrite_splits(const Graph& g, const std::function<std::vector<Mutation>(const RuleContext&, NodeId)>& rule,
                     std::vector<std::string>& applied) {
  std::vector<std::vector<NodeId>> users = g.users();
  RuleContext ctx{g, users};
  std::vector<Mutation> ms;
  std::set<NodeId> used;
  for (NodeId n : g.topo_order()) {
    if (g.node(n).kind != OpKind::kSplit) continue;
    for (Mutation& m : rule(ctx, n)) {
      if (std::any_of(m.nodes.begin(), m.nodes.end(), [&](NodeId x) { return used.count(x) > 0; })) continue;
      used.insert(m.nodes.begin(), m.nodes.end());
      m.id.kind = MutationId::Kind::kSharding;
      applied.push_back(m.description);
      ms.push_back(std::move(m));
    }
  }
  return ms.empty() ? g : apply_mutations(g, ms);
}

}  // namespace

std::vector<DeviceMesh> sub_meshes(const DeviceMesh& mesh) {
  std::vector<std::vector<int64_t>> sizes(1);
  for (const DeviceMesh::Axis& a : mesh.axes()) {
    std::vector<std::vector<int64_t>> next;
    for (const std::vector<int64_t>& prefix : sizes)
      for (int64_t d = 1; d <= a.size; ++d)
        if (a.size % d == 0) {
          next.push_back(prefix);
          next.back().push_back(d);
        }
    sizes = std::move(next);
  }
  std::vector<std::pair<int64_t, std::vector<int64_t>>> keyed;
  for (const std::vector<int64_t>& s : sizes) {
    int64_t n = 1;
    for (int64_t x : s) n *= x;
    keyed.push_back({n, s});
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<DeviceMesh> out;
  for (const auto& [n, s] : keyed) {
    std::vector<DeviceMesh::Axis> axes;
    for (size_t a = 0; a < s.size(); ++a)
      if (s[a] > 1) axes.push_back({mesh.axes()[a].name, s[a]});
    // One device: a mesh of one rank on the innermost axis, so that the
    // plan is still a mesh plan (rank0.onnx) a mesh run reads.
    if (axes.empty()) axes.push_back({mesh.axes().empty() ? "tp" : mesh.axes().back().name, 1});
    out.emplace_back(std::move(axes));
  }
  return out;
}

namespace {

// The point's plan as it will be written: propagated from its pins,
// partitioned (rank 0; SPMD ranks run alike), and priced on the ranks'
// critical path, so that degrees and rewrites are compared on the number
// plan.json reports.
// Propagation runs on `device`, as shard() runs it; the ranks' programs are
// priced on `rank_device`, each rank's share of its host.
void price_partitioned(const Graph& g, const DeviceMesh& mesh, const cost::DeviceProfile& device,
                       const cost::DeviceProfile& rank_device, const std::vector<ShardConstraint>& pins,
                       DegreePoint& p) {
  p.priced_as_plan = true;
  if (mesh.num_devices() == 1) {
    p.predicted_s = p.compute_s = cost::graph_cost(g, rank_device).time_s;
    p.comm_s = 0;
    return;
  }
  ShardedGraph sharded = propagate(g, mesh, pins, device);
  Graph rank0 = partition_rank(g, sharded, 0);
  cost::PlanCost pc = cost::plan_cost(cost::spmd_rank_programs(rank0, mesh, rank_device));
  p.predicted_s = pc.time_s;
  p.compute_s = pc.compute_s[0];
  p.comm_s = pc.comm_s[0];
}

}  // namespace

size_t pick_degree_point(const std::vector<DegreePoint>& curve) {
  size_t fastest = curve.size();
  for (size_t k = 0; k < curve.size(); ++k)
    if (curve[k].fits && (fastest == curve.size() || curve[k].predicted_s < curve[fastest].predicted_s * (1 - 1e-9)))
      fastest = k;
  if (fastest == curve.size()) return fastest;
  // The fewest devices within kDegreeSlack of the fastest, and the fastest
  // of those (a rewrite of the graph on as many devices may be).
  size_t pick = fastest;
  for (size_t k = 0; k < curve.size(); ++k) {
    const DegreePoint& p = curve[k];
    if (!p.fits || p.predicted_s > curve[fastest].predicted_s * (1 + kDegreeSlack)) continue;
    int64_t devices = p.mesh.num_devices(), picked = curve[pick].mesh.num_devices();
    if (devices < picked || (devices == picked && p.predicted_s < curve[pick].predicted_s * (1 - 1e-9))) pick = k;
  }
  return pick;
}

ShardSearchResult search_shardings(const Graph& g, const cost::DeviceProfile& device,
                                   const ShardSearchOptions& options) {
  auto start = Clock::now();
  auto deadline = start + std::chrono::microseconds(static_cast<int64_t>(options.budget_s * 1e6));
  int threads = options.threads > 0 ? options.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  ShardSearchResult r;
  r.offered = options.mesh;
  r.device_memory = options.device_memory > 0 ? options.device_memory : device.main_memory().capacity_bytes;
  if (r.device_memory <= 0) r.device_memory = std::numeric_limits<int64_t>::max();

  struct Variant {
    std::string name;
    Graph graph;
    std::vector<std::string> rewrites;
  };
  std::vector<Variant> variants;
  variants.push_back({"as exported", g, {}});
  if (!options.rewrite.empty() && options.rewrite != "none" && options.rewrite != "split-merged-projection" &&
      options.rewrite != "permute-merged-projection")
    TESSERA_THROW(ErrorKind::kUsage, "unknown sharding rewrite '" << options.rewrite
                                                                  << "' (none, split-merged-projection, permute-merged-projection)");
  // Rewrites are tried with no annotations, or with annotations given as
  // specs (resolved on each rewritten graph).
  const bool rewrites = options.rewrites && (options.constraints.empty() || !options.specs.empty());
  auto constraints_on = [&](const Variant& v) -> std::optional<std::vector<ShardConstraint>> {
    if (v.rewrites.empty() || options.specs.empty()) return options.constraints;
    try {
      return resolve_annotations(v.graph, options.mesh, options.specs);
    } catch (const Error&) {
      return std::nullopt;  // the annotations do not name this graph's tensors
    }
  };
  if (rewrites) {
    std::vector<std::string> applied;
    Graph split = rewrite_splits(g, find_rule("split-merged-projection").fn, applied);
    if (!applied.empty())
      variants.push_back({"split-merged-projection x" + std::to_string(applied.size()), std::move(split), applied});
  }
  std::map<int64_t, size_t> permuted;  // ways -> variant

  std::vector<DeviceMesh> meshes = options.degrees && options.constraints.empty() ? sub_meshes(options.mesh)
                                                                                  : std::vector<DeviceMesh>{options.mesh};
  std::vector<std::vector<ShardConstraint>> pins;
  std::vector<size_t> variant_of;
  for (const DeviceMesh& mesh : meshes) {
    std::vector<size_t> tried{0};
    if (mesh.num_devices() > 1 && rewrites) {
      // A rewrite for sharding only: the split one, and the merged weight
      // permuted for this mesh's innermost degree.
      if (variants.size() > 1 && variants[1].name.rfind("split-", 0) == 0) tried.push_back(1);
      int64_t ways = mesh.axes().back().size;
      auto it = permuted.find(ways);
      if (it == permuted.end()) {
        std::vector<std::string> applied;
        Graph pg = rewrite_splits(
            g, [ways](const RuleContext& ctx, NodeId n) { return permute_merged_projection(ctx, n, ways); }, applied);
        size_t idx = variants.size();
        if (!applied.empty())
          variants.push_back({"permute-merged-projection(" + std::to_string(ways) + ") x" + std::to_string(applied.size()),
                              std::move(pg), applied});
        it = permuted.emplace(ways, applied.empty() ? 0 : idx).first;
      }
      if (it->second > 0) tried.push_back(it->second);
    }
    if (!options.rewrite.empty() && mesh.num_devices() > 1) {
      // One graph asked for: as exported, or one rewrite's.
      std::vector<size_t> only;
      for (size_t v : tried)
        if (options.rewrite == "none" ? v == 0 : variants[v].name.rfind(options.rewrite, 0) == 0) only.push_back(v);
      tried = only;
    }
    for (size_t v : tried) {
      std::optional<std::vector<ShardConstraint>> fixed = constraints_on(variants[v]);
      if (!fixed) continue;
      // A rank's share of the host where ranks share one (CPUs).
      const cost::DeviceProfile rank_device = cost::rank_share(device, cost::ranks_per_node(device, mesh.num_devices()));
      MeshSearch s(variants[v].graph, mesh, rank_device, *fixed, r.device_memory, threads, deadline);
      if (r.roles == 0) {
        r.roles = s.weight_decisions();
        for (const Role& role : s.weight_roles_list()) r.weights_in_roles += static_cast<int64_t>(role.values.size());
      }
      pins.emplace_back();
      DegreePoint p = s.run(pins.back());
      p.graph = variants[v].name;
      r.evaluations += s.evaluations();
      r.budget_exhausted |= s.exhausted();
      r.curve.push_back(std::move(p));
      variant_of.push_back(v);
    }
  }
  if (!options.rewrite.empty() && options.rewrite != "none" &&
      std::none_of(r.curve.begin(), r.curve.end(), [&](const DegreePoint& p) { return p.graph.rfind(options.rewrite, 0) == 0; }))
    TESSERA_THROW(ErrorKind::kUsage, "sharding rewrite '" << options.rewrite << "' applies nowhere in the model on "
                                                          << options.mesh.str()
                                                          << (options.specs.empty() ? "" : " under its annotations"));
  // The finalists priced as written.
  double best_estimate = std::numeric_limits<double>::infinity();
  for (DegreePoint& p : r.curve) {
    p.search_s = p.predicted_s;
    if (p.fits) best_estimate = std::min(best_estimate, p.predicted_s);
  }
  for (size_t k = 0; k < r.curve.size(); ++k) {
    DegreePoint& p = r.curve[k];
    // One device is the baseline every other point is read against (and
    // cheap to price): always priced as written.
    bool finalist = p.fits && p.search_s <= best_estimate * (1 + kRepriceSlack);
    if (!finalist && p.mesh.num_devices() > 1) continue;
    const cost::DeviceProfile rank_device =
        cost::rank_share(device, cost::ranks_per_node(device, p.mesh.num_devices()));
    price_partitioned(variants[variant_of[k]].graph, p.mesh, device, rank_device, pins[k], p);
  }
  size_t pick = pick_degree_point(r.curve);
  if (pick == r.curve.size()) {
    int64_t smallest = std::numeric_limits<int64_t>::max();
    std::string where;
    for (const DegreePoint& p : r.curve)
      if (p.memory_bytes < smallest) {
        smallest = p.memory_bytes;
        where = p.mesh.str();
      }
    TESSERA_THROW(ErrorKind::kResource, "no sharding on " << options.mesh.str() << " fits " << gb(r.device_memory)
                                                          << " per device: the smallest found needs " << gb(smallest)
                                                          << " per device (on " << where << ")");
  }
  r.chosen = pick;
  const DegreePoint& best = r.curve[pick];
  r.mesh = best.mesh;
  r.graph = variants[variant_of[pick]].graph;
  r.rewrites = variants[variant_of[pick]].rewrites;
  r.constraints = pins[pick];

  // Why: the chosen point against one device and against the whole mesh.
  const DegreePoint* single = nullptr;
  const DegreePoint* full = nullptr;
  for (const DegreePoint& p : r.curve) {
    if (p.mesh.num_devices() == 1 && !single) single = &p;
    if (p.mesh.num_devices() == options.mesh.num_devices() && (!full || p.predicted_s < full->predicted_s)) full = &p;
  }
  std::string why;
  if (best.mesh.num_devices() == 1) {
    why = "no split: one device is predicted fastest (" + ms(best.predicted_s) + ")";
    if (full && full != &best)
      why += "; on " + full->mesh.str() + " the best plan found takes " + ms(full->predicted_s) + " (" +
             ms(full->compute_s) + " of kernels per rank + " + ms(full->comm_s) + " of collectives)";
  } else {
    why = "split over " + best.mesh.str() + ": predicted " + ms(best.predicted_s) + " (" + ms(best.compute_s) +
          " of kernels per rank + " + ms(best.comm_s) + " of collectives)";
    if (single) why += " against " + ms(single->predicted_s) + " on one device";
    if (best.mesh.num_devices() < options.mesh.num_devices() && full)
      why += "; all of " + options.mesh.str() + " would take " + ms(full->predicted_s);
  }
  if (single && !single->fits) why += "; the model does not fit one device (" + gb(single->memory_bytes) + " > " + gb(r.device_memory) + ")";
  r.why = why;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace tessera::mutator
