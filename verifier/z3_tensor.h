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
//
// Arithmetic facts Z3 finds hard in context (division by a symbolic size)
// are proven once as schemas and assumed at ground instances.
//
// A sharded program is encoded as its ranks' local programs: each rank's
// inputs are tensors of their own, tied to the global tensors only by the
// placement's definition (a hypothesis: block(), or the global value of a
// Partial is the sum of the ranks' values: partial()), and the collectives
// by their own semantics (all_gather, all_reduce). A sharding claim compares
// that program with the global op on the global tensors, so it can fail.
#pragma once

#include <z3++.h>

#include <functional>
#include <map>
#include <optional>
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
  z3::func_decl int_tensor(const std::string& name, int rank);  // integer-valued (indices)

  using Index = std::vector<z3::expr>;
  // A rank's local tensor defined by an index map into `global`: a new
  // tensor `name` with name(idx) = global(map(idx)) wherever in_domain(idx);
  // elsewhere it is unrelated. The definition is a quantified hypothesis,
  // instantiated by e-matching on `name`'s terms only.
  z3::func_decl view(const z3::func_decl& global, const std::string& name, const std::function<Index(const Index&)>& map,
                     const std::function<z3::expr(const Index&)>& in_domain);
  // The block [offset, offset + size) of `global` along `dim` (a Shard).
  z3::func_decl block(const z3::func_decl& global, const std::string& name, int dim, const z3::expr& offset,
                      const z3::expr& size);
  // The blocks of `global` along `dim` of a symbolic number n of ranks: one
  // tensor `name` with the rank as an extra first index,
  // name(r, .., j, ..) = global(.., r * S + j, ..) for r in [0, n), j in [0, S).
  z3::func_decl rank_blocks(const z3::func_decl& global, const std::string& name, int dim, const z3::expr& n,
                            const z3::expr& S);
  // A Partial(sum) tensor of n ranks: n new tensors `name0`.. whose sum at
  // every index is `global` there (their split among the ranks is free).
  std::vector<z3::func_decl> partial(const z3::func_decl& global, const std::string& name, int n);

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

  // sum-ext under a condition: cond => Sum(f, n) = Sum(g, n). The summands'
  // equality, cond and k in [0, n) => f(k) = g(k), becomes a side goal, at
  // a fresh k; or at the caller's k, and then it may use the instances added
  // before it (a nested sum's ext, stated at k first, serves it).
  void assume_ext(const z3::expr& n, const std::function<z3::expr(const z3::expr&)>& f,
                  const std::function<z3::expr(const z3::expr&)>& g, const z3::expr& cond,
                  const std::optional<z3::expr>& k = std::nullopt);
  // A fact with `arity` parameters, proven once for all their values (a side
  // goal over fresh constants), then assumed at each of `instances`: Z3
  // proves a general arithmetic fact faster than its instances in context.
  void assume_schema(int arity, const std::function<z3::expr(const std::vector<z3::expr>&)>& fact,
                     const std::vector<std::vector<z3::expr>>& instances);
  // Sum(f, n * S) = sum over r < n of Sum(k -> f(r * S + k), S), as n - 1
  // sum-split instances in a balanced tree of halves (8 = 4 + 4 = (2 + 2) + (2 + 2)),
  // each tail written as the next block's function (a side goal each). A
  // chain peeling one block at a time proves as fast (row-parallel MatMul on
  // 8 ranks: 0.3 s either way, measured); what kept the earlier chain from
  // finishing was sums that differed in bound variable names (see sum()).
  void assume_blocks(int n, const z3::expr& S, const std::function<z3::expr(const z3::expr&)>& f);

  // The claim follows from the axiom instances with every sum an atom: its
  // checks then see each sum (outside binders) as a constant. That is sound,
  // since a formula valid for every value of a subterm is valid for its
  // value, and it keeps Z3 in linear arithmetic instead of building models
  // of lambdas with nonlinear bodies, which kept refutations from finishing
  // within 60 s (AllReduce of row-parallel Gemm + bias on 4 ranks; measured).
  void sums_as_atoms() { sums_as_atoms_ = true; }
  bool sums_are_atoms() const { return sums_as_atoms_; }
  z3::expr atomize(const z3::expr& e);

  void guard(const z3::expr& e) { guards_.push_back(e); }
  const std::vector<z3::expr>& guards() const { return guards_; }
  const std::vector<z3::expr>& axioms() const { return axioms_; }
  // A side goal may use the first `axioms` instances of axioms(), those
  // added before its own: by induction on that order every instance is true.
  // Only a nested sum's side goal is given them (assume_ext at a given k);
  // the others are about summands alone, and the instances they do not
  // need doubled the time of the sharding proofs (measured).
  struct SideGoal {
    z3::expr goal;
    size_t axioms;
  };
  const std::vector<SideGoal>& side_goals() const { return side_goals_; }

 private:
  z3::context& c_;
  z3::func_decl sum_;
  std::vector<z3::expr> guards_;
  std::vector<z3::expr> axioms_;
  std::vector<SideGoal> side_goals_;
  int lambda_counter_ = 0;
  bool sums_as_atoms_ = false;
  // Sum term id -> (the term, kept alive so that its id is not reused; its constant)
  std::map<unsigned, std::pair<z3::expr, z3::expr>> atoms_;
};

// r * S for a concrete rank r, with 0 for rank 0 (no 0 * S term to normalise).
z3::expr rank_offset(Enc& e, int r, const z3::expr& S);
// The position in rank r's block of the global position p: p - r * S.
z3::expr local_index(Enc& e, int r, const z3::expr& S, const z3::expr& p);

// Collectives over n ranks by their own semantics.
// AllGather of blocks of `size` along a dim: position p (in [0, n * size))
// reads rank r = p / size at p - r * size, as an ite chain over the blocks.
z3::expr all_gather(Enc& e, int n, const z3::expr& size, const z3::expr& p,
                    const std::function<z3::expr(int r, const z3::expr& local)>& part);
// The same over a symbolic rank count: p reads rank p / size at p % size.
z3::expr all_gather_ranks(const z3::expr& size, const z3::expr& p,
                          const std::function<z3::expr(const z3::expr& r, const z3::expr& local)>& part);
// AllReduce(sum): the sum of the ranks' values.
z3::expr all_reduce(Enc& e, int n, const std::function<z3::expr(int r)>& part);

// p in rank r's block [r * S, (r + 1) * S).
z3::expr in_block(Enc& e, int r, const z3::expr& S, const z3::expr& p);

// The proof step of a sharded contraction: the global sum over [0, n * S)
// of `global` equals the sum of the ranks' sums over [0, S) of `local(r)`.
// A balanced tree of sum-split instances cuts it into blocks (assume_blocks)
// and a sum-ext instance takes block r to rank r's summand.
void assume_rank_blocks(Enc& e, int n, const z3::expr& S, const std::function<z3::expr(const z3::expr&)>& global,
                        const std::function<std::function<z3::expr(const z3::expr&)>(int r)>& local);

// 1-D convolution, kernel 3, stride 1, pad 1, of input x(c, pos) (zero
// outside [0, len)) with weight w(c, k) at output position o: the sum over
// C * 3 of conv3_term, the reduction over (c, k) flattened to 3c + k.
using Fn2 = std::function<z3::expr(const z3::expr&, const z3::expr&)>;
std::function<z3::expr(const z3::expr&)> conv3_term(Enc& e, const Fn2& w, const z3::expr& o, const z3::expr& len,
                                                    const Fn2& x);
z3::expr conv3(Enc& e, const z3::expr& C, const Fn2& w, const z3::expr& o, const z3::expr& len, const Fn2& x);

// The rank counts every sharding strategy is proven for: concrete, so that
// r * S stays linear in a symbolic block size S. Strategies without a
// reduction over ranks are also proven for a symbolic count (`-n`).
inline constexpr int kRankCounts[] = {2, 4, 8};

// The ranks' blocks of `global` along `dim`, block r = [r * S, (r + 1) * S),
// as tensors `name_0`, `name_1`, ...
std::vector<z3::func_decl> blocks(Enc& e, const z3::func_decl& global, const std::string& name, int dim, int n,
                                  const z3::expr& S);

// An obligation: `claim` builds the statement under enc's guards.
struct Obligation {
  ObligationInfo info;
  std::function<z3::expr(Enc&)> claim;
};

// One "sharding" obligation per rank count n of kRankCounts, named
// `name-n`, its statement ending in "on n ranks".
void add_per_rank_count(std::vector<Obligation>& out, const std::string& name, int version,
                        const std::string& statement, const std::function<z3::expr(Enc&, int)>& claim);

std::vector<Obligation> rule_obligations();
std::vector<Obligation> sharding_obligations();
std::vector<Obligation> correction_obligations();
std::vector<Obligation> wrong_rule_obligations();
std::vector<Obligation> winograd_obligations();        // z3_winograd.cc, part of rule_obligations()
std::vector<Obligation> wrong_winograd_obligations();
std::vector<Obligation> op_sharding_obligations();  // reshape, softmax, gather, conv
std::vector<Obligation> reshard_obligations();       // collective identities
std::vector<Obligation> any_rank_count_obligations();  // pass-through, symbolic rank count
std::vector<Obligation> wrong_sharding_obligations();
std::vector<Obligation> wrong_op_sharding_obligations();
std::vector<Obligation> wrong_reshard_obligations();
std::vector<Obligation> wrong_any_rank_count_obligations();
std::vector<Obligation> wrong_correction_obligations();
std::vector<Obligation> spatial_obligations();  // z3_spatial.cc: a band's halo rows
std::vector<Obligation> wrong_spatial_obligations();

}  // namespace tessera::verifier::z3enc
