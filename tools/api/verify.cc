// api::verify: the verifier's multilinear test between two models, with the
// differing output boxes named by the original's outputs.
//
// A plan's model differs from the original by Tessera's canonical passes
// (BatchNorm folded into Conv, constants folded) as well as by the searched
// rewrites. A fold is an identity over the reals but not over Z_p (the
// folded weight w * gamma / sqrt(var + eps) is a new float, read as a new
// residue), so the direct test cannot decide it. Where the direct test does
// not answer `equivalent`, the original canonicalized by those passes is
// compared instead: each pass with a Z3 obligation is proven here, the
// others evaluate constants (exact over the reals), and the answer names
// them, with the float test's tolerance for the rounding the folds bring.
#include <sstream>

#include "graph/hash.h"
#include "mutator/canonicalize.h"
#include "mutator/replay.h"
#include "tools/api/tessera.h"
#include "verifier/multilinear.h"
#include "verifier/plan_check.h"
#include "verifier/proofs.h"

namespace tessera::api {

std::string Box::str() const { return verifier::Box{lo, hi}.str(); }

namespace {

Verdict from_verifier(const verifier::Verdict& v, const Graph& original) {
  Verdict out;
  out.kind = verifier::verdict_kind_name(v.kind);
  out.method = verifier::method_name(v.method);
  out.trials = v.trials;
  out.degree = v.degree;
  out.error_bound = v.error_bound;
  out.reason = v.reason;
  out.sampled_boxes = v.sampled_boxes;
  out.summary = v.summary();
  for (const verifier::OutputRegion& r : v.differing) {
    DifferingOutput d;
    d.output = r.output;
    d.name = original.value(original.outputs()[static_cast<size_t>(r.output)]).name;
    for (const verifier::Box& b : r.boxes) d.boxes.push_back({b.lo, b.hi});
    out.differing.push_back(std::move(d));
  }
  return out;
}

// Proven passes of `passes` (all of them with an obligation), or false.
bool passes_proven(const std::vector<mutator::PassRecord>& passes, std::string& applied, std::string& proofs) {
  for (const mutator::PassRecord& p : passes) {
    if (p.times == 0) continue;
    applied += (applied.empty() ? "" : ", ") + p.pass;
    if (p.obligation.empty()) continue;
    if (verifier::prove(p.obligation).status != verifier::ProofStatus::kProven) return false;
    proofs += (proofs.empty() ? "" : ", ") + ("z3:" + p.obligation);
  }
  return true;
}

// The candidate against the canonicalized original; nullopt-like (kind
// empty) when the passes change nothing or a pass's obligation is not proven.
Verdict against_canonical(const Graph& original, const Graph& candidate, const verifier::CheckOptions& check,
                          const verifier::Verdict& direct) {
  Graph canonical = original;
  std::string applied, proofs;
  if (!passes_proven(mutator::canonicalize(canonical), applied, proofs)) return {};
  if (applied.empty() || structurally_equal(canonical, original)) return {};
  verifier::Verdict v = verifier::check_equivalence(canonical, candidate, check);
  if (!v.equivalent()) return {};
  Verdict out = from_verifier(v, original);
  out.method = "canonical+" + out.method;
  out.reason = "the original canonicalized first (" + applied + (proofs.empty() ? "" : "; proven: " + proofs) +
               "), then " + out.reason;
  out.summary = "equivalent after canonicalizing the original (" + applied + (proofs.empty() ? "" : ", " + proofs) +
                "): " + v.summary();
  if (direct.method == verifier::Method::kFloatTest) {
    std::ostringstream os;
    os << "; in floats the two agree within rtol " << direct.error_bound << " (the folds' rounding)";
    out.summary += os.str();
  }
  return out;
}

// The two programs after the canonical passes, when they are the same
// program (what a plan that applied no search rewrite is): exact, and
// immediate where the random test would run the whole model.
Verdict same_after_canonicalizing(const Graph& original, const Graph& candidate) {
  Graph a = original, b = candidate;
  std::string applied;
  std::vector<mutator::PassRecord> passes = mutator::canonicalize(a);
  for (const mutator::PassRecord& p : passes)
    if (p.times > 0) applied += (applied.empty() ? "" : ", ") + p.pass;
  mutator::canonicalize(b);
  if (!structurally_equal(a, b)) return {};
  for (const mutator::PassRecord& p : passes)
    if (p.times > 0 && !p.obligation.empty() && verifier::prove(p.obligation).status != verifier::ProofStatus::kProven)
      return {};
  Verdict out;
  out.kind = "equivalent";
  out.method = "structural";
  out.error_bound = 0;
  out.reason = applied.empty() ? "the same program" : "the same program once the original is canonicalized (" + applied + ")";
  out.summary = "equivalent (structural: " + out.reason + ")";
  return out;
}

// The candidate rederived from the canonicalized original by rule instances
// that proven obligations cover (mutator/replay.h): what confirms a plan
// whose rewrites compute new float constants (Winograd's transformed
// weights), which the Z_p test reads as unrelated residues. Whatever the
// replay does not reproduce is left to the multilinear test between the
// rederived program and the candidate, where such constants are the same
// on both sides. Kind empty when no proven rule applies, or the rest is not
// shown equivalent.
Verdict rederived_by_rules(const Graph& original, const Graph& candidate, const verifier::CheckOptions& check) {
  Graph a = original, b = candidate;
  std::string applied, proofs;
  if (!passes_proven(mutator::canonicalize(a), applied, proofs)) return {};
  mutator::canonicalize(b);
  mutator::ReplayResult r = mutator::replay_rules(a, b);
  if (r.steps.empty()) return {};
  Verdict out;
  std::string rules = mutator::replay_summary(r.steps);
  if (!r.target_steps.empty()) rules += "; the plan brought to the same normal form by " + mutator::replay_summary(r.target_steps);
  std::string steps = std::to_string(r.steps.size()) + " steps, each a rule instance its proven obligation covers or a layout chain checked exactly";
  std::string canon = applied.empty() ? "" : "the original canonicalized (" + applied + (proofs.empty() ? "" : "; proven: " + proofs) + "), then ";
  if (r.equal) {
    out.kind = "equivalent";
    out.method = "rules";
    out.error_bound = 0;
    out.reason = canon + "rederived by " + steps + ": " + rules;
    out.summary = "equivalent (rules: " + out.reason + ")";
  } else {
    verifier::Verdict v = verifier::check_equivalence(r.rederived, r.target, check);
    if (!v.equivalent()) return {};
    out = from_verifier(v, original);
    out.method = "rules+" + out.method;
    out.reason = canon + "rederived in part by " + steps + " (" + rules + "), then " + out.reason;
    out.summary = "equivalent after rederiving in part by " + steps + " (" + rules + "): " + v.summary();
  }
  // Over the reals the rules are exact; in floats the constants they compute
  // are rounded and the sums run in another order. One seeded input set
  // through the interpreter says by how much.
  verifier::EndToEndOptions e;
  e.seed = check.seed;
  e.trials = 1;
  verifier::EndToEndReport f = verifier::check_end_to_end(verifier::Program(original), verifier::Program(candidate), e);
  if (!f.passed) return {};
  std::ostringstream os;
  os << "; in floats the two agree within max abs error " << f.max_abs_error << " (tolerance atol " << f.atol
     << " + rtol " << f.rtol << " + " << f.scale_rtol << " of the output's largest value, 1 input set)";
  out.summary += os.str();
  return out;
}

}  // namespace

Verdict verify(const Graph& original, const Graph& candidate, const VerifyConfig& config) {
  Verdict same = same_after_canonicalizing(original, candidate);
  if (!same.kind.empty()) return same;
  verifier::CheckOptions check;
  check.seed = config.seed;
  Verdict rules = rederived_by_rules(original, candidate, check);
  if (!rules.kind.empty()) return rules;
  verifier::Verdict v = verifier::check_equivalence(original, candidate, check);
  if (!v.equivalent()) {
    Verdict c = against_canonical(original, candidate, check, v);
    if (!c.kind.empty()) return c;
  }
  return from_verifier(v, original);
}

}  // namespace tessera::api
