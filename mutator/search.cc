#include "mutator/search.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <omp.h>

#include "cost/flops.h"
#include "cost/graph_cost.h"
#include "graph/error.h"
#include "graph/hash.h"
#include "graph/strategy.h"
#include "mutator/pet/correction.h"
#include "mutator/rules/rule.h"
#include "mutator/verify_mutation.h"

namespace tessera::mutator {

namespace {

using Clock = std::chrono::steady_clock;

// Ops a subprogram may hold: the (multi)linear and affine ones the rules and
// the multilinear test handle (the op table's linearity, with a bias read
// left out: Conv and Gemm with a bias are affine). Everything else bounds
// subprograms.
bool in_subprogram(const Graph& g, const Node& n) { return affine_linearity(g, n).any(); }

// A value read by more nodes than this is a broadcast (a mask, positions),
// not a link worth searching across.
constexpr size_t kMaxJoinedReaders = 4;

bool shares_input_usefully(const Node& n) {
  return n.kind == OpKind::kMatMul || n.kind == OpKind::kGemm || n.kind == OpKind::kConv;
}

// Subprograms stop growing at this many nodes: a pre-LayerNorm transformer's
// residual stream links every layer through linear Adds (GPT-2: one
// subprogram of ~300 nodes, where each candidate costs a full re-costing and
// the search covered two of twelve layers in its budget). A few layers per
// subprogram keep every merge of one layer together.
constexpr int kMaxSubprogramNodes = 64;

struct UnionFind {
  std::vector<int> parent, size;
  explicit UnionFind(int n) : parent(n), size(n, 1) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) { return parent[x] == x ? x : parent[x] = find(parent[x]); }
  void join(int a, int b) {
    a = find(a);
    b = find(b);
    if (a == b || size[a] + size[b] > kMaxSubprogramNodes) return;
    parent[a] = b;
    size[b] += size[a];
  }
};

}  // namespace

std::vector<std::vector<NodeId>> partition_subprograms(const Graph& g) {
  UnionFind uf(g.num_nodes());
  std::vector<bool> inside(g.num_nodes());
  for (NodeId n = 0; n < g.num_nodes(); ++n) inside[n] = in_subprogram(g, g.node(n));
  auto users = g.users();
  for (ValueId v = 0; v < g.num_values(); ++v) {
    if (g.value(v).is_constant()) continue;
    // Producer and readers join one subprogram. Readers of a value made
    // outside, or read in many places, join each other only when merge rules
    // can use the shared input (MatMuls, Gemms, Convs): an attention mask read
    // by every layer's Add would otherwise glue all layers into one
    // subprogram, whose search is slow and whose cross-layer merges close
    // cycles through the Softmaxes (BERT-base: one subprogram of 12 layers).
    int first = -1;
    NodeId p = g.value(v).producer;
    bool made_inside = p >= 0 && inside[p] && users[v].size() <= kMaxJoinedReaders;
    if (made_inside) first = p;
    for (NodeId u : users[v]) {
      if (!inside[u] || (!made_inside && !shares_input_usefully(g.node(u)))) continue;
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
  std::atomic<int64_t> unstarted{0};  // subprograms no thread has picked up yet
  bool expired() {
    if (Clock::now() >= deadline) out_of_time = true;
    return out_of_time;
  }
  // Whether m's verification can finish before the deadline: small ones
  // always can; a test is estimated from the FLOPs of both sides. A proof is
  // cached after its first use, so only tests are estimated.
  bool fits(const Mutation& m, const Rule& rule) const {
    int64_t before = graph_flops(m.before);
    // Large enough to be proven rather than tested (MutationVerifier::verify).
    if (before > MutationVerifier::kTestFlops && rule.obligation != kNoObligation) return true;
    double flops = static_cast<double>(before + graph_flops(m.replacement));
    if (flops <= 2.0 * MutationVerifier::kTestFlops) return true;
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    return flops / kTestFlopsPerSecond < left;
  }
  // Rate of the multilinear test over Z_p (both sides evaluated), measured
  // from csrnet's dilated Convs (7.4 GFLOP in ~5 s), rounded down.
  static constexpr double kTestFlopsPerSecond = 1.0e9;
};

// Paths that leave a subprogram and come back: for each output of the
// subprogram, the subprogram inputs it reaches through host nodes outside it
// (e.g. a Conv's output through a Relu into the next Conv). A candidate that
// connects such an input back to that output inside the subprogram would
// close a cycle when spliced into the host.
struct Outside {
  std::unordered_map<std::string, int> input_index;   // by value name
  std::unordered_map<std::string, int> output_index;
  std::vector<std::vector<int>> reaches;  // output index -> input indices
};

Outside outside_paths(const Graph& host, const std::vector<NodeId>& nodes, const Graph& sub,
                      const std::vector<std::vector<NodeId>>& users) {
  Outside out;
  for (size_t i = 0; i < sub.inputs().size(); ++i) out.input_index[sub.value(sub.inputs()[i]).name] = static_cast<int>(i);
  for (size_t i = 0; i < sub.outputs().size(); ++i)
    out.output_index[sub.value(sub.outputs()[i]).name] = static_cast<int>(i);
  std::vector<char> inside(host.num_nodes(), 0);
  for (NodeId n : nodes) inside[n] = 1;
  out.reaches.resize(sub.outputs().size());
  for (size_t k = 0; k < sub.outputs().size(); ++k) {
    std::vector<char> seen(host.num_nodes(), 0);
    std::vector<ValueId> stack = {*host.find_value(sub.value(sub.outputs()[k]).name)};
    std::vector<char> hit(sub.inputs().size(), 0);
    while (!stack.empty()) {
      ValueId v = stack.back();
      stack.pop_back();
      for (NodeId u : users[v]) {
        if (inside[u]) {
          // Read back inside: v came from outside, so it is a subprogram input
          // (unless it is the output itself, read inside too).
          auto it = out.input_index.find(host.value(v).name);
          if (it != out.input_index.end() && !hit[it->second]) {
            hit[it->second] = 1;
            out.reaches[k].push_back(it->second);
          }
          continue;
        }
        if (seen[u]) continue;
        seen[u] = 1;
        for (ValueId o : host.node(u).outputs) stack.push_back(o);
      }
    }
  }
  return out;
}

// Whether splicing candidate c (inputs and outputs named as in the
// subprogram) into the host would make the host cyclic.
bool closes_cycle(const Graph& c, const Outside& outside) {
  bool any = false;
  for (const auto& r : outside.reaches) any = any || !r.empty();
  if (!any) return false;
  size_t ni = outside.input_index.size(), no = outside.reaches.size();
  // Inputs of c that reach each value, then each output.
  std::vector<std::vector<char>> from(c.num_values());
  for (ValueId v : c.inputs()) {
    auto it = outside.input_index.find(c.value(v).name);
    if (it == outside.input_index.end()) continue;
    from[v].assign(ni, 0);
    from[v][it->second] = 1;
  }
  for (NodeId n : c.topo_order()) {
    std::vector<char> acc(ni, 0);
    for (ValueId in : c.node(n).inputs)
      if (in != kNoValue && !from[in].empty())
        for (size_t i = 0; i < ni; ++i) acc[i] |= from[in][i];
    for (ValueId o : c.node(n).outputs) from[o] = acc;
  }
  // Nodes 0..ni-1 are inputs, ni..ni+no-1 outputs; look for a cycle.
  std::vector<std::vector<int>> edges(ni + no);
  for (ValueId v : c.outputs()) {
    auto it = outside.output_index.find(c.value(v).name);
    if (it == outside.output_index.end() || from[v].empty()) continue;
    for (size_t i = 0; i < ni; ++i)
      if (from[v][i]) edges[i].push_back(static_cast<int>(ni) + it->second);
  }
  for (size_t k = 0; k < no; ++k)
    for (int i : outside.reaches[k]) edges[ni + k].push_back(i);
  std::vector<int> state(ni + no, 0);  // 0 new, 1 on the stack, 2 done
  std::function<bool(int)> dfs = [&](int x) {
    state[x] = 1;
    for (int y : edges[x])
      if (state[y] == 1 || (state[y] == 0 && dfs(y))) return true;
    state[x] = 2;
    return false;
  };
  for (size_t x = 0; x < ni + no; ++x)
    if (state[x] == 0 && dfs(static_cast<int>(x))) return true;
  return false;
}

struct Candidate {
  Graph g;
  double cost = 0;
  std::vector<AppliedMutation> history;  // verified mutations, the last one included once verified
  // The mutation that made this candidate, not verified yet: verification
  // waits until the candidate is expanded or chosen, since most candidates
  // are neither, and a test of a large product takes a tenth of a second.
  std::optional<Mutation> pending;
  const Rule* pending_rule = nullptr;
  int subprogram = 0;
  size_t parent = 0;  // the candidate it was made from (a correction rebuilds from there)
};

double cost_of(const Graph& g, const cost::DeviceProfile& device, const cost::CostOptions& options);
std::string boxes_text(const std::vector<verifier::OutputRegion>& regions);

// Verifies a candidate's pending mutation; false when verification refused it.
// A partially equivalent mutant that is right on all but some output boxes is
// corrected there (when partial mutants are on): the candidate's graph and
// cost change to the corrected program's, which is tested again.
bool settle(Candidate& cand, const Graph& parent, Shared& sh, SearchStats& stats, const cost::CostOptions& context) {
  if (!cand.pending) return true;
  Mutation& m = *cand.pending;
  sh.verifier.verify(m, cand.pending_rule->obligation);
  if (!m.verification.accepted() && cand.pending_rule->partial && sh.options.partial &&
      !m.verification.differing.empty() && pet::add_corrections(m, m.verification.differing)) {
    cand.g = apply_mutation(parent, m);
    cand.cost = cost_of(cand.g, sh.options.device, context);
    sh.verifier.verify(m, kNoObligation);
  }
  bool ok = m.verification.accepted();
  if (ok) {
    ++stats.verified;
    if (!m.corrections.empty()) m.description += "; corrected on " + boxes_text(m.corrections);
    cand.history.push_back({m.rule, m.description, m.verification, cand.subprogram, !m.corrections.empty()});
  } else {
    ++stats.rejected;
  }
  cand.pending.reset();
  return ok;
}

struct RegionResult {
  Graph best;
  double cost_before = 0, cost_after = 0;
  std::vector<AppliedMutation> applied;
  SearchStats stats;
};

double cost_of(const Graph& g, const cost::DeviceProfile& device, const cost::CostOptions& options) {
  return cost::graph_cost(g, device, options).time_s;
}

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
// `context`: how the subprogram sits in the whole graph, for the cost model.
RegionResult search_region(const Graph& start, int index, const Outside& outside, Clock::time_point until,
                           Shared& sh, const cost::CostOptions& context) {
  RegionResult res;
  // The whole budget runs out, or this subprogram's share of it while other
  // subprograms still wait for a thread.
  auto out = [&] {
    if (!sh.expired()) {
      if (Clock::now() < until) return false;
      if (sh.unstarted == 0) {
        until = sh.deadline;
        return false;
      }
    }
    res.stats.budget_exhausted = true;
    return true;
  };
  // Enumerated (PET) sequences start from the subprogram's own ops: an op a
  // rule made (a Winograd transform's strided Conv, a merged MatMul) is
  // already a chosen form, and its mutants cost verification time that the
  // subprograms after it need.
  std::unordered_set<std::string> own_ops;
  for (NodeId n = 0; n < start.num_nodes(); ++n) own_ops.insert(start.node(n).name);
  std::deque<Candidate> store;
  std::unordered_map<uint64_t, std::vector<size_t>> seen;
  using Item = std::pair<double, size_t>;  // (cost, candidate index): ties go to the older candidate
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  store.push_back({start, cost_of(start, sh.options.device, context), {}});
  seen[structural_hash(start)].push_back(0);
  queue.push({store[0].cost, 0});
  size_t best = 0;
  res.cost_before = store[0].cost;
  while (!queue.empty() && res.stats.expansions < sh.options.max_expansions && !out()) {
    auto [c, idx] = queue.top();
    queue.pop();
    if (c > sh.options.alpha * store[best].cost) continue;
    if (store[idx].pending) {
      if (!sh.fits(*store[idx].pending, *store[idx].pending_rule)) {
        ++res.stats.skipped_slow;
        store[idx].pending.reset();
        continue;
      }
      double queued = store[idx].cost;
      if (!settle(store[idx], store[store[idx].parent].g, sh, res.stats, context)) continue;
      if (store[idx].cost != queued) {
        // Corrected: back in the queue at the corrected program's cost.
        seen[structural_hash(store[idx].g)].push_back(idx);
        if (store[idx].cost < sh.options.alpha * store[best].cost) queue.push({store[idx].cost, idx});
        continue;
      }
      if (store[idx].cost < store[best].cost) best = idx;
    }
    ++res.stats.expansions;
    const Graph& g = store[idx].g;
    auto users = g.users();
    RuleContext ctx{g, users};
    for (NodeId n = 0; n < g.num_nodes() && !out(); ++n)
      for (const Rule* rule : sh.rules) {
        if (std::find(rule->roots.begin(), rule->roots.end(), g.node(n).kind) == rule->roots.end()) continue;
        if (rule->enumerator && (from_rule(store[idx].history, rule->name) || !own_ops.count(g.node(n).name)))
          continue;
        for (Mutation& m : rule->fn(ctx, n)) {
          ++res.stats.generated;
          Graph next = apply_mutation(g, m);
          if (closes_cycle(next, outside)) {
            ++res.stats.cyclic;
            continue;
          }
          uint64_t h = structural_hash(next);
          bool dup = false;
          for (size_t s : seen[h]) dup = dup || structurally_equal(store[s].g, next);
          if (dup) {
            ++res.stats.duplicates;
            continue;
          }
          // Cost before verification: a candidate the alpha bound discards
          // needs no proof.
          double cost = cost_of(next, sh.options.device, context);
          if (!(cost < sh.options.alpha * store[best].cost)) continue;
          // A Z_p test cannot be interrupted, and on a large Conv it takes
          // seconds (csrnet's 512-channel dilated Convs, 3.7 GFLOP each side:
          // ~5 s): run it only when it fits in what is left of the budget.
          if (!sh.fits(m, *rule)) {
                      ++res.stats.skipped_slow;
            continue;
          }
          // Verified when expanded or chosen (settle).
          Candidate cand{std::move(next), cost, store[idx].history, std::move(m), rule, index, idx};
          seen[h].push_back(store.size());
          store.push_back(std::move(cand));
          queue.push({cost, store.size() - 1});
          if (out()) break;
        }
      }
  }
  // Candidates cheaper than the best verified one that were never expanded
  // are verified now, cheapest first, until one passes.
  std::vector<size_t> open;
  for (size_t k = 0; k < store.size(); ++k)
    if (store[k].pending && store[k].cost < store[best].cost) open.push_back(k);
  std::sort(open.begin(), open.end(),
            [&](size_t a, size_t b) { return std::make_pair(store[a].cost, a) < std::make_pair(store[b].cost, b); });
  for (size_t k : open) {
    if (sh.expired() || !sh.fits(*store[k].pending, *store[k].pending_rule)) break;
    if (settle(store[k], store[store[k].parent].g, sh, res.stats, context) && store[k].cost < store[best].cost) {
      best = k;
      break;
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
    if (!r.mesh_only && !options.disabled_rules.count(r.name)) sh.rules.push_back(&r);
  std::vector<std::vector<NodeId>> parts = partition_subprograms(g);
  std::vector<Graph> subs;
  std::vector<Outside> outsides;
  auto host_users = g.users();
  for (const auto& nodes : parts) {
    subs.push_back(g.extract(nodes));
    outsides.push_back(outside_paths(g, nodes, subs.back(), host_users));
  }
  std::vector<RegionResult> results(parts.size());
  const std::vector<char> blocked = cost::blocked_values(g, options.device);
  std::atomic<size_t> next{0}, done{0};
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(parts.size())));
  std::vector<std::string> errors(parts.size());
  sh.unstarted = static_cast<int64_t>(parts.size());
  auto worker = [&] {
    // The workers already use every core: the interpreter's parallel loops
    // (verification runs it) stay on the worker's own thread.
    omp_set_num_threads(1);
    for (size_t i; (i = next++) < parts.size(); ++done) {
      // A fair share of what is left, so that the last subprograms (the
      // last layers) are searched too; time a quick one leaves goes on.
      --sh.unstarted;
      auto now = Clock::now();
      auto left = sh.deadline > now ? sh.deadline - now : Clock::duration::zero();
      auto until = now + left * threads / static_cast<int64_t>(parts.size() - i);
      try {
        cost::CostOptions context;
        context.part_of_larger_program = true;
        for (ValueId v : subs[i].inputs()) {
          std::optional<ValueId> host = g.find_value(subs[i].value(v).name);
          if (host && blocked[static_cast<size_t>(*host)]) context.blocked_inputs.push_back(subs[i].value(v).name);
        }
        context.other_parameter_bytes = std::max<int64_t>(0, g.parameter_bytes() - subs[i].parameter_bytes());
        results[i] = search_region(subs[i], static_cast<int>(i), outsides[i], std::min(until, sh.deadline), sh, context);
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
    out.stats.cyclic += r.stats.cyclic;
    out.stats.skipped_slow += r.stats.skipped_slow;
    out.stats.budget_exhausted = out.stats.budget_exhausted || r.stats.budget_exhausted;
    if (r.applied.empty() || !(r.cost_after < r.cost_before * (1.0 - options.min_gain))) continue;
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
  // Candidates that would close a cycle through the host were refused during
  // the search (closes_cycle); this check stays as a guard: a subprogram whose
  // splice still fails keeps its original program.
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
  out.stats.budget_exhausted = out.stats.budget_exhausted || sh.out_of_time;
  return out;
}

}  // namespace tessera::mutator
