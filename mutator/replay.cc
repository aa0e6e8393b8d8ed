#include "mutator/replay.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_set>

#include "graph/attr_views.h"
#include "graph/hash.h"
#include "graph/interpreter.h"
#include "graph/permute.h"
#include "mutator/canonicalize.h"
#include "mutator/mutation.h"
#include "mutator/rules/rule.h"
#include "verifier/proofs.h"

namespace tessera::mutator {

namespace {

// The hashes of the values the target's nodes compute.
std::unordered_set<uint64_t> computed_hashes(const Graph& g) {
  std::vector<uint64_t> h = value_hashes(g);
  std::unordered_set<uint64_t> out;
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    for (ValueId v : g.node(n).outputs)
      if (v != kNoValue) out.insert(h[static_cast<size_t>(v)]);
  return out;
}

// How far g is from the target: its node outputs the target computes too,
// less those it does not.
int64_t score(const Graph& g, const std::vector<uint64_t>& h, const std::unordered_set<uint64_t>& target) {
  int64_t s = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    for (ValueId v : g.node(n).outputs)
      if (v != kNoValue) s += target.count(h[static_cast<size_t>(v)]) ? 1 : -1;
  return s;
}

// Where g and the target part: nodes with an output the target lacks whose
// inputs it has (or that are graph inputs and constants), and their readers
// up to `depth` steps below; in topological order.
std::vector<NodeId> roots(const Graph& g, const std::vector<uint64_t>& h, const std::unordered_set<uint64_t>& target,
                          int depth) {
  auto known = [&](ValueId v) {
    if (v == kNoValue) return true;
    const Value& val = g.value(v);
    return val.producer < 0 || target.count(h[static_cast<size_t>(v)]) > 0;
  };
  std::vector<NodeId> order = g.topo_order();
  std::vector<char> picked(static_cast<size_t>(g.num_nodes()), 0);
  for (NodeId n : order) {
    const Node& node = g.node(n);
    bool inputs_known = true, outputs_known = true;
    for (ValueId v : node.inputs) inputs_known = inputs_known && known(v);
    for (ValueId v : node.outputs) outputs_known = outputs_known && known(v);
    if (inputs_known && !outputs_known) picked[static_cast<size_t>(n)] = 1;
  }
  auto users = g.users();
  for (int d = 0; d < depth; ++d) {
    std::vector<char> next = picked;
    for (NodeId n = 0; n < g.num_nodes(); ++n) {
      if (!picked[static_cast<size_t>(n)]) continue;
      for (ValueId v : g.node(n).outputs)
        if (v != kNoValue)
          for (NodeId u : users[static_cast<size_t>(v)]) next[static_cast<size_t>(u)] = 1;
    }
    picked = std::move(next);
  }
  std::vector<NodeId> out;
  for (NodeId n : order)
    if (picked[static_cast<size_t>(n)]) out.push_back(n);
  return out;
}

// Whether each obligation is proven, asked of Z3 once.
class Proofs {
 public:
  bool proven(const std::string& obligation) {
    auto it = proven_.find(obligation);
    if (it == proven_.end())
      it = proven_.emplace(obligation, verifier::prove(obligation).status == verifier::ProofStatus::kProven).first;
    return it->second;
  }

 private:
  std::map<std::string, bool> proven_;
};

// The first covered, proven instance of one of `rules` in g (in node order),
// applied; false when there is none.
bool normalize_once(Graph& g, const std::vector<std::string>& rules, Proofs& proofs, std::vector<ReplayStep>& steps) {
  auto users = g.users();
  RuleContext ctx{g, users};
  for (NodeId n : g.topo_order())
    for (const std::string& name : rules) {
      const Rule& rule = find_rule(name);
      if (std::find(rule.roots.begin(), rule.roots.end(), g.node(n).kind) == rule.roots.end()) continue;
      for (Mutation& m : rule.fn(ctx, n)) {
        std::string ob = covering_obligation(rule, m);
        if (ob.empty() || !proofs.proven(ob)) continue;
        g = apply_mutation(g, m);
        steps.push_back({rule.name, ob, "z3:" + ob, m.description});
        return true;
      }
    }
  return false;
}

// The ops of a layout chain, run on a fresh input of `type`.
Graph chain_graph(const Graph& g, const std::vector<NodeId>& nodes, const TensorType& type) {
  Graph c;
  ValueId v = c.add_input("x", type);
  for (NodeId n : nodes) v = c.add(g.node(n).kind, {v}, g.node(n).attrs);
  c.set_outputs({v});
  return c;
}

// Layout chains larger than this are left as they are (the exact check runs
// them on an index tensor).
constexpr int64_t kMaxNormalizedElements = int64_t{1} << 26;

// One Transpose of g, with the Reshape right before it (read by it only)
// and the one right after (its only reader), written as
// Reshape(X, sizes) -> Transpose(perm) -> Reshape(to Y's shape), sizes and
// perm from canonical_permute: two chains that move elements alike get one
// form. Each rewrite is checked exactly: both chains, run on an index
// tensor (every element distinct), give the same tensor. False when every
// Transpose is in that form already.
bool layout_normal_once(Graph& g, std::vector<ReplayStep>& steps) {
  auto users = g.users();
  auto output = [&](ValueId v) { return std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end(); };
  auto sole_user = [&](ValueId v) -> NodeId {
    const std::vector<NodeId>& u = users[static_cast<size_t>(v)];
    return u.size() == 1 && !output(v) ? u[0] : -1;
  };
  for (NodeId t : g.topo_order()) {
    const Node& tn = g.node(t);
    if (tn.kind != OpKind::kTranspose) continue;
    std::vector<NodeId> chain;
    NodeId pre = g.value(tn.inputs[0]).producer;
    if (pre >= 0 && is_reshape_like(g.node(pre).kind) && sole_user(tn.inputs[0]) == t) chain.push_back(pre);
    chain.push_back(t);
    NodeId post = sole_user(tn.outputs[0]);
    if (post >= 0 && is_reshape_like(g.node(post).kind)) chain.push_back(post);
    ValueId x = g.node(chain.front()).inputs[0], y = g.node(chain.back()).outputs[0];
    const TensorType& xt = g.type(x);
    if (xt.numel() > kMaxNormalizedElements) continue;
    CanonicalPermute c = canonical_permute(g.type(tn.inputs[0]).shape, TransposeAttrs::of(tn).perm);
    // The normal chain, as a graph of its own.
    Graph want;
    ValueId v = want.add_input("x", xt);
    if (want.type(v).shape != c.sizes) {
      Attrs a;
      a.set("shape", c.sizes);
      v = want.add(OpKind::kReshape, {v}, a);
    }
    bool moves = false;
    for (size_t i = 0; i < c.perm.size(); ++i) moves = moves || c.perm[i] != static_cast<int64_t>(i);
    if (moves) {
      Attrs a;
      a.set("perm", c.perm);
      v = want.add(OpKind::kTranspose, {v}, a);
    }
    if (want.type(v).shape != g.type(y).shape) {
      Attrs a;
      a.set("shape", std::vector<int64_t>(g.type(y).shape.begin(), g.type(y).shape.end()));
      v = want.add(OpKind::kReshape, {v}, a);
    }
    want.set_outputs({v});
    if (structurally_equal(want, chain_graph(g, chain, xt))) continue;
    // Exact: an index tensor through both.
    TensorType it{DType::kI64, xt.shape};
    std::vector<int64_t> iota(static_cast<size_t>(xt.numel()));
    for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<int64_t>(i);
    Tensor index = Tensor::from_ints(DType::kI64, xt.shape, iota);
    std::vector<NodeId> want_nodes;
    for (NodeId n = 0; n < want.num_nodes(); ++n) want_nodes.push_back(n);
    Tensor have_out = evaluate(chain_graph(g, chain, it), {index}, Precision::kF64)[0];
    Tensor want_out = evaluate(chain_graph(want, want_nodes, it), {index}, Precision::kF64)[0];
    if (!have_out.identical(want_out)) continue;
    MutationBuilder b(g, "layout-normal-form", chain);
    ValueId r = b.in(x);
    for (NodeId n = 0; n < want.num_nodes(); ++n) r = b.add(want.node(n).kind, {r}, want.node(n).attrs);
    b.replace(y, r);
    Mutation m = b.finish("Transpose written in its simplest form");
    g = apply_mutation(g, m);
    steps.push_back({"layout-normal-form", "", "exact on an index tensor", m.description});
    return true;
  }
  return false;
}

// The rules and the layout form to a fixed point, with the Identity nodes
// a rewrite of a graph output leaves (apply_mutation keeps output names)
// forwarded.
Graph normal_form(Graph g, const std::vector<std::string>& rules, Proofs& proofs, std::vector<ReplayStep>& steps) {
  remove_identities(g);
  for (int32_t i = 2 * g.num_nodes() + 2; i > 0; --i) {
    if (!normalize_once(g, rules, proofs, steps) && !layout_normal_once(g, steps)) break;
    remove_identities(g);
  }
  return g;
}

class Replayer {
 public:
  Replayer(const Graph& target, const ReplayOptions& o, Proofs& proofs)
      : target_(computed_hashes(target)), o_(o), proofs_(proofs) {}

  // The best proven rule instance at one of g's roots, or false when none
  // brings g closer to the target.
  bool step(Graph& g, std::vector<ReplayStep>& steps) {
    std::vector<uint64_t> h = value_hashes(g);
    int64_t best_score = score(g, h, target_);
    std::optional<Graph> best;
    std::vector<ReplayStep> best_steps;
    auto users = g.users();
    RuleContext ctx{g, users};
    for (NodeId root : roots(g, h, target_, o_.reader_depth))
      for (const Rule& rule : all_rules()) {
        if (rule.enumerator || rule.partial || !rule.covered_by) continue;
        if (std::find(rule.roots.begin(), rule.roots.end(), g.node(root).kind) == rule.roots.end()) continue;
        for (Mutation& m : rule.fn(ctx, root)) {
          std::string ob = covering_obligation(rule, m);
          if (ob.empty() || !proofs_.proven(ob)) continue;
          std::vector<ReplayStep> normal;
          Graph next = normal_form(apply_mutation(g, m), o_.normal_rules, proofs_, normal);
          int64_t s = score(next, value_hashes(next), target_);
          if (s <= best_score) continue;
          best_score = s;
          best = std::move(next);
          best_steps = {{rule.name, ob, "z3:" + ob, m.description}};
          best_steps.insert(best_steps.end(), normal.begin(), normal.end());
        }
      }
    if (!best) return false;
    g = std::move(*best);
    steps.insert(steps.end(), best_steps.begin(), best_steps.end());
    return true;
  }

 private:
  std::unordered_set<uint64_t> target_;
  const ReplayOptions& o_;
  Proofs& proofs_;
};

}  // namespace

ReplayResult replay_rules(const Graph& original, const Graph& target, const ReplayOptions& options) {
  ReplayResult r;
  Proofs proofs;
  r.rederived = normal_form(original, options.normal_rules, proofs, r.steps);
  r.target = normal_form(target, options.normal_rules, proofs, r.target_steps);
  Replayer replayer(r.target, options, proofs);
  for (int i = 0; i < options.max_steps; ++i) {
    if (structurally_equal(r.rederived, r.target)) break;
    if (!replayer.step(r.rederived, r.steps)) break;
  }
  r.equal = structurally_equal(r.rederived, r.target);
  return r;
}

std::string replay_summary(const std::vector<ReplayStep>& steps) {
  std::vector<std::pair<std::string, int>> counts;  // "rule [check]", in first-applied order
  for (const ReplayStep& s : steps) {
    std::string key = s.rule + " [" + s.check + "]";
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == key; });
    if (it == counts.end()) counts.push_back({key, 1});
    else ++it->second;
  }
  std::string out;
  for (const auto& [key, n] : counts) {
    std::string rule = key.substr(0, key.find(' '));
    out += (out.empty() ? "" : ", ") + rule + (n > 1 ? " x" + std::to_string(n) : "") + key.substr(rule.size());
  }
  return out;
}

}  // namespace tessera::mutator
