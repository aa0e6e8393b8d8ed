// The runtime's copy loop against the definition dst[i] = src[f(i)], over
// permutations whose tiles take in several source dims (a row shorter than
// a cache line), element sizes 1 to 8 and 16, and both thread counts.
#include "runtime/cpu/strided_copy.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <numeric>
#include <random>

namespace tessera::runtime::cpu {
namespace {

std::vector<int64_t> row_major(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// Transpose of a row-major `in` by `perm`, as a StridedCopy.
StridedCopy transpose(const Shape& in, const std::vector<int64_t>& perm, int64_t elem) {
  std::vector<int64_t> is = row_major(in);
  StridedCopy c;
  for (int64_t p : perm) c.shape.push_back(in[static_cast<size_t>(p)]);
  c.dst_strides = row_major(c.shape);
  for (int64_t p : perm) c.src_strides.push_back(is[static_cast<size_t>(p)]);
  c.elem = elem;
  return c;
}

// The definition, one element at a time.
std::vector<uint8_t> by_definition(const StridedCopy& c, const std::vector<uint8_t>& src, size_t dst_bytes) {
  std::vector<uint8_t> dst(dst_bytes, 0);
  int64_t n = 1;
  for (int64_t v : c.shape) n *= v;
  std::vector<int64_t> idx(c.shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t d = c.dst_offset, s = c.src_offset;
    for (size_t i = 0; i < idx.size(); ++i) d += idx[i] * c.dst_strides[i], s += idx[i] * c.src_strides[i];
    std::copy_n(src.begin() + s * c.elem, c.elem, dst.begin() + d * c.elem);
    for (size_t i = idx.size(); i-- > 0;) {
      if (++idx[i] < c.shape[i]) break;
      idx[i] = 0;
    }
  }
  return dst;
}

void expect_copies(const StridedCopy& c, int threads) {
  int64_t n = c.elem;
  for (int64_t v : c.shape) n *= v;
  int64_t src_bytes = c.elem, dst_bytes = c.elem;
  for (size_t i = 0; i < c.shape.size(); ++i) {
    src_bytes += (c.shape[i] - 1) * c.src_strides[i] * c.elem;
    dst_bytes += (c.shape[i] - 1) * c.dst_strides[i] * c.elem;
  }
  src_bytes += c.src_offset * c.elem;
  dst_bytes += c.dst_offset * c.elem;
  std::vector<uint8_t> src(static_cast<size_t>(src_bytes));
  std::mt19937 rng(7);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> want = by_definition(c, src, static_cast<size_t>(dst_bytes));
  std::vector<uint8_t> got(static_cast<size_t>(dst_bytes), 0);
  int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  c.run(got.data(), src.data());
  omp_set_num_threads(before);
  ASSERT_EQ(got, want) << "shape " << shape_str(c.shape) << ", elem " << c.elem << ", " << threads << " threads";
}

TEST(StridedCopy, WinogradOutputTransforms) {
  // [m, m, co, batch, th, tw] -> [batch, co, th, m, tw, m]: F(4,3) at 256
  // channels, 16 x 16 outputs (rows of 4 along tw take in th), and F(2,3)
  // at 64 channels, 56 x 56 (rows of 28 along tw, a line already).
  for (int threads : {1, 2}) {
    expect_copies(transpose({4, 4, 256, 1, 4, 4}, {3, 2, 4, 0, 5, 1}, 4), threads);
    expect_copies(transpose({2, 2, 64, 1, 28, 28}, {3, 2, 4, 0, 5, 1}, 4), threads);
    expect_copies(transpose({4, 4, 8, 2, 3, 2}, {3, 2, 4, 0, 5, 1}, 4), threads);
  }
}

// ConvNeXt's permutes between channels-first and channels-last, whole 16 x
// 16 tiles of 4-byte elements (transposed in registers on an AVX-512 host)
// and the partial tiles at their edges (channels and pixels not multiples of
// 16), at 1 and 2 threads.
TEST(StridedCopy, ChannelsLastPermutesInWholeAndPartialTiles) {
  for (int threads : {1, 2}) {
    expect_copies(transpose({1, 96, 56, 56}, {0, 2, 3, 1}, 4), threads);
    expect_copies(transpose({1, 56, 56, 96}, {0, 3, 1, 2}, 4), threads);
    expect_copies(transpose({1, 40, 7, 9}, {0, 2, 3, 1}, 4), threads);
    expect_copies(transpose({2, 33, 17, 5}, {0, 3, 1, 2}, 4), threads);
  }
}

TEST(StridedCopy, RowsGrowToALineWithinTheirLimit) {
  // The source continues along a dim of 20000 after a row of 3: the row
  // takes 8 of it (a split of the dim); along 10007, a prime, it would have
  // to take all, past the limit: the row stays 3.
  expect_copies(transpose({2, 20000, 3}, {2, 1, 0}, 4), 2);
  expect_copies(transpose({2, 10007, 3}, {2, 1, 0}, 4), 2);
  // Rows of 5 one-byte elements take in three dims of 2 (to 40 elements)
  // and stop at the innermost dim, which the tiles keep as columns.
  expect_copies(transpose({3, 2, 2, 2, 2, 5}, {0, 5, 4, 3, 2, 1}, 1), 1);
}

TEST(StridedCopy, RandomPermutationsMatchTheDefinition) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    size_t rank = 2 + rng() % 5;
    Shape s;
    for (size_t i = 0; i < rank; ++i) {
      int64_t pick = static_cast<int64_t>(rng() % 10);
      s.push_back(pick < 6 ? 1 + pick : pick == 9 ? 17 + static_cast<int64_t>(rng() % 20) : 3);
    }
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    int64_t elem = std::vector<int64_t>{1, 2, 4, 8, 16}[rng() % 5];
    expect_copies(transpose(s, perm, elem), 1 + static_cast<int>(rng() % 2));
  }
}

TEST(StridedCopy, FewLongContiguousRowsSplitOverTheThreads) {
  // A Concat piece along the outermost axis (one contiguous row once the
  // dims merge, 200704 elements, into the second half of the output), and
  // two rows of a prime length into every other row of the output: each row
  // in chunks over the threads, the last one shorter.
  StridedCopy piece;
  piece.shape = {1, 64, 56, 56};
  piece.src_strides = {200704, 3136, 56, 1};
  piece.dst_strides = {200704, 3136, 56, 1};
  piece.dst_offset = 200704;
  piece.elem = 4;
  StridedCopy rows;
  rows.shape = {2, 70001};
  rows.src_strides = {70001, 1};
  rows.dst_strides = {140002, 1};
  rows.dst_offset = 70001;
  for (int threads : {1, 2, 3, 4}) {
    expect_copies(piece, threads);
    for (int64_t elem : {1, 2, 4}) {
      rows.elem = elem;
      expect_copies(rows, threads);
    }
  }
}

TEST(StridedCopy, SlicedSourceAndOffsetDestination) {
  // Every other row of a [6, 10] source's columns 1..8, transposed into a
  // destination at an offset: strides that are not a row-major tensor's.
  StridedCopy c;
  c.shape = {8, 3};
  c.src_strides = {1, 20};
  c.src_offset = 1;
  c.dst_strides = {3, 1};
  c.dst_offset = 5;
  for (int64_t elem : {1, 4, 8}) {
    c.elem = elem;
    expect_copies(c, 1);
  }
}

}  // namespace
}  // namespace tessera::runtime::cpu
