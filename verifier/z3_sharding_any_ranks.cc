// Proof obligations of pass-through strategies for a symbolic rank count n:
// the ranks' inputs are one rank-indexed tensor (Enc::rank_blocks) and the
// AllGather reads rank p / S at p % S. Z3 handles the division by the
// symbolic block size here because no sum runs over the ranks; the
// strategies with an AllReduce would need the sum over n blocks of a sum,
// which no instance of the three Sum axioms gives for a symbolic n, and are
// proven for 2, 4 and 8 ranks instead.
#include "verifier/z3_tensor.h"

namespace tessera::verifier::z3enc {
namespace {

using Fn = std::function<z3::expr(const z3::expr&)>;

// As elementwise() in z3_sharding.cc: X, Y [R, C] and B [C] sharded on C
// (C = n * S), V [R] replicated:
//   AllGather_1(f(X_r, Y_r, B_r, V))[i, p] = f(X, Y, B, V)[i, p].
// `unsliced_broadcast`: B kept whole and read at the local column.
z3::expr elementwise(Enc& e, bool unsliced_broadcast) {
  z3::expr n = e.dim("n"), R = e.dim("R"), S = e.dim("S");
  z3::func_decl X = e.tensor("X", 2), Y = e.tensor("Y", 2), B = e.tensor("B", 1), V = e.tensor("V", 1);
  z3::func_decl f = e.real_fn("f", 4);
  z3::func_decl Xr = e.rank_blocks(X, "X_r", 1, n, S), Yr = e.rank_blocks(Y, "Y_r", 1, n, S),
                Br = e.rank_blocks(B, "B_r", 0, n, S);
  z3::expr i = e.index("i"), p = e.index("p");
  z3::expr gathered = all_gather_ranks(S, p, [&](const z3::expr& r, const z3::expr& j) {
    return f(Xr(r, i, j), Yr(r, i, j), unsliced_broadcast ? B(j) : Br(r, j), V(i));
  });
  return z3::implies(e.in_range(i, R) && e.in_range(p, n * S), gathered == f(X(i, p), Y(i, p), B(p), V(i)));
}

// Column-parallel MatMul: A replicated, W [K, N] sharded on N (N = n * S):
//   AllGather_1(A @ W_r)[i, p] = (A @ W)[i, p].
// `cyclic`: the gather reads rank p % n at p / n, as if the columns were
// dealt out cyclically, while each rank holds a block.
z3::expr matmul_column_parallel(Enc& e, bool cyclic) {
  e.sums_as_atoms();
  z3::expr n = e.dim("n"), K = e.dim("K"), S = e.dim("S");
  z3::func_decl A = e.tensor("A", 2), W = e.tensor("W", 2);
  z3::func_decl Wr = e.rank_blocks(W, "W_r", 1, n, S);
  z3::expr i = e.index("i"), p = e.index("p");
  auto local = [&](const z3::expr& r, const z3::expr& j) {
    return e.sum(K, [&](const z3::expr& k) { return A(i, k) * Wr(r, k, j); });
  };
  e.assume_ext(
      K, [&](const z3::expr& k) { return A(i, k) * Wr(p / S, k, p % S); },
      [&](const z3::expr& k) { return A(i, k) * W(k, p); }, e.in_range(p, n * S));
  z3::expr gathered = cyclic ? local(p % n, p / n) : all_gather_ranks(S, p, local);
  return z3::implies(e.in_range(p, n * S),
                     gathered == e.sum(K, [&](const z3::expr& k) { return A(i, k) * W(k, p); }));
}

// Batch MatMul: A [M, K] sharded on M (M = n * S), W replicated:
//   AllGather_0(A_r @ W)[p, j] = (A @ W)[p, j].
// `w_sharded`: W sharded on N as well, on the same ranks.
z3::expr matmul_batch(Enc& e, bool w_sharded) {
  e.sums_as_atoms();
  z3::expr n = e.dim("n"), K = e.dim("K"), S = e.dim("S"), T = e.dim("T");
  z3::func_decl A = e.tensor("A", 2), W = e.tensor("W", 2);
  z3::func_decl Ar = e.rank_blocks(A, "A_r", 0, n, S), Wr = e.rank_blocks(W, "W_r", 1, n, T);
  z3::expr p = e.index("p"), j = e.index("j");
  auto w = [&](const z3::expr& r, const z3::expr& k) { return w_sharded ? Wr(r, k, j) : W(k, j); };
  auto local = [&](const z3::expr& r, const z3::expr& il) {
    return e.sum(K, [&](const z3::expr& k) { return Ar(r, il, k) * w(r, k); });
  };
  Fn global = [&](const z3::expr& k) { return A(p, k) * W(k, j); };
  if (!w_sharded)
    e.assume_ext(
        K, [&](const z3::expr& k) { return Ar(p / S, p % S, k) * W(k, j); }, global, e.in_range(p, n * S));
  return z3::implies(e.in_range(p, n * S) && e.in_range(j, T), all_gather_ranks(S, p, local) == e.sum(K, global));
}

// Softmax along the last axis of X [R, C], rows sharded (R = n * S):
//   AllGather_0(Softmax_1(X_r))[p, c] = Softmax_1(X)[p, c].
// `reduced_axis`: X sharded on the softmax axis (C = n * S), each rank
// normalising over its slice.
z3::expr softmax_rows(Enc& e, bool reduced_axis) {
  e.sums_as_atoms();
  z3::expr n = e.dim("n"), S = e.dim("S"), W = e.dim("W");
  z3::func_decl X = e.tensor("X", 2);
  z3::func_decl exp = e.real_fn("exp", 1);
  z3::expr p = e.index("p"), c = e.index("c");
  if (!reduced_axis) {
    z3::func_decl Xr = e.rank_blocks(X, "X_r", 0, n, S);
    auto softmax = [&](const std::function<z3::expr(const z3::expr&)>& row, const z3::expr& col) {
      return exp(row(col)) / e.sum(W, [&](const z3::expr& k) { return exp(row(k)); });
    };
    e.assume_ext(
        W, [&](const z3::expr& k) { return exp(Xr(p / S, p % S, k)); }, [&](const z3::expr& k) { return exp(X(p, k)); },
        e.in_range(p, n * S));
    z3::expr gathered = all_gather_ranks(S, p, [&](const z3::expr& r, const z3::expr& i) {
      return softmax([&](const z3::expr& k) { return Xr(r, i, k); }, c);
    });
    return z3::implies(e.in_range(p, n * S) && e.in_range(c, W),
                       gathered == softmax([&](const z3::expr& k) { return X(p, k); }, c));
  }
  z3::func_decl Xr = e.rank_blocks(X, "X_r", 1, n, S);
  z3::expr gathered = all_gather_ranks(S, c, [&](const z3::expr& r, const z3::expr& j) {
    return exp(Xr(r, p, j)) / e.sum(S, [&](const z3::expr& k) { return exp(Xr(r, p, k)); });
  });
  z3::expr global = exp(X(p, c)) / e.sum(n * S, [&](const z3::expr& k) { return exp(X(p, k)); });
  return z3::implies(e.in_range(p, W) && e.in_range(c, n * S), gathered == global);
}

// S(0) -> S(1) by AllToAll, as all_to_all() in z3_reshard.cc: X [n * S,
// n * T] sharded on dim 0; rank q receives chunk q of every rank's block:
//   AllToAll(X_r)_q[p, j] = X[p, q * T + j] for every rank q in [0, n).
// `own_chunk`: each sender sends its own chunk instead of chunk q.
z3::expr all_to_all(Enc& e, bool own_chunk) {
  z3::expr n = e.dim("n"), S = e.dim("S"), T = e.dim("T");
  z3::func_decl X = e.tensor("X", 2);
  z3::func_decl Xr = e.rank_blocks(X, "X_r", 0, n, S);
  z3::expr q = e.index("q"), p = e.index("p"), j = e.index("j");
  z3::expr received = all_gather_ranks(S, p, [&](const z3::expr& r, const z3::expr& i) {
    return Xr(r, i, (own_chunk ? r : q) * T + j);
  });
  return z3::implies(e.in_range(q, n) && e.in_range(p, n * S) && e.in_range(j, T), received == X(p, q * T + j));
}

}  // namespace

std::vector<Obligation> any_rank_count_obligations() {
  auto any = [](std::string name, std::string statement, std::function<z3::expr(Enc&)> claim) {
    return Obligation{{std::move(name), 1, "sharding", std::move(statement) + " on n ranks (symbolic n)"},
                      std::move(claim)};
  };
  return {
      any("shard-elementwise-n", "AllGather_1(f(X_r, Y_r, B_r, V)) = f(X, Y, B, V), X, Y, B sharded on C, V replicated",
          [](Enc& e) { return elementwise(e, false); }),
      any("shard-matmul-batch-n", "AllGather_0(A[block r, :] @ W) = A @ W",
          [](Enc& e) { return matmul_batch(e, false); }),
      any("shard-matmul-column-parallel-n", "AllGather_1(A @ W[:, block r]) = A @ W",
          [](Enc& e) { return matmul_column_parallel(e, false); }),
      any("shard-softmax-rows-n", "AllGather_0(Softmax_1(X[block r, :])) = Softmax_1(X)",
          [](Enc& e) { return softmax_rows(e, false); }),
      any("shard-all-to-all-n", "AllToAll(X sharded on dim 0) = X sharded on dim 1",
          [](Enc& e) { return all_to_all(e, false); }),
  };
}

std::vector<Obligation> wrong_any_rank_count_obligations() {
  auto wrong = [](std::string name, std::string statement, std::function<z3::expr(Enc&)> claim) {
    return Obligation{{std::move(name), 1, "sharding", std::move(statement) + " on n ranks (symbolic n)"},
                      std::move(claim)};
  };
  return {
      wrong("wrong-elementwise-n-broadcast-unsliced", "AllGather_1(f(X_r, Y_r, B, V)) = f(X, Y, B, V), B not sharded",
            [](Enc& e) { return elementwise(e, true); }),
      wrong("wrong-matmul-batch-n-both-free-dims", "AllGather_0(A[block r, :] @ W[:, block r]) = A @ W",
            [](Enc& e) { return matmul_batch(e, true); }),
      wrong("wrong-matmul-column-parallel-n-cyclic-gather", "Gather_cyclic(A @ W[:, block r]) = A @ W",
            [](Enc& e) { return matmul_column_parallel(e, true); }),
      wrong("wrong-softmax-n-reduced-axis", "AllGather_1(Softmax_1(X[:, block r])) = Softmax_1(X)",
            [](Enc& e) { return softmax_rows(e, true); }),
      wrong("wrong-all-to-all-n-chunk", "AllToAll sending chunk r instead of chunk q = X sharded on dim 1",
            [](Enc& e) { return all_to_all(e, true); }),
  };
}

}  // namespace tessera::verifier::z3enc
