// Proof obligations of the sharding strategies of contractions and
// element-wise ops: pass-through dims, column- and row-parallel MatMul,
// reductions over a sharded axis, a bias after a contraction, and the
// algebra of Partial values. Each compares the ranks' local programs (their
// own input tensors, tied to the global ones by the placement) plus the
// collective with the global op at a global index.
//
// A wrong twin keeps the axiom instances of its correct twin that stay true,
// so that Z3 refutes the claim itself, not a side goal.
#include "verifier/z3_tensor.h"

namespace tessera::verifier::z3enc {
namespace {

using Fn = std::function<z3::expr(const z3::expr&)>;

// Pass-through: X, Y [R, C] sharded on C (C = n * S), B [C] broadcast along
// R and so sharded with C, V [R] broadcast along C and so replicated:
//   AllGather_1(f(X_r, Y_r, B_r, V))[i, p] = f(X, Y, B, V)[i, p].
// `unsliced_broadcast`: B kept whole on every rank and read at the local
// column (the broadcast operand's shard forgotten).
z3::expr elementwise(Enc& e, int n, bool unsliced_broadcast) {
  z3::expr R = e.dim("R"), S = e.dim("S");
  z3::func_decl X = e.tensor("X", 2), Y = e.tensor("Y", 2), B = e.tensor("B", 1), V = e.tensor("V", 1);
  z3::func_decl f = e.real_fn("f", 4);
  auto Xs = blocks(e, X, "X", 1, n, S), Ys = blocks(e, Y, "Y", 1, n, S), Bs = blocks(e, B, "B", 0, n, S);
  z3::expr i = e.index("i"), p = e.index("p");
  z3::expr gathered = all_gather(e, n, S, p, [&](int r, const z3::expr& j) {
    return f(Xs[r](i, j), Ys[r](i, j), unsliced_broadcast ? B(j) : Bs[r](j), V(i));
  });
  return z3::implies(e.in_range(i, R) && e.in_range(p, e.num(n) * S), gathered == f(X(i, p), Y(i, p), B(p), V(i)));
}

// Batch MatMul: A [M, K] sharded on M (M = n * S), W [K, N] replicated:
//   AllGather_0(A_r @ W)[p, j] = (A @ W)[p, j].
// `w_sharded`: W sharded on N as well (N = n * T), on the same ranks (both
// free dims on one mesh axis): rank r computes the block (r, r) only, yet
// its rows are claimed for the columns of block 0. Rank 0's instance stays true.
z3::expr matmul_batch(Enc& e, int n, bool w_sharded) {
  e.sums_as_atoms();
  z3::expr K = e.dim("K"), S = e.dim("S"), N = e.dim(w_sharded ? "T" : "N");
  z3::func_decl A = e.tensor("A", 2), W = e.tensor("W", 2);
  auto As = blocks(e, A, "A", 0, n, S);
  std::vector<z3::func_decl> Ws(n, W);  // replicated: every rank reads W
  if (w_sharded) Ws = blocks(e, W, "W", 1, n, N);
  z3::expr p = e.index("p"), j = e.index("j");
  auto local = [&](int r, const z3::expr& il) {
    return e.sum(K, [&](const z3::expr& k) { return As[r](il, k) * Ws[r](k, j); });
  };
  Fn global = [&](const z3::expr& k) { return A(p, k) * W(k, j); };
  for (int r = 0; r < (w_sharded ? 1 : n); ++r)
    e.assume_ext(
        K, [&](const z3::expr& k) { return As[r](local_index(e, r, S, p), k) * Ws[r](k, j); }, global,
        in_block(e, r, S, p) && e.in_range(j, N));
  z3::expr gathered = all_gather(e, n, S, p, local);
  return z3::implies(e.in_range(p, e.num(n) * S) && e.in_range(j, N), gathered == e.sum(K, global));
}

// Column-parallel MatMul: A replicated, W [K, N] sharded on N (N = n * S):
//   AllGather_1(A @ W_r)[i, p] = (A @ W)[i, p].
// `strided`: rank r holds the interleaved columns r, r + n, ... (a strided
// shard, as a minor-dim reshape leaves it) but the gather concatenates blocks.
z3::expr matmul_column_parallel(Enc& e, int n, bool strided) {
  e.sums_as_atoms();
  z3::expr K = e.dim("K"), S = e.dim("S");
  z3::func_decl A = e.tensor("A", 2), W = e.tensor("W", 2);
  std::vector<z3::func_decl> Ws = blocks(e, W, "W", 1, n, S);
  if (strided)
    for (int r = 0; r < n; ++r)
      Ws[r] = e.view(
          W, "Wstrided_" + std::to_string(r),
          [&](const Enc::Index& x) { return Enc::Index{x[0], x[1] * n + r}; },
          [&](const Enc::Index& x) { return e.in_range(x[1], S); });
  z3::expr i = e.index("i"), p = e.index("p");
  auto local = [&](int r, const z3::expr& jl) {
    return e.sum(K, [&](const z3::expr& k) { return A(i, k) * Ws[r](k, jl); });
  };
  Fn global = [&](const z3::expr& k) { return A(i, k) * W(k, p); };
  for (int r = 0; r < n && !strided; ++r)
    e.assume_ext(
        K, [&](const z3::expr& k) { return A(i, k) * Ws[r](k, local_index(e, r, S, p)); }, global,
        in_block(e, r, S, p));
  return z3::implies(e.in_range(p, e.num(n) * S), all_gather(e, n, S, p, local) == e.sum(K, global));
}

// Contracted dim -> Partial: A [M, K] sharded on K, W [K, N] sharded on K
// (K = n * S); the local products are Partial and the AllReduce sums them:
//   AllReduce(A_r @ W_r) = A @ W.
// `missing_allreduce`: rank 0's partial product claimed as the result.
z3::expr matmul_row_parallel(Enc& e, int n, bool missing_allreduce) {
  e.sums_as_atoms();
  z3::expr S = e.dim("S");
  z3::func_decl A = e.tensor("A", 2), W = e.tensor("W", 2);
  auto As = blocks(e, A, "A", 1, n, S), Ws = blocks(e, W, "W", 0, n, S);
  z3::expr i = e.index("i"), j = e.index("j");
  Fn global = [&](const z3::expr& k) { return A(i, k) * W(k, j); };
  auto local = [&](int r) { return Fn([&, r](const z3::expr& k) { return As[r](i, k) * Ws[r](k, j); }); };
  assume_rank_blocks(e, n, S, global, local);
  z3::expr reduced = missing_allreduce ? e.sum(S, local(0)) : all_reduce(e, n, [&](int r) { return e.sum(S, local(r)); });
  return reduced == e.sum(e.num(n) * S, global);
}

// Gemm with its bias after a row-parallel contraction: the bias [N] enters
// as a Partial (rank 0 holds it, the others zeros), so that the AllReduce
// counts it once:  AllReduce(A_r @ W_r + b_r) = A @ W + b.
// `bias_everywhere`: every rank adds b (counted n times).
z3::expr gemm_bias(Enc& e, int n, bool bias_everywhere) {
  e.sums_as_atoms();
  z3::expr S = e.dim("S");
  z3::func_decl A = e.tensor("A", 2), W = e.tensor("W", 2), b = e.tensor("b", 1);
  auto As = blocks(e, A, "A", 1, n, S), Ws = blocks(e, W, "W", 0, n, S);
  z3::expr i = e.index("i"), j = e.index("j");
  Fn global = [&](const z3::expr& k) { return A(i, k) * W(k, j); };
  auto local = [&](int r) { return Fn([&, r](const z3::expr& k) { return As[r](i, k) * Ws[r](k, j); }); };
  assume_rank_blocks(e, n, S, global, local);
  z3::expr reduced = all_reduce(e, n, [&](int r) {
    return e.sum(S, local(r)) + (r == 0 || bias_everywhere ? b(j) : e.ctx().real_val(0));
  });
  return reduced == e.sum(e.num(n) * S, global) + b(j);
}

// A row i of X [R, C] whose columns are split in n blocks of S (C = n * S),
// each rank's block its own tensor tied to X: what the reductions over a
// sharded axis read.
struct RowBlocks {
  RowBlocks(Enc& e, int n)
      : S((e.sums_as_atoms(), e.dim("S"))), X(e.tensor("X", 2)), Xs(blocks(e, X, "X", 1, n, S)), i(e.index("i")) {
    assume_rank_blocks(e, n, S, global(), [this](int r) { return local(r); });
  }
  Fn global() const {
    return [this](const z3::expr& k) { return X(i, k); };
  }
  Fn local(int r) const {
    return [this, r](const z3::expr& k) { return Xs[static_cast<size_t>(r)](i, k); };
  }
  z3::expr S;
  z3::func_decl X;
  std::vector<z3::func_decl> Xs;
  z3::expr i;
};

// ReduceSum over a sharded axis: X [R, C] sharded on C (C = n * S):
//   AllReduce(ReduceSum_1(X_r)) = ReduceSum_1(X).
// `average`: the AllReduce averages (Partial(avg) taken for Partial(sum)).
z3::expr reduce_sum(Enc& e, int n, bool average) {
  RowBlocks x(e, n);
  z3::expr S = x.S;
  Fn global = x.global();
  auto local = [&](int r) { return x.local(r); };
  z3::expr reduced = all_reduce(e, n, [&](int r) { return e.sum(S, local(r)); });
  if (average) reduced = reduced * e.ctx().real_val(1, n);
  return reduced == e.sum(e.num(n) * S, global);
}

// ReduceMean over a sharded axis: each rank's local mean scaled by 1/n is a
// Partial whose AllReduce is the global mean:
//   AllReduce(ReduceMean_1(X_r) / n) = ReduceMean_1(X).
// `unscaled`: the local means summed without the 1/n (n times the mean).
z3::expr reduce_mean(Enc& e, int n, bool unscaled) {
  RowBlocks x(e, n);
  z3::expr S = x.S;
  Fn global = x.global();
  auto local = [&](int r) { return x.local(r); };
  z3::expr scale = unscaled ? e.ctx().real_val(1) : e.ctx().real_val(1, n);
  z3::expr reduced = all_reduce(e, n, [&](int r) { return e.sum(S, local(r)) / z3::to_real(S) * scale; });
  return reduced == e.sum(e.num(n) * S, global) / z3::to_real(e.num(n) * S);
}

// The Partial algebra: an op that is linear in its Partial inputs commutes
// with the AllReduce. P, Q Partial(sum) over n ranks, R replicated.
enum class PartialOp { kAdd, kMulReplicated, kTranspose, kRelu, kAddReplicated, kMulPartial };

//   kAdd:            AllReduce(P_r + Q_r) = P + Q
//   kMulReplicated:  AllReduce(P_r * R) = P * R
//   kTranspose:      AllReduce(Transpose(P_r)) = Transpose(P)
// and the wrong ones, non-linear in the Partial input:
//   kRelu:           AllReduce(Relu(P_r)) = Relu(P)
//   kAddReplicated:  AllReduce(P_r + R) = P + R (R added on every rank)
//   kMulPartial:     AllReduce(P_r * Q_r) = P * Q
z3::expr partial_op(Enc& e, int n, PartialOp op) {
  z3::func_decl P = e.tensor("P", 2), Q = e.tensor("Q", 2), R = e.tensor("R", 2);
  z3::func_decl relu = e.real_fn("relu", 1);
  std::vector<z3::func_decl> Ps = e.partial(P, "P", n), Qs = e.partial(Q, "Q", n);
  z3::expr i = e.index("i"), j = e.index("j");
  auto reduce = [&](const std::function<z3::expr(int)>& f) { return all_reduce(e, n, f); };
  switch (op) {
    case PartialOp::kAdd: return reduce([&](int r) { return Ps[r](i, j) + Qs[r](i, j); }) == P(i, j) + Q(i, j);
    case PartialOp::kMulReplicated: return reduce([&](int r) { return Ps[r](i, j) * R(i, j); }) == P(i, j) * R(i, j);
    case PartialOp::kTranspose: return reduce([&](int r) { return Ps[r](j, i); }) == P(j, i);
    case PartialOp::kRelu: return reduce([&](int r) { return relu(Ps[r](i, j)); }) == relu(P(i, j));
    case PartialOp::kAddReplicated: return reduce([&](int r) { return Ps[r](i, j) + R(i, j); }) == P(i, j) + R(i, j);
    case PartialOp::kMulPartial: return reduce([&](int r) { return Ps[r](i, j) * Qs[r](i, j); }) == P(i, j) * Q(i, j);
  }
  return e.ctx().bool_val(false);
}

// Megatron MLP: W1 [K, H] and its bias b1 [H] column-parallel, W2 [H, N]
// row-parallel (H = n * S), X replicated, one AllReduce:
//   AllReduce(Relu(X @ W1_r + b1_r) @ W2_r) = Relu(X @ W1 + b1) @ W2.
// The hidden sum over H splits into the ranks' blocks; on each, the inner
// sum over K meets rank r's by a sum-ext instance at the hidden index h,
// which the outer block's ext then uses.
// `bias_unsliced`: b1 kept whole and read at the local hidden index; only
// rank 0's instances stay true.
z3::expr megatron_mlp(Enc& e, int n, bool bias_unsliced) {
  e.sums_as_atoms();
  z3::expr K = e.dim("K"), S = e.dim("S");
  z3::func_decl X = e.tensor("X", 2), W1 = e.tensor("W1", 2), W2 = e.tensor("W2", 2), b1 = e.tensor("b1", 1);
  z3::func_decl relu = e.real_fn("relu", 1);
  auto W1s = blocks(e, W1, "W1", 1, n, S), W2s = blocks(e, W2, "W2", 0, n, S), b1s = blocks(e, b1, "b1", 0, n, S);
  z3::expr i = e.index("i"), j = e.index("j");
  auto hidden = [&](const z3::func_decl& w1, const z3::expr& h) {
    return e.sum(K, [&](const z3::expr& k) { return X(i, k) * w1(k, h); });
  };
  Fn global = [&](const z3::expr& h) { return relu(hidden(W1, h) + b1(h)) * W2(h, j); };
  auto local = [&](int r) {
    return Fn([&, r](const z3::expr& h) {
      return relu(hidden(W1s[r], h) + (bias_unsliced ? b1(h) : b1s[r](h))) * W2s[r](h, j);
    });
  };
  e.assume_blocks(n, S, global);
  for (int r = 0; r < (bias_unsliced ? 1 : n); ++r) {
    z3::expr h = e.index("h!" + std::to_string(r));
    z3::expr g = r == 0 ? h : rank_offset(e, r, S) + h;
    e.assume_ext(
        K, [&](const z3::expr& k) { return X(i, k) * W1(k, g); },
        [&](const z3::expr& k) { return X(i, k) * W1s[r](k, h); }, e.in_range(h, S));
    Fn leaf = r == 0 ? global : Fn([&, r](const z3::expr& hh) { return global(rank_offset(e, r, S) + hh); });
    e.assume_ext(S, leaf, local(r), e.ctx().bool_val(true), h);
  }
  return all_reduce(e, n, [&](int r) { return e.sum(S, local(r)); }) == e.sum(e.num(n) * S, global);
}

}  // namespace

std::vector<Obligation> sharding_obligations() {
  std::vector<Obligation> v;
  add_per_rank_count(v, "shard-elementwise", 2,
                     "AllGather_1(f(X_r, Y_r, B_r, V)) = f(X, Y, B, V), X, Y, B sharded on C, V replicated",
                     [](Enc& e, int n) { return elementwise(e, n, false); });
  add_per_rank_count(v, "shard-matmul-batch", 1, "AllGather_0(A[block r, :] @ W) = A @ W",
                     [](Enc& e, int n) { return matmul_batch(e, n, false); });
  add_per_rank_count(v, "shard-matmul-column-parallel", 2, "AllGather_1(A @ W[:, block r]) = A @ W",
                     [](Enc& e, int n) { return matmul_column_parallel(e, n, false); });
  add_per_rank_count(v, "shard-matmul-row-parallel", 2, "AllReduce(A[:, block r] @ W[block r, :]) = A @ W",
                     [](Enc& e, int n) { return matmul_row_parallel(e, n, false); });
  add_per_rank_count(v, "shard-gemm-bias-partial", 1,
                     "AllReduce(A[:, block r] @ W[block r, :] + (r == 0 ? b : 0)) = A @ W + b",
                     [](Enc& e, int n) { return gemm_bias(e, n, false); });
  add_per_rank_count(v, "shard-reduce-sum", 1, "AllReduce(ReduceSum_1(X[:, block r])) = ReduceSum_1(X)",
                     [](Enc& e, int n) { return reduce_sum(e, n, false); });
  add_per_rank_count(v, "shard-reduce-mean", 1, "AllReduce(ReduceMean_1(X[:, block r]) / n) = ReduceMean_1(X)",
                     [](Enc& e, int n) { return reduce_mean(e, n, false); });
  add_per_rank_count(v, "shard-partial-add", 1, "AllReduce(P_r + Q_r) = P + Q for Partial P, Q",
                     [](Enc& e, int n) { return partial_op(e, n, PartialOp::kAdd); });
  add_per_rank_count(v, "shard-partial-mul-replicated", 1, "AllReduce(P_r * R) = P * R for Partial P, replicated R",
                     [](Enc& e, int n) { return partial_op(e, n, PartialOp::kMulReplicated); });
  add_per_rank_count(v, "shard-partial-transpose", 1, "AllReduce(Transpose(P_r)) = Transpose(P) for Partial P",
                     [](Enc& e, int n) { return partial_op(e, n, PartialOp::kTranspose); });
  add_per_rank_count(v, "shard-megatron-mlp", 3,
                     "AllReduce(Relu(X @ W1[:, block r] + b1[block r]) @ W2[block r, :]) = Relu(X @ W1 + b1) @ W2",
                     [](Enc& e, int n) { return megatron_mlp(e, n, false); });
  return v;
}

std::vector<Obligation> wrong_sharding_obligations() {
  auto wrong = [](std::string name, std::string statement, std::function<z3::expr(Enc&)> claim) {
    return Obligation{{std::move(name), 2, "sharding", std::move(statement)}, std::move(claim)};
  };
  return {
      wrong("wrong-elementwise-broadcast-unsliced", "AllGather_1(f(X_r, Y_r, B, V)) = f(X, Y, B, V), B not sharded",
            [](Enc& e) { return elementwise(e, 2, true); }),
      wrong("wrong-matmul-batch-both-free-dims", "AllGather_0(A[block r, :] @ W[:, block r]) = A @ W",
            [](Enc& e) { return matmul_batch(e, 2, true); }),
      wrong("wrong-matmul-column-strided", "AllGather_1(A @ W[:, r::n]) = A @ W (strided shard, block gather)",
            [](Enc& e) { return matmul_column_parallel(e, 4, true); }),
      wrong("wrong-missing-allreduce", "A[:, block 0] @ W[block 0, :] = A @ W (no AllReduce)",
            [](Enc& e) { return matmul_row_parallel(e, 2, true); }),
      wrong("wrong-gemm-bias-every-rank", "AllReduce(A[:, block r] @ W[block r, :] + b) = A @ W + b (b counted n times)",
            [](Enc& e) { return gemm_bias(e, 4, true); }),
      wrong("wrong-reduce-sum-average", "AllReduce_avg(ReduceSum_1(X[:, block r])) = ReduceSum_1(X)",
            [](Enc& e) { return reduce_sum(e, 2, true); }),
      wrong("wrong-reduce-mean-unscaled", "AllReduce(ReduceMean_1(X[:, block r])) = ReduceMean_1(X) (no 1/n)",
            [](Enc& e) { return reduce_mean(e, 2, true); }),
      wrong("wrong-partial-add-replicated", "AllReduce(P_r + R) = P + R (R added on every rank)",
            [](Enc& e) { return partial_op(e, 2, PartialOp::kAddReplicated); }),
      wrong("wrong-partial-mul-partial", "AllReduce(P_r * Q_r) = P * Q for Partial P, Q",
            [](Enc& e) { return partial_op(e, 2, PartialOp::kMulPartial); }),
      wrong("wrong-megatron-mlp-bias-unsliced",
            "AllReduce(Relu(X @ W1[:, block r] + b1[local]) @ W2[block r, :]) = Relu(X @ W1 + b1) @ W2",
            [](Enc& e) { return megatron_mlp(e, 2, true); }),
      wrong("wrong-partial-relu", "AllReduce(Relu(P_r)) = Relu(P) for Partial P",
            [](Enc& e) { return partial_op(e, 2, PartialOp::kRelu); }),
  };
}

}  // namespace tessera::verifier::z3enc
