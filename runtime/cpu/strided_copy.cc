#include "runtime/cpu/strided_copy.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "graph/error.h"
#include "graph/permute.h"

namespace tessera::runtime::cpu {
namespace {

// A 16 x 16 tile of 4-byte elements transposed in registers: row b of the
// source (16 elements from in + b * stride) becomes column b of the output
// rows out[0..15]. The scalar tile loop reads and writes one element at a
// time: ConvNeXt-Tiny's NCHW <-> NHWC permutes (96-768 channels) took
// 0.24-0.40 ms each for 1.2 MB at two threads, 5.1 ms over the model
// against ONNX Runtime's 0.8.
__attribute__((target("avx512f"))) void transpose_tile16(const uint32_t* in, int64_t stride, uint32_t* const* out) {
  __m512 r[16], t[16];
  for (int b = 0; b < 16; ++b) r[b] = _mm512_loadu_ps(reinterpret_cast<const float*>(in + b * stride));
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
  }
  for (int a = 0; a < 16; ++a) _mm512_storeu_ps(reinterpret_cast<float*>(out[a]), r[a]);
}

bool avx512_tiles() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

// The loops of StridedCopy::run.
class CopyLoops {
 public:
  struct Dims {
    std::vector<int64_t> n, ds, ss;  // outermost first
    int64_t numel() const {
      int64_t t = 1;
      for (int64_t v : n) t *= v;
      return t;
    }
  };
  static constexpr int64_t kTile = 16;
  static constexpr int64_t kParallelElements = 32768;

  static Dims simplified(const StridedCopy& c) {
    Dims d;
    for (size_t i = 0; i < c.shape.size(); ++i) {
      if (c.shape[i] == 1) continue;
      if (!d.n.empty() && d.ds.back() == c.dst_strides[i] * c.shape[i] && d.ss.back() == c.src_strides[i] * c.shape[i]) {
        d.n.back() *= c.shape[i];
        d.ds.back() = c.dst_strides[i];
        d.ss.back() = c.src_strides[i];
        continue;
      }
      d.n.push_back(c.shape[i]);
      d.ds.push_back(c.dst_strides[i]);
      d.ss.push_back(c.src_strides[i]);
    }
    if (d.n.empty()) d = Dims{{1}, {1}, {1}};
    return d;
  }

  // Offsets of the multi-index over the dims `outer` (outermost first),
  // started at flat index `start` and advanced one step at a time.
  struct Odometer {
    const Dims& d;
    const std::vector<size_t>& outer;
    std::vector<int64_t> idx;
    int64_t doff = 0, soff = 0;
    Odometer(const Dims& dims, const std::vector<size_t>& axes, int64_t start)
        : d(dims), outer(axes), idx(axes.size(), 0) {
      for (size_t k = outer.size(); k-- > 0;) {
        size_t i = outer[k];
        idx[k] = start % d.n[i];
        start /= d.n[i];
        doff += idx[k] * d.ds[i];
        soff += idx[k] * d.ss[i];
      }
    }
    void next() {
      for (size_t k = outer.size(); k-- > 0;) {
        size_t i = outer[k];
        doff += d.ds[i];
        soff += d.ss[i];
        if (++idx[k] < d.n[i]) return;
        doff -= d.n[i] * d.ds[i];
        soff -= d.n[i] * d.ss[i];
        idx[k] = 0;
      }
    }
  };

  // body(odometer) for each of `count` steps, split in contiguous ranges
  // over the threads (each range walks its own odometer).
  template <typename Body>
  static void for_each_index(const Dims& d, const std::vector<size_t>& outer, int64_t count, bool parallel,
                             const Body& body) {
#pragma omp parallel if (parallel)
    {
      int64_t threads = omp_get_num_threads(), me = omp_get_thread_num();
      int64_t begin = count * me / threads, end = count * (me + 1) / threads;
      if (begin < end) {
        Odometer od(d, outer, begin);
        for (int64_t i = begin; i < end; ++i, od.next()) body(od);
      }
    }
  }

  template <typename T>
  static void copy(Dims d, uint8_t* dst8, const uint8_t* src8) {
    auto* dst = reinterpret_cast<T*>(dst8);
    const auto* src = reinterpret_cast<const T*>(src8);
    size_t r = d.n.size(), last = r - 1;
    int64_t inner = d.n[last], ds = d.ds[last], ss = d.ss[last];
    bool parallel = d.numel() > kParallelElements;
    // The dim the source is contiguous along, when it is not the innermost.
    size_t t = r;
    if (ds == 1 && ss != 1)
      for (size_t i = 0; i < last; ++i)
        if (d.ss[i] == 1) t = i;
    std::vector<size_t> outer;
    for (size_t i = 0; i < last; ++i)
      if (i != t) outer.push_back(i);
    if (t == r && ds == 1 && ss == 1 && parallel) {
      // Contiguous rows fewer than the threads (a Concat or Split along the
      // outermost axis is one row per piece once simplified): each row in
      // chunks, or one thread copies it all while the others wait (a 1x64x56x56
      // piece at two threads: 33 us against 25 on one).
      const int64_t rows = d.numel() / inner, threads = omp_get_max_threads();
      const int64_t split = std::min((threads + rows - 1) / rows, std::max<int64_t>(1, inner / kParallelElements));
      if (rows < threads && split > 1) {
        const int64_t chunk = (inner + split - 1) / split;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < rows * split; ++i) {
          Odometer o(d, outer, i / split);
          int64_t lo = (i % split) * chunk, hi = std::min(inner, lo + chunk);
          if (lo < hi) std::memcpy(dst + o.doff + lo, src + o.soff + lo, static_cast<size_t>(hi - lo) * sizeof(T));
        }
        return;
      }
    }
    if (t == r) {
      for_each_index(d, outer, d.numel() / inner, parallel, [&](const Odometer& o) {
        if (ds == 1 && ss == 1) {
          std::memcpy(dst + o.doff, src + o.soff, static_cast<size_t>(inner) * sizeof(T));
        } else {
          for (int64_t j = 0; j < inner; ++j) dst[o.doff + j * ds] = src[o.soff + j * ss];
        }
      });
      return;
    }
    // Tiled: rows of the source (copy_row: dim t, and where that is shorter
    // than a cache line the dim the source continues along, or part of it),
    // columns of the destination along the innermost dim. Winograd F(4,3)'s
    // output transform at 256 channels reads rows of 4 floats at 16 KB
    // strides: each source line was read four times, far apart, by 16 rows
    // that share one L1 set. As rows of 16 each line is read once. On a
    // 2-vCPU Zen 4 guest, alone: one thread 50 -> 40 us, two 26-48 -> 21-35;
    // in the program at two threads 50 -> 34 us, and in the guest's slow
    // state (memory-bound kernels at 2-5x their time) 186-410 -> 131-157 us.
    const int64_t total = d.numel();
    CopyRow row = copy_row({d.n.begin(), d.n.begin() + static_cast<std::ptrdiff_t>(last)},
                           {d.ss.begin(), d.ss.begin() + static_cast<std::ptrdiff_t>(last)}, t, sizeof(T));
    const int64_t nt = row.elements;
    std::vector<int64_t> row_ds;
    for (size_t i : row.dims) row_ds.push_back(d.ds[i]);
    // The outer dims: those the row does not take, and the rest of one it
    // takes part of.
    std::vector<size_t> outer_rows;
    for (size_t i : outer) {
      auto k = static_cast<size_t>(std::find(row.dims.begin(), row.dims.end(), i) - row.dims.begin());
      if (k < row.dims.size() && row.take[k] == d.n[i]) continue;
      if (k < row.dims.size()) {
        d.n[i] /= row.take[k];
        d.ds[i] *= row.take[k];
        d.ss[i] *= row.take[k];
      }
      outer_rows.push_back(i);
    }
    const bool vector_tiles = avx512_tiles();
    auto tiles = [&](const auto& dst_of) {
      for_each_index(d, outer_rows, total / (nt * inner), parallel, [&](const Odometer& o) {
        if (inner < kTile) {
          // A few destination columns (a Winograd tile's m outputs): one
          // contiguous read per column, the writes interleave in few lines.
          for (int64_t b = 0; b < inner; ++b) {
            T* out = dst + o.doff + b;
            const T* in = src + o.soff + b * ss;
            for (int64_t a = 0; a < nt; ++a) out[dst_of(a)] = in[a];
          }
          return;
        }
        for (int64_t a0 = 0; a0 < nt; a0 += kTile) {
          int64_t a1 = std::min(a0 + kTile, nt);
          for (int64_t b0 = 0; b0 < inner; b0 += kTile) {
            int64_t b1 = std::min(b0 + kTile, inner);
            if constexpr (sizeof(T) == 4) {
              if (vector_tiles && a1 - a0 == kTile && b1 - b0 == kTile) {
                uint32_t* rows[kTile];
                for (int64_t a = a0; a < a1; ++a)
                  rows[a - a0] = reinterpret_cast<uint32_t*>(dst + o.doff + dst_of(a) + b0);
                transpose_tile16(reinterpret_cast<const uint32_t*>(src + o.soff + a0 + b0 * ss), ss, rows);
                continue;
              }
            }
            for (int64_t a = a0; a < a1; ++a) {
              T* out = dst + o.doff + dst_of(a);
              const T* in = src + o.soff + a;
              for (int64_t b = b0; b < b1; ++b) out[b] = in[b * ss];
            }
          }
        }
      });
    };
    if (row.dims.size() == 1) {
      int64_t dt = row_ds[0];
      tiles([dt](int64_t a) { return a * dt; });
      return;
    }
    std::vector<int64_t> row_dst(static_cast<size_t>(nt));
    for (int64_t a = 0; a < nt; ++a) {
      int64_t rest = a, off = 0;
      for (size_t k = 0; k < row.dims.size(); ++k) {
        off += rest % row.take[k] * row_ds[k];
        rest /= row.take[k];
      }
      row_dst[static_cast<size_t>(a)] = off;
    }
    const int64_t* at = row_dst.data();
    tiles([at](int64_t a) { return at[a]; });
  }

  static void copy_bytes(const Dims& d, uint8_t* dst, const uint8_t* src, int64_t elem) {
    std::vector<size_t> outer;
    for (size_t i = 0; i < d.n.size(); ++i) outer.push_back(i);
    size_t e = static_cast<size_t>(elem);
    for_each_index(d, outer, d.numel(), d.numel() > kParallelElements, [&](const Odometer& o) {
      std::memcpy(dst + o.doff * elem, src + o.soff * elem, e);
    });
  }

};

}  // namespace

void StridedCopy::run(uint8_t* dst, const uint8_t* src) const {
  for (int64_t v : shape)
    if (v == 0) return;
  CopyLoops::Dims d = CopyLoops::simplified(*this);
  dst += dst_offset * elem;
  src += src_offset * elem;
  switch (elem) {
    case 1: return CopyLoops::copy<uint8_t>(d, dst, src);
    case 2: return CopyLoops::copy<uint16_t>(d, dst, src);
    case 4: return CopyLoops::copy<uint32_t>(d, dst, src);
    case 8: return CopyLoops::copy<uint64_t>(d, dst, src);
    default: return CopyLoops::copy_bytes(d, dst, src, elem);
  }
}

StridedCopy block_permutation(const Shape& shape, int64_t axis, int64_t n, int64_t elem, bool to_blocks) {
  TESSERA_CHECK(axis >= 0 && axis < static_cast<int64_t>(shape.size()) && n > 0 && shape[axis] % n == 0,
                "block_permutation of " << shape_str(shape) << " along " << axis << " into " << n << " blocks");
  int64_t outer = 1, inner = 1, block = shape[axis] / n;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  // Iterated over [outer, n, block, inner]; row-major strides of that view
  // and of the blocked [n, outer, block, inner] order.
  std::vector<int64_t> plain = {n * block * inner, block * inner, inner, 1};
  std::vector<int64_t> blocked = {block * inner, outer * block * inner, inner, 1};
  StridedCopy c;
  c.shape = {outer, n, block, inner};
  c.dst_strides = to_blocks ? blocked : plain;
  c.src_strides = to_blocks ? plain : blocked;
  c.elem = elem;
  return c;
}

bool blocks_are_contiguous(const Shape& shape, int64_t axis) {
  for (int64_t d = 0; d < axis; ++d)
    if (shape[d] != 1) return false;
  return true;
}

}  // namespace tessera::runtime::cpu
