// Proof obligations of rewrite rules (mutator/rules/). Each builds, at a
// symbolic output index, the element of the original and of the rewritten
// program and claims them equal under the rule's preconditions, which the
// rule's covered_by checks on each instance. Sizes are symbolic; where an
// obligation enumerates (the permutations of a rank, the parts of a group)
// the rank or count is a precondition. Where a claim compares sums it also
// states the summands' identity at a symbolic index; a wrong twin claims
// only that (its summands differ at some index: with the data zero
// elsewhere, so do the sums), so that Z3 refutes it with values of the
// tensors' elements, not with free values of uninterpreted sums.
#include <algorithm>
#include <array>
#include <numeric>

#include "verifier/z3_tensor.h"

namespace tessera::verifier::z3enc {
namespace {

using Fn = std::function<z3::expr(const z3::expr&)>;
using Perm = std::vector<int>;
using Idx = std::vector<z3::expr>;

z3::expr element(const z3::func_decl& f, const Idx& i) {
  z3::expr_vector args(f.ctx());
  for (const z3::expr& x : i) args.push_back(x);
  return f(args);
}

Idx indices(Enc& e, int rank) {
  Idx i;
  for (int k = 0; k < rank; ++k) i.push_back(e.index("i" + std::to_string(k)));
  return i;
}

std::vector<Perm> perms_of(int rank) {
  Perm p(static_cast<size_t>(rank));
  std::iota(p.begin(), p.end(), 0);
  std::vector<Perm> out;
  do out.push_back(p);
  while (std::next_permutation(p.begin(), p.end()));
  return out;
}

// Transpose(X, perm) at output index i reads X at j, j[perm[k]] = i[k].
Idx transpose_source(const Idx& i, const Perm& perm) {
  Idx j = i;
  for (size_t k = 0; k < perm.size(); ++k) j[perm[k]] = i[k];
  return j;
}

// Concat along an axis with part `mid` at [O, O + N): position q reads the
// parts before it (`low`), `mid` at q - O, or the parts after (`high`). A
// symbolic offset stands for any number of parts around the one a Split
// takes back.
z3::expr concat_at(const z3::expr& q, const z3::expr& O, const z3::expr& N, const Fn& low, const Fn& mid,
                   const Fn& high) {
  return z3::ite(q < O, low(q), z3::ite(q < O + N, mid(q - O), high(q - O - N)));
}

// Merging products that read one input (merge-matmuls-sharing-input,
// merge-convs-sharing-input): part j of Split(P@Concat(W..) + Concat(b..))
// at [O, O + N) is P@W_j + b_j, over a reduction of symbolic size R. For
// MatMul, P is A (row i); for Conv, P is the input's im2col patch at output
// position i (the same for every part, since the rule requires equal
// kernel, stride, pad, dilation and weight shape). `shift` moves the Split's
// part away from the Concat's (the wrong twin).
z3::expr merged_products(Enc& e, int shift) {
  z3::expr R = e.dim("R"), N = e.dim("N"), O = e.param("O"), rows = e.dim("rows");
  z3::func_decl P = e.tensor("P", 2), W = e.tensor("W", 2), b = e.tensor("b", 1);
  z3::func_decl Wlo = e.tensor("W_before", 2), Whi = e.tensor("W_after", 2);
  z3::func_decl blo = e.tensor("b_before", 1), bhi = e.tensor("b_after", 1);
  z3::expr i = e.index("i"), j = e.index("j"), k = e.index("k");
  z3::expr col = O + j + e.num(shift);
  auto wc = [&](const z3::expr& r, const z3::expr& q) {
    return concat_at(q, O, N, [&](const z3::expr& x) { return Wlo(r, x); }, [&](const z3::expr& x) { return W(r, x); },
                     [&](const z3::expr& x) { return Whi(r, x); });
  };
  z3::expr bc = concat_at(col, O, N, [&](const z3::expr& x) { return blo(x); }, [&](const z3::expr& x) { return b(x); },
                          [&](const z3::expr& x) { return bhi(x); });
  Fn merged = [&](const z3::expr& r) { return P(i, r) * wc(r, col); };
  Fn part = [&](const z3::expr& r) { return P(i, r) * W(r, j); };
  z3::expr in = e.in_range(i, rows) && e.in_range(j, N);
  z3::expr elements = z3::implies(e.in_range(k, R), merged(k) == part(k)) && bc == b(j);
  if (shift) return z3::implies(in, elements);
  e.assume_ext(R, merged, part, in);
  return z3::implies(in, elements && e.sum(R, merged) + bc == e.sum(R, part) + b(j));
}

// Parallel convolutions into one grouped convolution: for n parts of No
// output and Ci input channels, Conv(Concat(X_g), Concat(W_g), group=n)'s
// output channel g * No + o reads input channels [g * Ci, (g + 1) * Ci), and
// part j of its Split is Conv(X_j, W_j). The reduction index r reads channel
// chan(r) in [0, Ci) at window position pos(r, p) (the same geometry for
// all, a precondition). `wrong_group` makes part j read group j + 1's input.
z3::expr grouped_convs(Enc& e, int n, bool wrong_group = false) {
  z3::expr R = e.dim("R"), No = e.dim("No"), Ci = e.dim("Ci"), L = e.dim("L");
  z3::func_decl chan_raw = e.int_tensor("chan", 1), pos = e.int_tensor("pos", 2);
  std::vector<z3::func_decl> X, W, b;
  for (int g = 0; g < n; ++g) {
    X.push_back(e.tensor("X" + std::to_string(g), 2));
    W.push_back(e.tensor("W" + std::to_string(g), 2));
    b.push_back(e.tensor("b" + std::to_string(g), 1));
  }
  auto chan = [&](const z3::expr& r) {
    z3::expr c = chan_raw(r);
    return z3::ite(e.in_range(c, Ci), c, e.num(0));
  };
  auto block = [&](const z3::expr& q, const z3::expr& size, const std::function<z3::expr(int, const z3::expr&)>& part) {
    z3::expr v = part(n - 1, q - e.num(n - 1) * size);
    for (int g = n - 2; g >= 0; --g) v = z3::ite(q < e.num(g + 1) * size, part(g, q - e.num(g) * size), v);
    return v;
  };
  z3::expr o = e.index("o"), p = e.index("p"), k = e.index("k");
  z3::expr all = e.ctx().bool_val(true);
  for (int j = 0; j < n; ++j) {
    z3::expr oc = e.num(j) * No + o;
    // The grouped Conv: output channel oc is in block h of No channels and
    // reads input channels [h * Ci, (h + 1) * Ci) (the wrong twin: group h + 1's).
    Fn merged = [&, oc](const z3::expr& r) {
      return block(oc, No, [&](int h, const z3::expr& q) {
        int group = wrong_group ? (h + 1) % n : h;
        z3::expr x = block(e.num(group) * Ci + chan(r), Ci, [&](int c_part, const z3::expr& c) {
          return X[c_part](c, pos(r, p));
        });
        return W[h](q, r) * x;
      });
    };
    Fn part = [&, j](const z3::expr& r) { return W[j](o, r) * X[j](chan(r), pos(r, p)); };
    z3::expr bias = block(oc, No, [&](int h, const z3::expr& q) { return b[h](q); });
    z3::expr in = e.in_range(o, No) && e.in_range(p, L);
    z3::expr elements = z3::implies(e.in_range(k, R), merged(k) == part(k)) && bias == b[j](o);
    if (wrong_group) {
      all = all && z3::implies(in, elements);
      continue;
    }
    e.assume_ext(R, merged, part, in);
    all = all && z3::implies(in, elements && e.sum(R, merged) + bias == e.sum(R, part) + b[j](o));
  }
  return all;
}

// Transpose(Transpose(X, p1), p2) = Transpose(X, q), q[k] = p1[p2[k]], for
// every pair of permutations of each rank up to max_rank. `wrong` composes
// as p2[p1[k]].
z3::expr transpose_compose(Enc& e, int max_rank, bool wrong) {
  z3::expr all = e.ctx().bool_val(true);
  for (int rank = 1; rank <= max_rank; ++rank) {
    z3::func_decl X = e.tensor("X" + std::to_string(rank), rank);
    Idx i = indices(e, rank);
    std::vector<Perm> perms = perms_of(rank);
    for (const Perm& p1 : perms)
      for (const Perm& p2 : perms) {
        Perm q(p1.size());
        for (size_t k = 0; k < q.size(); ++k) q[k] = wrong ? p2[p1[k]] : p1[p2[k]];
        all = all && element(X, transpose_source(transpose_source(i, p2), p1)) == element(X, transpose_source(i, q));
      }
  }
  return all;
}

// Transpose(X, perm) = X exactly when perm is the identity, ranks 1 to
// max_rank. `wrong` also removes the Transpose that swaps the last two axes.
z3::expr transpose_identity(Enc& e, int max_rank, bool wrong) {
  z3::expr all = e.ctx().bool_val(true);
  for (int rank = wrong ? 2 : 1; rank <= max_rank; ++rank) {
    z3::func_decl X = e.tensor("X" + std::to_string(rank), rank);
    Idx i = indices(e, rank);
    Perm p(static_cast<size_t>(rank));
    std::iota(p.begin(), p.end(), 0);
    if (wrong) std::swap(p[rank - 2], p[rank - 1]);
    all = all && element(X, transpose_source(i, p)) == element(X, i);
  }
  return all;
}

// f(Transpose(A, p), Transpose(B, p)) = Transpose(f(A, B), p) for an
// element-wise f (uninterpreted: Add, Sub, Mul alike) on equal shapes, every
// permutation of each rank up to max_rank. `wrong` transposes by p's inverse.
z3::expr transpose_sink(Enc& e, int max_rank, bool wrong) {
  z3::func_decl f = e.real_fn("f", 2);
  z3::expr all = e.ctx().bool_val(true);
  for (int rank = 1; rank <= max_rank; ++rank) {
    z3::func_decl A = e.tensor("A" + std::to_string(rank), rank), B = e.tensor("B" + std::to_string(rank), rank);
    Idx i = indices(e, rank);
    for (const Perm& p : perms_of(rank)) {
      Perm after = p;
      if (wrong)
        for (size_t k = 0; k < p.size(); ++k) after[p[k]] = static_cast<int>(k);
      Idx src = transpose_source(i, p), late = transpose_source(i, after);
      all = all && f(element(A, src), element(B, src)) == f(element(A, late), element(B, late));
    }
  }
  return all;
}

// Row-major order over dims d: the flat position of index i (Horner), and
// the index of flat position l (successive division by the minor dims).
z3::expr flatten(const Idx& i, const Idx& d) {
  z3::expr l = i[0];
  for (size_t k = 1; k < i.size(); ++k) l = l * d[k] + i[k];
  return l;
}
Idx unflatten(const z3::expr& l, const Idx& d) {
  Idx i(d.size(), l);
  z3::expr rest = l;
  for (size_t k = d.size(); k-- > 1;) {
    i[k] = rest % d[k];
    rest = rest / d[k];
  }
  i[0] = rest;
  return i;
}

// A Reshape reads its input in row-major order: out(i) = X(unflatten_sX(
// flatten_s(i))). Both Reshape rules rest on the round trips through a shape
// d of symbolic dims: flatten(unflatten(l)) = l for l in [0, prod d)
// (reshape-chain: the middle shape's round trip, so that two Reshapes read
// X where one does) and unflatten(flatten(i)) = i for i in bounds
// (reshape-elimination: a Reshape to its own shape reads X at i), ranks 1
// to max_rank. `wrong` drops the minor dim's remainder in flatten.
z3::expr reshape_round_trip(Enc& e, int max_rank, bool chain, bool wrong) {
  z3::expr all = e.ctx().bool_val(true);
  for (int rank = 1; rank <= max_rank; ++rank) {
    Idx d;
    for (int k = 0; k < rank; ++k) d.push_back(e.dim("d" + std::to_string(rank) + "_" + std::to_string(k)));
    z3::func_decl X = e.tensor("X" + std::to_string(rank), 1);
    if (chain) {
      z3::expr l = e.index("l" + std::to_string(rank)), total = d[0];
      for (int k = 1; k < rank; ++k) total = total * d[k];
      Idx j = unflatten(l, d);
      if (wrong && rank > 1) j[rank - 1] = e.num(0);
      all = all && z3::implies(e.in_range(l, total), X(flatten(j, d)) == X(l));
    } else {
      z3::func_decl Y = e.tensor("Y" + std::to_string(rank), rank);
      Idx i = indices(e, rank);
      z3::expr bounds = e.ctx().bool_val(true);
      for (int k = 0; k < rank; ++k) bounds = bounds && e.in_range(i[k], d[k]);
      z3::expr l = flatten(i, d);
      if (wrong && rank > 1) l = l - i[rank - 1];
      // Division of q * d + b by d, b in [0, d): a schema, proven once
      // (Z3 decides it alone, not its instances in context), assumed at
      // each level of the Horner form.
      std::vector<std::vector<z3::expr>> at;
      z3::expr prefix = i[0];
      for (int k = 1; k < rank; ++k) {
        at.push_back({prefix, d[k], i[k]});
        prefix = prefix * d[k] + i[k];
      }
      if (!wrong)
        e.assume_schema(3, [](const std::vector<z3::expr>& v) {
          z3::expr n = v[0] * v[1] + v[2];
          return z3::implies(v[0] >= 0 && v[1] >= 1 && v[2] >= 0 && v[2] < v[1], n / v[1] == v[0] && n % v[1] == v[2]);
        }, at);
      all = all && z3::implies(bounds, element(Y, unflatten(l, d)) == element(Y, i));
    }
  }
  return all;
}

// MatMul(A, B) + C = Gemm(A, B, C) for 2-D A [M, K], B [K, N] and C that
// broadcasts to [M, N] (shape [], [N], [1, N], [M, 1] or [M, N]; Add and
// Gemm broadcast it alike), the Add either way round; Gemm as its
// definition, alpha * A'@B' + beta * C with the rule's alpha = beta = 1,
// transA = transB = 0. `trans_b` is the wrong twin's transB = 1.
z3::expr matmul_add_gemm(Enc& e, bool trans_b) {
  z3::expr K = e.dim("K"), M = e.dim("M"), N = e.dim("N");
  z3::func_decl A = e.tensor("A", 2), B = e.tensor("B", 2), C = e.tensor("C", 2);
  z3::expr i = e.index("i"), j = e.index("j"), k = e.index("k");
  z3::expr alpha = e.ctx().real_val(1), beta = e.ctx().real_val(1);
  z3::expr zero = e.num(0);
  // C's broadcast index maps to [M, N].
  std::vector<std::pair<z3::expr, z3::expr>> forms = {{zero, zero}, {zero, j}, {i, zero}, {i, j}};
  Fn product = [&](const z3::expr& r) { return A(i, r) * B(r, j); };
  Fn gemm_product = [&](const z3::expr& r) { return A(i, r) * (trans_b ? B(j, r) : B(r, j)); };
  z3::expr in = e.in_range(i, M) && e.in_range(j, N);
  z3::expr all = z3::implies(in && e.in_range(k, K), product(k) == gemm_product(k));
  if (trans_b) return all;
  e.assume_ext(K, product, gemm_product, in);
  for (const auto& [ci, cj] : forms) {
    z3::expr c = C(ci, cj);
    z3::expr gemm = alpha * e.sum(K, gemm_product) + beta * c;
    all = all && z3::implies(in, e.sum(K, product) + c == gemm && c + e.sum(K, product) == gemm);
  }
  return all;
}

// BatchNorm(Conv(X, W)) = Conv(X, W * s) + (beta - mean * s), s = gamma / sqrt(var + eps),
// for a 1-D convolution with kernel 3 and symbolic channels, stride, pad and
// dilation (the reduction over (c, k) flattened to r = 3c + k).
// `wrong` folds the bias as beta - mean (the scale forgotten).
z3::expr conv_bn_fold(Enc& e, bool wrong) {
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
  z3::expr folded = e.sum(R, [&](const z3::expr& r) { return scale(m) * term(r); }) + (beta(m) - mean(m) * (wrong ? e.ctx().real_val(1) : scale(m)));
  e.assume_scale(R, scale(m), term);
  return bn == folded;
}

// A@C + B@C = (A + B)@C and A@B + A@C = A@(B + C), over a reduction of
// symbolic size K (batch dims are free indices). `wrong` is the classic
// slip A@B + C@D = (A + C)@(B + D), which adds the cross terms.
z3::expr matmul_distribute(Enc& e, bool wrong) {
  z3::expr K = e.dim("K");
  z3::func_decl A = e.tensor("A", 2), B = e.tensor("B", 2), C = e.tensor("C", 2), D = e.tensor("D", 2);
  z3::expr i = e.index("i"), j = e.index("j"), k = e.index("k");
  z3::expr all = e.ctx().bool_val(true);
  for (int shared = 0; shared < 2; ++shared) {
    // shared 1: the right operand W = C; shared 0: the left one, A.
    Fn f = [&](const z3::expr& r) { return shared ? A(i, r) * C(r, j) : A(i, r) * B(r, j); };
    Fn g = [&](const z3::expr& r) {
      if (wrong) return C(i, r) * D(r, j);
      return shared ? B(i, r) * C(r, j) : A(i, r) * C(r, j);
    };
    Fn merged = [&](const z3::expr& r) {
      if (wrong) return (A(i, r) + C(i, r)) * (B(r, j) + D(r, j));
      return shared ? (A(i, r) + B(i, r)) * C(r, j) : A(i, r) * (B(r, j) + C(r, j));
    };
    Fn sum_fg = [&](const z3::expr& r) { return f(r) + g(r); };
    all = all && z3::implies(e.in_range(k, K), merged(k) == sum_fg(k));
    if (wrong) continue;
    e.assume_linear(K, f, g);
    e.assume_ext(K, merged, sum_fg, e.ctx().bool_val(true));
    all = all && e.sum(K, merged) == e.sum(K, f) + e.sum(K, g);
  }
  return all;
}

}  // namespace

// The ranks are kMaxPermRank and kMaxReshapeRank (proofs.h): rules check an
// instance's rank against them. Measured: transpose-compose over all pairs
// of rank-5 permutations took 34 s, rank 4 1.4 s; the reshape round trips
// at rank 4 2.5 s each.
std::vector<Obligation> rule_obligations() {
  std::vector<Obligation> out = {
      {{"matmul-concat-weights", 2, "rule",
        "A@W_j + b_j = part j of Split(A@Concat(W..) + Concat(b..), axis=-1), any number of parts"},
       [](Enc& e) { return merged_products(e, 0); }},
      {{"conv-concat-weights", 1, "rule",
        "Conv(X, W_j) + b_j = part j of Split(Conv(X, Concat(W.., axis=0)) + Concat(b..), axis=1), equal geometry"},
       [](Enc& e) { return merged_products(e, 0); }},
      {{"conv-group-concat", 1, "rule",
        "Conv(X_j, W_j) = part j of Split(Conv(Concat(X..), Concat(W..), group=n)), n = 2, 3, 4"},
       [](Enc& e) { return grouped_convs(e, 2) && grouped_convs(e, 3) && grouped_convs(e, 4); }},
      {{"transpose-compose", 2, "rule",
        "Transpose(Transpose(X, p1), p2) = Transpose(X, p1[p2[k]]), all permutations of ranks 1-4"},
       [](Enc& e) { return transpose_compose(e, kMaxPermRank, false); }},
      {{"transpose-identity", 1, "rule", "Transpose(X, identity) = X, ranks 1-8"},
       [](Enc& e) { return transpose_identity(e, 8, false); }},
      {{"transpose-sink-elementwise", 1, "rule",
        "f(Transpose(A, p), Transpose(B, p)) = Transpose(f(A, B), p), f element-wise, equal shapes, ranks 1-4"},
       [](Enc& e) { return transpose_sink(e, kMaxPermRank, false); }},
      {{"reshape-chain", 2, "rule",
        "flatten(unflatten(l)) = l through any middle shape of symbolic dims, ranks 1-4: two Reshapes read as one"},
       [](Enc& e) { return reshape_round_trip(e, kMaxReshapeRank, true, false); }},
      {{"reshape-identity", 1, "rule", "unflatten(flatten(i)) = i over symbolic dims, ranks 1-4: Reshape(X, shape(X)) = X"},
       [](Enc& e) { return reshape_round_trip(e, kMaxReshapeRank, false, false); }},
      {{"matmul-add-gemm", 1, "rule", "MatMul(A, B) + C = C + MatMul(A, B) = Gemm(A, B, C), C broadcast to [M, N]"},
       [](Enc& e) { return matmul_add_gemm(e, false); }},
      {{"conv-batchnorm-fold", 1, "rule", "BN(Conv(X, W)) = Conv(X, W*s) + (beta - mean*s), s = gamma/sqrt(var+eps)"},
       [](Enc& e) { return conv_bn_fold(e, false); }},
      {{"matmul-distribute-add", 2, "rule", "A@C + B@C = (A + B)@C and A@B + A@C = A@(B + C)"},
       [](Enc& e) { return matmul_distribute(e, false); }},
  };
  for (Obligation& o : winograd_obligations()) out.push_back(std::move(o));
  return out;
}

std::vector<Obligation> wrong_rule_obligations() {
  std::vector<Obligation> out = {
      {{"wrong-concat-order", 2, "rule", "Split takes part j one column past where Concat put it",
        "matmul-concat-weights"},
       [](Enc& e) { return merged_products(e, 1); }},
      {{"wrong-conv-concat-offset", 1, "rule", "Split takes Conv part j one channel past where Concat put it",
        "conv-concat-weights"},
       [](Enc& e) { return merged_products(e, 1); }},
      {{"wrong-group-input", 1, "rule", "grouped Conv part j reads group j+1's input channels", "conv-group-concat"},
       [](Enc& e) { return grouped_convs(e, 2, true); }},
      {{"wrong-transpose-perm", 2, "rule", "Transpose(Transpose(X, p1), p2) = Transpose(X, p2[p1[k]])",
        "transpose-compose"},
       [](Enc& e) { return transpose_compose(e, 3, true); }},
      {{"wrong-transpose-identity", 1, "rule", "Transpose(X, [.., n-1, n-2]) = X", "transpose-identity"},
       [](Enc& e) { return transpose_identity(e, 3, true); }},
      {{"wrong-transpose-sink-inverse", 1, "rule", "f(T(A, p), T(B, p)) = T(f(A, B), inverse(p))",
        "transpose-sink-elementwise"},
       [](Enc& e) { return transpose_sink(e, 3, true); }},
      {{"wrong-reshape-chain-minor", 1, "rule", "flatten(unflatten(l)) with the minor index dropped = l",
        "reshape-chain"},
       [](Enc& e) { return reshape_round_trip(e, 3, true, true); }},
      {{"wrong-reshape-identity-minor", 1, "rule", "unflatten(flatten(i) - i_minor) = i", "reshape-identity"},
       [](Enc& e) { return reshape_round_trip(e, 3, false, true); }},
      {{"wrong-gemm-trans-b", 1, "rule", "MatMul(A, B) + C = Gemm(A, B, C, transB=1)", "matmul-add-gemm"},
       [](Enc& e) { return matmul_add_gemm(e, true); }},
      {{"wrong-batchnorm-fold-bias", 1, "rule", "BN(Conv(X, W)) = Conv(X, W*s) + (beta - mean)", "conv-batchnorm-fold"},
       [](Enc& e) { return conv_bn_fold(e, true); }},
      {{"wrong-distribute-cross-terms", 1, "rule", "A@B + C@D = (A + C)@(B + D)", "matmul-distribute-add"},
       [](Enc& e) { return matmul_distribute(e, true); }},
  };
  for (Obligation& o : wrong_winograd_obligations()) out.push_back(std::move(o));
  return out;
}

}  // namespace tessera::verifier::z3enc
