#include "mutator/search.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <limits>
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
#include "mutator/pet/correction.h"
#include "mutator/rules/rule.h"
#include "mutator/verify_mutation.h"

namespace tessera::mutator {

namespace {

using Clock = std::chrono::steady_clock;

// A mutation of a candidate's lineage that is not verified yet.
struct Pending {
  Mutation m;
  const Rule* rule = nullptr;
  size_t parent = 0;  // the candidate it was applied to (a correction rebuilds from there)
  // The obligation that covers the mutation (covering_obligation), or
  // kNoObligation: then it is tested.
  std::string covered_by;
  bool verified = false;  // verified ahead of the others (it may have needed corrections)
};

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
  // Whether m's verification can finish before the deadline: a proven
  // obligation covers it (Z3 runs once per obligation, then it costs
  // nothing), or its test is small, or the test's estimate from the FLOPs of
  // both sides fits in what is left.
  bool fits(const Mutation& m, const std::string& covered_by) { return fits(test_flops(m, covered_by)); }
  bool fits(const std::vector<Pending>& chain) {
    double flops = 0;
    for (const Pending& p : chain) flops += test_flops(p.m, p.covered_by);
    return fits(flops);
  }
  double test_flops(const Mutation& m, const std::string& covered_by) {
    if (covered_by != kNoObligation && verifier.proven(covered_by)) return 0;
    return static_cast<double>(graph_flops(m.before) + graph_flops(m.replacement));
  }
  bool fits(double flops) {
    if (flops <= 2.0 * MutationVerifier::kTestFlops) return true;
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    return flops / kTestFlopsPerSecond < left;
  }
  // Rate of the multilinear test over Z_p (both sides evaluated), measured
  // from csrnet's dilated Convs (7.4 GFLOP in ~5 s), rounded down.
  static constexpr double kTestFlopsPerSecond = 1.0e9;
};

struct Candidate {
  Graph g;
  double cost = 0;
  std::vector<AppliedMutation> history;  // verified mutations, in application order
  // The mutations since the last verified one, oldest first: verification
  // waits until the candidate is chosen, since most candidates never are,
  // and a test of one projection takes a second (GPT-2's fold-scale-into-
  // weights, 0.96 GFLOP: 12 tests were 9 s of a 38 s optimize, for a rewrite
  // the 10% gain rule then dropped). A candidate whose last mutation may
  // need corrections is verified before it is expanded (its corrected
  // program is the one to expand).
  std::vector<Pending> pending;
};

struct RegionResult {
  Graph best;
  double cost_before = 0, cost_after = 0;
  std::vector<AppliedMutation> applied;
  SearchStats stats;
};

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

// Best-first search with alpha relaxation over one subprogram (TASO): the
// cheapest queued candidate within alpha of the best one so far is
// expanded by every rule at every node (verified when chosen); its mutants join the
// queue unless they are duplicates (structural hash, confirmed by equality),
// outside the alpha bound, or too slow to verify in the budget left.
class RegionSearch {
 public:
  // Searches subprogram `index` until `until` (or the whole deadline, once no
  // other subprogram waits for a thread).
  RegionSearch(const Subprogram& sub, int index, Clock::time_point until, Shared& sh);

  // Runs once: the search, then its best program.
  RegionResult run() {
    while (!queue_.empty() && res_.stats.expansions < sh_.options.max_expansions && !out_of_time()) {
      auto [c, idx] = queue_.top();
      queue_.pop();
      if (c > bound() || !ready_to_expand(idx)) continue;
      ++res_.stats.expansions;
      expand(idx);
    }
    settle_cheaper_open();
    res_.best = store_[best_].g;
    res_.cost_after = store_[best_].cost;
    res_.applied = store_[best_].history;
    return std::move(res_);
  }

 private:
  using Item = std::pair<double, size_t>;  // (cost, candidate index): ties go to the older candidate

  double cost_of(const Graph& g) const { return cost::graph_cost(g, sh_.options.device, context_).time_s; }
  // Alpha times the cheapest candidate expanded or verified so far (an
  // expanded candidate is verified when chosen).
  double bound() const { return sh_.options.alpha * std::min(store_[best_].cost, expanded_cost_); }
  bool verified_before_expanding(const Candidate& c) const {
    return !c.pending.empty() && !c.pending.back().verified && c.pending.back().rule->partial && sh_.options.partial;
  }
  bool out_of_time();
  bool ready_to_expand(size_t idx);
  void expand(size_t idx);
  bool proposes(const Rule& rule, const Candidate& c, const Node& root) const;
  bool consider(size_t parent, const Rule& rule, Mutation m);
  bool seen_before(uint64_t hash, const Graph& g);
  void add(Candidate c, uint64_t hash);
  bool verify_pending(Candidate& cand, size_t k);
  bool settle(size_t idx);
  void settle_cheaper_open();

  const int index_;
  const Outside& outside_;
  const cost::CostOptions& context_;  // how the subprogram sits in the whole graph, for the cost model
  Clock::time_point until_;
  Shared& sh_;
  // Enumerated (PET) sequences start from the subprogram's own ops: an op a
  // rule made (a Winograd transform's strided Conv, a merged MatMul) is
  // already a chosen form, and its mutants cost verification time that the
  // subprograms after it need.
  std::unordered_set<std::string> own_ops_;
  std::deque<Candidate> store_;  // a deque: expand() holds a candidate's graph while adding others
  std::unordered_map<uint64_t, std::vector<size_t>> seen_;  // structural hash -> candidates
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue_;
  size_t best_ = 0;  // the cheapest verified candidate
  double expanded_cost_ = std::numeric_limits<double>::infinity();  // the cheapest candidate expanded
  RegionResult res_;
};

RegionSearch::RegionSearch(const Subprogram& sub, int index, Clock::time_point until, Shared& sh)
    : index_(index), outside_(sub.outside), context_(sub.context), until_(until), sh_(sh) {
  const Graph& start = sub.graph;
  for (NodeId n = 0; n < start.num_nodes(); ++n) own_ops_.insert(start.node(n).name);
  double cost = cost_of(start);
  add({start, cost, {}}, structural_hash(start));
  res_.cost_before = cost;
}

// The whole budget runs out, or this subprogram's share of it while other
// subprograms still wait for a thread (once none waits, the share grows to
// the whole budget).
bool RegionSearch::out_of_time() {
  if (!sh_.expired()) {
    if (Clock::now() < until_) return false;
    if (sh_.unstarted == 0) {
      until_ = sh_.deadline;
      return false;
    }
  }
  res_.stats.budget_exhausted = true;
  return true;
}

// Whether candidate idx is expanded now. One whose last mutation may need
// corrections is verified first: false when it is too slow to verify in the
// budget left, refused, or corrected (then queued again at the corrected
// program's cost). Any other is expanded unverified.
bool RegionSearch::ready_to_expand(size_t idx) {
  Candidate& cand = store_[idx];
  if (!verified_before_expanding(cand)) {
    expanded_cost_ = std::min(expanded_cost_, cand.cost);
    return true;
  }
  // The mutations before the last stay pending: only the last is verified now.
  Pending& last = cand.pending.back();
  if (!sh_.fits(last.m, last.covered_by)) {
    ++res_.stats.skipped_slow;
    cand.pending.clear();
    return false;
  }
  double queued = cand.cost;
  if (!verify_pending(cand, cand.pending.size() - 1)) {
    cand.pending.clear();
    return false;
  }
  if (cand.cost != queued) {
    seen_[structural_hash(cand.g)].push_back(idx);
    if (cand.cost < bound()) queue_.push({cand.cost, idx});
    return false;
  }
  if (cand.pending.size() == 1 && settle(idx)) {
    if (cand.cost < store_[best_].cost) best_ = idx;
  } else {
    expanded_cost_ = std::min(expanded_cost_, cand.cost);
  }
  return true;
}

// Candidate generation: every rule at every node of candidate idx.
void RegionSearch::expand(size_t idx) {
  const Graph& g = store_[idx].g;
  auto users = g.users();
  RuleContext ctx{g, users};
  for (NodeId n = 0; n < g.num_nodes() && !out_of_time(); ++n)
    for (const Rule* rule : sh_.rules) {
      if (!proposes(*rule, store_[idx], g.node(n))) continue;
      for (Mutation& m : rule->fn(ctx, n))
        if (consider(idx, *rule, std::move(m)) && out_of_time()) break;
    }
}

// An enumerator runs once per lineage (its output already holds every
// sequence up to its depth), and only from the subprogram's own ops.
bool RegionSearch::proposes(const Rule& rule, const Candidate& c, const Node& root) const {
  if (std::find(rule.roots.begin(), rule.roots.end(), root.kind) == rule.roots.end()) return false;
  return !rule.enumerator || (!from_rule(c.history, rule.name) && own_ops_.count(root.name));
}

// Queues mutation m of candidate `parent` as a new candidate; false when it
// is refused instead.
bool RegionSearch::consider(size_t parent, const Rule& rule, Mutation m) {
  ++res_.stats.generated;
  Graph next = apply_mutation(store_[parent].g, m);
  if (closes_cycle(next, outside_)) {
    ++res_.stats.cyclic;
    return false;
  }
  uint64_t h = structural_hash(next);
  if (seen_before(h, next)) {
    ++res_.stats.duplicates;
    return false;
  }
  // Cost before verification: a candidate the alpha bound discards needs no
  // proof.
  double cost = cost_of(next);
  if (!(cost < bound())) return false;
  // A Z_p test cannot be interrupted, and on a large Conv it takes seconds
  // (csrnet's 512-channel dilated Convs, 3.7 GFLOP each side: ~5 s): run it
  // only when it fits in what is left of the budget. An instance a proven
  // obligation covers is not tested at all.
  std::string covered_by = covering_obligation(rule, m);
  if (!sh_.fits(m, covered_by)) {
    ++res_.stats.skipped_slow;
    return false;
  }
  // Verified when chosen (settle), or before it is expanded where it may need corrections.
  Candidate c{std::move(next), cost, store_[parent].history, store_[parent].pending};
  c.pending.push_back({std::move(m), &rule, parent, std::move(covered_by)});
  add(std::move(c), h);
  return true;
}

bool RegionSearch::seen_before(uint64_t hash, const Graph& g) {
  for (size_t s : seen_[hash])
    if (structurally_equal(store_[s].g, g)) return true;
  return false;
}

void RegionSearch::add(Candidate c, uint64_t hash) {
  seen_[hash].push_back(store_.size());
  queue_.push({c.cost, store_.size()});
  store_.push_back(std::move(c));
}

// Verifies mutation k of cand's pending ones; false when verification
// refused it. A partially equivalent mutant that is right on all but some
// output boxes is corrected there (when partial mutants are on): the
// candidate's graph and cost change to the corrected program's, which is
// tested again. Only the last can be: one that may need corrections is
// verified before anything is made from it.
bool RegionSearch::verify_pending(Candidate& cand, size_t k) {
  Pending& p = cand.pending[k];
  Mutation& m = p.m;
  sh_.verifier.verify(m, p.covered_by);
  if (k + 1 == cand.pending.size() && !m.verification.accepted() && p.rule->partial && sh_.options.partial &&
      !m.verification.differing.empty() && pet::add_corrections(m, m.verification.differing)) {
    cand.g = apply_mutation(store_[p.parent].g, m);
    cand.cost = cost_of(cand.g);
    sh_.verifier.verify(m, kNoObligation);
  }
  p.verified = m.verification.accepted();
  if (p.verified) {
    ++res_.stats.verified;
    if (m.id.kind == MutationId::Kind::kPartial) m.description += "; corrected on " + boxes_text(m.corrections);
  } else {
    ++res_.stats.rejected;
  }
  return p.verified;
}

// Verifies candidate idx's pending mutations, oldest first, and moves them
// to its history; false when verification refused one.
bool RegionSearch::settle(size_t idx) {
  Candidate& cand = store_[idx];
  bool ok = true;
  for (size_t k = 0; k < cand.pending.size() && ok; ++k) {
    ok = cand.pending[k].verified || verify_pending(cand, k);
    const Mutation& m = cand.pending[k].m;
    if (ok)
      cand.history.push_back({m.id.rule, m.description, m.verification, index_,
                              m.id.kind == MutationId::Kind::kPartial});
  }
  cand.pending.clear();
  return ok;
}

// Candidates cheaper than the best verified one, expanded or not, are
// verified now, cheapest first, until one passes. Only those that save the
// share of the subprogram's time that search() splices back (min_gain):
// a cheaper program that would be dropped needs no verification.
void RegionSearch::settle_cheaper_open() {
  const double worth = res_.cost_before * (1.0 - sh_.options.min_gain);
  std::vector<size_t> open;
  for (size_t k = 0; k < store_.size(); ++k)
    if (!store_[k].pending.empty() && store_[k].cost < store_[best_].cost && store_[k].cost < worth)
      open.push_back(k);
  std::sort(open.begin(), open.end(),
            [&](size_t a, size_t b) { return std::make_pair(store_[a].cost, a) < std::make_pair(store_[b].cost, b); });
  for (size_t k : open) {
    if (sh_.expired() || !sh_.fits(store_[k].pending)) break;
    if (settle(k) && store_[k].cost < store_[best_].cost) {
      best_ = k;
      break;
    }
  }
}

// A fair share of what is left of the budget, so that the last subprograms
// (the last layers) are searched too; time a quick one leaves goes on.
Clock::time_point fair_share(Clock::time_point deadline, int threads, size_t remaining) {
  auto now = Clock::now();
  auto left = deadline > now ? deadline - now : Clock::duration::zero();
  return std::min(now + left * threads / static_cast<int64_t>(remaining), deadline);
}

// Searches every subprogram on `threads` threads; results in subprogram order.
std::vector<RegionResult> search_subprograms(const std::vector<Subprogram>& subs, Shared& sh, int threads) {
  std::vector<RegionResult> results(subs.size());
  std::vector<std::string> errors(subs.size());
  std::atomic<size_t> next{0}, done{0};
  sh.unstarted = static_cast<int64_t>(subs.size());
  auto worker = [&] {
    // The workers already use every core: the interpreter's parallel loops
    // (verification runs it) stay on the worker's own thread.
    omp_set_num_threads(1);
    for (size_t i; (i = next++) < subs.size(); ++done) {
      --sh.unstarted;
      Clock::time_point until = fair_share(sh.deadline, threads, subs.size() - i);
      try {
        results[i] = RegionSearch(subs[i], static_cast<int>(i), until, sh).run();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  const auto& progress = sh.options.progress;
  while (done < subs.size()) {
    if (progress) progress(static_cast<double>(done) / std::max<size_t>(1, subs.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& t : pool) t.join();
  if (progress) progress(1.0);
  for (size_t i = 0; i < errors.size(); ++i)
    TESSERA_CHECK(errors[i].empty(), "search of subprogram " << i << " failed: " << errors[i]);
  return results;
}

void add_counts(SearchStats& total, const SearchStats& s) {
  total.generated += s.generated;
  total.verified += s.verified;
  total.rejected += s.rejected;
  total.duplicates += s.duplicates;
  total.expansions += s.expansions;
  total.cyclic += s.cyclic;
  total.skipped_slow += s.skipped_slow;
  total.budget_exhausted = total.budget_exhausted || s.budget_exhausted;
}

// The mutation that replaces subprogram `index` of host by `best`.
Mutation splice_of(const Graph& host, const Subprogram& s, int index, Graph best) {
  Mutation m;
  m.id = MutationId::splice(index);
  m.nodes = s.nodes;
  for (ValueId v : s.graph.inputs()) m.inputs.push_back(*host.find_value(s.graph.value(v).name));
  for (ValueId v : s.graph.outputs()) m.outputs.push_back(*host.find_value(s.graph.value(v).name));
  m.replacement = std::move(best);
  return m;
}

}  // namespace

SpliceResult splice_subprograms(const Graph& host, std::vector<Mutation> splices) {
  SpliceResult out;
  std::vector<Mutation> kept;
  for (Mutation& m : splices) {
    TESSERA_CHECK(m.id.kind == MutationId::Kind::kSplice, "splice_subprograms takes splices, got " << m.id.name());
    kept.push_back(std::move(m));
    try {
      apply_mutations(host, kept).topo_order();
      out.kept.push_back(kept.back().id.subprogram);
    } catch (const Error&) {
      kept.pop_back();
    }
  }
  out.graph = apply_mutations(host, kept);
  out.graph.validate();
  return out;
}

SearchResult search(const Graph& g, const SearchOptions& options) {
  if (!(options.budget_s > 0)) TESSERA_THROW(ErrorKind::kUsage, "search budget must be > 0 seconds, got " << options.budget_s);
  auto start = Clock::now();
  Shared sh{options, {}, MutationVerifier(options.seed),
            start + std::chrono::microseconds(static_cast<int64_t>(options.budget_s * 1e6))};
  for (const Rule& r : all_rules())
    if (!r.mesh_only && !options.disabled_rules.count(r.name)) sh.rules.push_back(&r);
  std::vector<Subprogram> subs = subprograms_of(g, options.device);
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(subs.size())));
  std::vector<RegionResult> results = search_subprograms(subs, sh, threads);

  // A subprogram's result is spliced back when the model predicts at least
  // min_gain of its time saved (SearchOptions::min_gain).
  SearchResult out;
  std::vector<Mutation> splices;
  std::vector<AppliedMutation> proposed;
  for (size_t i = 0; i < subs.size(); ++i) {
    RegionResult& r = results[i];
    add_counts(out.stats, r.stats);
    if (r.applied.empty() || !(r.cost_after < r.cost_before * (1.0 - options.min_gain))) continue;
    splices.push_back(splice_of(g, subs[i], static_cast<int>(i), std::move(r.best)));
    for (AppliedMutation& a : r.applied) proposed.push_back(std::move(a));
  }
  // Candidates that would close a cycle through the host were refused during
  // the search (closes_cycle); the splice keeps a check as a guard.
  SpliceResult spliced = splice_subprograms(g, std::move(splices));
  for (AppliedMutation& a : proposed) {
    if (std::find(spliced.kept.begin(), spliced.kept.end(), a.subprogram) == spliced.kept.end()) continue;
    out.stats.partial_used += a.partial;
    out.applied.push_back(std::move(a));
  }
  out.graph = std::move(spliced.graph);
  out.stats.subprograms = static_cast<int>(subs.size());
  out.stats.applied = static_cast<int64_t>(out.applied.size());
  out.stats.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out.stats.budget_exhausted = out.stats.budget_exhausted || sh.out_of_time;
  return out;
}

}  // namespace tessera::mutator
