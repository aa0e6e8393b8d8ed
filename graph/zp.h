// Integers modulo the Mersenne prime p = 2^61 - 1: the number type the verifier
// evaluates graphs in. Ops that are not polynomial (exp, tanh, comparisons of
// reals, ...) have no meaning over Z_p; the interpreter replaces them by fixed
// pseudo-random functions (see uninterpreted()), the same on both sides of a
// comparison, which is what the multilinear test needs.
#pragma once

#include <cstdint>

namespace tessera {

struct Zp {
  static constexpr uint64_t kP = (uint64_t{1} << 61) - 1;
  uint64_t v = 0;  // always in [0, kP)

  constexpr Zp() = default;
  static constexpr Zp from_u64(uint64_t x) { Zp z; z.v = x % kP; return z; }
  static constexpr Zp from_i64(int64_t x) {
    return x >= 0 ? from_u64(static_cast<uint64_t>(x))
                  : from_u64(kP - (static_cast<uint64_t>(-(x + 1)) % kP) - 1);
  }

  friend constexpr Zp operator+(Zp a, Zp b) { uint64_t s = a.v + b.v; if (s >= kP) s -= kP; Zp z; z.v = s; return z; }
  friend constexpr Zp operator-(Zp a, Zp b) { Zp z; z.v = a.v >= b.v ? a.v - b.v : a.v + kP - b.v; return z; }
  friend constexpr Zp operator-(Zp a) { Zp z; z.v = a.v ? kP - a.v : 0; return z; }
  friend constexpr Zp operator*(Zp a, Zp b) {
    unsigned __int128 m = static_cast<unsigned __int128>(a.v) * b.v;
    uint64_t lo = static_cast<uint64_t>(m & kP), hi = static_cast<uint64_t>(m >> 61);
    uint64_t s = lo + hi;
    if (s >= kP) s -= kP;
    Zp z; z.v = s; return z;
  }
  friend constexpr bool operator==(Zp a, Zp b) { return a.v == b.v; }
  friend constexpr bool operator!=(Zp a, Zp b) { return a.v != b.v; }
  Zp& operator+=(Zp b) { return *this = *this + b; }
  Zp& operator-=(Zp b) { return *this = *this - b; }
  Zp& operator*=(Zp b) { return *this = *this * b; }

  constexpr Zp pow(uint64_t e) const {
    Zp r = from_u64(1), b = *this;
    while (e) { if (e & 1) r = r * b; b = b * b; e >>= 1; }
    return r;
  }
  // Multiplicative inverse; 0 maps to 0 so that division is total.
  constexpr Zp inverse() const { return pow(kP - 2); }
};

// A fixed pseudo-random function Z_p -> Z_p, one per `fn` id (and salt), used
// for the non-polynomial ops. Same inputs give the same output everywhere.
inline Zp uninterpreted(uint64_t fn, Zp x, uint64_t salt = 0) {
  uint64_t h = x.v ^ (fn * 0x9e3779b97f4a7c15ull) ^ (salt * 0xc2b2ae3d27d4eb4full);
  h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return Zp::from_u64(h);
}
inline Zp uninterpreted2(uint64_t fn, Zp a, Zp b, uint64_t salt = 0) {
  return uninterpreted(fn, Zp::from_u64(a.v * 0x100000001b3ull + b.v), salt ^ 0x5bd1e995u);
}

}  // namespace tessera
