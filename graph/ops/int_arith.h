// Integer arithmetic for the reference kernels of integer-typed tensors. The
// interpreter keeps every integer dtype in int64; these helpers give results
// the narrow dtype would hold (two's-complement wrap, as ONNX Runtime and
// numpy do) and turn the cases C++ leaves undefined or fatal (signed
// overflow, division by zero) into defined values or a tessera::Error.
#pragma once

#include <cstdint>

#include "graph/dtype.h"
#include "graph/error.h"

namespace tessera::ops {

// Wraps an int64 result to the range of `t`; bool becomes 0/1.
inline int64_t wrap_int(DType t, int64_t v) {
  switch (t) {
    case DType::kI32: return static_cast<int32_t>(v);
    case DType::kI8: return static_cast<int8_t>(v);
    case DType::kU8: return static_cast<uint8_t>(v);
    case DType::kBool: return v != 0 ? 1 : 0;
    default: return v;
  }
}

// Wrapping int64 arithmetic (signed overflow is undefined in C++).
inline int64_t int_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t int_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
inline int64_t int_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
inline int64_t int_neg(int64_t a) { return int_sub(0, a); }

// Division truncating toward zero, as C++, numpy's int division in ONNX and
// ONNX Runtime. INT64_MIN / -1 wraps instead of trapping.
inline int64_t int_div(int64_t a, int64_t b) {
  if (b == 0) TESSERA_THROW(ErrorKind::kInvalidGraph, "integer division by zero");
  if (b == -1) return int_neg(a);
  return a / b;
}

// Remainder; with `fmod` false the result takes the sign of the divisor
// (Python's %), otherwise the sign of the dividend (C's %).
inline int64_t int_mod(int64_t a, int64_t b, bool fmod) {
  if (b == 0) TESSERA_THROW(ErrorKind::kInvalidGraph, "integer modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

}  // namespace tessera::ops
