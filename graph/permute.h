// A permutation of a tensor's elements in its simplest form, for comparing
// Reshape -> Transpose -> Reshape chains (the ONNX exporter's DepthToSpace
// match, the replay's layout normal form in mutator/replay.cc).
#pragma once

#include <cstdint>
#include <vector>

namespace tessera {

// Axes of size 1 dropped, neighbouring axes that stay neighbours merged. Two
// Reshape -> Transpose -> Reshape chains over the same number of elements
// move them the same way exactly when these are equal.
struct CanonicalPermute {
  std::vector<int64_t> sizes;  // merged axes, input order
  std::vector<int64_t> perm;   // output axis -> merged input axis
  bool operator==(const CanonicalPermute&) const = default;
};

// Transpose(perm) of a tensor of `shape`, in that form.
CanonicalPermute canonical_permute(const std::vector<int64_t>& shape, const std::vector<int64_t>& perm);

}  // namespace tessera
