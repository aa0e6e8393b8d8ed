// Z3 proofs of the identities Tessera relies on: rewrite rules under their
// shape guards, sharding strategies (local computation + collective = global
// op), and the boundaries of correction boxes of partially equivalent mutants.
// Each is a named obligation with a version; results are cached by name and
// version in a JSON file so that a rule is proven once. A refuted, timed-out
// or failed proof is reported as such, never as proven.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tessera::verifier {

struct ObligationInfo {
  std::string name;       // kebab-case, stable (the rule or strategy name)
  int version = 1;        // bump when the statement changes
  std::string category;   // "rule", "sharding" or "correction"
  std::string statement;  // the identity, in one line
  std::string twin_of;    // a wrong obligation: the obligation it is the wrong twin of
};

// kTimeout: the time or resource budget ran out before Z3 decided.
enum class ProofStatus { kProven, kRefuted, kTimeout, kError };
const char* proof_status_name(ProofStatus s);

struct ProofResult {
  std::string name;
  int version = 0;
  ProofStatus status = ProofStatus::kError;
  double seconds = 0;
  bool cached = false;
  std::string detail;  // counterexample or Z3's reason for unknown
};

// The ranks up to which the rule obligations over permutations and over
// reshapes are stated: a rule's instance of higher rank is tested instead.
inline constexpr int kMaxPermRank = 4;  // (rank!)^2 pairs: rank 5 took 34 s
inline constexpr int kMaxReshapeRank = 4;

// The obligations the mutator's rules and strategies rest on.
const std::vector<ObligationInfo>& proof_obligations();
// Deliberately wrong variants (soundness catalogue): each must be refuted.
const std::vector<ObligationInfo>& wrong_obligations();

// Proves one obligation (from either list) by name. `rlimit` (0: none) caps
// Z3's resource counter, a budget that does not depend on the clock. Throws
// Error(kUsage) for an unknown name.
ProofResult prove(const std::string& name, unsigned timeout_ms = 20000, unsigned rlimit = 0);

// Results keyed by name and version, stored as JSON at `path`. Only proven
// and refuted results are stored (a timeout may succeed with more time).
class ProofCache {
 public:
  explicit ProofCache(std::string path);  // loads `path` if it exists
  const ProofResult* find(const std::string& name, int version) const;
  void store(const ProofResult& r);
  void save() const;  // writes atomically; throws Error(kIo)

 private:
  std::string path_;
  std::map<std::string, ProofResult> entries_;
};

// Where proof results are kept between runs: $XDG_CACHE_HOME/tessera/
// proofs.json, or ~/.cache/tessera/proofs.json (beside the host profile).
std::string default_proof_cache_path();

// Proves every obligation of proof_obligations(), using and updating `cache`
// when given.
std::vector<ProofResult> prove_all(ProofCache* cache, unsigned timeout_ms = 20000);

}  // namespace tessera::verifier
