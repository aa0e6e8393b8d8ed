// Proof obligations of conv-winograd (mutator/rules/winograd_rules.cc):
// Winograd F(m x m, 3 x 3) against the direct 3x3 convolution, over
// symbolic channels, image size, pads and tile counts.
//
// What is symbolic and what is fixed. Per output tile the rewrite is a
// fixed finite bilinear form, A^T [(G' g G'^T) . (B^T d B)] A / s^2 in the 9
// weights g and the (m+2)^2 inputs d of the tile, which must equal the
// correlation of d with g at each of the m^2 positions (r, c) of the tile:
// an identity over the reals in finitely many terms. Both sides are linear
// in g, so it is stated for each of the 9 unit weights (one tap 1, the
// others 0, in every channel); then it is linear in d, and the channel sum
// goes through it. Symbolic: the number of channels C (the batched MatMul
// sums U' V over them, the convolution sums over them: Sum over C, with the
// sum-scale and sum-linear instances that take the finite sums B^T d B out
// of it, so each claim is linear in the channel sums of single tile inputs,
// Sum_C d(i, j), which are independent values), the image H x W, the four
// pads, the output position and its tile, and the tile counts
// th = ceil(Ho / m), tw = ceil(Wo / m) with the end pads the rule gives the
// input transform (m * th + 2 - H - pad_top), whose output must have exactly
// th x tw tiles, of which the output's own must exist. Batch and output
// channel are free indices.
//
// The layout ops between the stages (channels read as batch, the Reshapes
// and Transposes that regroup (channel, batch, tile) axes) are modelled as
// the index maps they denote: the transformed tensors are indexed by
// (alpha, beta, channel, batch, tile). The final Reshape from [th, m] to
// th * m rows and the Slice to Ho are stated: output row py reads tile
// py / m at py % m.
//
// Floating-point rounding is not part of the obligation: the identity is
// over the reals; the applied form's folded U = G g G^T rounds to f32, which
// the plan check's tolerance covers.
#include <array>
#include <string>
#include <vector>

#include "verifier/winograd_form.h"
#include "verifier/z3_tensor.h"

namespace tessera::verifier::z3enc {
namespace {

using Form = WinogradForm;
using Matrix = std::vector<std::vector<int>>;

const Form& form(int m) { return winograd_form(m); }

using Fn = std::function<z3::expr(const z3::expr&)>;

// g_0 + (g_1 + (... + g_n)), with the sum-linear instances
// Sum(g_i + rest) = Sum(g_i) + Sum(rest) that take it out of a Sum over n.
Fn sum_of_terms(Enc& e, const z3::expr& n, const std::vector<Fn>& terms) {
  Fn tail = terms.back();
  for (size_t i = terms.size() - 1; i-- > 0;) {
    Fn head = terms[i];
    e.assume_linear(n, head, tail);
    tail = [head, tail](const z3::expr& k) { return head(k) + tail(k); };
  }
  return tail;
}

// The claim for form f at in-tile position (r, c) of every tile.
z3::expr winograd(Enc& e, const Form& f) {
  const int m = f.m, a = m + 2;
  z3::expr C = e.dim("C"), H = e.dim("H"), W = e.dim("W");
  z3::expr pt = e.param("pad_top"), pl = e.param("pad_left"), pb = e.param("pad_bottom"), pr = e.param("pad_right");
  z3::func_decl X = e.tensor("X", 4), bias = e.tensor("bias", 1);
  z3::expr b = e.index("b"), o = e.index("o"), ty = e.index("ty"), tx = e.index("tx");
  z3::expr M = e.num(m);
  z3::expr ho = H + pt + pb - 2, wo = W + pl + pr - 2;
  // The rule's preconditions: at least one whole tile each way.
  e.guard(ho >= M && wo >= M);
  // The rule's tile counts and the input transform's end pads.
  z3::expr th = (ho + e.num(m - 1)) / M, tw = (wo + e.num(m - 1)) / M;
  z3::expr end_h = M * th + 2 - H - pt, end_w = M * tw + 2 - W - pl;
  // The input transform: an (m+2) x (m+2) Conv with stride m over the
  // input padded by (pt, end_h) x (pl, end_w): th x tw tiles, none missing.
  z3::expr geometry = end_h >= 0 && end_w >= 0 && (H + pt + end_h - a) / M + 1 == th &&
                      (W + pl + end_w - a) / M + 1 == tw;

  // Tile (ty, tx)'s input d(i, j) in channel k, as the input transform reads
  // it: X is the padded input, uninterpreted. Both programs read it at the
  // same padded positions (`reads` below), zero outside [0, H) x [0, W) for
  // both; what only the Winograd tiles read (the last tiles' rows and columns
  // past Ho, Wo) cancels in the identity, whatever its value.
  auto tile = [&](const z3::expr& k, int i, int j) { return X(b, k, M * ty + i - pt, M * tx + j - pl); };
  // Both programs are linear in the weights g (U' = G' g G'^T is; the
  // direct convolution is), so the identity for all g is the identity for
  // each of the 9 unit weights (one tap 1, the others 0, in every channel):
  // then each claim is linear in the channel sums of the tile's inputs, and
  // Z3 decides it at once, where the bilinear form in symbolic g and d took
  // Z3 4.8.12 more than 100 s for F(4x4,3x3) (measured).
  auto U = [&](int tap, int al, int be) { return f.g[al][tap / 3] * f.g[be][tap % 3]; };
  // V(al, be) = (B^T d B)(al, be) at channel k, with the sum-scale and
  // sum-linear instances that take its finite sum out of the channel sum:
  // Sum_C V(al, be) = sum over (i, j) of B^T[al][i] B^T[be][j] Sum_C d(i, j).
  std::vector<std::vector<Fn>> V(static_cast<size_t>(a), std::vector<Fn>(static_cast<size_t>(a)));
  for (int al = 0; al < a; ++al)
    for (int be = 0; be < a; ++be) {
      std::vector<Fn> terms;
      for (int i = 0; i < a; ++i)
        for (int j = 0; j < a; ++j)
          if (int c = f.bt[al][i] * f.bt[be][j]) {
            Fn d = [&tile, i, j](const z3::expr& k) { return tile(k, i, j); };
            z3::expr coef = e.ctx().real_val(c);
            e.assume_scale(C, coef, d);
            terms.push_back([d, coef](const z3::expr& k) { return coef * d(k); });
          }
      V[al][be] = sum_of_terms(e, C, terms);
    }
  z3::expr inv = e.ctx().real_val(1) / e.ctx().real_val(f.s * f.s);

  z3::expr all = geometry;
  for (int tap = 0; tap < 9; ++tap)
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < m; ++c) {
        int y = tap / 3, x = tap % 3;
        z3::expr py = M * ty + r, px = M * tx + c;
        // The direct convolution with the unit weight: output (py, px) reads
        // the input at (py + y, px + x), the tile's input (r + y, c + x).
        z3::expr reads = py + y - pt == M * ty + (r + y) - pt && px + x - pl == M * tx + (c + x) - pl &&
                         r + y < a && c + x < a;
        z3::expr direct = e.sum(C, [&](const z3::expr& k) { return tile(k, r + y, c + x); });
        // The rewritten program: M(al, be) = Sum_C U' V (the batched MatMul;
        // U' a number here), then A^T M A / s^2 at (r, c).
        z3::expr rewritten = e.ctx().real_val(0);
        for (int al = 0; al < a; ++al)
          for (int be = 0; be < a; ++be)
            if (int coef = f.at[r][al] * f.at[c][be] * U(tap, al, be))
              rewritten = rewritten + e.ctx().real_val(coef) * inv * e.sum(C, V[al][be]);
        z3::expr in_output = e.in_range(py, ho) && e.in_range(px, wo) && ty >= 0 && tx >= 0;
        // Output row py is tile py / m at py % m (the Reshape and Slice), the
        // tile exists, and its value is the convolution's.
        z3::expr layout = py / M == ty && py % M == e.num(r) && px / M == tx && px % M == e.num(c) && ty < th &&
                          tx < tw && reads;
        all = all && z3::implies(in_output, layout && rewritten + bias(o) == direct + bias(o));
      }
  e.sums_as_atoms();
  return all;
}

}  // namespace

std::vector<Obligation> winograd_obligations() {
  return {
      {{"conv-winograd-f2", 1, "rule",
        "Conv3x3(X, g) = A^T[(G g G^T) . (B^T d B)]A per 2x2 output tile, F(2x2,3x3), symbolic channels, size, "
        "pads and tile counts"},
       [](Enc& e) { return winograd(e, form(2)); }},
      {{"conv-winograd-f4", 1, "rule",
        "Conv3x3(X, g) = A^T[(G g G^T) . (B^T d B)]A per 4x4 output tile, F(4x4,3x3), symbolic channels, size, "
        "pads and tile counts"},
       [](Enc& e) { return winograd(e, form(4)); }},
  };
}

std::vector<Obligation> wrong_winograd_obligations() {
  return {
      {{"wrong-winograd-g-entry", 1, "rule", "F(2x2,3x3) with G'[1][1] = 2 instead of 1", "conv-winograd-f2"},
       [](Enc& e) {
         Form f = form(2);
         f.g[1][1] = 2;
         return winograd(e, f);
       }},
      {{"wrong-winograd-a-entry", 1, "rule", "F(4x4,3x3) with A^T[1][3] = 3 instead of 2", "conv-winograd-f4"},
       [](Enc& e) {
         Form f = form(4);
         f.at[1][3] = 3;
         return winograd(e, f);
       }},
  };
}

}  // namespace tessera::verifier::z3enc
