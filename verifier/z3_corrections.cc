// Proof obligations of the correction boxes of partially equivalent mutants:
// outside the boxes the mutant is exact.
#include "verifier/z3_tensor.h"

namespace tessera::verifier::z3enc {
namespace {

// Batching two images along H: Conv(Concat(X0, X1, H)) equals the separate
// convolutions except on rows [H - 1, H + 1), the correction box. The claimed
// box starts at H - 1 + box_shrink (0 is right; 1 is the wrong mutant).
z3::expr batch_along_h(Enc& e, int box_shrink) {
  z3::expr C = e.dim("C"), H = e.dim("H");
  z3::func_decl X0 = e.tensor("X0", 2), X1 = e.tensor("X1", 2), W = e.tensor("W", 3);
  z3::expr m = e.index("m"), o = e.index("o");
  auto w = [&](const z3::expr& c, const z3::expr& k) { return W(m, c, k); };
  auto stacked = [&](const z3::expr& c, const z3::expr& h) { return z3::ite(h < H, X0(c, h), X1(c, h - H)); };
  z3::expr big = conv3(e, C, w, o, H + H, stacked);
  z3::expr box_lo = H - 1 + e.num(box_shrink);
  z3::expr sep0 = conv3(e, C, w, o, H, [&](const z3::expr& c, const z3::expr& h) { return X0(c, h); });
  z3::expr sep1 = conv3(e, C, w, o - H, H, [&](const z3::expr& c, const z3::expr& h) { return X1(c, h); });
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
  z3::expr plain = conv3(
      e, C, [&](const z3::expr& c, const z3::expr& k) { return W(m, c, k); }, q, padded_len / 2, phase);
  return z3::implies((ph == 0 || ph == 1) && o >= 0 && o < L, dilated == plain);
}

}  // namespace

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

std::vector<Obligation> wrong_correction_obligations() {
  return {
      {{"wrong-correction-box", 1, "correction", "batch along H with correction rows [H, H+1) only"},
       [](Enc& e) { return batch_along_h(e, 1); }},
      {{"wrong-dilation-phase", 1, "correction", "DilatedConv_2(X)[2q+ph] = Conv(X[(1-ph)::2])[q]"},
       [](Enc& e) { return dilation_phases(e, false, true); }},
  };
}

}  // namespace tessera::verifier::z3enc
