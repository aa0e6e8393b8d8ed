#include "runtime/cpu/half_convert.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>

#include <cstring>

#include "graph/error.h"

namespace tessera::runtime::cpu {
namespace {

// Conversions of fewer elements than this run on the calling thread (a
// fork-join costs more than converting 64 KiB).
constexpr int64_t kConvertParallelMin = 1 << 15;

void widen_bf16(const uint16_t* s, float* d, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : n > kConvertParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(s[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    d[i] = f;
  }
}

// float_to_bf16 (graph/dtype.cc) in a form the compiler vectorizes.
void narrow_bf16(const float* s, uint16_t* d, int64_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : n > kConvertParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, &s[i], 4);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x40u;
    d[i] = static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

// F16C converts 8 values per instruction, IEEE round to nearest even, as
// float_to_half does; the tail and hosts without F16C use the scalar form.
// The vector code sits in its own target("f16c") function that takes
// pointers only: an OpenMP region is outlined into a function without the
// target attribute, and clang refuses __m256 values crossing into it.
__attribute__((target("avx2,f16c"))) void widen_f16_blocks(const uint16_t* s, float* d, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + b * 8));
    _mm256_storeu_ps(d + b * 8, _mm256_cvtph_ps(h));
  }
}

__attribute__((target("avx2,f16c"))) void narrow_f16_blocks(const float* s, uint16_t* d, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(s + b * 8), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + b * 8), h);
  }
}

// Splits [0, blocks) into one contiguous range per thread.
template <class Body>
void over_blocks(int64_t blocks, int64_t n, Body body) {
#pragma omp parallel if (n > kConvertParallelMin)
  {
    int threads = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t lo = blocks * t / threads, hi = blocks * (t + 1) / threads;
    if (hi > lo) body(lo, hi);
  }
}

void widen_f16_f16c(const uint16_t* s, float* d, int64_t n) {
  int64_t blocks = n / 8;
  over_blocks(blocks, n, [&](int64_t lo, int64_t hi) { widen_f16_blocks(s + lo * 8, d + lo * 8, hi - lo); });
  for (int64_t i = blocks * 8; i < n; ++i) d[i] = half_to_float(s[i]);
}

void narrow_f16_f16c(const float* s, uint16_t* d, int64_t n) {
  int64_t blocks = n / 8;
  over_blocks(blocks, n, [&](int64_t lo, int64_t hi) { narrow_f16_blocks(s + lo * 8, d + lo * 8, hi - lo); });
  for (int64_t i = blocks * 8; i < n; ++i) d[i] = float_to_half(s[i]);
}

// CPUID leaf 1, ECX bit 29: clang's __builtin_cpu_supports does not know
// "f16c" (the sanitizer builds use clang), so it is read directly.
bool has_f16c() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
  }();
  return yes;
}

class ConvertKernel : public Kernel {
 public:
  DType from = DType::kF32, to = DType::kF32;
  int64_t count = 0;
  void run(ExecContext& ctx) override {
    if (from == DType::kF32) narrow_from_f32(to, ctx.at<float>(inputs[0]), ctx.ptr[outputs[0]], count);
    else widen_to_f32(from, ctx.ptr[inputs[0]], ctx.at<float>(outputs[0]), count);
  }
  std::string impl() const override { return "native"; }
};

}  // namespace

void widen_to_f32(DType from, const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  if (from == DType::kBF16) {
    widen_bf16(s, dst, n);
  } else if (has_f16c()) {
    widen_f16_f16c(s, dst, n);
  } else {
    TESSERA_CHECK(from == DType::kF16, "widen_to_f32 of " << dtype_name(from));
#pragma omp parallel for schedule(static) if (n > kConvertParallelMin)
    for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(s[i]);
  }
}

void narrow_from_f32(DType to, const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  if (to == DType::kBF16) {
    narrow_bf16(src, d, n);
  } else if (has_f16c()) {
    narrow_f16_f16c(src, d, n);
  } else {
    TESSERA_CHECK(to == DType::kF16, "narrow_from_f32 to " << dtype_name(to));
#pragma omp parallel for schedule(static) if (n > kConvertParallelMin)
    for (int64_t i = 0; i < n; ++i) d[i] = float_to_half(src[i]);
  }
}

Tensor widen_tensor(const Tensor& t) {
  TESSERA_CHECK(is_float16(t.dtype()), "widen_tensor of " << dtype_name(t.dtype()));
  Tensor w(DType::kF32, t.shape());
  widen_to_f32(t.dtype(), t.data(), w.mutable_data_as<float>(), t.numel());
  return w;
}

std::unique_ptr<Kernel> make_convert_kernel(ValueId from, DType from_t, ValueId to, DType to_t, int64_t count) {
  TESSERA_CHECK((from_t == DType::kF32 && is_float16(to_t)) || (to_t == DType::kF32 && is_float16(from_t)),
                "convert kernel from " << dtype_name(from_t) << " to " << dtype_name(to_t));
  auto k = std::make_unique<ConvertKernel>();
  k->from = from_t;
  k->to = to_t;
  k->count = count;
  k->inputs = {from};
  k->outputs = {to};
  k->op = std::string("Convert ") + dtype_name(from_t) + "->" + dtype_name(to_t);
  return k;
}

}  // namespace tessera::runtime::cpu
