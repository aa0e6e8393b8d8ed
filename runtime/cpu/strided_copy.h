// The CPU runtime's one copy loop: dst[i] = src[f(i)] for an affine f given
// as per-dim element strides and offsets. The movement kernels
// (native_kernels.cc) build theirs from the ops' dim maps; the collectives
// (runtime/collective_kernels.cc) build the permutations that put a tensor's
// blocks along an axis next to each other around a flat-block exchange.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/tensor.h"

namespace tessera::runtime::cpu {

// dst[i] = src[f(i)] over `shape`, with element strides (in elements of
// `elem` bytes) for each side. Dims of size 1 are dropped and dims that are
// contiguous on both sides merged; then the innermost dim is copied as one
// memcpy when both sides are contiguous there, a permutation whose source-
// contiguous dim is not the innermost one is copied in tiles of source rows
// by destination columns (reads and writes both touch whole cache lines; a
// source row shorter than a line takes in the dims the source continues
// along), and anything else element by element. OpenMP across the outer
// dims for large copies.
struct StridedCopy {
  Shape shape;
  std::vector<int64_t> dst_strides, src_strides;
  int64_t dst_offset = 0, src_offset = 0;
  int64_t elem = 4;

  void run(uint8_t* dst, const uint8_t* src) const;
};

// The row-major tensor of `shape` seen as [outer, n, block, inner] around
// `axis` (outer: the dims before it, block: shape[axis] / n, inner: the dims
// after it), reordered to [n, outer, block, inner]: block j along the axis
// becomes the j-th contiguous run. The collectives' pack (before a
// reduce-scatter or an all-to-all) and, with to_blocks = false, the inverse
// unpack (after an all-gather or an all-to-all). Requires shape[axis] % n == 0.
StridedCopy block_permutation(const Shape& shape, int64_t axis, int64_t n, int64_t elem, bool to_blocks);

// Whether block_permutation is the identity (every dim before `axis` is 1).
bool blocks_are_contiguous(const Shape& shape, int64_t axis);

}  // namespace tessera::runtime::cpu
