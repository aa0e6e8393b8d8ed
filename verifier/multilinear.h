// The multilinear random test: evaluates the original and a candidate over
// Z_p (p = 2^61 - 1) at random inputs and compares every output position.
// Equal programs agree everywhere; programs that differ as polynomials agree
// at a random point with probability at most degree/p (Schwartz–Zippel), so a
// few trials make a wrong "equivalent" negligible. Positions that differ are
// returned as boxes over each output (exact: they cover every differing
// position seen and nothing else).
//
// Programs with non-polynomial ops are read with those ops as uninterpreted
// functions (graph/number.h): agreement is then sound under congruence (the
// same op on equal arguments gives equal results, which real semantics also
// has), but a Z_p difference may be a real-number identity the reading cannot
// see (relu(relu(x)) = relu(x)); such differences are re-checked in floating
// point and reported as unknown when floats agree.
#pragma once

#include <cstdint>

#include "graph/graph.h"
#include "verifier/program.h"
#include "verifier/verdict.h"

namespace tessera::verifier {

struct CheckOptions {
  double target_error = 1e-9;  // bound on a wrong "equivalent"
  uint64_t seed = 0x7e55e7a;
  int max_trials = 64;
  // Float re-check of Z_p differences: |a - b| <= atol + rtol * max(|a|, |b|).
  double rtol = 1e-4;
  double atol = 1e-5;
  int float_trials = 3;
  // How outputs are compared. kAuto samples each box of the splitting-point
  // grid (box_check.h) when that is estimated to cost less than half of a
  // whole evaluation, and evaluates everything otherwise (small programs,
  // sharded ones, ops without a splitting rule, boxes it cannot decide).
  // kFull always evaluates everything (the reference); kBoxes samples boxes
  // whenever it can, whatever the cost (still falling back when it cannot).
  enum class Evaluation { kAuto, kFull, kBoxes };
  Evaluation evaluation = Evaluation::kAuto;
};

// Candidate and original must have the same global input types, in order;
// outputs are compared in order (a type mismatch is a difference of the whole
// output). Throws Error(kUsage) when the inputs do not match.
Verdict check_equivalence(const Program& original, const Program& candidate, const CheckOptions& options = {});
inline Verdict check_equivalence(const Graph& original, const Graph& candidate, const CheckOptions& options = {}) {
  return check_equivalence(Program(original), Program(candidate), options);
}

}  // namespace tessera::verifier
