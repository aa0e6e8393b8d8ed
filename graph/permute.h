// A permutation of a tensor's elements in its simplest form, for comparing
// Reshape -> Transpose -> Reshape chains (the ONNX exporter's DepthToSpace
// match, the replay's layout normal form in mutator/replay.cc); and the rows
// the CPU runtime's copy loop moves a permutation in, which the cost model
// prices it by.
#pragma once

#include <cstddef>
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

// The source row the CPU runtime's tiled copy moves at a time
// (runtime/cpu/strided_copy.cc), which the cost model counts its steps by.
// `extents`, `src_strides`: the copy's dims but the innermost, outermost
// first, merged as the copy merges them; `t`: the one the source is
// contiguous along. A row shorter than a cache line takes in the dim the
// source continues along, or of it the fewest elements that divide it and
// make the row a line (the copy keeps the rest as an outer dim), while the
// row stays within kMaxCopyRow elements.
inline constexpr int64_t kCopyLineBytes = 64;
inline constexpr int64_t kMaxCopyRow = 4096;
struct CopyRow {
  std::vector<size_t> dims;   // t first, then the dims taken in, in order
  std::vector<int64_t> take;  // elements of each: its extent, or a divisor of it (then the last)
  int64_t elements = 1;
};
CopyRow copy_row(const std::vector<int64_t>& extents, const std::vector<int64_t>& src_strides, size_t t,
                 int64_t elem_bytes);

}  // namespace tessera
