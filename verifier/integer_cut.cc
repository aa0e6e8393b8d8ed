#include "verifier/integer_cut.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "graph/error.h"
#include "graph/hash.h"

namespace tessera::verifier {

namespace {

bool is_int(const TensorType& t) { return !is_float(t.dtype); }

enum class Part { kFloat, kInteger, kFrontier };

// Which part each node is in; throws nothing: `why` is set on failure.
struct Split {
  std::vector<Part> part;        // per node
  std::vector<bool> integer;     // per value: an integer value that depends on an integer graph input
  std::vector<ValueId> frontier; // float outputs of frontier nodes, in topological order
};

std::optional<Split> split(const Graph& g, std::string* why) {
  Split s;
  s.integer.assign(static_cast<size_t>(g.num_values()), false);
  s.part.assign(static_cast<size_t>(g.num_nodes()), Part::kFloat);
  for (ValueId v : g.inputs())
    if (is_int(g.type(v))) s.integer[v] = true;
  for (NodeId n : g.topo_order()) {
    const Node& node = g.node(n);
    bool reads_integer = false, reads_float_data = false;
    for (ValueId in : node.inputs) {
      if (in == kNoValue) continue;
      if (s.integer[in]) reads_integer = true;
      else if (!g.value(in).is_constant() && is_float(g.type(in).dtype)) reads_float_data = true;
    }
    if (!reads_integer) continue;
    bool float_out = false;
    for (ValueId o : node.outputs)
      if (o != kNoValue && is_float(g.type(o).dtype)) float_out = true;
    if (!float_out) {
      if (reads_float_data) {
        *why = "node '" + node.name + "' (" + op_name(node.kind) + ") mixes integer inputs' values with float data";
        return std::nullopt;
      }
      s.part[n] = Part::kInteger;
      for (ValueId o : node.outputs)
        if (o != kNoValue) s.integer[o] = true;
      continue;
    }
    if (reads_float_data) {
      *why = "node '" + node.name + "' (" + op_name(node.kind) + ") reads an integer input's values and float data";
      return std::nullopt;
    }
    for (ValueId o : node.outputs)
      if (o != kNoValue && is_int(g.type(o))) {
        *why = "node '" + node.name + "' (" + op_name(node.kind) + ") makes floats and integers from integer inputs";
        return std::nullopt;
      }
    s.part[n] = Part::kFrontier;
    for (ValueId o : node.outputs)
      if (o != kNoValue) s.frontier.push_back(o);
  }
  for (ValueId v : g.outputs())
    if (s.integer[v]) {
      *why = "graph output '" + g.value(v).name + "' is computed from integer inputs alone";
      return std::nullopt;
    }
  return s;
}

// Whether value a of ga and value b of gb are the same computation of the
// same integer inputs and constants.
class SameComputation {
 public:
  SameComputation(const Graph& ga, const Graph& gb) : ga_(ga), gb_(gb) {}

  bool operator()(ValueId a, ValueId b) {
    auto key = std::make_pair(a, b);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    bool same = compare(a, b);
    memo_[key] = same;
    return same;
  }

 private:
  bool compare(ValueId a, ValueId b) {
    const Value &x = ga_.value(a), &y = gb_.value(b);
    if (x.type != y.type) return false;
    if (x.is_constant() || y.is_constant())
      return x.is_constant() && y.is_constant() && x.constant->nbytes() == y.constant->nbytes() &&
             std::memcmp(x.constant->data(), y.constant->data(), static_cast<size_t>(x.constant->nbytes())) == 0;
    if (x.producer < 0 || y.producer < 0) {
      if (x.producer >= 0 || y.producer >= 0) return false;
      return input_index(ga_, a) == input_index(gb_, b);
    }
    const Node &p = ga_.node(x.producer), &q = gb_.node(y.producer);
    if (p.kind != q.kind || !(p.attrs == q.attrs) || x.producer_output != y.producer_output ||
        p.inputs.size() != q.inputs.size())
      return false;
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      if ((p.inputs[i] == kNoValue) != (q.inputs[i] == kNoValue)) return false;
      if (p.inputs[i] != kNoValue && !(*this)(p.inputs[i], q.inputs[i])) return false;
    }
    return true;
  }

  static int64_t input_index(const Graph& g, ValueId v) {
    for (size_t i = 0; i < g.inputs().size(); ++i)
      if (g.inputs()[i] == v) return static_cast<int64_t>(i);
    return -1;
  }

  const Graph &ga_, &gb_;
  std::map<std::pair<ValueId, ValueId>, bool> memo_;
};

// The float part of g: its float graph inputs, then one input per slot (of
// `types`), which every value of g listed in slots[k] reads as (a slot may
// list none: an input the part does not read).
Graph float_part(const Graph& g, const Split& s, const std::vector<std::vector<ValueId>>& slots,
                 const std::vector<TensorType>& types) {
  Graph r;
  r.name = g.name;
  std::unordered_map<ValueId, ValueId> m;
  for (ValueId v : g.inputs())
    if (!is_int(g.type(v))) m[v] = r.add_input(g.value(v).name, g.type(v));
  for (size_t k = 0; k < slots.size(); ++k) {
    ValueId in = r.add_input("integer-cut:" + std::to_string(k), types[k]);
    for (ValueId v : slots[k]) m[v] = in;
  }
  auto mapped = [&](ValueId v) -> ValueId {
    if (v == kNoValue) return kNoValue;
    if (auto it = m.find(v); it != m.end()) return it->second;
    TESSERA_CHECK(g.value(v).is_constant(), "integer cut: value '" << g.value(v).name << "' is not in the float part");
    return m[v] = r.add_constant(g.value(v).name, *g.value(v).constant);
  };
  for (NodeId n : g.topo_order()) {
    if (s.part[n] != Part::kFloat) continue;
    const Node& node = g.node(n);
    std::vector<ValueId> ins;
    for (ValueId in : node.inputs) ins.push_back(mapped(in));
    std::vector<std::string> names;
    for (ValueId o : node.outputs) names.push_back(o == kNoValue ? "" : g.value(o).name);
    NodeId added = r.add_node(node.kind, ins, node.attrs, node.name, names);
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (node.outputs[i] != kNoValue) m[node.outputs[i]] = r.node(added).outputs[i];
  }
  std::vector<ValueId> outs;
  for (ValueId v : g.outputs()) outs.push_back(mapped(v));
  r.set_outputs(outs);
  return r;
}

}  // namespace

std::optional<IntegerCut> cut_integer_inputs(const Graph& original, const Graph& candidate, std::string* why) {
  std::string scratch;
  if (!why) why = &scratch;
  bool any = false;
  for (ValueId v : original.inputs()) any = any || is_int(original.type(v));
  if (!any) {
    *why = "no integer inputs";
    return std::nullopt;
  }
  std::optional<Split> a = split(original, why), b = split(candidate, why);
  if (!a || !b) return std::nullopt;
  // One slot per frontier value of the original (values that compute the
  // same thing share one); each frontier value of the candidate must be the
  // same computation as one of them.
  std::vector<uint64_t> ha = value_hashes(original), hb = value_hashes(candidate);
  SameComputation within(original, original), across(original, candidate);
  std::vector<std::vector<ValueId>> slots_a, slots_b;
  std::vector<TensorType> types;
  std::unordered_multimap<uint64_t, size_t> slot_of_hash;
  std::map<std::string, int> kinds;
  for (ValueId v : a->frontier) {
    size_t slot = slots_a.size();
    auto [lo, hi] = slot_of_hash.equal_range(ha[v]);
    for (auto it = lo; it != hi; ++it)
      if (within(slots_a[it->second][0], v)) slot = it->second;
    if (slot == slots_a.size()) {
      slots_a.emplace_back();
      slots_b.emplace_back();
      types.push_back(original.type(v));
      slot_of_hash.emplace(ha[v], slot);
      ++kinds[op_name(original.node(original.value(v).producer).kind)];
    }
    slots_a[slot].push_back(v);
  }
  for (ValueId v : b->frontier) {
    size_t slot = slots_a.size();
    auto [lo, hi] = slot_of_hash.equal_range(hb[v]);
    for (auto it = lo; it != hi && slot == slots_a.size(); ++it)
      if (across(slots_a[it->second][0], v)) slot = it->second;
    if (slot == slots_a.size()) {
      const Node& p = candidate.node(candidate.value(v).producer);
      *why = "the candidate reads its integer inputs through '" + p.name + "' (" + op_name(p.kind) +
             "), which the original does not compute";
      return std::nullopt;
    }
    slots_b[slot].push_back(v);
  }
  IntegerCut cut;
  cut.original = float_part(original, *a, slots_a, types);
  cut.candidate = float_part(candidate, *b, slots_b, types);
  cut.frontier = static_cast<int>(types.size());
  std::string list;
  for (const auto& [kind, n] : kinds) list += (list.empty() ? "" : ", ") + std::to_string(n) + " " + kind;
  cut.detail = std::to_string(types.size()) + " value" + (types.size() == 1 ? "" : "s") + " (" + list + ")";
  return cut;
}

}  // namespace tessera::verifier
