// The end-to-end check a plan must pass before it is written: the original
// graph and the candidate (one graph, or a per-rank program on a mesh) run in
// the reference interpreter on seeded random inputs (floats in [-1, 1),
// integers over the range the model reads them in: input_ranges.h) and on the
// model's own test inputs when given, and every output must agree within a
// tolerance that the report states.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/progress.h"
#include "graph/tensor.h"
#include "verifier/input_ranges.h"
#include "verifier/program.h"

namespace tessera::verifier {

struct EndToEndOptions {
  uint64_t seed = 2024;
  int trials = 3;
  // Input sets given by the user (one tensor per graph input, in order),
  // checked after the random ones.
  std::vector<std::vector<Tensor>> given_inputs;
  // Ranges the user states for integer inputs (--input-range), replacing
  // what the model's use gives (input_ranges.h).
  StatedRanges input_ranges;
  // |a - b| <= atol + rtol * |a| + scale_rtol * max|a|, with a the
  // original's value and max|a| taken over the output. The last term is the
  // rounding of a different but exact summation order (Winograd transforms,
  // merged products): it scales with the tensor's magnitude, not with the
  // element's, so an element that cancels to a small value keeps an error of
  // the tensor's scale. A wrong program differs by the scale itself.
  double rtol = 1e-3;
  double atol = 1e-4;
  double scale_rtol = 1e-5;
  // The tolerance follows the precision the original computes in (these
  // fields are then its floor, the f32 tolerance). With u the unit roundoff
  // of the narrowest float type among the original's tensors (bf16 2^-8,
  // f16 2^-11, f32 2^-24: the interpreter rounds every node's result to its
  // type) and K the longest reduction of any node (the product of its dim
  // map's contracted factors: a MatMul's K, a convolution's input channels
  // times taps, a Softmax row), a correct plan that rounds at other points
  // or sums in another order differs by about u per rounding, and rounding
  // errors over K terms add up like a random walk, sqrt(K) u in units of
  // one term; a term is about 1/sqrt(K) of a sum, hence the halving:
  //     eps = u sqrt(K) / 2
  //     atol = max(atol, eps), rtol = max(rtol, eps), scale_rtol = max(scale_rtol, 4 u)
  // fp16 ResNet-50 (K = 4608): eps = 0.017, tolerance 0.046 at 1.75, where
  // two correct programs differ by 0.03; a bf16 decoder (K = 2816): eps =
  // 0.10, so a 25% error in a weight still fails. f32 models keep the floor
  // (eps <= 1e-5 for K < 10^7). A wrong program differs by the values.
  bool from_precision = true;
  // Called before each input set: "checking", "set k/N".
  ProgressFn progress;
};

// The tolerance `o` gives for comparisons against `original`, and the rule's
// one-line statement (empty when the floor applies as it is).
struct Tolerance {
  double rtol = 0, atol = 0, scale_rtol = 0;
  std::string rule;
};
Tolerance end_to_end_tolerance(const Graph& original, const EndToEndOptions& o);

struct EndToEndReport {
  bool passed = false;
  int trials = 0;           // random input sets
  int given = 0;            // the user's input sets
  std::string integer_inputs;  // how integer inputs were drawn (describe_ranges)
  double rtol = 0, atol = 0, scale_rtol = 0;
  std::string tolerance_rule;  // how the precision set them (Tolerance::rule)
  double max_abs_error = 0;  // over all outputs and trials
  int64_t mismatches = 0;    // positions beyond the tolerance
  std::string detail;        // first mismatch, or a one-line summary

  std::string summary() const;
};

EndToEndReport check_end_to_end(const Program& original, const Program& candidate,
                                const EndToEndOptions& options = {});

}  // namespace tessera::verifier
