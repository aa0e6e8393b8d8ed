// Products of a few rows by a constant weight (a decode step's MatMuls: M =
// batch x new tokens, at most 8): y = a · W, W of shape [K, N]. Such a
// product does two flops per weight element and reads each element once, so
// its time is the time to stream W from memory. oneDNN 2.6's brgemm streams
// it at about half of this host's DRAM read bandwidth (a 1024x2816 f32
// weight: 12.8 GB/s of 29), so the weight is packed once, at plan compile,
// into column panels that one thread reads front to back: panel p holds
// columns [p·w, (p+1)·w) of every row, w = 16·V (V vectors of 16 floats),
// rows consecutive; bf16 weights interleave row pairs (k, k+1) per column,
// the operand order of AVX-512 BF16's dot product. Threads take contiguous
// runs of panels; each row of `a` is broadcast against the panel's vectors
// with the accumulators in registers.
#pragma once

#include <cstdint>
#include <memory>

#include "graph/tensor.h"

namespace tessera::runtime::cpu {

// The most rows the kernels take.
inline constexpr int64_t kSkinnyMaxRows = 8;

// Whether this host runs the kernels for weights of `dtype` (f32: AVX-512F;
// bf16: AVX-512 BF16, BW and VL).
bool skinny_supported(DType dtype);

class SkinnyWeights {
 public:
  // Packs W, element (k, n) at data + k·k_stride + n·n_stride (elements),
  // for products of `rows` rows. dtype: f32 or bf16.
  SkinnyWeights(DType dtype, const void* data, int64_t k, int64_t n, int64_t k_stride, int64_t n_stride,
                int64_t rows);
  // y[m, :] = a[m, :] · W (+ bias) for m < rows; `a` row-major [rows, K] of
  // the weight's dtype, `bias` [N] of it or null; y row-major [rows, N], f32
  // when `f32_out`, else the weight's dtype (rounded to nearest even).
  // `threads` OpenMP threads (1: the calling thread).
  void run(const void* a, const void* bias, void* y, bool f32_out, int threads) const;

  int64_t bytes() const { return bytes_; }
  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }

 private:
  DType dtype_;
  int64_t k_, n_, rows_, vectors_, panels_, panel_elems_;
  int64_t bytes_;
  std::unique_ptr<uint8_t, void (*)(void*)> packed_;
};

}  // namespace tessera::runtime::cpu
