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
#include "mutator/sharding/shard_plan.h"
#include "mutator/sharding/shard_variants.h"
#include "mutator/sharding/sharded_cost.h"
#include "mutator/sharding/spatial_strategy.h"
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

// Pin a weight role, reduce a role of Partial values there, choose how
// carried state crosses the boundary (both ends of each pair alike), or
// split an image input's rows in bands (a spatial split, spread through the
// layers by propagation).
enum class DecisionKind { kPinWeight, kReduceAt, kCarry, kSpatial };

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
             const std::vector<ShardConstraint>& fixed, const std::vector<std::pair<ValueId, ValueId>>& carried,
             int64_t memory, int threads, Clock::time_point deadline)
      : g_(g), mesh_(mesh), device_(device), fixed_(fixed), memory_(memory), threads_(threads), deadline_(deadline),
        table_(strategy_table(g, mesh)), model_(g, mesh, device) {
    for (const ShardConstraint& c : fixed) annotated_.insert(c.value);
    add_carry_decisions(carried);
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
    add_spatial_decisions();
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
    auto r = static_cast<size_t>(dec.role);
    return dec.kind == DecisionKind::kPinWeight ? weight_roles_[r]
           : dec.kind == DecisionKind::kCarry   ? carry_roles_[r]
           : dec.kind == DecisionKind::kSpatial ? spatial_roles_[r]
                                                : value_roles_[r];
  }

  // Graph inputs whose rows the first window op on their path (through
  // element-wise ops of their shape: a normalization) can take in bands
  // (spatial_strategy.h): offered split as that op's spatial strategies take
  // it, inside the program (fed whole, each rank cutting its band).
  // Propagation then carries the bands through every layer that keeps them
  // and gathers them before the first that cannot read a band.
  void add_spatial_decisions() {
    std::vector<std::vector<NodeId>> users = g_.users();
    for (ValueId v : g_.inputs()) {
      if (annotated_.count(v) || g_.value(v).constant) continue;
      ValueId at = v;
      std::vector<Sharding> opts;
      Role role;
      for (int hops = 0; hops < 8 && opts.empty(); ++hops) {
        const std::vector<NodeId>& readers = users[static_cast<size_t>(at)];
        if (readers.size() != 1) break;
        NodeId u = readers[0];
        const Node& node = g_.node(u);
        for (const Strategy& st : table_[static_cast<size_t>(u)]) {
          if (std::none_of(st.axes.begin(), st.axes.end(), [](const AxisStrategy& a) { return is_spatial(a); }) ||
              node.inputs[0] != at || std::find(opts.begin(), opts.end(), st.inputs[0]) != opts.end())
            continue;
          opts.push_back(st.inputs[0]);
        }
        role.reader = u;
        if (!opts.empty() || !op_def(node.kind).elementwise() || node.outputs.size() != 1 ||
            !(g_.type(node.outputs[0]).shape == g_.type(v).shape))
          break;
        at = node.outputs[0];
      }
      if (opts.empty()) continue;
      role.values = {v};
      role.slot = 0;
      role.label = "rows of " + g_.value(v).name;
      spatial_roles_.push_back(std::move(role));
      decisions_.push_back({DecisionKind::kSpatial, static_cast<int>(spatial_roles_.size() - 1), std::move(opts), true});
    }
  }

  // Carried pairs (output, input) no constraint places, grouped by type
  // (every layer's key cache is one decision): each offered whole (the
  // decision unpinned) or crossing as a sharding that a reader of the
  // input takes it in, split and not Partial, at both ends. The state then
  // stays on the ranks from one step to the next, and the step is priced so.
  void add_carry_decisions(const std::vector<std::pair<ValueId, ValueId>>& carried) {
    std::vector<std::vector<NodeId>> users = g_.users();
    std::map<std::string, size_t> by_type;
    for (const auto& [out, in] : carried) {
      if (annotated_.count(out) || annotated_.count(in) || users[static_cast<size_t>(in)].empty()) continue;
      std::string key = type_str(g_.type(in));
      auto it = by_type.find(key);
      if (it == by_type.end()) {
        it = by_type.emplace(key, carry_roles_.size()).first;
        Role role;
        role.reader = users[static_cast<size_t>(in)][0];
        const Node& rn = g_.node(role.reader);
        role.slot = static_cast<int>(std::find(rn.inputs.begin(), rn.inputs.end(), in) - rn.inputs.begin());
        role.label = "carried " + g_.value(out).name + "=" + g_.value(in).name;
        carry_roles_.push_back(std::move(role));
        carry_options_.emplace_back();
      }
      Role& role = carry_roles_[it->second];
      role.values.push_back(out);
      role.values.push_back(in);
      std::vector<Sharding>& opts = carry_options_[it->second];
      for (NodeId u : users[static_cast<size_t>(in)]) {
        const Node& node = g_.node(u);
        for (const Strategy& st : table_[static_cast<size_t>(u)])
          for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
            if (node.inputs[slot] != in) continue;
            const Sharding& sh = st.inputs[slot];
            bool split = std::any_of(sh.placements.begin(), sh.placements.end(), [](const Placement& p) { return p.is_shard(); });
            bool partial = std::any_of(sh.placements.begin(), sh.placements.end(),
                                       [](const Placement& p) { return p.kind == Placement::Kind::kPartial; });
            if (split && !partial && std::find(opts.begin(), opts.end(), sh) == opts.end()) opts.push_back(sh);
          }
      }
    }
    for (size_t r = 0; r < carry_roles_.size(); ++r) {
      Role& role = carry_roles_[r];
      if (role.values.size() > 2) role.label += " (x" + std::to_string(role.values.size() / 2) + ")";
      if (!carry_options_[r].empty())
        decisions_.push_back({DecisionKind::kCarry, static_cast<int>(r), std::move(carry_options_[r]), true});
    }
  }

  std::string describe_move(size_t d, int option) const {
    const Decision& dec = decisions_[d];
    const Role& role = role_of(d);
    const Sharding& s = dec.options[static_cast<size_t>(option - 1)];
    std::string what = dec.kind == DecisionKind::kPinWeight ? "pin "
                       : dec.kind == DecisionKind::kCarry   ? "carry "
                       : dec.kind == DecisionKind::kSpatial ? "split "
                                                            : "reduce ";
    return what + role.label + " (" + g_.value(role.values[0]).name + (role.values.size() > 1 ? ", ..." : "") +
           ") to " + s.str();
  }

  std::vector<ShardConstraint> constraints(const std::vector<int>& state, bool with_origin) const {
    std::vector<ShardConstraint> out = fixed_;
    for (size_t d = 0; d < state.size(); ++d) {
      if (state[d] == 0) continue;
      const Sharding& s = decisions_[d].options[static_cast<size_t>(state[d] - 1)];
      std::string origin = with_origin ? "search: " + describe_move(d, state[d]) : "";
      for (ValueId v : role_of(d).values) out.push_back({v, s, origin, decisions_[d].kind == DecisionKind::kCarry});
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
          auto it = closest(opts, want);
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

  // `want` among `opts`, or where a sibling's dim is too small for the
  // axis (4 KV heads beside 16 query heads on 8 ranks), the same split in
  // the most groups that `opts` has: Megatron's and vLLM's replicated KV
  // heads beside the query heads' split.
  static std::vector<Sharding>::const_iterator closest(const std::vector<Sharding>& opts, const Sharding& want) {
    auto it = std::find(opts.begin(), opts.end(), want);
    if (it != opts.end()) return it;
    auto best = opts.end();
    for (auto o = opts.begin(); o != opts.end(); ++o) {
      bool like = o->placements.size() == want.placements.size();
      int64_t blocks = 1;
      for (size_t a = 0; like && a < want.placements.size(); ++a) {
        const Placement &p = o->placements[a], &w = want.placements[a];
        like = p.kind == w.kind && p.dim == w.dim && (p == w || (p.is_grouped() && !w.is_grouped()));
        blocks *= p.groups;
      }
      if (like && (best == opts.end() || blocks > [&] {
            int64_t b = 1;
            for (const Placement& p : best->placements) b *= p.groups;
            return b;
          }()))
        best = o;
    }
    return best;
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
          if (moves[k].size() == 1) {
            results[k] = evaluate_threadsafe(s);
            continue;
          }
          // A sibling move, and the same move completed: Q, K and V split
          // by heads pay only with the output projection and the carried
          // cache split alike, which no single move reaches from here.
          ShardedGraph sg;
          results[k] = evaluate_threadsafe(s, &sg);
          if (!results[k].ok) continue;
          Move more = completion(s, sg);
          if (more.empty()) continue;
          std::vector<int> c = s;
          for (const auto& [d, o] : more) c[d] = o;
          Eval e = evaluate_threadsafe(c);
          if (better(e, results[k])) {
            moves[k].insert(moves[k].end(), more.begin(), more.end());
            results[k] = e;
          }
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

  // The unpinned weight and carry decisions that the propagation of `sg`
  // (from `state`) already placed as one of their options: pinned so, they
  // hold what the move's split asked of them (a row split of the output
  // projection after a head split, a cache split by the heads that write it).
  Move completion(const std::vector<int>& state, const ShardedGraph& sg) const {
    Move m;
    for (size_t d = 0; d < decisions_.size(); ++d) {
      const Decision& dec = decisions_[d];
      if (state[d] != 0 || dec.kind == DecisionKind::kReduceAt) continue;
      const Role& role = role_of(d);
      const Sharding& placed = dec.kind == DecisionKind::kCarry
                                   ? sg.values[static_cast<size_t>(role.values[0])]
                                   : sg.nodes[static_cast<size_t>(role.reader)].inputs[static_cast<size_t>(role.slot)];
      auto it = std::find(dec.options.begin(), dec.options.end(), placed);
      if (it != dec.options.end()) m.push_back({d, static_cast<int>(it - dec.options.begin()) + 1});
    }
    return m;
  }

  Eval evaluate_threadsafe(const std::vector<int>& state, ShardedGraph* out = nullptr) {
    Eval e;
    evaluations_.fetch_add(1);
    try {
      ShardedGraph s = propagate(g_, mesh_, constraints(state, false), device_, &table_);
      e.cost = model_(s);
      if (out) *out = s;
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
  std::vector<Role> weight_roles_, value_roles_, carry_roles_, spatial_roles_;
  std::vector<std::vector<Sharding>> carry_options_;
  std::vector<Decision> decisions_;
  std::vector<std::vector<size_t>> siblings_;
  std::vector<std::string> taken_;
  std::atomic<int64_t> evaluations_{0};
  bool exhausted_ = false;
};

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

  Variants variants(g, options);
  // Rewrites are tried with no annotations, or with annotations given as
  // specs (resolved on each rewritten graph).
  const bool rewrites = options.constraints.empty() || !options.specs.empty();
  const bool only_rewritten = !options.rewrite.empty() && options.rewrite != "none";
  auto constraints_on = [&](size_t v) -> std::optional<std::vector<ShardConstraint>> {
    if (v == 0 || options.specs.empty()) return options.constraints;
    try {
      return resolve_annotations(variants[v].graph, options.mesh, options.specs);
    } catch (const Error&) {
      return std::nullopt;  // the annotations do not name this graph's tensors
    }
  };

  std::vector<DeviceMesh> meshes = options.degrees && options.constraints.empty() ? sub_meshes(options.mesh)
                                                                                  : std::vector<DeviceMesh>{options.mesh};
  std::vector<std::vector<ShardConstraint>> pins;
  std::vector<size_t> variant_of;
  for (const DeviceMesh& mesh : meshes) {
    std::vector<size_t> tried = rewrites ? variants.for_mesh(mesh, only_rewritten) : std::vector<size_t>{0};
    for (size_t v : tried) {
      std::optional<std::vector<ShardConstraint>> fixed = constraints_on(v);
      if (!fixed) continue;
      // A rank's share of the host where ranks share one (CPUs).
      const cost::DeviceProfile rank_device = cost::rank_share(device, cost::ranks_per_node(device, mesh.num_devices()));
      // Carried pairs by name on this graph (a rewrite keeps the boundary's names).
      std::vector<std::pair<ValueId, ValueId>> carried;
      for (const CarryPair& c : options.carry) {
        std::optional<ValueId> out = variants[v].graph.find_value(c.output), in = variants[v].graph.find_value(c.input);
        if (out && in) carried.emplace_back(*out, *in);
      }
      MeshSearch s(variants[v].graph, mesh, rank_device, *fixed, carried, r.device_memory, threads, deadline);
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
  if (only_rewritten && std::none_of(variant_of.begin(), variant_of.end(), [](size_t v) { return v > 0; }))
    TESSERA_THROW(ErrorKind::kUsage, "sharding rewrite '" << options.rewrite << "' applies nowhere in the model on "
                                                          << options.mesh.str()
                                                          << (options.specs.empty() ? "" : " under its annotations"));
  // The finalists priced as written.
  double best_estimate = std::numeric_limits<double>::infinity();
  for (DegreePoint& p : r.curve) {
    p.search_s = p.predicted_s;
    if (p.fits) best_estimate = std::min(best_estimate, p.predicted_s);
  }
  std::map<size_t, PricedPlan> priced;
  auto price = [&](size_t k) {
    DegreePoint& p = r.curve[k];
    const cost::DeviceProfile rank_device =
        cost::rank_share(device, cost::ranks_per_node(device, p.mesh.num_devices()));
    priced[k] = price_partitioned(variants[variant_of[k]].graph, p.mesh, device, rank_device, pins[k], p);
  };
  for (size_t k = 0; k < r.curve.size(); ++k) {
    const DegreePoint& p = r.curve[k];
    // One device is the baseline every other point is read against (and
    // cheap to price): always priced as written.
    bool finalist = p.fits && p.search_s <= best_estimate * (1 + kRepriceSlack);
    if (finalist || p.mesh.num_devices() == 1) price(k);
  }
  size_t pick = pick_degree_point(r.curve);
  // A point chosen on its estimate is priced as written, and the choice made
  // again, until the chosen point's price is the plan's.
  while (pick < r.curve.size() && !r.curve[pick].priced_as_plan) {
    price(pick);
    pick = pick_degree_point(r.curve);
  }
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
  if (best.mesh.num_devices() > 1) {
    // The winner as it was priced: its sharding and every rank's program
    // (the same program over their blocks).
    PricedPlan& w = priced.at(pick);
    r.ranks = written_ranks(r.graph, w);
    r.sharding = std::move(w.sharded);
    r.plan_cost = std::move(w.cost);
  }

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
