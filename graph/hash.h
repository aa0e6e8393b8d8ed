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

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace tessera {

// hashes[v] for every value id of `g`: graph inputs from their position and
// type, constants from type and data, node outputs from the producer's kind,
// attributes, input hashes and the output index. Throws on a cycle.
std::vector<uint64_t> value_hashes(const Graph& g);

// Hash of the graph's signature (input types) and of its outputs in order.
uint64_t structural_hash(const Graph& g);

bool structurally_equal(const Graph& a, const Graph& b);

}  // namespace tessera
