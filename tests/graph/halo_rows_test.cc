#include "graph/halo_rows.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace tessera {
namespace {

// A 1-D window op over integer rows: output row o is the sum of its taps'
// values times (t + 1), padding reading 0. Integers, so pieces compare exactly.
std::vector<int64_t> window_rows_apply(const WindowRows& w, const std::vector<int64_t>& in) {
  std::vector<int64_t> out(static_cast<size_t>(w.out_rows(static_cast<int64_t>(in.size()))));
  for (size_t o = 0; o < out.size(); ++o)
    for (int64_t t = 0; t < w.kernel; ++t) {
      int64_t r = w.stride * static_cast<int64_t>(o) - w.pad_begin + w.dilation * t;
      if (r >= 0 && r < static_cast<int64_t>(in.size())) out[o] += in[static_cast<size_t>(r)] * (t + 1);
    }
  return out;
}

// Output rows `out` computed as window_piece says, from source rows `src`.
std::vector<int64_t> window_piece_rows(const WindowRows& w, RowRange out, RowRange src, const std::vector<int64_t>& in) {
  WindowPiece p = window_piece(w, out, src);
  EXPECT_GE(p.pad_begin, 0);
  EXPECT_GE(p.pad_end, 0);
  std::vector<int64_t> slice(in.begin() + src.lo + p.slice.lo, in.begin() + src.lo + p.slice.hi);
  WindowRows pw = w;
  pw.pad_begin = p.pad_begin;
  pw.pad_end = p.pad_end;
  return window_rows_apply(pw, slice);
}

TEST(HaloRows, ThreeByThreeSeamBand) {
  WindowRows w{3, 1, 1, 0, 0};  // a seam band: no padding, one halo row each way
  HaloSplit s = split_halo_rows(w, {1, 4, 1});
  EXPECT_EQ(s.top, (RowRange{0, 1}));
  EXPECT_EQ(s.interior, (RowRange{1, 3}));
  EXPECT_EQ(s.bottom, (RowRange{3, 4}));
  EXPECT_EQ(w.reached({1, 3}), (RowRange{1, 5}));
}

TEST(HaloRows, FirstBandKeepsItsPaddingInTheInterior) {
  WindowRows w{3, 1, 1, 1, 0};  // the image's top edge: pad 1 above, a halo row below
  HaloSplit s = split_halo_rows(w, {0, 4, 1});
  EXPECT_TRUE(s.top.empty());
  EXPECT_EQ(s.interior, (RowRange{0, 3}));
  EXPECT_EQ(s.bottom, (RowRange{3, 4}));
  WindowPiece p = window_piece(w, s.interior, {0, 4});
  EXPECT_EQ(p.pad_begin, 1);
  EXPECT_EQ(p.slice, (RowRange{0, 4}));
  EXPECT_EQ(p.pad_end, 0);
}

TEST(HaloRows, DilatedWindowSkipsAHaloRowButTheInteriorStaysOneRange) {
  WindowRows w{3, 1, 2, 0, 0};  // taps r, r+2, r+4
  HaloSplit s = split_halo_rows(w, {2, 6, 2});
  // Rows 0 and 1 tap halo rows 0 and 1; row 2 taps 2, 4, 6 (own rows).
  EXPECT_EQ(s.top, (RowRange{0, 2}));
  EXPECT_EQ(s.bottom.hi, w.out_rows(10));
  for (int64_t o = s.interior.lo; o < s.interior.hi; ++o) {
    EXPECT_FALSE(w.taps_any(o, {0, 2})) << o;
    EXPECT_FALSE(w.taps_any(o, {8, 10})) << o;
  }
}

TEST(HaloRows, NotAWindowOrCeilModeHasNoRows) {
  Graph g;
  ValueId x = g.add_input("x", TensorType{DType::kF32, {1, 1, 8, 8}});
  Attrs relu;
  ValueId r = g.add(OpKind::kRelu, {x}, relu);
  EXPECT_FALSE(window_rows_of(g.node(g.value(r).producer), 2));
  Attrs pool;
  pool.set("kernel_shape", std::vector<int64_t>{3, 3});
  pool.set("strides", std::vector<int64_t>{2, 2});
  pool.set("pads", std::vector<int64_t>{1, 0, 0, 1});
  pool.set("dilations", std::vector<int64_t>{1, 1});
  pool.set("ceil_mode", int64_t{0});
  ValueId p = g.add(OpKind::kMaxPool, {x}, pool);
  std::optional<WindowRows> w = window_rows_of(g.node(g.value(p).producer), 2);
  ASSERT_TRUE(w);
  EXPECT_EQ(*w, (WindowRows{3, 2, 1, 1, 0}));
  std::optional<WindowRows> cols = window_rows_of(g.node(g.value(p).producer), 3);
  ASSERT_TRUE(cols);
  EXPECT_EQ(cols->pad_begin, 0);
  EXPECT_EQ(cols->pad_end, 1);
  EXPECT_FALSE(window_rows_of(g.node(g.value(p).producer), 4));
  pool.set("ceil_mode", int64_t{1});
  ValueId c = g.add(OpKind::kMaxPool, {x}, pool);
  EXPECT_FALSE(window_rows_of(g.node(g.value(c).producer), 2));
}

// Every band of every window: the split covers the output in order, the
// interior taps no halo row, the edges' bounds tap one, and each part
// computed from its piece equals those rows of the whole band's output.
TEST(HaloRows, PiecesEqualTheWholeBandForAnyStrideDilationPaddingAndBand) {
  std::mt19937 rng(43);
  int checked = 0;
  for (int64_t k = 1; k <= 4; ++k)
    for (int64_t s = 1; s <= 3; ++s)
      for (int64_t d = 1; d <= 3; ++d)
        for (int trial = 0; trial < 12; ++trial) {
          WindowRows w{k, s, d, static_cast<int64_t>(rng() % 3), static_cast<int64_t>(rng() % 3)};
          HaloBand b{static_cast<int64_t>(rng() % 4), 1 + static_cast<int64_t>(rng() % 13),
                     static_cast<int64_t>(rng() % 4)};
          std::vector<int64_t> in(static_cast<size_t>(b.total()));
          for (auto& v : in) v = static_cast<int64_t>(rng() % 97) + 1;
          std::vector<int64_t> whole = window_rows_apply(w, in);
          HaloSplit sp = split_halo_rows(w, b);
          ASSERT_EQ(sp.top.lo, 0);
          ASSERT_EQ(sp.top.hi, sp.interior.lo);
          ASSERT_EQ(sp.interior.hi, sp.bottom.lo);
          ASSERT_EQ(sp.bottom.hi, static_cast<int64_t>(whole.size()));
          RowRange above{0, b.before}, below{b.before + b.rows, b.total()};
          for (int64_t o = sp.interior.lo; o < sp.interior.hi; ++o) {
            ASSERT_FALSE(w.taps_any(o, above)) << o;
            ASSERT_FALSE(w.taps_any(o, below)) << o;
          }
          if (!sp.top.empty() && sp.top.hi < sp.bottom.hi) EXPECT_TRUE(w.taps_any(sp.top.hi - 1, above));
          if (!sp.bottom.empty() && sp.bottom.lo > sp.top.hi) EXPECT_TRUE(w.taps_any(sp.bottom.lo, below));
          RowRange all{0, b.total()}, own{b.before, b.before + b.rows};
          struct Part {
            RowRange out, src;
          };
          for (const Part& part : {Part{sp.top, all}, Part{sp.interior, own}, Part{sp.bottom, all}}) {
            if (part.out.empty()) continue;
            std::vector<int64_t> got = window_piece_rows(w, part.out, part.src, in);
            std::vector<int64_t> want(whole.begin() + part.out.lo, whole.begin() + part.out.hi);
            ASSERT_EQ(got, want) << "k" << k << " s" << s << " d" << d << " pads " << w.pad_begin << "/" << w.pad_end
                                 << " band " << b.before << "+" << b.rows << "+" << b.after << " rows "
                                 << str(part.out);
            ++checked;
          }
        }
  EXPECT_GT(checked, 500);
}

// Uneven bands of one image: each rank's rows, its halo taken from reached(),
// computed as a band equal the image's output rows.
TEST(HaloRows, UnevenBandsOfAnImageReassembleTheWholeOutput) {
  WindowRows w{3, 2, 2, 2, 2};
  std::vector<int64_t> image(23);
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<int64_t>(i * 7 % 11) + 1;
  std::vector<int64_t> whole = window_rows_apply(w, image);
  for (int64_t n : {2, 3, 5}) {
    std::vector<int64_t> joined;
    int64_t out = static_cast<int64_t>(whole.size());
    for (int64_t r = 0; r < n; ++r) {
      RowRange mine{out * r / n, out * (r + 1) / n};
      std::vector<int64_t> got = window_piece_rows(w, mine, {0, static_cast<int64_t>(image.size())}, image);
      joined.insert(joined.end(), got.begin(), got.end());
    }
    EXPECT_EQ(joined, whole) << n << " ranks";
  }
}

}  // namespace
}  // namespace tessera
