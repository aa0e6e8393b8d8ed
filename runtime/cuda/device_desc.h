// Descriptors of the CUDA backend's own kernels and the per-element code they
// run, shared by the device kernels (kernels.cu) and the host: the plan
// compiler fills these plain structs from the graph (lowering.h), the device
// kernels evaluate them, and the CPU tests evaluate the very same functions on
// the host against the reference interpreter, so the lowering and the math
// are checked on machines without a GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__ inline
#else
#define TESSERA_HD inline
#endif

namespace tessera::runtime::cuda {

inline constexpr int kMaxRank = 8;
inline constexpr int kEwMaxInputs = 8;
inline constexpr int kEwMaxInstrs = 24;

// Element types as the kernels see them (the DTypes the backend handles).
enum class Elem : uint8_t { kF32, kF16, kBF16, kBool, kI64, kI32, kI8, kU8 };

TESSERA_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
TESSERA_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
// Written out: the <cmath> classification functions differ between the host
// (std::) and device (global) namespaces.
TESSERA_HD bool f_isnan(float x) { return x != x; }
TESSERA_HD bool f_isinf(float x) { return (float_bits(x) & 0x7fffffffu) == 0x7f800000u; }
TESSERA_HD bool f_signbit(float x) { return (float_bits(x) >> 31) != 0; }

// IEEE half and bfloat16 conversions, round to nearest even, written out so
// that host and device round identically (and as graph/dtype.cc does).
TESSERA_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

TESSERA_HD uint16_t f32_to_f16(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  int e = static_cast<int>(exp) - 112;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {  // a half subnormal (or zero)
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry rounds up to the next binade or inf
  return static_cast<uint16_t>(sign | h);
}

TESSERA_HD float bf16_to_f32(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }
TESSERA_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

TESSERA_HD float load_elem(Elem e, const void* p, int64_t i) {
  switch (e) {
    case Elem::kF32: return static_cast<const float*>(p)[i];
    case Elem::kF16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case Elem::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case Elem::kI64: return static_cast<float>(static_cast<const int64_t*>(p)[i]);
    case Elem::kI32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case Elem::kI8: return static_cast<float>(static_cast<const int8_t*>(p)[i]);
    default: return static_cast<float>(static_cast<const uint8_t*>(p)[i]);  // u8, bool
  }
}

TESSERA_HD void store_elem(Elem e, void* p, int64_t i, float x) {
  switch (e) {
    case Elem::kF32: static_cast<float*>(p)[i] = x; break;
    case Elem::kF16: static_cast<uint16_t*>(p)[i] = f32_to_f16(x); break;
    case Elem::kBF16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(x); break;
    case Elem::kBool: static_cast<uint8_t*>(p)[i] = x != 0.0f; break;
    case Elem::kI64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(x); break;
    case Elem::kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(x); break;
    case Elem::kI8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(x); break;
    default: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(x);
  }
}

// ---- Fused element-wise programs ----------------------------------------
// A straight-line program over float registers: instruction i writes
// register i; operands name earlier registers. The result is the last
// register, stored in out_elem. Inputs are read through per-input strides
// over the output's index space (stride 0 along broadcast dimensions).

enum class EwCode : uint8_t {
  kInput, kConst,
  // unary (a); alpha/beta carry attributes
  kCopy, kNeg, kAbs, kRelu, kLeakyRelu, kElu, kSigmoid, kHardSigmoid, kHardSwish, kSoftplus, kTanh, kErf,
  kGeluErf, kGeluTanh, kSqrt, kReciprocal, kExp, kLog, kSin, kCos, kFloor, kCeil, kRound, kSign,
  kNot, kIsNaN, kIsInf, kClip, kToF16, kToBF16, kTrunc,
  // binary (a, b)
  kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kMod, kFmod, kEqual, kLess, kLessOrEqual, kGreater,
  kGreaterOrEqual, kAnd, kOr, kXor,
  // ternary: a ? b : c
  kWhere,
};

struct EwInstr {
  EwCode code = EwCode::kConst;
  int8_t a = 0, b = 0, c = 0;
  float alpha = 0, beta = 0;
};

struct EwOperand {
  Elem elem = Elem::kF32;
  bool contiguous = false;  // same shape as the output: read at the output index
  int64_t strides[kMaxRank] = {};
};

struct EwProgram {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t numel = 1;
  int num_inputs = 0;
  EwOperand in[kEwMaxInputs];
  int num_instrs = 0;
  EwInstr instr[kEwMaxInstrs];
  Elem out_elem = Elem::kF32;
};

TESSERA_HD float ew_sigmoid(float x) {
  return x >= 0.0f ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x));
}
TESSERA_HD float ew_clamp01(float y) { return y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y; }

TESSERA_HD float ew_floor_mod(float x, float y) {
  if (f_isnan(x) || f_isnan(y) || f_isinf(x) || y == 0.0f) return NAN;
  if (f_isinf(y)) return x == 0.0f ? copysignf(0.0f, y) : (f_signbit(x) == f_signbit(y) ? x : y);
  float r = fmodf(x, y);
  if (r != 0.0f && f_signbit(r) != f_signbit(y)) r += y;
  return r == 0.0f ? copysignf(0.0f, y) : r;
}

TESSERA_HD float ew_unary(const EwInstr& in, float x) {
  switch (in.code) {
    case EwCode::kNeg: return -x;
    case EwCode::kAbs: return fabsf(x);
    case EwCode::kRelu: return x > 0.0f ? x : 0.0f;
    case EwCode::kLeakyRelu: return x >= 0.0f ? x : in.alpha * x;
    case EwCode::kElu: return x >= 0.0f ? x : in.alpha * expm1f(x);
    case EwCode::kSigmoid: return ew_sigmoid(x);
    case EwCode::kHardSigmoid: return ew_clamp01(in.alpha * x + in.beta);
    case EwCode::kHardSwish: return x * ew_clamp01(x * (1.0f / 6.0f) + 0.5f);
    case EwCode::kSoftplus: return x > 20.0f ? x : log1pf(expf(x));
    case EwCode::kTanh: return tanhf(x);
    case EwCode::kErf: return erff(x);
    case EwCode::kGeluErf: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case EwCode::kGeluTanh:
      return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case EwCode::kSqrt: return sqrtf(x);
    case EwCode::kReciprocal: return 1.0f / x;
    case EwCode::kExp: return expf(x);
    case EwCode::kLog: return logf(x);
    case EwCode::kSin: return sinf(x);
    case EwCode::kCos: return cosf(x);
    case EwCode::kFloor: return floorf(x);
    case EwCode::kCeil: return ceilf(x);
    case EwCode::kRound: return nearbyintf(x);  // half to even, as ONNX Round
    case EwCode::kSign: return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : 0.0f;
    case EwCode::kNot: return x == 0.0f ? 1.0f : 0.0f;
    case EwCode::kIsNaN: return f_isnan(x) ? 1.0f : 0.0f;
    case EwCode::kIsInf:
      return (f_isinf(x) && ((x < 0.0f && in.alpha != 0.0f) || (x > 0.0f && in.beta != 0.0f))) ? 1.0f : 0.0f;
    case EwCode::kClip: {
      float y = x < in.alpha ? in.alpha : x;  // NaN passes through; min > max gives max
      return y > in.beta ? in.beta : y;
    }
    case EwCode::kToF16: return f16_to_f32(f32_to_f16(x));
    case EwCode::kToBF16: return bf16_to_f32(f32_to_bf16(x));
    case EwCode::kTrunc: return truncf(x);
    default: return x;
  }
}

TESSERA_HD float ew_binary(EwCode code, float x, float y) {
  switch (code) {
    case EwCode::kAdd: return x + y;
    case EwCode::kSub: return x - y;
    case EwCode::kMul: return x * y;
    case EwCode::kDiv: return x / y;
    case EwCode::kPow: return powf(x, y);
    case EwCode::kMax: return f_isnan(x) ? x : f_isnan(y) ? y : x < y ? y : x;
    case EwCode::kMin: return f_isnan(x) ? x : f_isnan(y) ? y : y < x ? y : x;
    case EwCode::kMod: return ew_floor_mod(x, y);
    case EwCode::kFmod: return fmodf(x, y);
    case EwCode::kEqual: return x == y ? 1.0f : 0.0f;
    case EwCode::kLess: return x < y ? 1.0f : 0.0f;
    case EwCode::kLessOrEqual: return x <= y ? 1.0f : 0.0f;
    case EwCode::kGreater: return x > y ? 1.0f : 0.0f;
    case EwCode::kGreaterOrEqual: return x >= y ? 1.0f : 0.0f;
    case EwCode::kAnd: return (x != 0.0f && y != 0.0f) ? 1.0f : 0.0f;
    case EwCode::kOr: return (x != 0.0f || y != 0.0f) ? 1.0f : 0.0f;
    case EwCode::kXor: return ((x != 0.0f) != (y != 0.0f)) ? 1.0f : 0.0f;
    default: return x;
  }
}

// Element offset of output index `o` in input `k`.
TESSERA_HD int64_t ew_offset(const EwProgram& p, int k, int64_t o) {
  const EwOperand& op = p.in[k];
  if (op.contiguous) return o;
  int64_t off = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    int64_t idx = o % p.shape[d];
    o /= p.shape[d];
    off += idx * op.strides[d];
  }
  return off;
}

// Output element `o` of the program; `in` holds the input base pointers.
TESSERA_HD float ew_eval(const EwProgram& p, const void* const* in, int64_t o) {
  float r[kEwMaxInstrs];
  for (int i = 0; i < p.num_instrs; ++i) {
    const EwInstr& ins = p.instr[i];
    float v;
    if (ins.code == EwCode::kInput) v = load_elem(p.in[ins.a].elem, in[ins.a], ew_offset(p, ins.a, o));
    else if (ins.code == EwCode::kConst) v = ins.alpha;
    else if (ins.code == EwCode::kWhere) v = r[ins.a] != 0.0f ? r[ins.b] : r[ins.c];
    else if (ins.code >= EwCode::kAdd) v = ew_binary(ins.code, r[ins.a], r[ins.b]);
    else v = ew_unary(ins, r[ins.a]);
    r[i] = v;
  }
  return r[p.num_instrs - 1];
}

// ---- Strided copies: transpose, slice, concat/split parts, expand, pad ----

struct CopyDesc {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t src_strides[kMaxRank] = {};
  int64_t dst_strides[kMaxRank] = {};
  int64_t src_offset = 0, dst_offset = 0;
  int64_t numel = 1;
  int elem_bytes = 4;
};

TESSERA_HD void copy_offsets(const CopyDesc& d, int64_t i, int64_t& src, int64_t& dst) {
  src = d.src_offset;
  dst = d.dst_offset;
  for (int k = d.rank - 1; k >= 0; --k) {
    int64_t idx = i % d.shape[k];
    i /= d.shape[k];
    src += idx * d.src_strides[k];
    dst += idx * d.dst_strides[k];
  }
}

// ---- Reductions over arbitrary axes: one output element per thread --------

enum class ReduceCode : uint8_t { kSum, kMean, kMax, kMin, kProd, kL2, kSumSquare };

struct ReduceDesc {
  ReduceCode code = ReduceCode::kSum;
  Elem elem = Elem::kF32;
  int out_rank = 0;  // kept dimensions only
  int64_t out_shape[kMaxRank] = {};
  int64_t out_strides[kMaxRank] = {};  // input strides of the kept dimensions
  int red_rank = 0;
  int64_t red_shape[kMaxRank] = {};
  int64_t red_strides[kMaxRank] = {};
  int64_t out_numel = 1, red_numel = 1;
};

TESSERA_HD float reduce_one(const ReduceDesc& d, const void* in, int64_t o) {
  int64_t base = 0;
  for (int k = d.out_rank - 1; k >= 0; --k) {
    base += (o % d.out_shape[k]) * d.out_strides[k];
    o /= d.out_shape[k];
  }
  bool is_max = d.code == ReduceCode::kMax, is_min = d.code == ReduceCode::kMin;
  float acc = d.code == ReduceCode::kProd ? 1.0f : is_max ? -INFINITY : is_min ? INFINITY : 0.0f;
  for (int64_t j = 0; j < d.red_numel; ++j) {
    int64_t off = base, t = j;
    for (int k = d.red_rank - 1; k >= 0; --k) {
      off += (t % d.red_shape[k]) * d.red_strides[k];
      t /= d.red_shape[k];
    }
    float x = load_elem(d.elem, in, off);
    switch (d.code) {
      case ReduceCode::kMax: acc = (f_isnan(x) || x > acc) ? x : acc; break;
      case ReduceCode::kMin: acc = (f_isnan(x) || x < acc) ? x : acc; break;
      case ReduceCode::kProd: acc *= x; break;
      case ReduceCode::kL2:
      case ReduceCode::kSumSquare: acc += x * x; break;
      default: acc += x;
    }
    if (f_isnan(acc) && (is_max || is_min)) break;
  }
  if (d.code == ReduceCode::kMean) acc /= static_cast<float>(d.red_numel);
  if (d.code == ReduceCode::kL2) acc = sqrtf(acc);
  return acc;
}

// ---- Gather along one axis ------------------------------------------------

struct GatherDesc {
  int64_t outer = 1, axis_dim = 1, inner = 1, num_indices = 1;
  int64_t numel = 0;  // outer * num_indices * inner
  int elem_bytes = 4;
  Elem index_elem = Elem::kI64;
};

// Source element of output element `o`, or -1 for an index out of range
// (the kernel writes zeros there: a device kernel cannot throw).
TESSERA_HD int64_t gather_source(const GatherDesc& d, const void* indices, int64_t o) {
  int64_t i = o % d.inner, t = o / d.inner;
  int64_t j = t % d.num_indices, outer = t / d.num_indices;
  int64_t idx = d.index_elem == Elem::kI64 ? static_cast<const int64_t*>(indices)[j]
                                           : static_cast<int64_t>(static_cast<const int32_t*>(indices)[j]);
  if (idx < 0) idx += d.axis_dim;
  if (idx < 0 || idx >= d.axis_dim) return -1;
  return (outer * d.axis_dim + idx) * d.inner + i;
}

// ---- Layer normalization over the trailing `cols` elements of each row ----

struct LayerNormDesc {
  int64_t rows = 1, cols = 1;
  float epsilon = 1e-5f;
  Elem elem = Elem::kF32;
  Elem stat_elem = Elem::kF32;  // Mean and InvStdDev (the stash type)
  bool has_bias = false;
};

// One row on one thread: the host check of the lowering (the device kernel
// spreads a row over a block with the same two-pass formula).
TESSERA_HD void layer_norm_row(const LayerNormDesc& d, const void* x, const void* scale, const void* bias, void* y,
                               void* mean_out, void* inv_out, int64_t row) {
  int64_t base = row * d.cols;
  float mean = 0.0f;
  for (int64_t j = 0; j < d.cols; ++j) mean += load_elem(d.elem, x, base + j);
  mean /= static_cast<float>(d.cols);
  float var = 0.0f;
  for (int64_t j = 0; j < d.cols; ++j) {
    float t = load_elem(d.elem, x, base + j) - mean;
    var += t * t;
  }
  float inv = 1.0f / sqrtf(var / static_cast<float>(d.cols) + d.epsilon);
  if (mean_out) store_elem(d.stat_elem, mean_out, row, mean);
  if (inv_out) store_elem(d.stat_elem, inv_out, row, inv);
  for (int64_t j = 0; j < d.cols; ++j) {
    float v = (load_elem(d.elem, x, base + j) - mean) * inv * load_elem(d.elem, scale, j);
    if (d.has_bias) v += load_elem(d.elem, bias, j);
    store_elem(d.elem, y, base + j, v);
  }
}

// Launch geometry of the 1-D grid-stride kernels: blocks of `threads`,
// enough blocks for one element per thread up to `max_blocks` (each thread
// then loops).
struct Launch1d {
  unsigned blocks = 1, threads = 256;
};
inline Launch1d launch_1d(int64_t n, unsigned threads = 256, unsigned max_blocks = 65535u * 4u) {
  Launch1d l;
  l.threads = threads;
  int64_t blocks = (n + threads - 1) / threads;
  l.blocks = static_cast<unsigned>(blocks < 1 ? 1 : blocks > max_blocks ? max_blocks : blocks);
  return l;
}

}  // namespace tessera::runtime::cuda
