// The dense matrix product behind the reference MatMul, Gemm and Conv kernels,
// for every interpreter number type (float, double, Zp) and int64_t (integer
// MatMul). Cache-blocked and packed (GotoBLAS loop order), OpenMP-parallel over
// output tiles, with an AVX2 micro-kernel for float and double where the CPU
// has one.
//
// Each output sums its products in increasing p, starting from its current
// value, exactly as the naive loop `c = c + a*b` does: the blocking only
// changes when the partial sums are stored, not their order. Float results
// therefore equal the naive loop's as long as the compiler does not contract
// a*b+c into an FMA (GCC in ISO C++ mode does not), and Zp results are exact
// in any case.
#pragma once

#include <cstdint>
#include <functional>

#include "graph/zp.h"

namespace tessera::ops {

// A read-only matrix in any layout: element (i, j) is at
// data[i * row_stride + j * col_stride] (a transpose swaps the strides).
template <class T>
struct MatrixView {
  const T* data = nullptr;
  int64_t row_stride = 0, col_stride = 1;
};

// C[i, j] += sum over p < k of A[i, p] * B[p, j], for i < m and j < n, where
// C[i, j] is c[i * ldc + j]. `parallel` lets the call use OpenMP threads; pass
// false from inside a parallel loop.
template <class T>
void gemm_accumulate(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T* c, int64_t ldc,
                     bool parallel = true);

// Runs fn(i, inner_parallel) for i < count, independent products of about
// `macs_each` multiply-adds each: in parallel across i when there are enough
// of them to keep every thread busy (then inner_parallel is false), else one
// after the other with inner_parallel true, for fn to pass to gemm_accumulate.
void for_each_product(int64_t count, double macs_each, const std::function<void(int64_t, bool)>& fn);

}  // namespace tessera::ops
