// Verifying mutations: each accepted mutation is either proven by its rule's
// Z3 obligation (proven once per process, shape guards checked by the rule)
// or tested by the multilinear test on the small subprogram it touches.
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

  // Fills m.verification. `obligation` is the rule's Z3 obligation or
  // kNoObligation. Subprograms up to kTestFlops are always tested; larger
  // ones rely on the proof when the rule has one, else are tested anyway.
  void verify(Mutation& m, const std::string& obligation);

  static constexpr int64_t kTestFlops = 60'000'000;

  int tested() const { return tested_; }
  int proofs() const { return static_cast<int>(proofs_.size()); }

 private:
  bool proven(const std::string& obligation, std::string* detail);

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
