// The canonical text form of a graph: what tests, golden files and --dump
// use. print_graph and parse_graph are inverses: parse(print(g)) is
// structurally equal to g with the same value, node and graph names, and
// print(parse(print(g))) == print(g).
//
//   graph resnet_block {
//     input x: f32[1x3x8x8]
//     const w: f32[4x3x3x3] = hex"0000803f..."      # exact little-endian bytes
//     const shape: i64[2] = [1, -1]                 # small integer tensors
//     y = Conv[conv1](x, w, _) {dilations=[1, 1], group=1, ...}
//     a, b = Split[split0](y) {axis=1, split=[2, 2]}
//     output a, b
//   }
//
// - Statements: inputs in order, then constants, then nodes in topological
//   order, then one output list. `# ...` is a comment; whitespace is free.
// - Names are bare ([A-Za-z0-9_./:-], a ':' only inside a name) or quoted
//   "..." with C escapes; the keywords input/const/output/graph and `_` are
//   always quoted when used as names.
// - A node is `outs = Op[node name](inputs) {attrs}`; `_` is an omitted
//   optional input; attributes are sorted by name (defaults included), braces
//   omitted when there are none.
// - Attribute values: int `3`; float always with a '.', an exponent, or
//   inf/-inf/nan/-nan (nan:0x<bits> keeps other NaN payloads), printed in the
//   shortest form that parses back bit-exact; string "..."; lists [..]; tensor
//   `f32[2] hex"..."` or `i64[3] [1, 2, 3]`. An empty list or an int where
//   the op's schema wants a float takes the schema's type.
#pragma once

#include <string>

#include "graph/graph.h"

namespace tessera {

std::string print_graph(const Graph& g);

// Parses the text form. Syntax errors throw Error(kParse) whose context file
// is "<source_name>:<line>:<column>"; nodes that fail attribute validation or
// shape inference throw that Error (naming the node and op) with the same
// location added.
Graph parse_graph(const std::string& text, const std::string& source_name = "<text>");

}  // namespace tessera
