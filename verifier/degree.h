// What the multilinear test needs to know about a program before it runs:
// its degree as a polynomial in the graph inputs (for the Schwartz–Zippel
// bound), and what in it is not a polynomial over Z_p (uninterpreted
// functions, comparisons of residues, inexact constants, integer inputs),
// which decides how far a Z_p result can be trusted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::verifier {

struct ProgramAnalysis {
  // Largest total degree of any value, counting each uninterpreted-function
  // result as a fresh variable of degree 1.
  int64_t degree = 0;
  // Applications of non-polynomial ops to non-constant arguments.
  int64_t uninterpreted = 0;
  // Comparisons of residues (Max, Less, MaxPool, ...): deterministic but not
  // random-looking, so a trial may miss a difference with probability 1/2.
  bool order_based = false;
  // A graph input of integer dtype: Z_p inputs cannot range over it.
  bool integer_inputs = false;
  // A non-integral float constant (0.5): Z_p maps it to a hash, so real
  // identities between constants (0.5 * 2 = 1) do not hold over Z_p.
  bool inexact_constants = false;
  std::vector<std::string> nonlinear_ops;  // distinct op names read as functions

  // Equal over Z_p <=> equal as polynomials: both directions of the test hold.
  bool polynomial() const {
    return uninterpreted == 0 && !order_based && !integer_inputs && !inexact_constants;
  }
};

ProgramAnalysis analyze_program(const Graph& g);

// Probability that one Z_p trial agrees on programs that differ: (number of
// uninterpreted applications + 1) * degree / p by Schwartz–Zippel and a
// union bound over the function arguments; 1/2 when residues are compared.
double trial_error_bound(const ProgramAnalysis& a, const ProgramAnalysis& b);
// Trials needed so that per_trial^n < target (at least 1).
int trials_for(double per_trial, double target);

}  // namespace tessera::verifier
