// The GEMM traffic model that matrix multiplication and convolution kernels
// share. A tiled GEMM keeps a block of C (tile.m x tile.n) resident in a
// memory level while the matching rows of A and columns of B stream through
// it; the level outside therefore supplies A once per column block and B
// once per row block:
//
//   bytes(level i) = |A| * ceil(N / tile.n) + |B| * ceil(M / tile.m) + |C| * c_passes
//
// where the tile is the block held by the level just inside level i (the
// register tile for the fastest level). Larger tiles never move more bytes,
// and every level moves at least the compulsory |A| + |B| + |C|.
#pragma once

#include <cstdint>
#include <vector>

#include "cost/device_profile.h"

namespace tessera::cost {

struct GemmProblem {
  // Independent GEMMs of the same shape (batched matmul, convolution
  // groups). A B shared by every batch entry is folded into M by the caller.
  int64_t batch = 1;
  int64_t m = 1, n = 1, k = 1;
  int64_t a_bytes_per_elem = 4, b_bytes_per_elem = 4, c_bytes_per_elem = 4;
  // Distinct elements of A per GEMM when A is implicit: a convolution's
  // im2col matrix has m*k entries over an input of fewer elements, which a
  // cached tile reads once. -1: A is explicit (m*k).
  int64_t a_unique_elems = -1;

  int64_t a_elems() const { return a_unique_elems < 0 ? m * k : a_unique_elems; }
};

struct Tile {
  int64_t m = 1;
  int64_t n = 1;
  // K extent accumulated per pass over C: C is read and written once per
  // ceil(K / k) panels. 0: the whole K (C stays resident).
  int64_t k = 0;
};

// Bytes read out of each memory level; tiles[i] is the block held by the
// level just inside level i (tiles[0]: registers). Level 0 reads im2col A.
std::vector<double> gemm_level_bytes(const GemmProblem& p, const std::vector<Tile>& tiles);

// The block of C a level of `capacity_bytes` holds: the largest near-square
// block whose C fits in half the level (the other half streams A and B),
// clamped to the problem and at least `min_tile`.
Tile tile_for_capacity(const GemmProblem& p, int64_t capacity_bytes, const Tile& min_tile);

// The tiles a kernel on `device` uses: the register tile for level 0, then
// one per level from the capacity of the level inside it.
std::vector<Tile> gemm_tiles(const GemmProblem& p, const DeviceProfile& device);

// Share of the peak a GEMM of this shape can reach: register-tile padding of
// M and N, and the last partial wave of work items over `units` of the
// device's units (0: all of them; 1: a kernel that runs on one core).
double gemm_utilization(const GemmProblem& p, const DeviceProfile& device, const Tile& work_tile, int64_t units = 0);

}  // namespace tessera::cost
