// Arithmetic the reference kernels need, for each number type the interpreter
// runs in (float, double, Zp). Kernels are written once over T and call these.
// Over Z_p, functions that are not polynomials are fixed pseudo-random
// functions (uninterpreted), and order comparisons compare residues: both are
// deterministic, so the same op on equal arguments gives equal results.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "graph/zp.h"

namespace tessera {

enum class MathFn : uint8_t {
  kExp, kLog, kSqrt, kTanh, kErf, kSigmoid, kSin, kCos, kFloor, kCeil, kRound,
  kAbs, kSign, kRelu, kSoftplus, kGeluErf, kGeluTanh, kIsNaN, kIsInf,
};

template <class T>
inline constexpr bool kIsZp = std::is_same_v<T, Zp>;

template <class T>
T num_from_double(double x) {
  if constexpr (kIsZp<T>) {
    // Reals have no image in Z_p; integral values map exactly, others hash.
    if (x == std::floor(x) && std::fabs(x) < 9.0e15) return Zp::from_i64(static_cast<int64_t>(x));
    uint64_t bits;
    static_assert(sizeof(bits) == sizeof(x));
    __builtin_memcpy(&bits, &x, 8);
    return uninterpreted(0xdeadbeef, Zp::from_u64(bits));
  } else {
    return static_cast<T>(x);
  }
}

template <class T>
T num_from_int(int64_t x) {
  if constexpr (kIsZp<T>) return Zp::from_i64(x);
  else return static_cast<T>(x);
}

// For Z_p: the residue, read as a signed value around 0.
template <class T>
double num_to_double(T x) {
  if constexpr (kIsZp<T>) return x.v > Zp::kP / 2 ? -static_cast<double>(Zp::kP - x.v) : static_cast<double>(x.v);
  else return static_cast<double>(x);
}

template <class T>
int64_t num_to_int(T x) {
  if constexpr (kIsZp<T>) return x.v > Zp::kP / 2 ? -static_cast<int64_t>(Zp::kP - x.v) : static_cast<int64_t>(x.v);
  else return static_cast<int64_t>(x);
}

template <class T>
T num_div(T a, T b) {
  if constexpr (kIsZp<T>) return a * b.inverse();
  else return a / b;
}

template <class T>
bool num_less(T a, T b) {
  if constexpr (kIsZp<T>) return a.v < b.v;
  else return a < b;
}

template <class T>
bool num_is_zero(T a) {
  if constexpr (kIsZp<T>) return a.v == 0;
  else return a == T(0);
}

template <class T>
T num_pow(T a, T b) {
  if constexpr (kIsZp<T>) {
    // Small non-negative integral exponents (x^2, x^3) are polynomials; keep them exact.
    if (b.v <= 8) return a.pow(b.v);
    return uninterpreted2(0x9041, a, b);
  } else {
    return std::pow(a, b);
  }
}

template <class T>
T num_fmod(T a, T b) {
  if constexpr (kIsZp<T>) return uninterpreted2(0x30d, a, b);
  else return std::fmod(a, b);
}

// Floor modulo (Mod with fmod=0): x - floor(x / y) * y, with the sign of y,
// and ONNX's special cases for zeros, infinities and NaN.
template <class T>
T num_floor_mod(T x, T y) {
  if constexpr (kIsZp<T>) {
    return uninterpreted2(0x30e, x, y);
  } else {
    if (std::isnan(x) || std::isnan(y) || std::isinf(x) || y == T(0)) return std::numeric_limits<T>::quiet_NaN();
    if (std::isinf(y)) return x == T(0) ? std::copysign(T(0), y) : (std::signbit(x) == std::signbit(y) ? x : y);
    T r = std::fmod(x, y);
    if (r != T(0) && std::signbit(r) != std::signbit(y)) r += y;
    return r == T(0) ? std::copysign(T(0), y) : r;
  }
}

template <class T>
T math_fn(MathFn fn, T x) {
  if constexpr (kIsZp<T>) {
    return uninterpreted(static_cast<uint64_t>(fn) + 1, x);
  } else {
    switch (fn) {
      case MathFn::kExp: return std::exp(x);
      case MathFn::kLog: return std::log(x);
      case MathFn::kSqrt: return std::sqrt(x);
      case MathFn::kTanh: return std::tanh(x);
      case MathFn::kErf: return std::erf(x);
      case MathFn::kSigmoid: return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
      case MathFn::kSin: return std::sin(x);
      case MathFn::kCos: return std::cos(x);
      case MathFn::kFloor: return std::floor(x);
      case MathFn::kCeil: return std::ceil(x);
      case MathFn::kRound: return std::nearbyint(x);  // half to even, as ONNX Round
      case MathFn::kAbs: return std::fabs(x);
      case MathFn::kSign: return x > 0 ? T(1) : x < 0 ? T(-1) : T(0);
      case MathFn::kRelu: return x > 0 ? x : T(0);
      case MathFn::kSoftplus: return x > 20 ? x : std::log1p(std::exp(x));
      case MathFn::kGeluErf: return T(0.5) * x * (T(1) + std::erf(x / std::sqrt(T(2))));
      case MathFn::kGeluTanh: {
        T c = std::sqrt(T(2) / T(M_PI));
        return T(0.5) * x * (T(1) + std::tanh(c * (x + T(0.044715) * x * x * x)));
      }
      case MathFn::kIsNaN: return std::isnan(x) ? T(1) : T(0);
      case MathFn::kIsInf: return std::isinf(x) ? T(1) : T(0);
    }
    return x;
  }
}

}  // namespace tessera
