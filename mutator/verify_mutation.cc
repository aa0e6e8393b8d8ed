#include "mutator/verify_mutation.h"

#include "cost/flops.h"
#include "graph/error.h"
#include "graph/hash.h"
#include "mutator/rules/rule.h"
#include "verifier/multilinear.h"
#include "verifier/proofs.h"

namespace tessera::mutator {

bool MutationVerifier::proven(const std::string& obligation, std::string* detail) {
  std::lock_guard<std::mutex> lock(proof_mu_);
  auto it = proofs_.find(obligation);
  if (it == proofs_.end()) {
    verifier::ProofResult r = verifier::prove(obligation, 20000);
    it = proofs_.emplace(obligation, std::make_pair(r.status == verifier::ProofStatus::kProven,
                                                   std::string(verifier::proof_status_name(r.status)) +
                                                       (r.detail.empty() ? "" : ": " + r.detail)))
             .first;
  }
  *detail = it->second.second;
  return it->second.first;
}

void MutationVerifier::verify(Mutation& m, const std::string& obligation) {
  const Graph& after = m.unfolded.num_nodes() > 0 ? m.unfolded : m.replacement;
  uint64_t key = structural_hash(m.before) * 0x9e3779b97f4a7c15ull ^ structural_hash(after);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : cache_[key])
      if (structurally_equal(e->before, m.before) && structurally_equal(e->after, after)) {
        m.verification = e->verdict;
        return;
      }
  }
  Verification v;
  bool has_proof = obligation != kNoObligation;
  std::string detail;
  if (has_proof && graph_flops(m.before) > kTestFlops && proven(obligation, &detail)) {
    v.status = Verification::kProven;
    v.method = "z3:" + obligation;
    v.error_bound = 0;
    v.detail = "obligation " + obligation + " " + detail + "; shape guards checked by the rule";
  } else {
    verifier::CheckOptions options;
    options.seed = seed_ ^ key;
    verifier::Verdict verdict;
    try {
      verdict = verifier::check_equivalence(m.before, after, options);
    } catch (const Error& e) {
      // Over the memory limit: the search stays under it and goes on
      // without this mutation.
      if (e.kind() != ErrorKind::kResource) throw;
      v.status = Verification::kRejected;
      v.method = "none";
      v.detail = "not tested: " + e.message();
      m.verification = v;
      return;
    }
    v.status = verdict.equivalent() ? Verification::kTested : Verification::kRejected;
    v.method = verifier::method_name(verdict.method);
    v.error_bound = verdict.error_bound;
    v.detail = verdict.summary();
    if (&after != &m.replacement) v.detail += "; tested before constant folding";
    if (verdict.kind == verifier::Verdict::kDiffers) v.differing = verdict.differing;
    std::lock_guard<std::mutex> lock(mu_);
    ++tested_;
  }
  m.verification = v;
  std::lock_guard<std::mutex> lock(mu_);
  cache_[key].push_back(std::make_shared<Entry>(Entry{m.before, after, v}));
}

}  // namespace tessera::mutator
