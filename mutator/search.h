// The search: the graph is split into subprograms at non-linear ops (what
// rules and mutants rewrite lives between them); each subprogram gets a
// best-first search with alpha relaxation over Mutations (TASO): candidates
// costing less than alpha times the best so far are expanded, duplicates are
// dropped by structural hash confirmed by equality, every candidate is
// costed with the cost model, and every mutation of a program that is kept
// is verified: when the program is chosen (only where it saves min_gain),
// or, for a mutant that may need corrections, before it is expanded. The
// best program of each subprogram is spliced back.
//
// Deterministic for a seed: subprograms are searched in parallel but each
// search depends only on its subprogram and the seed, and results are
// assembled in subprogram order. Only a budget that runs out makes the result
// depend on timing (the report says when it did).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "cost/device_profile.h"
#include "graph/graph.h"
#include "mutator/mutation.h"
#include "mutator/subprogram.h"

namespace tessera::mutator {

struct SearchOptions {
  cost::DeviceProfile device;
  double budget_s = 30;      // wall clock for the whole search
  uint64_t seed = 0;
  int threads = 0;           // 0: one per core
  double alpha = 1.05;
  int max_expansions = 48;   // per subprogram
  // A subprogram keeps its rewrite only when the model predicts at least
  // this share of its time saved: smaller differences are within the cost
  // model's error (per kernel, a median of about 25% on this CPU) and come
  // out either way when measured. Measured: at 3%, inception_v3's marginal
  // Winograd transforms made it 5% slower; at 10% the suite loses nothing
  // that measured faster (vgg16, csrnet keep every rewrite).
  double min_gain = 0.10;
  std::set<std::string> disabled_rules;
  bool partial = true;       // partially equivalent mutants (their generator plugs in here)
  std::function<void(double)> progress;  // fraction of subprograms done, called from the calling thread
};

struct AppliedMutation {
  std::string rule;
  std::string description;
  Verification verification;
  int subprogram = 0;  // the subprogram it rewrote (partition_subprograms order)
  bool partial = false;  // corrected where it is wrong (MutationId::Kind::kPartial)
};

struct SearchStats {
  int subprograms = 0;
  int64_t generated = 0;   // mutations proposed
  int64_t verified = 0;    // mutations that passed verification
  int64_t rejected = 0;    // mutations verification refused
  int64_t duplicates = 0;  // candidates already seen
  int64_t skipped_slow = 0;  // candidates whose verification could not finish in the budget left
  int64_t cyclic = 0;      // candidates refused: spliced back, they would close a cycle through the host
  int64_t expansions = 0;
  int64_t applied = 0;     // mutations in the final program
  int64_t partial_used = 0;
  double seconds = 0;
  bool budget_exhausted = false;
};

struct SearchResult {
  Graph graph;
  std::vector<AppliedMutation> applied;  // in subprogram order, then application order
  SearchStats stats;
};

struct SpliceResult {
  Graph graph;
  std::vector<int> kept;  // the subprograms spliced, in order
};
// The host with the subprograms' best programs spliced back: `splices` are
// Mutations of kind kSplice over disjoint node sets, taken in order. One
// whose splice would make the host cyclic (or break its signature) is left
// out, and its subprogram keeps its original program.
SpliceResult splice_subprograms(const Graph& host, std::vector<Mutation> splices);

SearchResult search(const Graph& g, const SearchOptions& options);

}  // namespace tessera::mutator
