#include "graph/ops/dense_kernels.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tessera::ops {
namespace {

// Block sizes (elements): a kKc x nr panel of B stays in L1 while it meets
// every mr x kKc panel of the kMc-row block of A, which stays in L2.
// Measured on the 2-core dev machine (AVX-512 Xeon, AVX2 kernel), float
// 128x768x768: ~95 GFLOP/s on one thread, ~150 on two; the naive loop ~1.
constexpr int64_t kKc = 256;
constexpr int64_t kMc = 96;  // a multiple of every kernel's mr
constexpr int64_t kNc = 4096;
constexpr int kMaxTile = 16 * 16;
// Below this many multiply-adds a product runs on one thread: forking costs
// a few microseconds.
constexpr double kParallelMacs = 1 << 17;
// Narrower column blocks would repack A more often than they multiply it.
constexpr int64_t kMinColumns = 128;

// One register-blocked kernel: C[0:mr, 0:nr] += Ap * Bp over kc steps, with
// Ap packed as kc columns of mr values and Bp as kc rows of nr values.
template <class T>
using MicroFn = void (*)(int64_t kc, const T* ap, const T* bp, T* c, int64_t ldc);

template <class T>
struct Kernel {
  int mr, nr;
  MicroFn<T> fn;
};

// The accumulators live in registers (MR * NV vectors); the a*b products and
// sums stay separate operations, in p order.
template <class T, class V, int MR, int NV>
[[gnu::always_inline]] inline void micro_vector(int64_t kc, const T* ap, const T* bp, T* c, int64_t ldc) {
  constexpr int kW = sizeof(V) / sizeof(T);
  V acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) std::memcpy(&acc[r][v], c + r * ldc + v * kW, sizeof(V));
  for (int64_t p = 0; p < kc; ++p) {
    V b[NV];
    for (int v = 0; v < NV; ++v) std::memcpy(&b[v], bp + p * NV * kW + v * kW, sizeof(V));
    const T* a = ap + p * MR;
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = acc[r][v] + b[v] * a[r];
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) std::memcpy(c + r * ldc + v * kW, &acc[r][v], sizeof(V));
}

template <class T, int MR, int NR>
void micro_scalar(int64_t kc, const T* ap, const T* bp, T* c, int64_t ldc) {
  T acc[MR][NR];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) acc[r][j] = c[r * ldc + j];
  for (int64_t p = 0; p < kc; ++p)
    for (int r = 0; r < MR; ++r)
      for (int j = 0; j < NR; ++j) acc[r][j] = acc[r][j] + ap[p * MR + r] * bp[p * NR + j];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) c[r * ldc + j] = acc[r][j];
}

using F32x4 = float __attribute__((vector_size(16)));
using F64x2 = double __attribute__((vector_size(16)));

void micro_f32_sse(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc) {
  micro_vector<float, F32x4, 4, 2>(kc, ap, bp, c, ldc);
}
void micro_f64_sse(int64_t kc, const double* ap, const double* bp, double* c, int64_t ldc) {
  micro_vector<double, F64x2, 4, 2>(kc, ap, bp, c, ldc);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define TESSERA_HAVE_AVX2_KERNELS 1
using F32x8 = float __attribute__((vector_size(32)));
using F64x4 = double __attribute__((vector_size(32)));

// 6x2 accumulators + 2 B vectors + 1 broadcast fit the 16 ymm registers.
[[gnu::target("avx2")]] void micro_f32_avx2(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc) {
  micro_vector<float, F32x8, 6, 2>(kc, ap, bp, c, ldc);
}
[[gnu::target("avx2")]] void micro_f64_avx2(int64_t kc, const double* ap, const double* bp, double* c,
                                            int64_t ldc) {
  micro_vector<double, F64x4, 6, 2>(kc, ap, bp, c, ldc);
}

bool have_avx2() {
  static const bool kHave = __builtin_cpu_supports("avx2");
  return kHave;
}
#endif

template <class T>
Kernel<T> kernel_for() {
  if constexpr (std::is_same_v<T, float>) {
#ifdef TESSERA_HAVE_AVX2_KERNELS
    if (have_avx2()) return {6, 16, micro_f32_avx2};
#endif
    return {4, 8, micro_f32_sse};
  } else if constexpr (std::is_same_v<T, double>) {
#ifdef TESSERA_HAVE_AVX2_KERNELS
    if (have_avx2()) return {6, 8, micro_f64_avx2};
#endif
    return {4, 4, micro_f64_sse};
  } else {
    return {4, 4, micro_scalar<T, 4, 4>};
  }
}

// Packs A[i0 : i0+rows, p0 : p0+kc] as kc columns of mr values, zero-padded.
template <class T>
void pack_a(MatrixView<T> a, int64_t i0, int64_t rows, int64_t p0, int64_t kc, int mr, T* dst) {
  for (int64_t r = 0; r < mr; ++r) {
    if (r >= rows) {
      for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = T{};
      continue;
    }
    const T* src = a.data + (i0 + r) * a.row_stride + p0 * a.col_stride;
    for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = src[p * a.col_stride];
  }
}

// Packs B[p0 : p0+kc, j0 : j0+cols] as kc rows of nr values, zero-padded;
// reads along whichever of B's axes is contiguous.
template <class T>
void pack_b(MatrixView<T> b, int64_t p0, int64_t kc, int64_t j0, int64_t cols, int nr, T* dst) {
  const T* base = b.data + p0 * b.row_stride + j0 * b.col_stride;
  if (b.col_stride == 1 || b.row_stride != 1) {
    for (int64_t p = 0; p < kc; ++p) {
      const T* src = base + p * b.row_stride;
      for (int64_t j = 0; j < cols; ++j) dst[p * nr + j] = src[j * b.col_stride];
      for (int64_t j = cols; j < nr; ++j) dst[p * nr + j] = T{};
    }
  } else {
    for (int64_t j = 0; j < nr; ++j) {
      const T* src = base + j * b.col_stride;
      for (int64_t p = 0; p < kc; ++p) dst[p * nr + j] = j < cols ? src[p] : T{};
    }
  }
}

// One mr x nr tile of C; edge tiles go through a full-size scratch tile.
template <class T>
void run_tile(const Kernel<T>& ker, int64_t kc, const T* ap, const T* bp, T* c, int64_t ldc, int64_t rows,
              int64_t cols) {
  if (rows == ker.mr && cols == ker.nr) {
    ker.fn(kc, ap, bp, c, ldc);
    return;
  }
  T tile[kMaxTile] = {};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) tile[i * ker.nr + j] = c[i * ldc + j];
  ker.fn(kc, ap, bp, tile, ker.nr);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) c[i * ldc + j] = tile[i * ker.nr + j];
}

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// One thread's product, blocked as in GotoBLAS: p blocks outermost (in
// increasing order, which keeps each sum's order), then rows, then tiles.
template <class T>
void gemm_serial(const Kernel<T>& ker, int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T* c,
                 int64_t ldc) {
  const int mr = ker.mr, nr = ker.nr;
  thread_local std::vector<T> apack, bpack;
  const int64_t kc_max = std::min(k, kKc);
  apack.resize(static_cast<size_t>(kc_max * round_up(std::min(m, kMc), mr)));
  bpack.resize(static_cast<size_t>(kc_max * round_up(std::min(n, kNc), nr)));
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc), jpanels = (nc + nr - 1) / nr;
    for (int64_t pc = 0; pc < k; pc += kKc) {
      const int64_t kc = std::min(kKc, k - pc);
      for (int64_t jr = 0; jr < jpanels; ++jr)
        pack_b(b, pc, kc, jc + jr * nr, std::min<int64_t>(nr, nc - jr * nr), nr, bpack.data() + jr * nr * kc);
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic), ipanels = (mc + mr - 1) / mr;
        for (int64_t ir = 0; ir < ipanels; ++ir)
          pack_a(a, ic + ir * mr, std::min<int64_t>(mr, mc - ir * mr), pc, kc, mr, apack.data() + ir * mr * kc);
        for (int64_t jr = 0; jr < jpanels; ++jr)
          for (int64_t ir = 0; ir < ipanels; ++ir) {
            int64_t i0 = ic + ir * mr, j0 = jc + jr * nr;
            run_tile(ker, kc, apack.data() + ir * mr * kc, bpack.data() + jr * nr * kc, c + i0 * ldc + j0, ldc,
                     std::min<int64_t>(mr, m - i0), std::min<int64_t>(nr, n - j0));
          }
      }
    }
  }
}

}  // namespace

void for_each_product(int64_t count, double macs_each, const std::function<void(int64_t, bool)>& fn) {
  int threads = max_threads();
  if (threads > 1 && count >= threads && macs_each * static_cast<double>(count) >= kParallelMacs) {
#pragma omp parallel for schedule(dynamic)
    for (int64_t i = 0; i < count; ++i) fn(i, false);
    return;
  }
  for (int64_t i = 0; i < count; ++i) fn(i, true);
}

template <class T>
void gemm_accumulate(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T* c, int64_t ldc,
                     bool parallel) {
  if (m <= 0 || n <= 0 || k <= 0) return;
  const Kernel<T> ker = kernel_for<T>();
  int threads = parallel && static_cast<double>(m) * n * k >= kParallelMacs ? max_threads() : 1;
  if (threads == 1) {
    gemm_serial(ker, m, n, k, a, b, c, ldc);
    return;
  }
  // Independent blocks of C, a few per thread and handed out dynamically: a
  // thread that shares its core with another process takes fewer blocks, and
  // no barrier waits for it in between (the 2-core dev machine is shared).
  int64_t row_blocks = (m + kMc - 1) / kMc;
  int64_t col_blocks = std::max<int64_t>(1, std::min((n + kMinColumns - 1) / kMinColumns,
                                                     (4 * threads + row_blocks - 1) / row_blocks));
  int64_t cols = round_up((n + col_blocks - 1) / col_blocks, ker.nr);
  col_blocks = (n + cols - 1) / cols;
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(threads)
  for (int64_t rb = 0; rb < row_blocks; ++rb)
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      int64_t i0 = rb * kMc, j0 = cb * cols;
      MatrixView<T> as{a.data + i0 * a.row_stride, a.row_stride, a.col_stride};
      MatrixView<T> bs{b.data + j0 * b.col_stride, b.row_stride, b.col_stride};
      gemm_serial(ker, std::min(kMc, m - i0), std::min(cols, n - j0), k, as, bs, c + i0 * ldc + j0, ldc);
    }
}

#define TESSERA_INSTANTIATE(T)                                                                             \
  template void gemm_accumulate<T>(int64_t, int64_t, int64_t, MatrixView<T>, MatrixView<T>, T*, int64_t, \
                                   bool);
TESSERA_INSTANTIATE(float)
TESSERA_INSTANTIATE(double)
TESSERA_INSTANTIATE(Zp)
TESSERA_INSTANTIATE(int64_t)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::ops
