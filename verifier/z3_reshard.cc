// Proof obligations of collective and resharding identities: the
// collectives are encoded by their own semantics (z3_tensor.h), so an
// identity between two of them compares two different programs.
#include "verifier/z3_tensor.h"

namespace tessera::verifier::z3enc {
namespace {

// ReduceScatter then AllGather is an AllReduce. Rank r holds x_r [n * S];
// ReduceScatter leaves rank q block q of the sum, sum_r x_r(q * S + j), and
// AllGather concatenates the ranks' blocks:
//   AllGather(ReduceScatter(x))[p] = AllReduce(x)[p] = sum_r x_r(p).
// `reversed`: the gather puts rank q's block at block n - 1 - q.
z3::expr rs_ag_is_ar(Enc& e, int n, bool reversed) {
  z3::expr S = e.dim("S");
  std::vector<z3::func_decl> x;
  for (int r = 0; r < n; ++r) x.push_back(e.tensor("x_" + std::to_string(r), 1));
  auto scattered = [&](int q, const z3::expr& j) {
    z3::expr at = q == 0 ? j : rank_offset(e, q, S) + j;
    return all_reduce(e, n, [&](int r) { return x[r](at); });
  };
  z3::expr p = e.index("p");
  z3::expr gathered = all_gather(e, n, S, p, [&](int q, const z3::expr& j) { return scattered(reversed ? n - 1 - q : q, j); });
  return z3::implies(e.in_range(p, e.num(n) * S), gathered == all_reduce(e, n, [&](int r) { return x[r](p); }));
}

// S(0) -> S(1) by AllToAll: X [n * S, n * T] sharded on dim 0; every rank
// splits its block into n column chunks and sends chunk q to rank q, which
// concatenates what it receives along dim 0:
//   AllToAll(X_r)_q[p, j] = X[p, q * T + j], rank q's block of X along dim 1.
// `own_chunk`: each sender sends its own chunk r instead of chunk q.
z3::expr all_to_all(Enc& e, int n, bool own_chunk) {
  z3::expr S = e.dim("S"), T = e.dim("T");
  z3::func_decl X = e.tensor("X", 2);
  auto Xs = blocks(e, X, "X", 0, n, S);
  z3::expr p = e.index("p"), j = e.index("j");
  auto chunk = [&](int c) { return c == 0 ? j : rank_offset(e, c, T) + j; };
  z3::expr all = e.ctx().bool_val(true);
  for (int q = 0; q < n; ++q) {
    z3::expr received = all_gather(e, n, S, p, [&](int r, const z3::expr& i) { return Xs[r](i, chunk(own_chunk ? r : q)); });
    all = all && received == X(p, chunk(q));
  }
  return z3::implies(e.in_range(p, e.num(n) * S) && e.in_range(j, T), all);
}

}  // namespace

std::vector<Obligation> reshard_obligations() {
  std::vector<Obligation> v;
  add_per_rank_count(v, "shard-all-gather-reduce-scatter-is-all-reduce", 2,
                     "AllGather(ReduceScatter(x)) = AllReduce(x)", [](Enc& e, int n) { return rs_ag_is_ar(e, n, false); });
  add_per_rank_count(v, "shard-all-to-all", 1, "AllToAll(X sharded on dim 0) = X sharded on dim 1",
                     [](Enc& e, int n) { return all_to_all(e, n, false); });
  return v;
}

std::vector<Obligation> wrong_reshard_obligations() {
  return {
      {{"wrong-all-gather-block-order", 1, "sharding", "AllGather with blocks reversed of ReduceScatter(x) = AllReduce(x)"},
       [](Enc& e) { return rs_ag_is_ar(e, 4, true); }},
      {{"wrong-all-to-all-chunk", 1, "sharding", "AllToAll sending chunk r instead of chunk q = X sharded on dim 1"},
       [](Enc& e) { return all_to_all(e, 2, true); }},
  };
}

}  // namespace tessera::verifier::z3enc
