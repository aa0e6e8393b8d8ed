// The CUDA backend's own kernels. Each evaluates a descriptor of
// device_desc.h with the functions the host tests also run; only the
// parallel decomposition (grid-stride loops, warp and block reductions)
// lives here.
#include "runtime/cuda/kernels.h"

namespace tessera::runtime::cuda {
namespace {

__global__ void ew_kernel(EwProgram p, EwInputs in, void* out) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < p.numel;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_elem(p.out_elem, out, o, ew_eval(p, in.p, o));
}

template <class T>
__global__ void copy_kernel(CopyDesc d, const T* src, T* dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < d.numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t s, t;
    copy_offsets(d, i, s, t);
    dst[t] = src[s];
  }
}

__global__ void fill_kernel(void* dst, int64_t n, Elem e, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_elem(e, dst, i, value);
}

__device__ float combine(ReduceCode code, float acc, float x) {
  switch (code) {
    case ReduceCode::kMax: return (f_isnan(x) || x > acc) ? x : acc;
    case ReduceCode::kMin: return (f_isnan(x) || x < acc) ? x : acc;
    case ReduceCode::kProd: return acc * x;
    default: return acc + x;  // partial sums (of squares, for L2 and SumSquare)
  }
}

// One warp per output element: lanes stride over the reduced elements,
// then combine by shuffles.
__global__ void reduce_kernel(ReduceDesc d, const void* in, void* out) {
  int lane = threadIdx.x & 31;
  int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t o = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; o < d.out_numel; o += warps) {
    int64_t base = 0, t = o;
    for (int k = d.out_rank - 1; k >= 0; --k) {
      base += (t % d.out_shape[k]) * d.out_strides[k];
      t /= d.out_shape[k];
    }
    float acc = d.code == ReduceCode::kProd ? 1.0f
                : d.code == ReduceCode::kMax ? -INFINITY
                : d.code == ReduceCode::kMin ? INFINITY
                                             : 0.0f;
    for (int64_t j = lane; j < d.red_numel; j += 32) {
      int64_t off = base, r = j;
      for (int k = d.red_rank - 1; k >= 0; --k) {
        off += (r % d.red_shape[k]) * d.red_strides[k];
        r /= d.red_shape[k];
      }
      float x = load_elem(d.elem, in, off);
      if (d.code == ReduceCode::kL2 || d.code == ReduceCode::kSumSquare) x *= x;
      acc = combine(d.code, acc, x);
    }
    for (int s = 16; s > 0; s >>= 1) acc = combine(d.code, acc, __shfl_down_sync(0xffffffffu, acc, s));
    if (lane == 0) {
      if (d.code == ReduceCode::kMean) acc /= static_cast<float>(d.red_numel);
      if (d.code == ReduceCode::kL2) acc = sqrtf(acc);
      store_elem(d.elem, out, o, acc);
    }
  }
}

template <class T>
__global__ void gather_kernel(GatherDesc d, const T* data, const void* indices, T* out) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < d.numel;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t s = gather_source(d, indices, o);
    out[o] = s < 0 ? T{} : data[s];
  }
}

__device__ float block_sum(float v, float* shared) {
  for (int s = 16; s > 0; s >>= 1) v += __shfl_down_sync(0xffffffffu, v, s);
  int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += shared[w];
    shared[32] = total;
  }
  __syncthreads();
  total = shared[32];
  __syncthreads();
  return total;
}

// One block per row; the two-pass formula of layer_norm_row.
__global__ void layer_norm_kernel(LayerNormDesc d, const void* x, const void* scale, const void* bias, void* y,
                                  void* mean_out, void* inv_out) {
  __shared__ float shared[33];
  for (int64_t row = blockIdx.x; row < d.rows; row += gridDim.x) {
    int64_t base = row * d.cols;
    float s = 0;
    for (int64_t j = threadIdx.x; j < d.cols; j += blockDim.x) s += load_elem(d.elem, x, base + j);
    float mean = block_sum(s, shared) / static_cast<float>(d.cols);
    float v = 0;
    for (int64_t j = threadIdx.x; j < d.cols; j += blockDim.x) {
      float t = load_elem(d.elem, x, base + j) - mean;
      v += t * t;
    }
    float inv = 1.0f / sqrtf(block_sum(v, shared) / static_cast<float>(d.cols) + d.epsilon);
    for (int64_t j = threadIdx.x; j < d.cols; j += blockDim.x) {
      float r = (load_elem(d.elem, x, base + j) - mean) * inv * load_elem(d.elem, scale, j);
      if (d.has_bias) r += load_elem(d.elem, bias, j);
      store_elem(d.elem, y, base + j, r);
    }
    if (threadIdx.x == 0) {
      if (mean_out) store_elem(d.stat_elem, mean_out, row, mean);
      if (inv_out) store_elem(d.stat_elem, inv_out, row, inv);
    }
  }
}

}  // namespace

void launch_ew(const EwProgram& p, const EwInputs& in, void* out, cudaStream_t stream) {
  if (p.numel == 0) return;
  Launch1d l = launch_1d(p.numel);
  ew_kernel<<<l.blocks, l.threads, 0, stream>>>(p, in, out);
}

void launch_copy(const CopyDesc& d, const void* src, void* dst, cudaStream_t stream) {
  if (d.numel == 0) return;
  Launch1d l = launch_1d(d.numel);
  switch (d.elem_bytes) {
    case 1: copy_kernel<<<l.blocks, l.threads, 0, stream>>>(d, static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst)); break;
    case 2: copy_kernel<<<l.blocks, l.threads, 0, stream>>>(d, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst)); break;
    case 4: copy_kernel<<<l.blocks, l.threads, 0, stream>>>(d, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst)); break;
    default: copy_kernel<<<l.blocks, l.threads, 0, stream>>>(d, static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst));
  }
}

void launch_fill(void* dst, int64_t n, Elem e, float value, cudaStream_t stream) {
  if (n == 0) return;
  Launch1d l = launch_1d(n);
  fill_kernel<<<l.blocks, l.threads, 0, stream>>>(dst, n, e, value);
}

void launch_reduce(const ReduceDesc& d, const void* in, void* out, cudaStream_t stream) {
  if (d.out_numel == 0) return;
  Launch1d l = launch_1d(d.out_numel * 32);
  reduce_kernel<<<l.blocks, l.threads, 0, stream>>>(d, in, out);
}

void launch_gather(const GatherDesc& d, const void* data, const void* indices, void* out, cudaStream_t stream) {
  if (d.numel == 0) return;
  Launch1d l = launch_1d(d.numel);
  switch (d.elem_bytes) {
    case 1: gather_kernel<<<l.blocks, l.threads, 0, stream>>>(d, static_cast<const uint8_t*>(data), indices, static_cast<uint8_t*>(out)); break;
    case 2: gather_kernel<<<l.blocks, l.threads, 0, stream>>>(d, static_cast<const uint16_t*>(data), indices, static_cast<uint16_t*>(out)); break;
    case 4: gather_kernel<<<l.blocks, l.threads, 0, stream>>>(d, static_cast<const uint32_t*>(data), indices, static_cast<uint32_t*>(out)); break;
    default: gather_kernel<<<l.blocks, l.threads, 0, stream>>>(d, static_cast<const uint64_t*>(data), indices, static_cast<uint64_t*>(out));
  }
}

void launch_layer_norm(const LayerNormDesc& d, const void* x, const void* scale, const void* bias, void* y,
                       void* mean, void* inv_std, cudaStream_t stream) {
  if (d.rows == 0) return;
  unsigned blocks = static_cast<unsigned>(d.rows < 65535 * 4 ? d.rows : 65535 * 4);
  layer_norm_kernel<<<blocks, 256, 0, stream>>>(d, x, scale, bias, y, mean, inv_std);
}

}  // namespace tessera::runtime::cuda
