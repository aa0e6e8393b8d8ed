// Proof obligations of spatial sharding: a windowed op split into bands of
// output rows over the ranks, each rank computing its band from the input
// rows it holds plus the halo its neighbours send (mutator/sharding/spatial.h).
// They are "correction" obligations: a band run as a whole image is a
// partially equivalent mutant whose seam rows the halo corrects, and the
// claim is about one band [a, b) of any placement, whatever the rank count.
#include "verifier/z3_tensor.h"

namespace tessera::verifier::z3enc {
namespace {

// One spatial dim of a windowed op: kernel taps, stride, dilation, pad at the
// start. The geometry is the dim map's window read s·o + d·t - p (graph/ops/
// conv.cc); max pooling reads the same rows, only the reduction differs.
struct Window {
  int kernel, stride, dilation, pad;
};

// The halo formula: output rows [a, b) read input rows
//   [max(0, s·a - p), min(H, s·(b - 1) - p + d·(K - 1) + 1)),
// which a rank holds after the exchange (its own band plus what its
// neighbours send). The rank's buffer L is those rows of X (a view); its
// local op runs the same window over L with reads outside L as zero, at
// output rows o - a. Claim, for any band [a, b) of the output and any H, C:
//   Conv_local(L)[o - a] = Conv(X)[o]   for o in [a, b).
// `thin`: the buffer ends `thin` rows early (a halo one row too thin).
z3::expr spatial_halo(Enc& e, Window w, int thin) {
  e.sums_as_atoms();
  z3::expr H = e.dim("H"), C = e.dim("C"), a = e.param("a"), B = e.dim("B");
  z3::expr b = a + B;
  z3::expr s = e.num(w.stride), d = e.num(w.dilation), p = e.num(w.pad), K = e.num(w.kernel);
  // The band lies within the output: its last window fits the padded input.
  e.guard(s * (b - 1) + d * (K - 1) <= H + p + p - 1);
  z3::expr lo_raw = s * a - p, hi_raw = s * (b - 1) - p + d * (K - 1) + 1 - e.num(thin);
  z3::expr lo = z3::ite(lo_raw < 0, e.num(0), lo_raw), hi = z3::ite(hi_raw > H, H, hi_raw);
  z3::func_decl X = e.tensor("X", 2), W = e.tensor("W", 2);
  z3::func_decl L = e.view(
      X, "L", [&](const Enc::Index& i) { return Enc::Index{i[0], i[1] + lo}; },
      [&](const Enc::Index& i) { return e.in_range(i[1], hi - lo); });
  z3::expr o = e.index("o");
  auto term = [&e, w, s, d, p, o](const z3::func_decl& x, const z3::expr& shift, const z3::expr& len) {
    return [&e, w, s, d, p, o, x, shift, len](const z3::expr& k) {
      z3::expr c = k / w.kernel, t = k % w.kernel, pos = s * o - p + d * t - shift;
      return e.guarded(pos, len, x(c, pos));
    };
  };
  auto local = [&, f = term(L, lo, hi - lo)](const z3::expr& k) { return f(k) * W(k / w.kernel, k % w.kernel); };
  auto global = [&, f = term(X, e.num(0), H)](const z3::expr& k) { return f(k) * W(k / w.kernel, k % w.kernel); };
  z3::expr n = C * K;
  z3::expr in_band = o >= a && o < b;
  // The ext instance is stated where the window's last tap lies inside the
  // buffer (or the buffer runs to the image's end): always, for the
  // formula's rows, so the claim follows; for a halo too thin not at the
  // band's last row, where Z3 must then find the claim false itself.
  z3::expr inside = s * o - p + d * (K - 1) < hi || hi == H;
  e.assume_ext(n, local, global, in_band && inside);
  return z3::implies(in_band, e.sum(n, local) == e.sum(n, global));
}

// The windows proven: a 3x3 convolution, strided (ResNet's downsampling),
// dilated (CSRNet's back end), the 7x7 stride-2 stem, a 2x2 stride-2 pool.
// The mutator's halo formula is stated for any window; a window outside
// this list is covered by the plan's end-to-end check, as every plan is.
constexpr Window kWindows[] = {{3, 1, 1, 1}, {3, 2, 1, 1}, {3, 1, 2, 2}, {7, 2, 1, 3}, {2, 2, 1, 0}};

std::string window_name(Window w) {
  return "k" + std::to_string(w.kernel) + "-s" + std::to_string(w.stride) + "-d" + std::to_string(w.dilation) +
         "-p" + std::to_string(w.pad);
}

}  // namespace

std::vector<Obligation> spatial_obligations() {
  std::vector<Obligation> v;
  for (Window w : kWindows)
    v.push_back({{"spatial-halo-" + window_name(w), 1, "correction",
                  "a band [a, b) of Conv(X) (kernel " + std::to_string(w.kernel) + ", stride " +
                      std::to_string(w.stride) + ", dilation " + std::to_string(w.dilation) + ", pad " +
                      std::to_string(w.pad) + ") from X's rows [max(0, s*a - p), min(H, s*(b-1) - p + d*(K-1) + 1))"},
                 [w](Enc& e) { return spatial_halo(e, w, 0); }});
  return v;
}

std::vector<Obligation> wrong_spatial_obligations() {
  return {
      {{"wrong-spatial-halo-thin", 1, "correction",
        "a band of a 3x3 Conv from X's rows [a - 1, b): the halo from the next rank one row too thin",
        "spatial-halo-k3-s1-d1-p1"},
       [](Enc& e) { return spatial_halo(e, {3, 1, 1, 1}, 1); }},
      {{"wrong-spatial-halo-thin-strided", 1, "correction",
        "a band of the 7x7 stride-2 stem from one row fewer than the formula's", "spatial-halo-k7-s2-d1-p3"},
       [](Enc& e) { return spatial_halo(e, {7, 2, 1, 3}, 1); }},
  };
}

}  // namespace tessera::verifier::z3enc
