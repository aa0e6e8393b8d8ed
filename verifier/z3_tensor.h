// Index-level encoding of tensor semantics in Z3 (private to the verifier).
// A tensor is an uninterpreted function from integer indices to reals; an op's
// output element is a term over its inputs' elements at index maps, with
// reductions as Sum(array, n) over a guarded lambda. Shape dims are integer
// constants with guards. An obligation is a claim whose free constants are
// universally quantified: it is proven when its negation is unsatisfiable.
//
// Sum is uninterpreted; the properties of summation a proof uses are added as
// ground instances of three axioms (named, so a proof states what it assumes):
//   sum-ext:    equal summands on [0, n) give equal sums (from array
//               extensionality, since summands are guarded lambdas)
//   sum-linear: Sum(f + g, n) = Sum(f, n) + Sum(g, n); Sum(c * f, n) = c * Sum(f, n)
//   sum-split:  Sum(f, a + b) = Sum(f, a) + Sum(k -> f(k + a), b)
#pragma once

#include <z3++.h>

#include <functional>
#include <string>
#include <vector>

#include "verifier/proofs.h"

namespace tessera::verifier::z3enc {

class Enc {
 public:
  explicit Enc(z3::context& c);

  z3::context& ctx() { return c_; }
  // A symbolic shape dim (>= 1) or a non-negative parameter.
  z3::expr dim(const std::string& name);
  z3::expr param(const std::string& name);  // >= 0
  z3::expr index(const std::string& name) { return c_.int_const(name.c_str()); }
  z3::expr num(int64_t v) { return c_.int_val(static_cast<int64_t>(v)); }
  z3::expr real(const std::string& name) { return c_.real_const(name.c_str()); }
  // An input tensor of the given rank (an uninterpreted function).
  z3::func_decl tensor(const std::string& name, int rank);
  z3::func_decl real_fn(const std::string& name, int arity);  // non-linear ops

  z3::expr in_range(const z3::expr& i, const z3::expr& n) { return i >= 0 && i < n; }
  // Zero outside [0, n): the padding and guard of every index map.
  z3::expr guarded(const z3::expr& i, const z3::expr& n, const z3::expr& v) {
    return z3::ite(in_range(i, n), v, c_.real_val(0));
  }
  // Sum over k in [0, n) of body(k).
  z3::expr sum(const z3::expr& n, const std::function<z3::expr(const z3::expr&)>& body);

  // Axiom instances (see the header comment).
  void assume_linear(const z3::expr& n, const std::function<z3::expr(const z3::expr&)>& f,
                     const std::function<z3::expr(const z3::expr&)>& g);
  void assume_scale(const z3::expr& n, const z3::expr& c, const std::function<z3::expr(const z3::expr&)>& f);
  void assume_split(const z3::expr& a, const z3::expr& b, const std::function<z3::expr(const z3::expr&)>& f);
  // The same with the tail summand written by the caller in the form the
  // rest of the proof uses; `shifted(k) = f(k + a)` becomes a side goal the
  // proof must also discharge, so the instance stays sound.
  void assume_split(const z3::expr& a, const z3::expr& b, const std::function<z3::expr(const z3::expr&)>& f,
                    const std::function<z3::expr(const z3::expr&)>& shifted);

  void guard(const z3::expr& e) { guards_.push_back(e); }
  const std::vector<z3::expr>& guards() const { return guards_; }
  const std::vector<z3::expr>& axioms() const { return axioms_; }
  const std::vector<z3::expr>& side_goals() const { return side_goals_; }

 private:
  z3::context& c_;
  z3::func_decl sum_;
  std::vector<z3::expr> guards_;
  std::vector<z3::expr> axioms_;
  std::vector<z3::expr> side_goals_;
  int lambda_counter_ = 0;
};

// An obligation: `claim` builds the statement under enc's guards.
struct Obligation {
  ObligationInfo info;
  std::function<z3::expr(Enc&)> claim;
};

std::vector<Obligation> rule_obligations();
std::vector<Obligation> sharding_obligations();
std::vector<Obligation> correction_obligations();
std::vector<Obligation> wrong_rule_obligations();
std::vector<Obligation> wrong_sharding_obligations();  // and wrong correction boxes

}  // namespace tessera::verifier::z3enc
