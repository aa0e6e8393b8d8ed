// Canonicalization: the plain rewrites every model gets before the search
// (constant folding, Identity removal, BatchNorm and bias folded into Conv,
// MatMul + bias into Gemm, dead code). Each pass returns whether it changed
// anything; the pipeline runs them to a fixed point and validates the graph
// after each pass that changed it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::mutator {

// Folds nodes whose inputs are all constants into constants (outputs up to
// kMaxFoldElements; graph outputs stay computed). Evaluated in double.
bool fold_constants(Graph& g);
inline constexpr int64_t kMaxFoldElements = int64_t{1} << 24;
// Identity nodes forward their input (a graph output keeps its name).
bool remove_identities(Graph& g);
// BatchNormalization(Conv(X, W, b)) = Conv(X, W*s, (b - mean)*s + beta),
// s = gamma / sqrt(var + eps), when the Conv's only reader is the BN.
// Z3 obligation: conv-batchnorm-fold.
bool fold_batchnorm_into_conv(Graph& g);
// Conv(X, W, b) + c = Conv(X, W, b + c) for a constant c broadcast along
// channels ([C], [C,1,1], [1,C,1,1]).
bool fold_bias_into_conv(Graph& g);
// MatMul(A, B) + C = Gemm(A, B, C) for 2-D A, B and constant C (the
// matmul-add-to-gemm rule applied everywhere).
bool fold_bias_into_gemm(Graph& g);
bool remove_dead_code(Graph& g);

struct PassRecord {
  std::string pass;  // kebab-case
  int times = 0;     // runs that changed the graph
  std::string obligation;  // Z3 obligation name, or "" (checked end to end)
};

// Runs the passes to a fixed point (at most 8 rounds). Throws Error if a pass
// leaves an invalid graph (a bug).
std::vector<PassRecord> canonicalize(Graph& g);

// The canonical passes, for --list-rules: name and identity.
std::vector<std::pair<std::string, std::string>> canonical_pass_list();

}  // namespace tessera::mutator
