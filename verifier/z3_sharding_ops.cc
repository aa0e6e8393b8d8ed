// Proof obligations of the sharding strategies of ops whose dims map less
// simply than a contraction's: Reshape carrying a shard, row-wise Softmax and
// LayerNorm, the vocab-parallel Gather, ScatterElements split on a dim it
// does not write, grouped-query attention with KV heads held in groups, and
// the shardings of a convolution.
// As in z3_sharding.cc, one side is the ranks' local programs plus the
// collective, the other the global op, and a wrong twin keeps the axiom
// instances of its correct twin that stay true.
#include "verifier/z3_tensor.h"

namespace tessera::verifier::z3enc {
namespace {

using Fn = std::function<z3::expr(const z3::expr&)>;

// Split heads: X [H * D] sharded on its only dim, reshaped to [H, D]
// sharded on dim 0 (H = n * Hl; each rank owns Hl heads):
//   AllGather_0(Reshape(X_r, [Hl, D]))[p, d] = Reshape(X, [H, D])[p, d] = X[p * D + d].
// `minor`: the same blocks claimed sharded on dim 1 (D = n * Dl): the shard
// put on the minor factor of the split.
z3::expr reshape_split(Enc& e, int n, bool minor) {
  z3::expr Hl = e.dim("Hl"), D = e.dim("D");
  z3::func_decl X = e.tensor("X", 1);
  z3::expr h = e.index("h"), d = e.index("d");
  if (!minor) {
    auto Xs = blocks(e, X, "X", 0, n, Hl * D);
    z3::expr gathered = all_gather(e, n, Hl, h, [&](int r, const z3::expr& hl) { return Xs[r](hl * D + d); });
    return z3::implies(e.in_range(h, e.num(n) * Hl) && e.in_range(d, D), gathered == X(h * D + d));
  }
  z3::expr H = e.dim("H"), Dl = e.dim("Dl");
  auto Xs = blocks(e, X, "X", 0, n, H * Dl);
  z3::expr gathered = all_gather(e, n, Dl, d, [&](int r, const z3::expr& dl) { return Xs[r](h * Dl + dl); });
  return z3::implies(e.in_range(h, H) && e.in_range(d, e.num(n) * Dl), gathered == X(h * (e.num(n) * Dl) + d));
}

// Merge heads: X [H, D] sharded on dim 0 (H = n * Hl), reshaped to [H * D]
// sharded on its only dim, in blocks of Hl * D:
//   AllGather(Reshape(X_r, [Hl * D]))[p] = Reshape(X, [H * D])[p] = X[p / D, p % D].
// `minor`: X sharded on dim 1 (D = n * Dl), the minor factor of the merge,
// claimed to give the same blocks.
z3::expr reshape_merge(Enc& e, int n, bool minor) {
  z3::func_decl X = e.tensor("X", 2);
  z3::expr p = e.index("p");
  // The local row-major merge of a [rows, cols] block.
  auto merged = [&](const z3::func_decl& x, const z3::expr& cols, const z3::expr& j) { return x(j / cols, j % cols); };
  if (!minor) {
    z3::expr Hl = e.dim("Hl"), D = e.dim("D");
    auto Xs = blocks(e, X, "X", 0, n, Hl);
    auto part = [&](int r, const z3::expr& j) { return merged(Xs[r], D, j); };
    // Division by the symbolic D, as two facts proven once: the quotient and
    // remainder are unique, and a quotient's bound. Rank r's local index
    // j = p - r*Hl*D is (p/D - r*Hl)*D + p%D, so j/D = p/D - r*Hl, and it is
    // in [0, Hl) since j is in [0, Hl*D).
    std::vector<std::vector<z3::expr>> unique, bound;
    for (int r = 0; r < n; ++r) {
      z3::expr j = local_index(e, r, Hl * D, p);
      unique.push_back({j, p / D - rank_offset(e, r, Hl), p % D});
      bound.push_back({j, Hl});
    }
    e.assume_schema(3, [&](const std::vector<z3::expr>& a) {
      const z3::expr &x = a[0], &q = a[1], &m = a[2];
      return z3::implies(x == D * q + m && m >= 0 && m < D, x / D == q && x % D == m);
    }, unique);
    e.assume_schema(2, [&](const std::vector<z3::expr>& a) {
      const z3::expr &x = a[0], &b = a[1];
      return z3::implies(x >= 0 && x < b * D, x / D >= 0 && x / D < b);
    }, bound);
    z3::expr gathered = all_gather(e, n, Hl * D, p, part);
    return z3::implies(e.in_range(p, e.num(n) * Hl * D), gathered == X(p / D, p % D));
  }
  z3::expr H = e.dim("H"), Dl = e.dim("Dl"), D = e.num(n) * Dl;
  auto Xs = blocks(e, X, "X", 1, n, Dl);
  z3::expr gathered = all_gather(e, n, H * Dl, p, [&](int r, const z3::expr& j) { return merged(Xs[r], Dl, j); });
  return z3::implies(e.in_range(p, H * D), gathered == X(p / D, p % D));
}

// Softmax along the last axis of X [R, C], rows sharded (R = n * S): each
// rank normalises its own rows, whole:
//   AllGather_0(Softmax_1(X_r))[p, c] = Softmax_1(X)[p, c],
// with Softmax(x)[c] = exp(x[c]) / sum_k exp(x[k]), exp uninterpreted.
// `reduced_axis`: X sharded on the softmax axis (C = n * S), each rank
// normalising over its slice only.
z3::expr softmax(Enc& e, int n, bool reduced_axis) {
  e.sums_as_atoms();
  z3::expr S = e.dim("S"), W = e.dim("W");  // W: the unsharded dim
  z3::func_decl X = e.tensor("X", 2);
  z3::func_decl exp = e.real_fn("exp", 1);
  z3::expr p = e.index("p"), c = e.index("c");
  if (!reduced_axis) {
    auto Xs = blocks(e, X, "X", 0, n, S);
    auto denominator = [&](const z3::func_decl& x, const z3::expr& row) {
      return e.sum(W, [&](const z3::expr& k) { return exp(x(row, k)); });
    };
    for (int r = 0; r < n; ++r)
      e.assume_ext(
          W, [&](const z3::expr& k) { return exp(Xs[r](local_index(e, r, S, p), k)); },
          [&](const z3::expr& k) { return exp(X(p, k)); }, in_block(e, r, S, p));
    z3::expr gathered = all_gather(e, n, S, p, [&](int r, const z3::expr& i) {
      return exp(Xs[r](i, c)) / denominator(Xs[r], i);
    });
    return z3::implies(e.in_range(p, e.num(n) * S) && e.in_range(c, W),
                       gathered == exp(X(p, c)) / denominator(X, p));
  }
  // Rows are dim 0 (size W) and the softmax axis, sharded, dim 1; p is the
  // row, c the global column.
  auto Xs = blocks(e, X, "X", 1, n, S);
  Fn global = [&](const z3::expr& k) { return exp(X(p, k)); };
  assume_rank_blocks(e, n, S, global, [&](int r) { return Fn([&, r](const z3::expr& k) { return exp(Xs[r](p, k)); }); });
  z3::expr gathered = all_gather(e, n, S, c, [&](int r, const z3::expr& j) {
    return exp(Xs[r](p, j)) / e.sum(S, [&](const z3::expr& k) { return exp(Xs[r](p, k)); });
  });
  return z3::implies(e.in_range(p, W) && e.in_range(c, e.num(n) * S),
                     gathered == exp(X(p, c)) / e.sum(e.num(n) * S, global));
}

// LayerNorm along the last axis of X [R, C], rows sharded (R = n * S),
// gamma and beta [C] replicated:
//   AllGather_0(LayerNorm_1(X_r))[p, c] = LayerNorm_1(X)[p, c],
// LayerNorm(x)[c] = (x[c] - mean) * rsqrt(var + eps) * gamma[c] + beta[c],
// mean = sum_k x[k] / C, var = sum_k (x[k] - mean)^2 / C, rsqrt uninterpreted.
// The variance's summands contain the mean, so its ext's side goal uses the
// mean's ext, stated first at the same row.
// `reduced_axis`: X sharded on the normalised axis (C = n * S), each rank
// normalising with its slice's statistics.
z3::expr layer_norm(Enc& e, int n, bool reduced_axis) {
  e.sums_as_atoms();
  z3::expr S = e.dim("S"), W = e.dim("W");
  z3::func_decl X = e.tensor("X", 2), gamma = e.tensor("gamma", 1), beta = e.tensor("beta", 1);
  z3::func_decl rsqrt = e.real_fn("rsqrt", 1);
  z3::expr eps = e.real("eps");
  z3::expr p = e.index("p"), c = e.index("c");
  // LayerNorm of the row x(k), k in [0, len), at column col (gamma, beta at gcol).
  auto norm = [&](const Fn& x, const z3::expr& len, const z3::expr& col, const z3::expr& gcol) {
    z3::expr mean = e.sum(len, x) / z3::to_real(len);
    z3::expr var = e.sum(len, [&](const z3::expr& k) { return (x(k) - mean) * (x(k) - mean); }) / z3::to_real(len);
    return (x(col) - mean) * rsqrt(var + eps) * gamma(gcol) + beta(gcol);
  };
  if (!reduced_axis) {
    auto Xs = blocks(e, X, "X", 0, n, S);
    auto row = [](const z3::func_decl& x, const z3::expr& i) { return Fn([x, i](const z3::expr& k) { return x(i, k); }); };
    Fn global = row(X, p);
    for (int r = 0; r < n; ++r) {
      Fn local = row(Xs[r], local_index(e, r, S, p));
      z3::expr k = e.index("k!" + std::to_string(r));
      e.assume_ext(W, local, global, in_block(e, r, S, p));
      z3::expr lmean = e.sum(W, local) / z3::to_real(W), gmean = e.sum(W, global) / z3::to_real(W);
      e.assume_ext(
          W, [&](const z3::expr& j) { return (local(j) - lmean) * (local(j) - lmean); },
          [&](const z3::expr& j) { return (global(j) - gmean) * (global(j) - gmean); }, in_block(e, r, S, p), k);
    }
    z3::expr gathered = all_gather(e, n, S, p, [&](int r, const z3::expr& i) { return norm(row(Xs[r], i), W, c, c); });
    return z3::implies(e.in_range(p, e.num(n) * S) && e.in_range(c, W), gathered == norm(global, W, c, c));
  }
  auto Xs = blocks(e, X, "X", 1, n, S);
  auto gs = blocks(e, gamma, "gamma", 0, n, S), bs = blocks(e, beta, "beta", 0, n, S);
  Fn global = [&](const z3::expr& k) { return X(p, k); };
  assume_rank_blocks(e, n, S, global, [&](int r) { return Fn([&, r](const z3::expr& k) { return Xs[r](p, k); }); });
  z3::expr gathered = all_gather(e, n, S, c, [&](int r, const z3::expr& j) {
    Fn x = [&, r](const z3::expr& k) { return Xs[r](p, k); };
    z3::expr mean = e.sum(S, x) / z3::to_real(S);
    z3::expr var = e.sum(S, [&](const z3::expr& k) { return (x(k) - mean) * (x(k) - mean); }) / z3::to_real(S);
    return (x(j) - mean) * rsqrt(var + eps) * gs[r](j) + bs[r](j);
  });
  return z3::implies(e.in_range(p, W) && e.in_range(c, e.num(n) * S), gathered == norm(global, e.num(n) * S, c, c));
}

// Vocab-parallel Gather (embedding): W [V, D] sharded on rows (V = n * S),
// ids replicated. Rank r masks the ids outside [r * S, (r + 1) * S), looks
// up the others shifted by r * S (a masked id reads row 0, a safe index),
// and zeroes the masked rows; the AllReduce adds the one unmasked row:
//   AllReduce(Where(mask_r, 0, Gather(W_r, ids - r * S)))[t, d] = Gather(W, ids)[t, d].
// `no_mask`: the shifted id clamped into the block but the row kept.
z3::expr gather_vocab(Enc& e, int n, bool no_mask) {
  z3::expr S = e.dim("S"), D = e.dim("D");
  z3::func_decl W = e.tensor("W", 2);
  z3::func_decl ids = e.int_tensor("ids", 1);
  auto Ws = blocks(e, W, "W", 0, n, S);
  z3::expr t = e.index("t"), d = e.index("d");
  z3::expr id = ids(t);
  z3::expr zero = e.ctx().real_val(0);
  z3::expr reduced = all_reduce(e, n, [&](int r) {
    z3::expr shifted = local_index(e, r, S, id);
    if (no_mask) return Ws[r](z3::ite(shifted < 0, e.num(0), z3::ite(shifted >= S, S - 1, shifted)), d);
    z3::expr masked = !in_block(e, r, S, id);
    return z3::ite(masked, zero, Ws[r](z3::ite(masked, e.num(0), shifted), d));
  });
  return z3::implies(e.in_range(id, e.num(n) * S) && e.in_range(d, D), reduced == W(id, d));
}

// ScatterElements along axis 1 of X [R, L] with K = 2 updates per row
// (indices I and updates U [R, 2]; reduction none, so the later update of
// a repeated index wins; an index i < 0 counts from the end, i + L):
//   out[p, c] = I[p, 1] ~ c ? U[p, 1] : I[p, 0] ~ c ? U[p, 0] : X[p, c].
// Rows split (R = n * S), the written axis whole: each rank scatters its
// rows of X, I and U with the indices as they are (global columns):
//   AllGather_0(ScatterElements_1(X_r, I_r, U_r)) = ScatterElements_1(X, I, U).
// `written_axis`: X [L] split along the written axis instead (L = n * S),
// I and U [2] whole on every rank, each rank scattering into its block with
// the indices read as positions in the block (and counted from the end of
// the block): an update lands in every rank's block at the index, not in
// the one block that holds it.
z3::expr scatter_elements(Enc& e, int n, bool written_axis) {
  constexpr int kUpdates = 2;
  z3::expr S = e.dim("S");
  auto scatter = [&](const std::function<z3::expr(int)>& index, const std::function<z3::expr(int)>& update,
                     const z3::expr& old, const z3::expr& size, const z3::expr& c) {
    z3::expr out = old;
    for (int k = 0; k < kUpdates; ++k) {
      z3::expr i = index(k);
      out = z3::ite(z3::ite(i < 0, i + size, i) == c, update(k), out);
    }
    return out;
  };
  z3::expr c = e.index("c");
  if (!written_axis) {
    z3::expr L = e.dim("L"), p = e.index("p");
    z3::func_decl X = e.tensor("X", 2), U = e.tensor("U", 2);
    z3::func_decl I = e.int_tensor("I", 2);
    auto Xs = blocks(e, X, "X", 0, n, S), Us = blocks(e, U, "U", 0, n, S), Is = blocks(e, I, "I", 0, n, S);
    z3::expr gathered = all_gather(e, n, S, p, [&](int r, const z3::expr& row) {
      return scatter([&](int k) { return Is[r](row, e.num(k)); }, [&](int k) { return Us[r](row, e.num(k)); },
                     Xs[r](row, c), L, c);
    });
    z3::expr global =
        scatter([&](int k) { return I(p, e.num(k)); }, [&](int k) { return U(p, e.num(k)); }, X(p, c), L, c);
    return z3::implies(e.in_range(p, e.num(n) * S) && e.in_range(c, L), gathered == global);
  }
  z3::func_decl X = e.tensor("X", 1), U = e.tensor("U", 1);
  z3::func_decl I = e.int_tensor("I", 1);
  auto Xs = blocks(e, X, "X", 0, n, S);
  auto index = [&](int k) { return I(e.num(k)); };
  auto update = [&](int k) { return U(e.num(k)); };
  z3::expr gathered =
      all_gather(e, n, S, c, [&](int r, const z3::expr& j) { return scatter(index, update, Xs[r](j), S, j); });
  return z3::implies(e.in_range(c, e.num(n) * S), gathered == scatter(index, update, X(c), e.num(n) * S, c));
}

// Shardings of a 1-D convolution (kernel 3, pad 1; see conv3), symbolic sizes.
enum class ConvShard { kBatch, kOutChannels, kInChannels, kGroups };

// kBatch: X [B, C, L] sharded on B (B = n * S), W replicated:
//   AllGather_0(Conv(X_r, W))[p, m, o] = Conv(X, W)[p, m, o].
// `wrong`: X [C, L] sharded on L instead, each rank convolving its block with
// its own zero padding and no halo exchange. The ext instances of the
// positions whose window stays inside the block are kept: Z3 must find the
// counterexample at a block border.
z3::expr conv_batch(Enc& e, int n, bool wrong) {
  e.sums_as_atoms();
  z3::expr S = e.dim("S"), C = e.dim("C"), L = e.dim("L");
  z3::func_decl W = e.tensor("W", 3);
  z3::expr p = e.index("p"), m = e.index("m"), o = e.index("o");
  Fn2 w = [&](const z3::expr& c, const z3::expr& k) { return W(m, c, k); };
  if (!wrong) {
    z3::func_decl X = e.tensor("X", 3);
    auto Xs = blocks(e, X, "X", 0, n, S);
    auto image = [](const z3::func_decl& x, const z3::expr& b) {
      return Fn2([x, b](const z3::expr& c, const z3::expr& pos) { return x(b, c, pos); });
    };
    for (int r = 0; r < n; ++r)
      e.assume_ext(C * 3, conv3_term(e, w, o, L, image(Xs[r], local_index(e, r, S, p))),
                   conv3_term(e, w, o, L, image(X, p)), in_block(e, r, S, p));
    z3::expr gathered =
        all_gather(e, n, S, p, [&](int r, const z3::expr& b) { return conv3(e, C, w, o, L, image(Xs[r], b)); });
    return z3::implies(e.in_range(p, e.num(n) * S), gathered == conv3(e, C, w, o, L, image(X, p)));
  }
  z3::func_decl X = e.tensor("X", 2);
  auto Xs = blocks(e, X, "X", 1, n, S);
  auto signal = [](const z3::func_decl& x) { return Fn2([x](const z3::expr& c, const z3::expr& pos) { return x(c, pos); }); };
  for (int r = 0; r < n; ++r) {
    z3::expr ol = local_index(e, r, S, p);
    e.assume_ext(C * 3, conv3_term(e, w, ol, S, signal(Xs[r])), conv3_term(e, w, p, e.num(n) * S, signal(X)),
                 in_block(e, r, S, p) && ol >= 1 && ol + 1 < S);
  }
  z3::expr gathered =
      all_gather(e, n, S, p, [&](int r, const z3::expr& ol) { return conv3(e, C, w, ol, S, signal(Xs[r])); });
  return z3::implies(e.in_range(p, e.num(n) * S), gathered == conv3(e, C, w, p, e.num(n) * S, signal(X)));
}

// kOutChannels: W [M, C, 3] and the bias B [M] sharded on M (M = n * S),
// X replicated:  AllGather_0(Conv(X, W_r) + B_r)[p, o] = (Conv(X, W) + B)[p, o].
// `wrong`: B kept whole and read at the local channel.
z3::expr conv_out_channels(Enc& e, int n, bool wrong) {
  e.sums_as_atoms();
  z3::expr S = e.dim("S"), C = e.dim("C"), L = e.dim("L");
  z3::func_decl X = e.tensor("X", 2), W = e.tensor("W", 3), B = e.tensor("B", 1);
  auto Ws = blocks(e, W, "W", 0, n, S), Bs = blocks(e, B, "B", 0, n, S);
  z3::expr p = e.index("p"), o = e.index("o");
  Fn2 x = [&](const z3::expr& c, const z3::expr& pos) { return X(c, pos); };
  auto weight = [](const z3::func_decl& w, const z3::expr& m) {
    return Fn2([w, m](const z3::expr& c, const z3::expr& k) { return w(m, c, k); });
  };
  for (int r = 0; r < n; ++r)
    e.assume_ext(C * 3, conv3_term(e, weight(Ws[r], local_index(e, r, S, p)), o, L, x),
                 conv3_term(e, weight(W, p), o, L, x), in_block(e, r, S, p));
  z3::expr gathered = all_gather(e, n, S, p, [&](int r, const z3::expr& m) {
    return conv3(e, C, weight(Ws[r], m), o, L, x) + (wrong ? B(m) : Bs[r](m));
  });
  return z3::implies(e.in_range(p, e.num(n) * S), gathered == conv3(e, C, weight(W, p), o, L, x) + B(p));
}

// kInChannels: X [C, L] sharded on C (C = n * S), W [M, C, 3] on dim 1; the
// local convolutions are Partial, the bias [M] a Partial on rank 0:
//   AllReduce(Conv(X_r, W_r) + (r == 0 ? B : 0)) = Conv(X, W) + B.
// The flattened reduction over 3C splits into the ranks' blocks of 3S.
// `wrong`: rank 0's partial convolution claimed as the result.
z3::expr conv_in_channels(Enc& e, int n, bool wrong) {
  e.sums_as_atoms();
  z3::expr S = e.dim("S"), L = e.dim("L");
  z3::func_decl X = e.tensor("X", 2), W = e.tensor("W", 3), B = e.tensor("B", 1);
  auto Xs = blocks(e, X, "X", 0, n, S), Ws = blocks(e, W, "W", 1, n, S);
  z3::expr m = e.index("m"), o = e.index("o");
  auto weight = [&m](const z3::func_decl& w) {
    return Fn2([w, &m](const z3::expr& c, const z3::expr& k) { return w(m, c, k); });
  };
  auto signal = [](const z3::func_decl& x) { return Fn2([x](const z3::expr& c, const z3::expr& pos) { return x(c, pos); }); };
  Fn global = conv3_term(e, weight(W), o, L, signal(X));
  assume_rank_blocks(e, n, S * 3, global, [&](int r) { return conv3_term(e, weight(Ws[r]), o, L, signal(Xs[r])); });
  auto partial = [&](int r) {
    return conv3(e, S, weight(Ws[r]), o, L, signal(Xs[r])) + (r == 0 ? B(m) : e.ctx().real_val(0));
  };
  z3::expr reduced = wrong ? partial(0) : all_reduce(e, n, partial);
  return reduced == e.sum(e.num(n) * S * 3, global) + B(m);
}

// kGroups: a grouped convolution with G = n * Gl groups of Cg input and Mg
// output channels, channels indexed as (group, channel in group) (the
// reshape [C] = [G * Cg] is a view, and a block of Gl groups is a block of
// Gl * Cg channels). X [G, Cg, L] and W [G, Mg, Cg, 3] sharded on groups;
// each rank runs a convolution with Gl groups:
//   AllGather_0(GroupConv(X_r, W_r))[p, mm, o] = GroupConv(X, W)[p, mm, o].
// `wrong`: W kept whole on every rank and read at the local group.
z3::expr conv_groups(Enc& e, int n, bool wrong) {
  e.sums_as_atoms();
  z3::expr Gl = e.dim("Gl"), Cg = e.dim("Cg"), L = e.dim("L");
  z3::func_decl X = e.tensor("X", 3), W = e.tensor("W", 4);
  auto Xs = blocks(e, X, "X", 0, n, Gl), Ws = blocks(e, W, "W", 0, n, Gl);
  z3::expr p = e.index("p"), mm = e.index("mm"), o = e.index("o");
  auto weight = [&mm](const z3::func_decl& w, const z3::expr& g) {
    return Fn2([w, g, &mm](const z3::expr& c, const z3::expr& k) { return w(g, mm, c, k); });
  };
  auto group = [](const z3::func_decl& x, const z3::expr& g) {
    return Fn2([x, g](const z3::expr& c, const z3::expr& pos) { return x(g, c, pos); });
  };
  // With W read at the local group, only rank 0's instance stays true.
  for (int r = 0; r < (wrong ? 1 : n); ++r) {
    z3::expr g = local_index(e, r, Gl, p);
    e.assume_ext(Cg * 3, conv3_term(e, weight(wrong ? W : Ws[r], g), o, L, group(Xs[r], g)),
                 conv3_term(e, weight(W, p), o, L, group(X, p)), in_block(e, r, Gl, p));
  }
  z3::expr gathered = all_gather(e, n, Gl, p, [&](int r, const z3::expr& g) {
    return conv3(e, Cg, weight(wrong ? W : Ws[r], g), o, L, group(Xs[r], g));
  });
  return z3::implies(e.in_range(p, e.num(n) * Gl), gathered == conv3(e, Cg, weight(W, p), o, L, group(X, p)));
}

// Grouped-query attention over more ranks than KV heads (Megatron-LM,
// vLLM): G = n / m KV heads, each read by the m * Hl query heads of m
// ranks. Q [H, E] sharded on heads (H = n * Hl), K [G, T] held in G groups
// (S(0/G): the strategies' shard in groups), rank r holding KV head r / m,
// which each of its query heads reads (the local repeat_kv):
//   AllGather_0(f(Q_r[hl, i], K_r[0, j]))[g*m*Hl + q, i, j] = f(Q[g*m*Hl + q, i], K[g, j])
// for every KV head g and q in [0, m * Hl): global query head h reads KV
// head h / (m * Hl), as repeat_kv's Expand and Reshape have it.
// `wrong`: rank r given KV head r % G (the groups dealt out cyclically).
z3::expr grouped_kv_heads(Enc& e, int n, int m, bool wrong) {
  int G = n / m;
  z3::expr Hl = e.dim("Hl"), E = e.dim("E"), T = e.dim("T");
  z3::func_decl Q = e.tensor("Q", 2), K = e.tensor("K", 2);
  z3::func_decl f = e.real_fn("f", 2);
  auto Qs = blocks(e, Q, "Q", 0, n, Hl);
  auto Ks = blocks(e, K, "K", 0, G, e.num(1));
  z3::expr q = e.index("q"), i = e.index("i"), j = e.index("j");
  z3::expr claim = e.ctx().bool_val(true);
  for (int g = 0; g < G; ++g) {
    z3::expr p = g == 0 ? q : e.num(g * m) * Hl + q;
    z3::expr gathered = all_gather(e, n, Hl, p, [&](int r, const z3::expr& hl) {
      return f(Qs[static_cast<size_t>(r)](hl, i), Ks[static_cast<size_t>(wrong ? r % G : r / m)](e.num(0), j));
    });
    claim = claim && z3::implies(e.in_range(q, e.num(m) * Hl) && e.in_range(i, E) && e.in_range(j, T),
                                 gathered == f(Q(p, i), K(e.num(g), j)));
  }
  return claim;
}

z3::expr conv(Enc& e, int n, ConvShard how, bool wrong) {
  switch (how) {
    case ConvShard::kBatch: return conv_batch(e, n, wrong);
    case ConvShard::kOutChannels: return conv_out_channels(e, n, wrong);
    case ConvShard::kInChannels: return conv_in_channels(e, n, wrong);
    case ConvShard::kGroups: return conv_groups(e, n, wrong);
  }
  return e.ctx().bool_val(false);
}

}  // namespace

std::vector<Obligation> op_sharding_obligations() {
  std::vector<Obligation> v;
  add_per_rank_count(v, "shard-reshape-split-heads", 1, "AllGather_0(Reshape(X[block r], [Hl, D])) = Reshape(X, [H, D])",
                     [](Enc& e, int n) { return reshape_split(e, n, false); });
  add_per_rank_count(v, "shard-reshape-merge-heads", 1, "AllGather(Reshape(X[block r, :], [Hl*D])) = Reshape(X, [H*D])",
                     [](Enc& e, int n) { return reshape_merge(e, n, false); });
  add_per_rank_count(v, "shard-softmax-rows", 1, "AllGather_0(Softmax_1(X[block r, :])) = Softmax_1(X)",
                     [](Enc& e, int n) { return softmax(e, n, false); });
  add_per_rank_count(v, "shard-layer-norm-rows", 1, "AllGather_0(LayerNorm_1(X[block r, :])) = LayerNorm_1(X)",
                     [](Enc& e, int n) { return layer_norm(e, n, false); });
  add_per_rank_count(v, "shard-gather-vocab-parallel", 1,
                     "AllReduce(Where(mask_r, 0, Gather(W[block r, :], ids - r*S))) = Gather(W, ids)",
                     [](Enc& e, int n) { return gather_vocab(e, n, false); });
  add_per_rank_count(v, "shard-scatter-elements-rows", 1,
                     "AllGather_0(ScatterElements_1(X[block r, :], I[block r, :], U[block r, :])) = "
                     "ScatterElements_1(X, I, U), 2 updates a row",
                     [](Enc& e, int n) { return scatter_elements(e, n, false); });
  add_per_rank_count(v, "shard-grouped-kv-heads", 1,
                     "AllGather_0(f(Q[heads block r], K[KV head r / 2])) = f(Q, repeat_kv(K)), n / 2 KV heads "
                     "each held by 2 ranks",
                     [](Enc& e, int n) { return grouped_kv_heads(e, n, 2, false); });
  add_per_rank_count(v, "shard-conv-batch", 1, "AllGather_0(Conv(X[block r], W)) = Conv(X, W)",
                     [](Enc& e, int n) { return conv(e, n, ConvShard::kBatch, false); });
  add_per_rank_count(v, "shard-conv-out-channels", 1, "AllGather_0(Conv(X, W[block r]) + B[block r]) = Conv(X, W) + B",
                     [](Enc& e, int n) { return conv(e, n, ConvShard::kOutChannels, false); });
  add_per_rank_count(v, "shard-conv-in-channels", 1,
                     "AllReduce(Conv(X[block r], W[:, block r]) + (r == 0 ? B : 0)) = Conv(X, W) + B",
                     [](Enc& e, int n) { return conv(e, n, ConvShard::kInChannels, false); });
  add_per_rank_count(v, "shard-conv-groups", 1, "AllGather_0(GroupConv(X[groups r], W[groups r])) = GroupConv(X, W)",
                     [](Enc& e, int n) { return conv(e, n, ConvShard::kGroups, false); });
  return v;
}

std::vector<Obligation> wrong_op_sharding_obligations() {
  auto wrong = [](std::string name, std::string statement, std::function<z3::expr(Enc&)> claim) {
    return Obligation{{std::move(name), 1, "sharding", std::move(statement)}, std::move(claim)};
  };
  return {
      wrong("wrong-reshape-split-shard-minor", "Reshape(X[H*D] sharded, [H, D]) claimed sharded on dim 1",
            [](Enc& e) { return reshape_split(e, 2, true); }),
      wrong("wrong-reshape-merge-minor-shard", "Reshape(X[H, D] sharded on dim 1, [H*D]) claimed sharded on dim 0",
            [](Enc& e) { return reshape_merge(e, 2, true); }),
      wrong("wrong-softmax-reduced-axis", "AllGather_1(Softmax_1(X[:, block r])) = Softmax_1(X)",
            [](Enc& e) { return softmax(e, 2, true); }),
      wrong("wrong-layer-norm-reduced-axis", "AllGather_1(LayerNorm_1(X[:, block r])) = LayerNorm_1(X)",
            [](Enc& e) { return layer_norm(e, 2, true); }),
      wrong("wrong-gather-no-mask", "AllReduce(Gather(W[block r, :], clamp(ids - r*S))) = Gather(W, ids)",
            [](Enc& e) { return gather_vocab(e, 2, true); }),
      wrong("wrong-scatter-elements-written-axis-local-indices",
            "AllGather_0(ScatterElements_0(X[block r], I, U)) = ScatterElements_0(X, I, U), indices read as local",
            [](Enc& e) { return scatter_elements(e, 2, true); }),
      wrong("wrong-grouped-kv-heads-cyclic",
            "AllGather_0(f(Q[heads block r], K[KV head r % 2])) = f(Q, repeat_kv(K)) on 4 ranks: a rank given "
            "another group's KV head",
            [](Enc& e) { return grouped_kv_heads(e, 4, 2, true); }),
      wrong("wrong-conv-spatial-no-halo", "AllGather_1(Conv(X[:, block r], W)) = Conv(X, W) without halo",
            [](Enc& e) { return conv(e, 2, ConvShard::kBatch, true); }),
      wrong("wrong-conv-out-channels-bias-unsliced", "AllGather_0(Conv(X, W[block r]) + B[local]) = Conv(X, W) + B",
            [](Enc& e) { return conv(e, 2, ConvShard::kOutChannels, true); }),
      wrong("wrong-conv-in-channels-no-reduction", "Conv(X[block 0], W[:, block 0]) + B = Conv(X, W) + B",
            [](Enc& e) { return conv(e, 2, ConvShard::kInChannels, true); }),
      wrong("wrong-conv-groups-weight-unsliced", "AllGather_0(GroupConv(X[groups r], W[local groups])) = GroupConv(X, W)",
            [](Enc& e) { return conv(e, 2, ConvShard::kGroups, true); }),
  };
}

}  // namespace tessera::verifier::z3enc
