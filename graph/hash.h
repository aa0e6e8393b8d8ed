// Structural hashing and equality of graphs. Two graphs are structurally
// equal when they take the same inputs (by position and type) and compute
// their outputs, in order, by isomorphic computations: same op kinds,
// attributes, constants (by type and bytes) and wiring. Names of values,
// nodes and the graph, and the order nodes were inserted in, do not matter.
//
// Dead code is ignored: only what reaches the outputs is compared, so a graph
// and the same graph after remove_dead() are equal. Graph inputs are part of
// the signature even when unused (they are positional).
//
// Isomorphism is one-to-one: a value computed once and read twice is not
// equal to the same expression computed twice (the graphs hash alike, since
// value hashes do not see sharing, and differ in structurally_equal). A hash
// match is therefore only a candidate; confirm it with structurally_equal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace tessera {

// Boost-style combination of a running hash with one more value.
inline uint64_t hash_combine(uint64_t h, uint64_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

// 64-bit FNV-1a of a byte string.
inline uint64_t fnv1a(const void* data, size_t n) {
  const unsigned char* d = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ d[i]) * 1099511628211ull;
  return h;
}

// hashes[v] for every value id of `g`: graph inputs from their position and
// type, constants from type and data, node outputs from the producer's kind,
// attributes, input hashes and the output index. Throws on a cycle.
std::vector<uint64_t> value_hashes(const Graph& g);

// Hash of the graph's signature (input types) and of its outputs in order.
uint64_t structural_hash(const Graph& g);

bool structurally_equal(const Graph& a, const Graph& b);

}  // namespace tessera
