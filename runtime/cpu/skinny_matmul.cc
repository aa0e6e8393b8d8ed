#include "runtime/cpu/skinny_matmul.h"
#include "runtime/thread_scope.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "graph/error.h"

namespace tessera::runtime::cpu {

namespace {

// CPUID leaf 7: subleaf 0 EBX bits 16 (AVX-512F), 30 (BW), 31 (VL);
// subleaf 1 EAX bit 5 (AVX-512 BF16). Read directly: clang's
// __builtin_cpu_supports (the sanitizer builds) does not know every name.
struct Features {
  bool f32 = false, bf16 = false;
};
Features features() {
  static const Features f = [] {
    Features r;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__builtin_cpu_supports("avx512f") || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return r;
    r.f32 = (b & (1u << 16)) != 0;
    bool bw_vl = (b & (1u << 30)) != 0 && (b & (1u << 31)) != 0;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) r.bf16 = r.f32 && bw_vl && (a & (1u << 5)) != 0;
    return r;
  }();
  return f;
}

constexpr size_t kHugePage = size_t{2} << 20;

// A mapping of `bytes` (rounded up to 4 KiB) in 2 MiB pages where the
// kernel gives them (transparent huge pages in madvise or always mode):
// 2 MiB-aligned, madvise(MADV_HUGEPAGE) before the first touch, zeros.
// With 4 KiB pages a stream takes a TLB miss every 64 lines (a two-level
// walk in a guest) and the hardware prefetcher stops at every page.
std::shared_ptr<uint8_t> huge_mapping(size_t bytes) {
  size_t len = (bytes + 4095) / 4096 * 4096, mapped = len + kHugePage;
  void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TESSERA_CHECK(m != MAP_FAILED, "out of memory: mapping " << bytes << " bytes of packed weights");
  auto* base = static_cast<uint8_t*>(m);
  // The 2 MiB-aligned start; the mapping's unused head and tail go back.
  auto* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + kHugePage - 1) / kHugePage * kHugePage);
  if (p > base) munmap(base, static_cast<size_t>(p - base));
  size_t tail = mapped - static_cast<size_t>(p - base) - len;
  if (tail > 0) munmap(p + len, tail);
  madvise(p, len, MADV_HUGEPAGE);  // a hint: without THP the pages stay 4 KiB
  return std::shared_ptr<uint8_t>(p, [len](uint8_t* q) { munmap(q, len); });
}

// Memory for packed weights, zeros, 64-byte aligned, in 2 MiB pages: a
// weight of 16 MiB or more gets its own mapping, rounded up to 2 MiB (at
// most 1/8 more); smaller ones are carved one after another from shared
// 64 MiB mappings, each kept while a weight in it lives, so that a 1 MiB
// weight does not take a 2 MiB page of its own nor stay in 4 KiB pages.
// bench_skinny bf16 2048x256 (1 MiB) at 1 thread: 0.49-0.65 of the DRAM
// read bandwidth in its own mapping (4 KiB pages), 1.0 carved.
std::shared_ptr<uint8_t> stream_buffer(int64_t bytes) {
  constexpr size_t kChunk = size_t{64} << 20, kOwn = size_t{16} << 20;
  size_t len = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  if (len >= kOwn) return huge_mapping((len + kHugePage - 1) / kHugePage * kHugePage);
  static std::mutex mu;
  static std::weak_ptr<uint8_t> chunk;
  static size_t used = 0;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<uint8_t> c = chunk.lock();
  if (!c || used + len > kChunk) {
    c = huge_mapping(kChunk);
    chunk = c;
    used = 0;
  }
  std::shared_ptr<uint8_t> p(c, c.get() + used);  // shares the chunk's ownership
  used += len;
  return p;
}

// The panel's width in columns for products of `rows` rows: the
// accumulators (rows x V vectors) stay within the 32 vector registers with
// room for the weight vectors and a broadcast row value.
int64_t vectors_for(int64_t rows) { return rows <= 3 ? 4 : 2; }

#define TESSERA_AVX512 __attribute__((target("avx512f")))
#define TESSERA_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// Stores 16 accumulated columns: + bias, then f32 or bf16.
TESSERA_AVX512_BF16 inline void store_bf16(uint16_t* y, __m512 v, __mmask16 mask) {
  _mm256_mask_storeu_epi16(y, mask, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}

TESSERA_AVX512_BF16 inline __m512 load_bf16(const uint16_t* p, __mmask16 mask) {
  // The zero-masked forms: GCC 12 warns of the unmasked ones' undefined
  // pass-through operand.
  __m256i h = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
}

// One f32 panel: y[m, c0 + j] for the panel's `cols` columns; row m of
// `a` at a + m·lda.
template <int M, int V>
TESSERA_AVX512 void panel_f32(const float* a, int64_t lda, int64_t k, const float* w, const float* bias, float* y,
                               int64_t n, int64_t cols) {
  __m512 acc[M][V];
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < V; ++j) acc[m][j] = _mm512_setzero_ps();
  constexpr int64_t kRow = 16 * V;
  for (int64_t r = 0; r < k; ++r) {
    const float* row = w + r * kRow;
    __m512 wv[V];
    for (int j = 0; j < V; ++j) wv[j] = _mm512_load_ps(row + 16 * j);
    for (int m = 0; m < M; ++m) {
      __m512 x = _mm512_set1_ps(a[m * lda + r]);
      for (int j = 0; j < V; ++j) acc[m][j] = _mm512_fmadd_ps(x, wv[j], acc[m][j]);
    }
  }
  for (int j = 0; j < V; ++j) {
    int64_t left = cols - 16 * j;
    if (left <= 0) break;
    __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + 16 * j) : _mm512_setzero_ps();
    for (int m = 0; m < M; ++m) _mm512_mask_storeu_ps(y + m * n + 16 * j, mask, _mm512_add_ps(acc[m][j], b));
  }
}

// One bf16 panel: rows interleaved in pairs, each 32-bit lane of a weight
// vector the column's (k, k+1) elements; `a`'s pair is broadcast against
// it (row m at a + m·lda, zero after its K elements).
template <int M, int V>
TESSERA_AVX512_BF16 void panel_bf16(const uint16_t* a, int64_t lda, int64_t k, const uint16_t* w,
                                    const uint16_t* bias, void* y, bool f32_out, int64_t n, int64_t cols) {
  __m512 acc[M][V];
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < V; ++j) acc[m][j] = _mm512_setzero_ps();
  constexpr int64_t kRow = 32 * V;  // one row pair
  for (int64_t r = 0; r < (k + 1) / 2; ++r) {
    const uint16_t* row = w + r * kRow;
    __m512i wv[V];
    for (int j = 0; j < V; ++j) wv[j] = _mm512_load_si512(row + 32 * j);
    for (int m = 0; m < M; ++m) {
      uint32_t pair;
      std::memcpy(&pair, a + m * lda + 2 * r, 4);
      __m512i x = _mm512_set1_epi32(static_cast<int>(pair));
      for (int j = 0; j < V; ++j)
        acc[m][j] = _mm512_dpbf16_ps(acc[m][j], reinterpret_cast<__m512bh>(x), reinterpret_cast<__m512bh>(wv[j]));
    }
  }
  for (int j = 0; j < V; ++j) {
    int64_t left = cols - 16 * j;
    if (left <= 0) break;
    __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    __m512 b = bias ? load_bf16(bias + 16 * j, mask) : _mm512_setzero_ps();
    for (int m = 0; m < M; ++m) {
      __m512 v = _mm512_add_ps(acc[m][j], b);
      if (f32_out) _mm512_mask_storeu_ps(static_cast<float*>(y) + m * n + 16 * j, mask, v);
      else store_bf16(static_cast<uint16_t*>(y) + m * n + 16 * j, v, mask);
    }
  }
}

// The bytes of weight a thread claims at a time: 2 threads on this host
// stream 30-35 GB/s together, so a chunk is 4-8 us of one thread's
// stream, about what a woken OpenMP worker is late by (pool_probe.h).
constexpr int64_t kChunkBytes = 128 << 10;

// Panel p's kernel call for M rows, V vectors.
template <int M, int V>
void run_panels(DType dtype, const void* a, int64_t lda, int64_t k, const uint8_t* packed, int64_t panel_bytes,
                const void* bias, void* y, bool f32_out, int64_t n, int64_t panels, int threads) {
  constexpr int64_t kWidth = 16 * V;
  auto panel = [&](int64_t p) {
    int64_t c0 = p * kWidth, cols = std::min(kWidth, n - c0);
    const uint8_t* w = packed + p * panel_bytes;
    if (dtype == DType::kF32) {
      panel_f32<M, V>(static_cast<const float*>(a), lda, k, reinterpret_cast<const float*>(w),
                      bias ? static_cast<const float*>(bias) + c0 : nullptr, static_cast<float*>(y) + c0, n, cols);
    } else {
      size_t out_elem = f32_out ? 4 : 2;
      panel_bf16<M, V>(static_cast<const uint16_t*>(a), lda, k, reinterpret_cast<const uint16_t*>(w),
                       bias ? static_cast<const uint16_t*>(bias) + c0 : nullptr,
                       static_cast<uint8_t*>(y) + c0 * static_cast<int64_t>(out_elem), f32_out, n, cols);
    }
  };
  if (threads <= 1 || panels <= 1) {
    for (int64_t p = 0; p < panels; ++p) panel(p);
    return;
  }
  // At least 4 chunks a thread, so that a late thread's run can be shared.
  int64_t chunk = std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(panel_bytes, 1));
  chunk = std::max<int64_t>(1, std::min(chunk, panels / (4 * int64_t{threads})));
  PanelQueue queue(panels, chunk, threads);
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num();
    for (int64_t begin = 0, end = 0; queue.next(t, &begin, &end);)
      for (int64_t p = begin; p < end; ++p) panel(p);
  }
}

using RunFn = void (*)(DType, const void*, int64_t, int64_t, const uint8_t*, int64_t, const void*, void*, bool, int64_t,
                       int64_t, int);

RunFn run_fn(int64_t rows) {
  switch (rows) {
    case 1: return run_panels<1, 4>;
    case 2: return run_panels<2, 4>;
    case 3: return run_panels<3, 4>;
    case 4: return run_panels<4, 2>;
    case 5: return run_panels<5, 2>;
    case 6: return run_panels<6, 2>;
    case 7: return run_panels<7, 2>;
    case 8: return run_panels<8, 2>;
    default: TESSERA_THROW(ErrorKind::kInternal, "skinny product of " << rows << " rows");
  }
}

}  // namespace

PanelQueue::PanelQueue(int64_t panels, int64_t chunk, int shares)
    : panels_(panels), chunk_(std::max<int64_t>(chunk, 1)), runs_(static_cast<size_t>(std::max(shares, 1))) {
  int64_t chunks = (panels_ + chunk_ - 1) / chunk_, n = static_cast<int64_t>(runs_.size());
  TESSERA_CHECK(chunks < (int64_t{1} << 32), "a skinny product of " << chunks << " chunks");
  for (int64_t s = 0; s < n; ++s) {
    auto front = static_cast<uint64_t>(s * chunks / n), back = static_cast<uint64_t>((s + 1) * chunks / n);
    runs_[s].range.store(back << 32 | front, std::memory_order_relaxed);
  }
}

bool PanelQueue::next(int t, int64_t* begin, int64_t* end) {
  size_t n = runs_.size();
  for (size_t i = 0; i < n; ++i) {
    std::atomic<uint64_t>& range = runs_[(static_cast<size_t>(t) + i) % n].range;
    uint64_t r = range.load(std::memory_order_relaxed);
    for (;;) {
      uint64_t front = r & 0xFFFFFFFFu, back = r >> 32;
      if (front >= back) break;
      // Its own run from the front, another's from the back.
      uint64_t taken = i == 0 ? front : back - 1;
      uint64_t left = i == 0 ? back << 32 | (front + 1) : (back - 1) << 32 | front;
      if (range.compare_exchange_weak(r, left, std::memory_order_relaxed)) {
        *begin = static_cast<int64_t>(taken) * chunk_;
        *end = std::min(panels_, *begin + chunk_);
        return true;
      }
    }
  }
  return false;
}

bool skinny_supported(DType dtype) {
  if (dtype == DType::kF32) return features().f32;
  if (dtype == DType::kBF16) return features().bf16;
  return false;
}

SkinnyWeights::SkinnyWeights(DType dtype, const void* data, int64_t k, int64_t n, int64_t k_stride, int64_t n_stride,
                             int64_t rows)
    : dtype_(dtype), k_(k), n_(n), rows_(rows) {
  TESSERA_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "skinny weights of " << dtype_name(dtype));
  TESSERA_CHECK(rows >= 1 && rows <= kSkinnyMaxRows, "skinny product of " << rows << " rows");
  vectors_ = vectors_for(rows);
  int64_t width = 16 * vectors_;
  panels_ = (n + width - 1) / width;
  // Rows padded to pairs for bf16.
  int64_t padded_k = dtype == DType::kBF16 ? (k + 1) / 2 * 2 : k;
  panel_elems_ = padded_k * width;
  int64_t elem = dtype_size(dtype);
  bytes_ = panels_ * panel_elems_ * elem;
  packed_ = stream_buffer(bytes_);  // zeros: the padding stays so
  if (dtype == DType::kF32) {
    const auto* src = static_cast<const float*>(data);
    auto* dst = reinterpret_cast<float*>(packed_.get());
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < panels_; ++p)
      for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < width && p * width + c < n; ++c)
          dst[p * panel_elems_ + r * width + c] = src[r * k_stride + (p * width + c) * n_stride];
  } else {
    const auto* src = static_cast<const uint16_t*>(data);
    auto* dst = reinterpret_cast<uint16_t*>(packed_.get());
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < panels_; ++p)
      for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < width && p * width + c < n; ++c)
          dst[p * panel_elems_ + (r / 2) * 2 * width + 2 * c + r % 2] = src[r * k_stride + (p * width + c) * n_stride];
  }
}

void SkinnyWeights::run(const void* a, const void* bias, void* y, bool f32_out, int threads) const {
  int64_t panel_bytes = panel_elems_ * static_cast<int64_t>(dtype_size(dtype_));
  // `a`'s rows copied 64 bytes further apart than whole lines (zeros
  // between: bf16's last pair for K odd), unless one f32 row: rows a
  // multiple of 4 KiB apart (K = 1024, 2048 f32) share L1 sets with the
  // weight stream. bench_skinny M=8 at 1 thread, 2048x2048 and 4096x4096:
  // f32 18.0 -> 20.2 GB/s, bf16 18.9 -> 21.7 (one 16-lane FMA a cycle
  // bounds them near 21).
  const void* a_rows = a;
  int64_t elem = dtype_size(dtype_), line = 64 / elem, lda = k_;
  if (rows_ > 1 || dtype_ == DType::kBF16) {
    lda = (k_ + line - 1) / line * line + line;
    if (lda * elem % 4096 == 0) lda += line;
    thread_local std::vector<uint8_t> rows;
    rows.resize(static_cast<size_t>(rows_ * lda * elem));
    for (int64_t m = 0; m < rows_; ++m) {
      uint8_t* dst = rows.data() + m * lda * elem;
      std::memcpy(dst, static_cast<const uint8_t*>(a) + m * k_ * elem, static_cast<size_t>(k_ * elem));
      std::memset(dst + k_ * elem, 0, static_cast<size_t>((lda - k_) * elem));
    }
    a_rows = rows.data();
  }
  run_fn(rows_)(dtype_, a_rows, lda, k_, packed_.get(), panel_bytes, bias, y, f32_out || dtype_ == DType::kF32, n_,
                panels_, std::max(threads, 1));
}

namespace {

TESSERA_AVX512 float sum_avx512(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

float sum_plain(const float* p, int64_t n) {
  float a[16] = {};
  for (int64_t i = 0; i < n; i += 16)
    for (int j = 0; j < 16; ++j) a[j] += p[i + j];
  float s = 0;
  for (float v : a) s += v;
  return s;
}

}  // namespace

int64_t last_level_cache_bytes() {
  // sysfs first: glibc's sysconf reads CPUID, which in this host's guest
  // reports 320 MiB of L3 for Zen 4's 32 MiB.
  int64_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 16; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int level = 0;
    std::string size;
    if (!(level_file >> level) || !(size_file >> size) || size.empty()) continue;
    int64_t bytes = std::atoll(size.c_str());
    if (size.back() == 'K') bytes <<= 10;
    if (size.back() == 'M') bytes <<= 20;
    if (level > best_level || (level == best_level && bytes > best)) best_level = level, best = bytes;
  }
  if (best > 0) return best;
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  long llc = l3 > 0 ? l3 : l2;
  return llc > 0 ? llc : int64_t{32} << 20;
}

DramReader::DramReader(int threads, int64_t bytes)
    : threads_(std::max(threads, 1)), bytes_(bytes) {
  if (bytes_ <= 0) bytes_ = std::max<int64_t>(int64_t{256} << 20, 8 * last_level_cache_bytes());
  bytes_ = (bytes_ + 4095) / 4096 * 4096;
  data_ = huge_mapping(static_cast<size_t>(bytes_));
  const int64_t n = bytes_ / 4;
  auto* d = reinterpret_cast<float*>(data_.get());
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t i = 0; i < n; ++i) d[i] = 1.0f;
}

double DramReader::pass() const {
  const int64_t n = bytes_ / 4;
  const auto* d = reinterpret_cast<const float*>(data_.get());
  bool avx512 = features().f32;
  float sum = 0;
  auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads_) reduction(+ : sum)
  {
    // Shares of whole 256-byte blocks, the last thread the rest.
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t per = n / nt / 64 * 64, len = t == nt - 1 ? n - t * per : per;
    sum += avx512 ? sum_avx512(d + t * per, len) : sum_plain(d + t * per, len);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The buffer holds ones: a wrong sum means a pass that did not read it.
  TESSERA_CHECK(sum > 0, "DRAM bandwidth pass summed " << sum);
  return static_cast<double>(bytes_) / s / 1e9;
}

DramBandwidth dram_read_bandwidth(int threads, int passes) {
  static std::mutex mu;
  static std::map<int, DramBandwidth> measured;
  std::lock_guard<std::mutex> lock(mu);
  auto it = measured.find(threads);
  if (it != measured.end()) return it->second;
  PinnedTeam pinned(threads);  // as a run binds its team
  DramReader reader(threads);
  reader.pass();  // the first pass maps pages
  std::vector<double> gbs;
  for (int i = 0; i < std::max(passes, 1); ++i) gbs.push_back(reader.pass());
  std::sort(gbs.begin(), gbs.end());
  return measured[threads] = {gbs[gbs.size() / 2], gbs.back()};
}

}  // namespace tessera::runtime::cpu
