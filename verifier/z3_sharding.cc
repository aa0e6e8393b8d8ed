// Proof obligations of sharding strategies (the local computation on each
// rank plus the collective equals the global op) and of the correction boxes
// of partially equivalent mutants (outside the boxes the mutant is exact).
#include "verifier/z3_tensor.h"

namespace tessera::verifier::z3enc {
namespace {

using Fn = std::function<z3::expr(const z3::expr&)>;

// Column parallel: rank r holds W[:, r*S:(r+1)*S]; AllGather(axis=1) of the
// local MatMuls at global column r*S + jj is the global MatMul there.
z3::expr matmul_column_parallel(Enc& e) {
  z3::expr K = e.dim("K"), S = e.dim("S"), n = e.dim("n");
  z3::func_decl A = e.tensor("A", 2), W = e.tensor("W", 2);
  z3::expr i = e.index("i"), r = e.index("r"), jj = e.index("jj");
  z3::expr local = e.sum(K, [&](const z3::expr& k) { return A(i, k) * W(k, r * S + jj); });
  z3::expr global = e.sum(K, [&](const z3::expr& k) { return A(i, k) * W(k, r * S + jj); });
  return z3::implies(e.in_range(r, n) && e.in_range(jj, S), local == global);
}

// Row parallel on n ranks (2 and 4 registered; 4 needs the claim and the
// side goals checked separately, see run_proof; with 8 blocks the claim alone
// did not finish within 60 s in Z3 4.8.12, measured): rank r holds A[:, r*S:(r+1)*S] and W[r*S:(r+1)*S, :];
// AllReduce of the local MatMuls = the global MatMul (K = n*S). `missing_allreduce`
// claims rank 0's partial result alone is the answer.
z3::expr matmul_row_parallel(Enc& e, int n, bool missing_allreduce) {
  z3::expr S = e.dim("S");
  z3::func_decl A = e.tensor("A", 2), W = e.tensor("W", 2);
  z3::expr i = e.index("i"), j = e.index("j");
  Fn global_term = [&](const z3::expr& k) { return A(i, k) * W(k, j); };
  auto local = [&](int r) {
    return e.sum(S, [&](const z3::expr& k) {
      z3::expr g = r == 0 ? k : e.num(r) * S + k;
      return A(i, g) * W(g, j);
    });
  };
  // Sum over [0, n*S) splits into n blocks: peel one block of S at a time,
  // each tail written in the block form the local sums use.
  auto block = [&](int r) {
    return [&, r](const z3::expr& k) { return r == 0 ? global_term(k) : global_term(e.num(r) * S + k); };
  };
  // Lengths written S + (S + ...) so that each split's tail is the next split's whole.
  std::function<z3::expr(int)> blocks = [&](int m) { return m == 1 ? S : S + blocks(m - 1); };
  for (int r = 0; r + 1 < n; ++r) {
    e.assume_split(S, blocks(n - r - 1), block(r), block(r + 1));
  }
  z3::expr reduced = local(0);
  if (!missing_allreduce)
    for (int r = 1; r < n; ++r) reduced = reduced + local(r);
  // The blocks' lengths, S + (n-1)*S + ..., are the global length n*S.
  return reduced == e.sum(blocks(n), global_term);
}

// Megatron MLP on 2 ranks: Relu(X@W1[:, block r])@W2[block r, :], AllReduce
// = Relu(X@W1)@W2 (column then row parallel, one all-reduce). The hidden
// block of rank r is the global hidden block r by shard-matmul-column-parallel
// and shard-elementwise; here it is the pre-activation tensor P.
z3::expr megatron_mlp(Enc& e) {
  z3::expr S = e.dim("S");
  z3::func_decl P = e.tensor("P", 2), W2 = e.tensor("W2", 2);
  z3::func_decl relu = e.real_fn("relu", 1);
  z3::expr i = e.index("i"), j = e.index("j");
  Fn global_term = [&](const z3::expr& h) { return relu(P(i, h)) * W2(h, j); };
  auto block = [&](int r) { return [&, r](const z3::expr& h) { return global_term(r == 0 ? h : S + h); }; };
  e.assume_split(S, S, block(0), block(1));
  return e.sum(S, block(0)) + e.sum(S, block(1)) == e.sum(S + S, global_term);
}

// Element-wise op on a tensor sharded along dim 0: f(X)[r*S + j] = f(X_r)[j].
z3::expr elementwise_sharded(Enc& e) {
  z3::expr S = e.dim("S"), n = e.dim("n");
  z3::func_decl X = e.tensor("X", 1), Y = e.tensor("Y", 1);
  z3::func_decl f = e.real_fn("f", 2);
  z3::expr r = e.index("r"), j = e.index("j");
  auto shard = [&](z3::func_decl t, const z3::expr& idx) { return t(r * S + idx); };
  z3::expr local = f(shard(X, j), shard(Y, j));
  return z3::implies(e.in_range(r, n) && e.in_range(j, S), local == f(X(r * S + j), Y(r * S + j)));
}

// AllGather(ReduceScatter(x)) = AllReduce(x) on 4 ranks: rank q's scatter
// block is block q of the sum, and the gather puts it back at q*S + jj.
z3::expr rs_ag_is_ar(Enc& e) {
  const int n = 4;
  z3::expr S = e.dim("S");
  std::vector<z3::func_decl> x;
  for (int r = 0; r < n; ++r) {
    std::string name = "x";
    name += std::to_string(r);  // not "x" + ...: GCC 12 warns -Wrestrict on that
    x.push_back(e.tensor(name, 1));
  }
  z3::expr q = e.index("q"), jj = e.index("jj");
  z3::expr scattered = e.ctx().real_val(0), reduced = e.ctx().real_val(0);
  for (int r = 0; r < n; ++r) scattered = scattered + x[r](q * S + jj);
  z3::expr g = q * S + jj;
  for (int r = 0; r < n; ++r) reduced = reduced + x[r](g);
  return z3::implies(e.in_range(q, e.num(n)) && e.in_range(jj, S), scattered == reduced);
}

// 1-D convolution, kernel 3, stride 1, pad 1, along H of input `x`
// (valid on [0, len)), reduction over (c, k) flattened.
z3::expr conv3(Enc& e, const z3::expr& C, z3::func_decl W, const z3::expr& m, const z3::expr& o,
               const z3::expr& len, const std::function<z3::expr(const z3::expr&, const z3::expr&)>& x) {
  return e.sum(C * 3, [&](const z3::expr& r) {
    z3::expr c = r / 3, k = r % 3, pos = o - 1 + k;
    return e.guarded(pos, len, x(c, pos)) * W(m, c, k);
  });
}

// Batching two images along H: Conv(Concat(X0, X1, H)) equals the separate
// convolutions except on rows [H - 1, H + 1), the correction box. The claimed
// box starts at H - 1 + box_shrink (0 is right; 1 is the wrong mutant).
z3::expr batch_along_h(Enc& e, int box_shrink) {
  z3::expr C = e.dim("C"), H = e.dim("H");
  z3::func_decl X0 = e.tensor("X0", 2), X1 = e.tensor("X1", 2), W = e.tensor("W", 3);
  z3::expr m = e.index("m"), o = e.index("o");
  auto stacked = [&](const z3::expr& c, const z3::expr& h) { return z3::ite(h < H, X0(c, h), X1(c, h - H)); };
  z3::expr big = conv3(e, C, W, m, o, H + H, stacked);
  z3::expr box_lo = H - 1 + e.num(box_shrink);
  z3::expr sep0 = conv3(e, C, W, m, o, H, [&](const z3::expr& c, const z3::expr& h) { return X0(c, h); });
  z3::expr sep1 = conv3(e, C, W, m, o - H, H, [&](const z3::expr& c, const z3::expr& h) { return X1(c, h); });
  return z3::implies(o >= 0 && o < box_lo, big == sep0) && z3::implies(o >= H + 1 && o < H + H, big == sep1);
}

// Dilation 2 <-> space-to-batch: a kernel-3, dilation-2, pad-2 convolution of
// X (length L) at o = 2q + ph equals a plain kernel-3, pad-1 convolution of
// the phase X_ph(t) = X(2t + ph). Even L = 2H: the phases have length H.
// Odd L = 2H + 1 (`odd`): X is zero-padded to 2H + 2 first and the output
// sliced back to L, the pad/slice mutant for odd sizes. `wrong_phase` reads
// the other phase (the wrong-dilation mutant).
z3::expr dilation_phases(Enc& e, bool odd, bool wrong_phase) {
  z3::expr C = e.dim("C"), H = e.dim("H");
  z3::func_decl X = e.tensor("X", 2), W = e.tensor("W", 3);
  z3::expr m = e.index("m"), q = e.index("q"), ph = e.index("ph");
  z3::expr L = odd ? H + H + 1 : H + H;
  z3::expr Lpad = H + H + (odd ? 2 : 0);
  z3::expr o = q + q + ph;
  z3::expr dilated = e.sum(C * 3, [&](const z3::expr& r) {
    z3::expr c = r / 3, k = r % 3, pos = o - 2 + k * 2;
    return e.guarded(pos, L, X(c, pos)) * W(m, c, k);
  });
  z3::expr src_ph = wrong_phase ? 1 - ph : ph;
  z3::expr padded_len = odd ? Lpad : L;
  auto phase = [&](const z3::expr& c, const z3::expr& t) {
    z3::expr pos = t + t + src_ph;
    return e.guarded(pos, L, X(c, pos));  // zero beyond L: the pad of the odd case
  };
  z3::expr plain = conv3(e, C, W, m, q, padded_len / 2, phase);
  return z3::implies((ph == 0 || ph == 1) && o >= 0 && o < L, dilated == plain);
}

}  // namespace

std::vector<Obligation> sharding_obligations() {
  return {
      {{"shard-matmul-column-parallel", 1, "sharding", "AllGather_1(A @ W[:, block r]) = A @ W"},
       matmul_column_parallel},
      {{"shard-matmul-row-parallel-2", 1, "sharding", "AllReduce(A[:, block r] @ W[block r, :]) = A @ W on 2 ranks"},
       [](Enc& e) { return matmul_row_parallel(e, 2, false); }},
      {{"shard-matmul-row-parallel-4", 1, "sharding", "AllReduce(A[:, block r] @ W[block r, :]) = A @ W on 4 ranks"},
       [](Enc& e) { return matmul_row_parallel(e, 4, false); }},
      {{"shard-megatron-mlp", 1, "sharding", "AllReduce(Relu(X @ W1[:, r]) @ W2[r, :]) = Relu(X @ W1) @ W2"},
       megatron_mlp},
      {{"shard-elementwise", 1, "sharding", "f(X, Y)[block r] = f(X[block r], Y[block r])"}, elementwise_sharded},
      {{"reduce-scatter-all-gather-is-all-reduce", 1, "sharding", "AllGather(ReduceScatter(x)) = AllReduce(x)"},
       rs_ag_is_ar},
  };
}

std::vector<Obligation> correction_obligations() {
  return {
      {{"correction-batch-along-h", 1, "correction",
        "Conv(Concat_H(X0, X1)) = Concat_H(Conv(X0), Conv(X1)) outside rows [H-1, H+1)"},
       [](Enc& e) { return batch_along_h(e, 0); }},
      {{"dilation-space-to-batch-even", 1, "correction",
        "DilatedConv_2(X)[2q+ph] = Conv(X[ph::2])[q] for even length"},
       [](Enc& e) { return dilation_phases(e, false, false); }},
      {{"dilation-space-to-batch-odd-pad-slice", 1, "correction",
        "Slice(Interleave(Conv(Pad(X)[ph::2])), L) = DilatedConv_2(X) for odd length L"},
       [](Enc& e) { return dilation_phases(e, true, false); }},
  };
}

std::vector<Obligation> wrong_sharding_obligations() {
  return {
      {{"wrong-missing-allreduce", 1, "sharding", "A[:, block 0] @ W[block 0, :] = A @ W (no AllReduce)"},
       [](Enc& e) { return matmul_row_parallel(e, 2, true); }},
      {{"wrong-correction-box", 1, "correction", "batch along H with correction rows [H, H+1) only"},
       [](Enc& e) { return batch_along_h(e, 1); }},
      {{"wrong-dilation-phase", 1, "correction", "DilatedConv_2(X)[2q+ph] = Conv(X[(1-ph)::2])[q]"},
       [](Enc& e) { return dilation_phases(e, false, true); }},
  };
}

}  // namespace tessera::verifier::z3enc
