#include "mutator/verify_mutation.h"

#include <filesystem>
#include <optional>

#include "graph/error.h"
#include "graph/hash.h"
#include "mutator/rules/rule.h"
#include "verifier/multilinear.h"
#include "verifier/proofs.h"

namespace tessera::mutator {

namespace {

// The proofs of earlier runs (verifier::default_proof_cache_path()), shared
// by every verifier of the process: a proof costs up to 2 s of Z3, which a
// search of 10 s would otherwise spend again in each run. Keyed by name and
// version (bumped when a statement changes); CI proves everything afresh
// (tessera verify --prove-rules reads no cache).
verifier::ProofResult cached_proof(const std::string& obligation) {
  static std::mutex mu;
  static std::optional<verifier::ProofCache> cache;
  std::lock_guard<std::mutex> lock(mu);
  int version = 0;
  for (const verifier::ObligationInfo& o : verifier::proof_obligations())
    if (o.name == obligation) version = o.version;
  try {
    if (!cache) cache.emplace(verifier::default_proof_cache_path());
    if (const verifier::ProofResult* hit = cache->find(obligation, version)) return *hit;
  } catch (const Error&) {
    cache.reset();  // an unreadable cache: prove, and do not write over it
  }
  verifier::ProofResult r = verifier::prove(obligation, 20000);
  if (cache) {
    cache->store(r);
    try {
      std::filesystem::create_directories(std::filesystem::path(verifier::default_proof_cache_path()).parent_path());
      cache->save();
    } catch (const std::exception&) {
      // Not writable: the proof is kept for this process only.
    }
  }
  return r;
}

}  // namespace

bool MutationVerifier::proven(const std::string& obligation, std::string* detail) {
  std::lock_guard<std::mutex> lock(proof_mu_);
  auto it = proofs_.find(obligation);
  if (it == proofs_.end()) {
    verifier::ProofResult r = cached_proof(obligation);
    it = proofs_.emplace(obligation, std::make_pair(r.status == verifier::ProofStatus::kProven,
                                                   std::string(verifier::proof_status_name(r.status)) +
                                                       (r.detail.empty() ? "" : ": " + r.detail)))
             .first;
  }
  if (detail) *detail = it->second.second;
  return it->second.first;
}

void MutationVerifier::verify(Mutation& m, const std::string& obligation) {
  // A covered instance of a proven obligation needs neither a test nor the
  // cache of test verdicts (whose key hashes both graphs' constants:
  // Winograd's transformed weights are 37 MB on a 512-channel Conv).
  std::string detail;
  if (obligation != kNoObligation && proven(obligation, &detail)) {
    Verification v;
    v.status = Verification::kProven;
    v.method = "z3:" + obligation;
    v.error_bound = 0;
    v.detail = "obligation " + obligation + " " + detail + " for all sizes; the instance meets its preconditions";
    m.verification = v;
    return;
  }
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
  {
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
