// Results of the verifier as plain data: which output positions of a candidate
// differ from the original, as boxes over each output's index space. The
// mutator turns boxes into correction kernels; the runtime and export read them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::verifier {

// Half-open box [lo, hi) over one output's index space (one entry per dim).
struct Box {
  std::vector<int64_t> lo, hi;

  int64_t numel() const;
  bool contains(const std::vector<int64_t>& idx) const;
  std::string str() const;  // "[0:4, 2:3]"
  bool operator==(const Box&) const = default;
};

struct OutputRegion {
  int output = 0;
  std::vector<Box> boxes;  // disjoint
};

// How a verdict was reached, so callers can weigh it.
enum class Method {
  kMultilinear,  // Z_p random test of polynomial programs (Schwartz–Zippel)
  kUninterpreted,  // Z_p test with non-linear ops read as shared uninterpreted functions
  kFloatTest,    // random float inputs compared with a tolerance: evidence, not proof
  kStructural,   // rejected before testing: signatures differ
};
const char* method_name(Method m);

struct Verdict {
  enum Kind { kEquivalent, kDiffers, kUnknown };
  Kind kind = kUnknown;
  Method method = Method::kMultilinear;
  // kEquivalent: probability that the programs differ although every trial
  // agreed. kFloatTest: the tolerance used.
  double error_bound = 1.0;
  int trials = 0;
  int64_t degree = 0;  // total degree used for the Schwartz–Zippel bound
  // Assumptions the verdict rests on and, for kUnknown, why it is unknown.
  std::string reason;
  std::vector<OutputRegion> differing;  // kDiffers (and suspect regions for kUnknown)
  // Z_p outputs compared at sampled positions of each splitting-point box
  // (this many boxes), rather than at every position (0).
  int64_t sampled_boxes = 0;

  bool equivalent() const { return kind == kEquivalent; }
  std::string summary() const;  // one line
};

const char* verdict_kind_name(Verdict::Kind k);

}  // namespace tessera::verifier
