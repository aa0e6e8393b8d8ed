// Seeded random inputs for the verifier's trials (deterministic per seed).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "graph/number.h"
#include "graph/op.h"

namespace tessera::verifier {

struct SplitMix {
  uint64_t state;
  explicit SplitMix(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

// Floats: uniform residues over Z_p, uniform in [-1, 1) otherwise. Integers
// and bools: {0, 1}, valid as indices, masks and token ids alike, or, where
// `int_ranges` is given (one [lo, hi) per input), uniform over that range.
template <class T>
std::vector<RefTensor<T>> random_inputs(const std::vector<TensorType>& types, SplitMix& rng,
                                        const std::vector<std::pair<int64_t, int64_t>>* int_ranges = nullptr) {
  std::vector<RefTensor<T>> out;
  for (size_t i = 0; i < types.size(); ++i) {
    const TensorType& t = types[i];
    RefTensor<T> r;
    r.type = t;
    auto n = static_cast<size_t>(t.numel());
    if (r.is_num()) {
      r.num.resize(n);
      for (T& x : r.num) {
        if constexpr (kIsZp<T>) x = Zp::from_u64(rng.next());
        else x = static_cast<T>(static_cast<float>(2.0 * rng.uniform() - 1.0));  // exact in f32 too
      }
    } else {
      r.ints.resize(n);
      int64_t lo = 0, span = 2;
      if (int_ranges && i < int_ranges->size() && t.dtype != DType::kBool) {
        lo = (*int_ranges)[i].first;
        span = std::max<int64_t>(1, (*int_ranges)[i].second - lo);
      }
      for (int64_t& x : r.ints) x = lo + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(span));
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace tessera::verifier
