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
#include "graph/tensor.h"
#include "verifier/program.h"

namespace tessera::verifier {

struct EndToEndOptions {
  uint64_t seed = 2024;
  int trials = 3;
  // Input sets given by the user (one tensor per graph input, in order),
  // checked after the random ones.
  std::vector<std::vector<Tensor>> given_inputs;
  // |a - b| <= atol + rtol * |a| + scale_rtol * max|a|, with a the
  // original's value and max|a| taken over the output. The last term is the
  // rounding of a different but exact summation order (Winograd transforms,
  // merged products): it scales with the tensor's magnitude, not with the
  // element's, so an element that cancels to a small value keeps an error of
  // the tensor's scale. A wrong program differs by the scale itself.
  double rtol = 1e-3;
  double atol = 1e-4;
  double scale_rtol = 1e-5;
};

struct EndToEndReport {
  bool passed = false;
  int trials = 0;           // random input sets
  int given = 0;            // the user's input sets
  std::string integer_inputs;  // how integer inputs were drawn (describe_ranges)
  double rtol = 0, atol = 0, scale_rtol = 0;
  double max_abs_error = 0;  // over all outputs and trials
  int64_t mismatches = 0;    // positions beyond the tolerance
  std::string detail;        // first mismatch, or a one-line summary

  std::string summary() const;
};

EndToEndReport check_end_to_end(const Program& original, const Program& candidate,
                                const EndToEndOptions& options = {});

}  // namespace tessera::verifier
