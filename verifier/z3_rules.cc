// Proof obligations of rewrite rules. Each builds, at a symbolic output index,
// the element of the original and of the rewritten program and claims them
// equal under the rule's shape guards.
#include <algorithm>
#include <array>

#include "verifier/z3_tensor.h"

namespace tessera::verifier::z3enc {
namespace {

using Fn = std::function<z3::expr(const z3::expr&)>;

// MatMul(A, W1), MatMul(A, W2) -> Split(MatMul(A, Concat(W1, W2, axis=1)), [N1, N2], axis=1).
// `swapped` concatenates in the wrong order (soundness catalogue).
z3::expr matmul_concat(Enc& e, bool swapped) {
  z3::expr M = e.dim("M"), K = e.dim("K"), N1 = e.dim("N1"), N2 = e.dim("N2");
  z3::func_decl A = e.tensor("A", 2), W1 = e.tensor("W1", 2), W2 = e.tensor("W2", 2);
  z3::expr i = e.index("i"), j = e.index("j");
  auto first = swapped ? W2 : W1;
  auto second = swapped ? W1 : W2;
  z3::expr n_first = swapped ? N2 : N1;
  auto Wc = [&](const z3::expr& k, const z3::expr& col) {
    return z3::ite(col < n_first, first(k, col), second(k, col - n_first));
  };
  z3::expr out0 = e.sum(K, [&](const z3::expr& k) { return A(i, k) * Wc(k, j); });
  z3::expr ref0 = e.sum(K, [&](const z3::expr& k) { return A(i, k) * W1(k, j); });
  z3::expr out1 = e.sum(K, [&](const z3::expr& k) { return A(i, k) * Wc(k, j + N1); });
  z3::expr ref1 = e.sum(K, [&](const z3::expr& k) { return A(i, k) * W2(k, j); });
  return z3::implies(e.in_range(i, M) && e.in_range(j, N1), out0 == ref0) &&
         z3::implies(e.in_range(i, M) && e.in_range(j, N2), out1 == ref1);
}

using Perm = std::array<int, 3>;

// Transpose: out[i_0..] = in[j] with j[perm[k]] = i[k].
std::array<z3::expr, 3> transpose_source(const std::array<z3::expr, 3>& out_idx, const Perm& perm) {
  std::array<z3::expr, 3> in = out_idx;
  for (int k = 0; k < 3; ++k) in[perm[k]] = out_idx[k];
  return in;
}

// Transpose(Transpose(X, p1), p2) = Transpose(X, q) with q[k] = p1[p2[k]],
// for every pair of rank-3 permutations. `wrong` composes as p2[p1[k]].
z3::expr transpose_compose(Enc& e, bool wrong) {
  z3::func_decl X = e.tensor("X", 3);
  std::array<z3::expr, 3> i = {e.index("i0"), e.index("i1"), e.index("i2")};
  std::vector<Perm> perms;
  Perm p = {0, 1, 2};
  do perms.push_back(p);
  while (std::next_permutation(p.begin(), p.end()));
  z3::expr all = e.ctx().bool_val(true);
  for (const Perm& p1 : perms)
    for (const Perm& p2 : perms) {
      Perm q;
      for (int k = 0; k < 3; ++k) q[k] = wrong ? p2[p1[k]] : p1[p2[k]];
      std::array<z3::expr, 3> y = transpose_source(i, p2);  // index into T(X, p1)
      std::array<z3::expr, 3> x = transpose_source(y, p1);  // index into X
      std::array<z3::expr, 3> direct = transpose_source(i, q);
      all = all && X(x[0], x[1], x[2]) == X(direct[0], direct[1], direct[2]);
    }
  return all;
}

// Reshape(Reshape(X[A,3,4], [A,12]), [A*12]) = Reshape(X, [A*12]), and
// Reshape(Reshape(X[A,12], [A,3,4]), [A,12]) = X: row-major order is kept.
z3::expr reshape_chain(Enc& e) {
  z3::expr A = e.dim("A");
  z3::func_decl X = e.tensor("X", 3), Y = e.tensor("Y", 2);
  z3::expr l = e.index("l"), a = e.index("a"), m = e.index("m");
  auto step1 = [&](const z3::expr& r, const z3::expr& c) { return X(r, c / 4, c % 4); };  // [A,12] view
  z3::expr chained = step1(l / 12, l % 12);
  z3::expr direct = X(l / 12, (l / 4) % 3, l % 4);
  auto split = [&](const z3::expr& r, const z3::expr& b, const z3::expr& c) { return Y(r, b * 4 + c); };
  z3::expr round_trip = split(a, m / 4, m % 4);
  return z3::implies(e.in_range(l, A * 12), chained == direct) &&
         z3::implies(e.in_range(a, A) && e.in_range(m, e.num(12)), round_trip == Y(a, m));
}

// BatchNorm(Conv(X, W)) = Conv(X, W * s) + (beta - mean * s), s = gamma / sqrt(var + eps),
// for a 1-D convolution with kernel 3 and symbolic channels, stride, pad and
// dilation (the reduction over (c, k) flattened to r = 3c + k).
z3::expr conv_bn_fold(Enc& e) {
  z3::expr C = e.dim("C"), L = e.dim("L"), S = e.dim("stride"), D = e.dim("dil"), P = e.param("pad");
  z3::func_decl X = e.tensor("X", 2), W = e.tensor("W", 3), scale = e.tensor("s", 1), beta = e.tensor("beta", 1),
                mean = e.tensor("mean", 1);
  z3::expr m = e.index("m"), o = e.index("o");
  z3::expr R = C * 3;
  Fn term = [&](const z3::expr& r) {
    z3::expr c = r / 3, k = r % 3, pos = o * S - P + k * D;
    return e.guarded(pos, L, X(c, pos)) * W(m, c, k);
  };
  z3::expr conv = e.sum(R, term);
  z3::expr bn = (conv - mean(m)) * scale(m) + beta(m);
  z3::expr folded = e.sum(R, [&](const z3::expr& r) { return scale(m) * term(r); }) + (beta(m) - mean(m) * scale(m));
  e.assume_scale(R, scale(m), term);
  return bn == folded;
}

// (A + B) @ W = A @ W + B @ W.
z3::expr matmul_distribute(Enc& e) {
  z3::expr K = e.dim("K");
  z3::func_decl A = e.tensor("A", 2), B = e.tensor("B", 2), W = e.tensor("W", 2);
  z3::expr i = e.index("i"), j = e.index("j");
  Fn f = [&](const z3::expr& k) { return A(i, k) * W(k, j); };
  Fn g = [&](const z3::expr& k) { return B(i, k) * W(k, j); };
  e.assume_linear(K, f, g);
  z3::expr lhs = e.sum(K, [&](const z3::expr& k) { return (A(i, k) + B(i, k)) * W(k, j); });
  return lhs == e.sum(K, f) + e.sum(K, g);
}

// Slice(Concat(X, Y, axis=0), [N1 + off, N1 + off + N2)) = Y (off = 0), and
// Slice(.., [0, N1)) = X. `off` = -1 is the off-by-one mutant.
z3::expr concat_slice(Enc& e, int off) {
  z3::expr N1 = e.dim("N1"), N2 = e.dim("N2"), H = e.dim("H");
  z3::func_decl X = e.tensor("X", 2), Y = e.tensor("Y", 2);
  z3::expr i = e.index("i"), h = e.index("h");
  auto cat = [&](const z3::expr& r) { return z3::ite(r < N1, X(r, h), Y(r - N1, h)); };
  z3::expr start = N1 + e.num(off);
  return z3::implies(e.in_range(i, N2) && e.in_range(h, H), cat(start + i) == Y(i, h)) &&
         z3::implies(e.in_range(i, N1) && e.in_range(h, H), cat(i) == X(i, h));
}

// Slice(Slice(X, a, _, step s1), c, _, step s2) = Slice(X, a + s1 * c, _, step s1 * s2).
z3::expr slice_compose(Enc& e) {
  z3::expr a = e.param("a"), c = e.param("c"), s1 = e.dim("s1"), s2 = e.dim("s2");
  z3::func_decl X = e.tensor("X", 1);
  z3::expr i = e.param("i");
  return X(a + s1 * (c + s2 * i)) == X((a + s1 * c) + (s1 * s2) * i);
}

// Slice(Pad(X, pb, pe), [pb + off, pb + off + N)) = X. `off` = 1 is the wrong-pad mutant.
z3::expr pad_slice(Enc& e, int off) {
  // The end pad only extends the zero tail; the slice never reaches it.
  z3::expr N = e.dim("N"), pb = e.param("pb");
  z3::func_decl X = e.tensor("X", 1);
  z3::expr i = e.index("i");
  auto padded = [&](const z3::expr& r) { return e.guarded(r - pb, N, X(r - pb)); };
  return z3::implies(e.in_range(i, N), padded(pb + e.num(off) + i) == X(i));
}

// Pad(Pad(X, a1, b1), a2, b2) = Pad(X, a1 + a2, b1 + b2) (zero fill).
z3::expr pad_merge(Enc& e) {
  z3::expr N = e.dim("N"), a1 = e.param("a1"), b1 = e.param("b1"), a2 = e.param("a2"), b2 = e.param("b2");
  z3::func_decl X = e.tensor("X", 1);
  z3::expr i = e.index("i");
  auto pad = [&](const z3::expr& r, const z3::expr& before, const z3::expr& n, const std::function<z3::expr(const z3::expr&)>& in) {
    return e.guarded(r - before, n, in(r - before));
  };
  auto x = [&](const z3::expr& r) { return X(r); };
  z3::expr twice = pad(i, a2, N + a1 + b1, [&](const z3::expr& r) { return pad(r, a1, N, x); });
  z3::expr once = pad(i, a1 + a2, N, x);
  return z3::implies(e.in_range(i, N + a1 + b1 + a2 + b2), twice == once);
}

}  // namespace

std::vector<Obligation> rule_obligations() {
  return {
      {{"matmul-concat-weights", 1, "rule", "A@W1, A@W2 = Split(A@Concat(W1, W2, axis=1), [N1, N2], axis=1)"},
       [](Enc& e) { return matmul_concat(e, false); }},
      {{"transpose-compose", 1, "rule", "Transpose(Transpose(X, p1), p2) = Transpose(X, p1[p2[k]]), all rank-3 perms"},
       [](Enc& e) { return transpose_compose(e, false); }},
      {{"reshape-chain", 1, "rule", "Reshape(Reshape(X, s1), s2) = Reshape(X, s2) (row-major order kept)"},
       reshape_chain},
      {{"conv-batchnorm-fold", 1, "rule", "BN(Conv(X, W)) = Conv(X, W*s) + (beta - mean*s), s = gamma/sqrt(var+eps)"},
       conv_bn_fold},
      {{"matmul-distribute-add", 1, "rule", "(A + B)@W = A@W + B@W"}, matmul_distribute},
      {{"concat-slice", 1, "rule", "Slice(Concat(X, Y), [N1, N1+N2)) = Y and Slice(Concat(X, Y), [0, N1)) = X"},
       [](Enc& e) { return concat_slice(e, 0); }},
      {{"slice-compose", 1, "rule", "Slice(Slice(X, a, step s1), c, step s2) = Slice(X, a + s1*c, step s1*s2)"},
       slice_compose},
      {{"pad-slice-inverse", 1, "rule", "Slice(Pad(X, pb, pe), [pb, pb+N)) = X"},
       [](Enc& e) { return pad_slice(e, 0); }},
      {{"pad-merge", 1, "rule", "Pad(Pad(X, a1, b1), a2, b2) = Pad(X, a1+a2, b1+b2) with zero fill"}, pad_merge},
  };
}

std::vector<Obligation> wrong_rule_obligations() {
  return {
      {{"wrong-concat-order", 1, "rule", "Split(A@Concat(W2, W1)) = A@W1, A@W2"},
       [](Enc& e) { return matmul_concat(e, true); }},
      {{"wrong-transpose-perm", 1, "rule", "Transpose(Transpose(X, p1), p2) = Transpose(X, p2[p1[k]])"},
       [](Enc& e) { return transpose_compose(e, true); }},
      {{"wrong-slice-off-by-one", 1, "rule", "Slice(Concat(X, Y), [N1-1, N1-1+N2)) = Y"},
       [](Enc& e) { return concat_slice(e, -1); }},
      {{"wrong-pad-slice", 1, "rule", "Slice(Pad(X, pb, pe), [pb+1, pb+1+N)) = X"},
       [](Enc& e) { return pad_slice(e, 1); }},
  };
}

}  // namespace tessera::verifier::z3enc
