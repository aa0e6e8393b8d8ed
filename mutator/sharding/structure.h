// Repeated structure, for the sharding search: the weights of a model's
// repeated blocks (transformer layers, ResNet stages) play the same role, so
// the search decides for all of them at once, and its work does not grow
// with depth.
//
// A value's role is its neighbourhood: a Weisfeiler-Lehman labelling of the
// graph where a node starts from its op kind, attributes and the types of
// what it reads (small constants such as Reshape's shape by their data,
// weights by their type only), and each round adds its producers' labels in
// slot order and its readers' labels as a set. After kRoleRounds rounds two
// weights with equal labels read by equal slots sit in equal neighbourhoods
// that far out; the labels are confirmed by comparing the readers' kinds,
// attributes and the weights' types (hash + equality), so a hash collision
// never merges two roles.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::mutator {

inline constexpr int kRoleRounds = 3;

struct Role {
  std::vector<ValueId> values;  // in value-id order
  NodeId reader = -1;           // the first value's first reader
  int slot = 0;                 // where it reads it
  std::string label;            // for reports: "MatMul in1 f32[768x3072] (x12)"
};

// Node labels after `rounds` rounds (by NodeId).
std::vector<uint64_t> role_labels(const Graph& g, int rounds = kRoleRounds);

// The roles of the graph's weights (constants of rank >= 2), in order of
// their first value. `extra` values (non-constants the search may pin) are
// grouped by the same rule.
std::vector<Role> weight_roles(const Graph& g);
std::vector<Role> value_roles(const Graph& g, const std::vector<ValueId>& values);

}  // namespace tessera::mutator
