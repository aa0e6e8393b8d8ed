// api::verify: the verifier's multilinear test between two models, with the
// differing output boxes named by the original's outputs.
#include "tools/api/tessera.h"
#include "verifier/multilinear.h"

namespace tessera::api {

std::string Box::str() const { return verifier::Box{lo, hi}.str(); }

Verdict verify(const Graph& original, const Graph& candidate, const VerifyConfig& config) {
  verifier::CheckOptions check;
  check.seed = config.seed;
  verifier::Verdict v = verifier::check_equivalence(original, candidate, check);
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

}  // namespace tessera::api
