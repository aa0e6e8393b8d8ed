#include "mutator/pet/enumerate.h"

#include <deque>
#include <set>
#include <unordered_map>

#include "graph/error.h"
#include "graph/hash.h"
#include "mutator/pet/catalogue.h"

namespace tessera::mutator::pet {

namespace {

bool reaches(const RuleContext& ctx, NodeId from, NodeId to) {
  std::vector<NodeId> stack = {from};
  std::set<NodeId> seen;
  while (!stack.empty()) {
    NodeId n = stack.back();
    stack.pop_back();
    if (n == to) return true;
    if (!seen.insert(n).second) continue;
    for (ValueId o : ctx.g.node(n).outputs)
      for (NodeId u : ctx.users[o]) stack.push_back(u);
  }
  return false;
}

// The anchors as a program of their own: same ops, reading host values.
Mutation local_program(const RuleContext& ctx, const std::vector<NodeId>& nodes) {
  MutationBuilder b(ctx.g, kRuleName, nodes);
  for (NodeId n : nodes) {
    const Node& node = ctx.g.node(n);
    std::vector<ValueId> ins;
    for (ValueId v : node.inputs) ins.push_back(v == kNoValue ? kNoValue : b.in(v));
    std::vector<ValueId> outs = b.add_multi(node.kind, ins, node.attrs, static_cast<int>(node.outputs.size()));
    for (size_t i = 0; i < outs.size(); ++i) b.replace(node.outputs[i], outs[i]);
  }
  return b.finish("");
}

struct State {
  Graph g;
  std::vector<std::string> moves;
  std::string undo;  // the move that would cancel the last one
};

std::string sequence_text(const std::vector<std::string>& moves) {
  std::string s;
  for (const std::string& m : moves) s += (s.empty() ? "" : " + ") + m;
  return s;
}

// Breadth-first over move sequences from `start`; every new program is a mutant.
std::vector<State> enumerate_from(const Graph& start, bool pair_first, const EnumerateOptions& options) {
  std::vector<State> found;
  std::unordered_map<uint64_t, std::vector<Graph>> seen;
  seen[structural_hash(start)].push_back(start);
  std::deque<State> frontier = {{start, {}, ""}};
  int visited = 0;
  while (!frontier.empty() && visited < options.max_states) {
    State st = std::move(frontier.front());
    frontier.pop_front();
    ++visited;
    if (static_cast<int>(st.moves.size()) >= options.depth) continue;
    std::vector<NodeId> anchors;
    for (NodeId n = 0; n < st.g.num_nodes(); ++n)
      if (is_anchor(st.g.node(n))) anchors.push_back(n);
    for (const Move& move : catalogue()) {
      if (move.name == st.undo) continue;  // it would cancel the previous move
      if (pair_first && st.moves.empty() && move.arity != 2) continue;
      std::vector<std::vector<NodeId>> sites;
      for (size_t i = 0; i < anchors.size(); ++i) {
        if (move.arity == 1) sites.push_back({anchors[i]});
        else
          for (size_t j = i + 1; j < anchors.size(); ++j) sites.push_back({anchors[i], anchors[j]});
      }
      for (const auto& site : sites) {
        std::optional<Graph> next;
        try {
          next = move.apply(st.g, site);
        } catch (const Error&) {
          continue;  // shapes that do not line up after all: the move does not apply
        }
        if (!next) continue;
        uint64_t h = structural_hash(*next);
        bool dup = false;
        for (const Graph& other : seen[h]) dup = dup || structurally_equal(other, *next);
        if (dup) continue;
        seen[h].push_back(*next);
        State child{std::move(*next), st.moves, move.inverse};
        child.moves.push_back(move.name);
        found.push_back(child);
        frontier.push_back(std::move(child));
        if (static_cast<int>(found.size()) >= options.max_mutants) return found;
      }
    }
  }
  return found;
}

}  // namespace

NodeId pair_partner(const RuleContext& ctx, NodeId root) {
  const Graph& g = ctx.g;
  const Node& r = g.node(root);
  for (NodeId n = root + 1; n < g.num_nodes(); ++n) {
    const Node& c = g.node(n);
    if (c.kind != r.kind || c.inputs.size() != r.inputs.size()) continue;
    bool same = true;
    for (size_t i = 0; i < c.inputs.size() && same; ++i)
      same = (c.inputs[i] == kNoValue) == (r.inputs[i] == kNoValue) &&
             (c.inputs[i] == kNoValue || g.type(c.inputs[i]) == g.type(r.inputs[i]));
    if (same && c.inputs[0] != r.inputs[0] && !reaches(ctx, root, n) && !reaches(ctx, n, root)) return n;
  }
  return -1;
}

std::vector<Mutation> enumerate_mutants(const RuleContext& ctx, NodeId root, const EnumerateOptions& options) {
  if (!is_anchor(ctx.g.node(root))) return {};
  std::vector<Mutation> out;
  std::vector<std::vector<NodeId>> programs = {{root}};
  if (NodeId partner = pair_partner(ctx, root); partner >= 0) programs.push_back({root, partner});
  for (const auto& nodes : programs) {
    Mutation base = local_program(ctx, nodes);
    base.id.kind = MutationId::Kind::kEnumerated;
    for (State& st : enumerate_from(base.replacement, nodes.size() == 2, options)) {
      Mutation m = base;
      m.replacement = std::move(st.g);
      m.description = "PET sequence on " + ctx.g.node(root).name + ": " + sequence_text(st.moves);
      out.push_back(std::move(m));
    }
  }
  return out;
}

}  // namespace tessera::mutator::pet

namespace tessera::mutator {

namespace {
std::vector<Mutation> pet_enumeration(const RuleContext& ctx, NodeId root) { return pet::enumerate_mutants(ctx, root); }
}  // namespace

void register_pet_rules(std::vector<Rule>& rules) {
  Rule r{.name = pet::kRuleName,
         .identity = "sequences of up to 3 catalogue moves (batch<->height/width, dilation->batch, explicit pad, pad "
                     "to a multiple, group split, batch->rows, batched-matmul and conv merges) that match on the "
                     "multilinear test",
         .roots = {OpKind::kConv, OpKind::kMatMul},
         .fn = pet_enumeration,
         .per_instance = "an enumerated sequence is not one identity: each is kept only if it matches on the "
                         "multilinear test, which also finds the output boxes where a partial mutant is wrong"};
  r.enumerator = true;
  r.partial = true;
  rules.push_back(std::move(r));
}

}  // namespace tessera::mutator
