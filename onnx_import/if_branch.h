// Internal to onnx_import: an ONNX `If` whose condition is a constant at
// import is replaced by the branch it selects. The condition is constant
// when it is an input fixed with --input-value (optimum's merged decoder:
// `If(use_cache_branch)` choosing the with-past or the no-past decoder) or
// a value folded from constants. The branch's nodes are imported into the
// outer graph as if they stood in place of the If: its initializers become
// constants, the names it reads from outside resolve to the outer values,
// the names it defines are renamed where they would clash with the outer
// graph's, and its outputs become the If's outputs. An If whose condition
// is computed at run time is refused (Tessera plans one static program):
// one line naming the node, with the way out (--input-value).
#pragma once

#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

#include "onnx/onnx_pb.h"
#include "onnx_import/node_importer.h"

namespace tessera::onnx_import {

// The names that the node's subgraphs (If branches, Loop and Scan bodies)
// read from the scopes around them: dependencies of the node besides its
// inputs.
std::vector<std::string> subgraph_reads(const onnx::NodeProto& node);

// Every value name defined or read in the node's subgraphs, nested ones
// included (names fresh values must avoid; names some node reads).
void subgraph_names(const onnx::NodeProto& node, std::unordered_set<std::string>& defined,
                    std::unordered_set<std::string>& read);

// Imports `proto` (an If of the default domain) as the branch its constant
// condition selects. `import_graph` imports a graph's nodes into the state
// (in a topological order), as the model's own graph is imported.
void import_if(ImportState& state, const onnx::NodeProto& proto, const std::string& name,
               const std::function<void(const onnx::GraphProto&)>& import_graph);

}  // namespace tessera::onnx_import
