#include "mutator/search.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <numeric>
#include <queue>
#include <thread>
#include <unordered_map>

#include "cost/flops.h"
#include "cost/graph_cost.h"
#include "graph/error.h"
#include "graph/hash.h"
#include "mutator/pet/correction.h"
#include "mutator/rules/rule.h"
#include "mutator/verify_mutation.h"

namespace tessera::mutator {

namespace {

using Clock = std::chrono::steady_clock;

// Ops a subprogram may hold: the (multi)linear and affine ones the rules and
// the multilinear test handle. Everything else bounds subprograms.
bool in_subprogram(const Node& n) {
  switch (n.kind) {
    case OpKind::kConv: case OpKind::kConvTranspose: case OpKind::kGemm: case OpKind::kMatMul:
    case OpKind::kAdd: case OpKind::kSub: case OpKind::kMul: case OpKind::kNeg:
    case OpKind::kReshape: case OpKind::kFlatten: case OpKind::kTranspose: case OpKind::kSplit:
    case OpKind::kConcat: case OpKind::kSlice: case OpKind::kSqueeze: case OpKind::kUnsqueeze:
    case OpKind::kIdentity:
      return true;
    default: {
      const OpDef& def = op_def(n.kind);
      return def.linearity && def.linearity(n).any();
    }
  }
}

struct UnionFind {
  std::vector<int> parent;
  explicit UnionFind(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) { return parent[x] == x ? x : parent[x] = find(parent[x]); }
  void join(int a, int b) { parent[find(a)] = find(b); }
};

}  // namespace

std::vector<std::vector<NodeId>> partition_subprograms(const Graph& g) {
  UnionFind uf(g.num_nodes());
  std::vector<bool> inside(g.num_nodes());
  for (NodeId n = 0; n < g.num_nodes(); ++n) inside[n] = in_subprogram(g.node(n));
  auto users = g.users();
  for (ValueId v = 0; v < g.num_values(); ++v) {
    if (g.value(v).is_constant()) continue;
    // Producer and readers, and readers among themselves (ops sharing an input
    // are what merge rules rewrite), join one subprogram.
    int first = -1;
    NodeId p = g.value(v).producer;
    if (p >= 0 && inside[p]) first = p;
    for (NodeId u : users[v]) {
      if (!inside[u]) continue;
      if (first < 0) first = u;
      else uf.join(u, first);
    }
  }
  std::map<int, std::vector<NodeId>> groups;
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (inside[n]) groups[uf.find(n)].push_back(n);
  std::vector<std::vector<NodeId>> out;
  for (auto& [root, nodes] : groups) out.push_back(std::move(nodes));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a[0] < b[0]; });
  return out;
}

namespace {

struct Shared {
  const SearchOptions& options;
  std::vector<const Rule*> rules;
  MutationVerifier verifier;
  Clock::time_point deadline;
  std::atomic<bool> out_of_time{false};
  bool expired() {
    if (Clock::now() >= deadline) out_of_time = true;
    return out_of_time;
  }
};

struct Candidate {
  Graph g;
  double cost = 0;
  std::vector<AppliedMutation> history;
};

struct RegionResult {
  Graph best;
  double cost_before = 0, cost_after = 0;
  std::vector<AppliedMutation> applied;
  SearchStats stats;
};

double cost_of(const Graph& g, const cost::DeviceProfile& device) { return cost::graph_cost(g, device).time_s; }

std::string boxes_text(const std::vector<verifier::OutputRegion>& regions) {
  std::string s;
  for (const verifier::OutputRegion& r : regions)
    for (const verifier::Box& b : r.boxes) s += (s.empty() ? "output " : ", output ") + std::to_string(r.output) + " " + b.str();
  return s;
}

bool from_rule(const std::vector<AppliedMutation>& history, const std::string& rule) {
  for (const AppliedMutation& a : history)
    if (a.rule == rule) return true;
  return false;
}

// Best-first search with alpha relaxation over one subprogram.
RegionResult search_region(const Graph& start, int index, Shared& sh) {
  RegionResult res;
  std::deque<Candidate> store;
  std::unordered_map<uint64_t, std::vector<size_t>> seen;
  using Item = std::pair<double, size_t>;  // (cost, candidate index): ties go to the older candidate
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  store.push_back({start, cost_of(start, sh.options.device), {}});
  seen[structural_hash(start)].push_back(0);
  queue.push({store[0].cost, 0});
  size_t best = 0;
  res.cost_before = store[0].cost;
  while (!queue.empty() && res.stats.expansions < sh.options.max_expansions && !sh.expired()) {
    auto [c, idx] = queue.top();
    queue.pop();
    if (c > sh.options.alpha * store[best].cost) continue;
    ++res.stats.expansions;
    const Graph& g = store[idx].g;
    auto users = g.users();
    RuleContext ctx{g, users};
    for (NodeId n = 0; n < g.num_nodes() && !sh.expired(); ++n)
      for (const Rule* rule : sh.rules) {
        if (std::find(rule->roots.begin(), rule->roots.end(), g.node(n).kind) == rule->roots.end()) continue;
        if (rule->enumerator && from_rule(store[idx].history, rule->name)) continue;
        for (Mutation& m : rule->fn(ctx, n)) {
          ++res.stats.generated;
          Graph next = apply_mutation(g, m);
          uint64_t h = structural_hash(next);
          bool dup = false;
          for (size_t s : seen[h]) dup = dup || structurally_equal(store[s].g, next);
          if (dup) {
            ++res.stats.duplicates;
            continue;
          }
          // Cost before verification: a candidate the alpha bound discards
          // needs no proof.
          double cost = cost_of(next, sh.options.device);
          if (!(cost < sh.options.alpha * store[best].cost)) continue;
          // Enumerated mutants have no proof, and the Z_p test of a large
          // Conv takes seconds (csrnet's 512-channel dilated Convs: ~5 s
          // each, overrunning a 20 s budget): leave those out.
          if (rule->enumerator && graph_flops(m.before) > MutationVerifier::kTestFlops) continue;
          sh.verifier.verify(m, rule->obligation);
          if (!m.verification.accepted() && rule->partial && sh.options.partial && !m.verification.differing.empty()) {
            // Right but on a few boxes: recompute the original there. The
            // corrected program is a new candidate, costed and tested again.
            if (!pet::add_corrections(m, m.verification.differing)) {
              ++res.stats.rejected;
              continue;
            }
            next = apply_mutation(g, m);
            h = structural_hash(next);
            bool seen_before = false;
            for (size_t s : seen[h]) seen_before = seen_before || structurally_equal(store[s].g, next);
            if (seen_before) {
              ++res.stats.duplicates;
              continue;
            }
            cost = cost_of(next, sh.options.device);
            if (!(cost < sh.options.alpha * store[best].cost)) continue;
            sh.verifier.verify(m, kNoObligation);
          }
          if (!m.verification.accepted()) {
            ++res.stats.rejected;
            continue;
          }
          ++res.stats.verified;
          if (!m.corrections.empty()) m.description += "; corrected on " + boxes_text(m.corrections);
          Candidate cand{std::move(next), cost, store[idx].history};
          cand.history.push_back({m.rule, m.description, m.verification, index, !m.corrections.empty()});
          seen[h].push_back(store.size());
          store.push_back(std::move(cand));
          size_t k = store.size() - 1;
          if (store[k].cost < store[best].cost) best = k;
          queue.push({store[k].cost, k});
          if (sh.expired()) break;
        }
      }
  }
  res.best = store[best].g;
  res.cost_after = store[best].cost;
  res.applied = store[best].history;
  return res;
}

}  // namespace

SearchResult search(const Graph& g, const SearchOptions& options) {
  if (!(options.budget_s > 0)) TESSERA_THROW(ErrorKind::kUsage, "search budget must be > 0 seconds, got " << options.budget_s);
  auto start = Clock::now();
  Shared sh{options, {}, MutationVerifier(options.seed),
            start + std::chrono::microseconds(static_cast<int64_t>(options.budget_s * 1e6))};
  for (const Rule& r : all_rules())
    if (!options.disabled_rules.count(r.name)) sh.rules.push_back(&r);
  std::vector<std::vector<NodeId>> parts = partition_subprograms(g);
  std::vector<Graph> subs;
  for (const auto& nodes : parts) subs.push_back(g.extract(nodes));
  std::vector<RegionResult> results(parts.size());
  std::atomic<size_t> next{0}, done{0};
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(parts.size())));
  std::vector<std::string> errors(parts.size());
  auto worker = [&] {
    for (size_t i; (i = next++) < parts.size(); ++done) {
      try {
        results[i] = search_region(subs[i], static_cast<int>(i), sh);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  while (done < parts.size()) {
    if (options.progress) options.progress(static_cast<double>(done) / std::max<size_t>(1, parts.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& t : pool) t.join();
  if (options.progress) options.progress(1.0);
  for (size_t i = 0; i < errors.size(); ++i)
    TESSERA_CHECK(errors[i].empty(), "search of subprogram " << i << " failed: " << errors[i]);

  SearchResult out;
  std::vector<Mutation> splices;
  for (size_t i = 0; i < parts.size(); ++i) {
    RegionResult& r = results[i];
    out.stats.generated += r.stats.generated;
    out.stats.verified += r.stats.verified;
    out.stats.rejected += r.stats.rejected;
    out.stats.duplicates += r.stats.duplicates;
    out.stats.expansions += r.stats.expansions;
    if (r.applied.empty() || !(r.cost_after < r.cost_before)) continue;
    Mutation m;
    m.rule = "subprogram-" + std::to_string(i);
    m.nodes = parts[i];
    for (ValueId v : subs[i].inputs()) m.inputs.push_back(*g.find_value(subs[i].value(v).name));
    for (ValueId v : subs[i].outputs()) m.outputs.push_back(*g.find_value(subs[i].value(v).name));
    m.replacement = std::move(r.best);
    splices.push_back(std::move(m));
    for (AppliedMutation& a : r.applied) {
      out.stats.partial_used += a.partial;
      out.applied.push_back(std::move(a));
    }
  }
  // A subprogram sees its inputs as independent, but outside it one input may
  // depend on another through a non-linear op; a merge across such a pair
  // would close a cycle in the whole graph. Such a subprogram keeps its
  // original program.
  std::vector<Mutation> kept;
  std::vector<int> kept_index;
  for (size_t k = 0; k < splices.size(); ++k) {
    kept.push_back(std::move(splices[k]));
    try {
      apply_mutations(g, kept).topo_order();
      kept_index.push_back(std::stoi(kept.back().rule.substr(11)));
    } catch (const Error&) {
      kept.pop_back();
    }
  }
  std::vector<AppliedMutation> applied;
  for (AppliedMutation& a : out.applied)
    if (std::find(kept_index.begin(), kept_index.end(), a.subprogram) != kept_index.end()) applied.push_back(std::move(a));
    else out.stats.partial_used -= a.partial;
  out.applied = std::move(applied);
  out.graph = apply_mutations(g, kept);
  out.graph.validate();
  out.stats.subprograms = static_cast<int>(parts.size());
  out.stats.applied = static_cast<int64_t>(out.applied.size());
  out.stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out.stats.budget_exhausted = sh.out_of_time;
  return out;
}

}  // namespace tessera::mutator
