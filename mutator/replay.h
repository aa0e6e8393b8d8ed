// Rederiving a plan from its original with proven rules: how `tessera
// verify` confirms a plan whose rewrites the Z_p test cannot decide (a
// Winograd transform's weights G g G^T are new floats, read as unrelated
// residues).
//
// Both programs are first brought to a normal form: a few proven layout
// rules (ReplayOptions::normal_rules) and every Transpose, with its
// neighbouring Reshapes, written in its simplest form (canonical_permute,
// graph/permute.h; each instance checked exactly by running both chains on
// an index tensor). A plan read back from ONNX needs it: the exporter writes
// a Reshape -> Transpose -> Reshape chain as DepthToSpace, which imports as
// another chain that moves the elements alike. Then, starting from the original, the replay applies
// rule instances that a proven Z3 obligation covers (the rule's covered_by,
// checked on the instance), one at a time, each the one that makes the most
// of the target's values appear (structural hashes, graph/hash.h), until the
// two are structurally equal or no instance helps. Nothing is taken from the
// plan's own record: the target only guides the choice, and the answer is
// the final structural equality, so a plan whose rewrites no proven rule
// reproduces is not equal at the end and is left to the other checks.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace tessera::mutator {

struct ReplayStep {
  std::string rule;
  std::string obligation;  // the proven obligation covering the instance ("" for the layout normal form)
  std::string check;       // "z3:<obligation>", or "exact on an index tensor"
  std::string description;
};

struct ReplayResult {
  Graph rederived;  // the original with `steps` applied
  Graph target;     // the target with `target_steps` applied (its normal form)
  std::vector<ReplayStep> steps;
  std::vector<ReplayStep> target_steps;
  bool equal = false;  // rederived is structurally equal to target
};

struct ReplayOptions {
  int max_steps = 256;
  // Roots tried per step: the nodes whose outputs the target lacks but whose
  // inputs it has (where the two programs part), and their readers up to
  // this many steps further (a rule's root can sit below its pattern).
  int reader_depth = 2;
  // The normal form both sides are brought to (to a fixed point), and every
  // rederived step is followed by.
  std::vector<std::string> normal_rules = {"reshape-chain", "reshape-elimination"};
};

ReplayResult replay_rules(const Graph& original, const Graph& target, const ReplayOptions& options = {});

// "conv-winograd x6 [z3:conv-winograd-f4], layout-normal-form x2 [exact on an index tensor]" in the order first applied.
std::string replay_summary(const std::vector<ReplayStep>& steps);

}  // namespace tessera::mutator
