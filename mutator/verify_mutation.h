// Verifying mutations: each accepted mutation is either proven by the Z3
// obligation of its rule that covers it (proven once per verifier, for all
// sizes; the instance's preconditions checked by the rule's covered_by) or
// tested by the multilinear test on the small subprogram it touches.
// Verdicts are cached by the structural hash of (before, replacement),
// confirmed by structural equality. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "mutator/mutation.h"

namespace tessera::mutator {

class MutationVerifier {
 public:
  explicit MutationVerifier(uint64_t seed) : seed_(seed) {}

  // Fills m.verification. `obligation`: the obligation whose preconditions
  // m satisfies (covering_obligation in mutator/rules/rule.h), or
  // kNoObligation. A covered mutation is proven, with no test, once its
  // obligation is; any other is tested, whatever its size.
  void verify(Mutation& m, const std::string& obligation);

  // Whether `obligation` is proven: Z3 runs on the first question, and the
  // answer is kept. `detail` (optional) gets Z3's status and reason.
  bool proven(const std::string& obligation, std::string* detail = nullptr);

  // A test of up to this many FLOPs (both sides) is quick at any budget.
  static constexpr int64_t kTestFlops = 60'000'000;

  int tested() const { return tested_; }
  int proofs() const { return static_cast<int>(proofs_.size()); }

 private:
  struct Entry {
    Graph before, after;
    Verification verdict;
  };
  uint64_t seed_;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::vector<std::shared_ptr<Entry>>> cache_;
  std::mutex proof_mu_;
  std::map<std::string, std::pair<bool, std::string>> proofs_;
  int tested_ = 0;
};

}  // namespace tessera::mutator
