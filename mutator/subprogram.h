// The subprograms the search rewrites one at a time: the graph cut at
// non-linear ops into groups of linear and affine nodes (what rules and
// mutants rewrite lives between them), each extracted as a program of its
// own, with what splicing a rewrite of it back must respect (the paths that
// leave it and come back) and how it sits in the host for the cost model.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "cost/device_profile.h"
#include "cost/kernel_model.h"
#include "graph/graph.h"

namespace tessera::mutator {

// Node sets of the subprograms, each in node-id order, ordered by first node.
std::vector<std::vector<NodeId>> partition_subprograms(const Graph& g);

// Paths that leave a subprogram and come back: for each output of the
// subprogram, the subprogram inputs it reaches through host nodes outside it
// (e.g. a Conv's output through a Relu into the next Conv). A candidate that
// connects such an input back to that output inside the subprogram would
// close a cycle when spliced into the host.
struct Outside {
  std::unordered_map<std::string, int> input_index;   // by value name
  std::unordered_map<std::string, int> output_index;
  std::vector<std::vector<int>> reaches;  // output index -> input indices
};

// A subprogram as the search sees it.
struct Subprogram {
  std::vector<NodeId> nodes;  // host nodes
  Graph graph;                // the nodes extracted, reading and making host values of the same names
  Outside outside;
  cost::CostOptions context;  // for the cost model: the subprogram is part of the host
};
// Every subprogram of g (partition_subprograms order).
std::vector<Subprogram> subprograms_of(const Graph& g, const cost::DeviceProfile& device);

// Whether splicing candidate c (inputs and outputs named as in the
// subprogram) into the host would make the host cyclic.
bool closes_cycle(const Graph& c, const Outside& outside);

}  // namespace tessera::mutator
