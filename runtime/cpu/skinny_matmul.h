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
// with the accumulators in registers. The packed weights lie in 2 MiB pages
// (transparent huge pages, madvised), small ones side by side in shared
// mappings: with 4 KiB pages one row streamed at 0.38-0.84 of one core's
// DRAM read bandwidth (a TLB walk every 4 KiB; the hardware prefetcher
// stops at each page), in 2 MiB pages at 0.96-1.03 with no software
// prefetch (which then cost 2-8 %) (docs/performance.md, bench_skinny).
// Products of 8 rows do 8 multiply-adds per weight element: one core's
// FMA unit (one 16-lane FMA a cycle on Zen 4) then streams about 20-26
// GB/s, under one core's 30 GB/s here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

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
  // The bytes of W a run reads: K x N elements.
  int64_t weight_bytes() const { return k_ * n_ * static_cast<int64_t>(dtype_size(dtype_)); }
  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }

 private:
  DType dtype_;
  int64_t k_, n_, rows_, vectors_, panels_, panel_elems_;
  int64_t bytes_;
  std::shared_ptr<uint8_t> packed_;  // stream_buffer()
};

// How SkinnyWeights::run hands its column panels to threads: the panels in
// chunks, the chunks in `shares` contiguous runs, one a thread; a thread
// takes its own run's chunks front to back, then the others' from their
// back ends, so that their owners' streams (and the hardware prefetcher
// running ahead of them) go on undisturbed. When every thread starts on
// time each streams its own run, as a static split; a thread that starts
// late (an OpenMP worker woken from sleep, or preempted by another process
// on a shared core) leaves its run to the others instead of the whole
// product waiting on it. Lock-free; thread-safe.
class PanelQueue {
 public:
  PanelQueue(int64_t panels, int64_t chunk, int shares);
  // The next chunk for thread `t` (any t >= 0: taken modulo the shares):
  // panels [*begin, *end). False when every chunk is taken.
  bool next(int t, int64_t* begin, int64_t* end);

 private:
  // A run's chunks not yet taken, [front, back): front in the low 32 bits,
  // back in the high 32, changed together by compare-and-swap.
  struct alignas(64) Run {
    std::atomic<uint64_t> range{0};
  };
  int64_t panels_, chunk_;
  std::vector<Run> runs_;
};

// This host's DRAM read bandwidth, the bound the kernels are held to:
// `threads` OpenMP threads each sum a contiguous share of a buffer with
// 64-byte loads (AVX-512 where the host has it), the buffer 8 times the
// last-level cache (at least 256 MiB) so that a pass reads it from DRAM.
class DramReader {
 public:
  explicit DramReader(int threads, int64_t bytes = 0);
  // GB/s of one pass over the buffer.
  double pass() const;
  int64_t bytes() const { return bytes_; }

 private:
  int threads_;
  int64_t bytes_;
  std::shared_ptr<uint8_t> data_;  // stream_buffer()
};

// `passes` DramReader passes at `threads` threads, measured once per thread
// count in a process (--profile's reference figure): their median, the
// figure a kernel's median run is held against (on shared cores a pass and
// a run see the same spread of load), and their best (what the memory
// gives when another process's load lowers nothing).
struct DramBandwidth {
  double median_gbs = 0;
  double best_gbs = 0;
};
constexpr int kDramPasses = 9;
DramBandwidth dram_read_bandwidth(int threads, int passes = kDramPasses);

// The last-level cache's size in bytes (sysfs, else sysconf; 32 MiB where
// neither says).
int64_t last_level_cache_bytes();

}  // namespace tessera::runtime::cpu
