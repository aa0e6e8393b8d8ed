#include "mutator/subprogram.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <optional>

#include "cost/graph_cost.h"
#include "graph/strategy.h"

namespace tessera::mutator {

namespace {

// Ops a subprogram may hold: the (multi)linear and affine ones the rules and
// the multilinear test handle (the op table's linearity, with a bias read
// left out: Conv and Gemm with a bias are affine). Everything else bounds
// subprograms, and so do collectives (linear, but a rank's program alone
// cannot evaluate them: the multilinear test runs one program).
bool in_subprogram(const Graph& g, const Node& n) {
  return !op_def(n.kind).is_collective() && affine_linearity(g, n).any();
}

// A value read by more nodes than this is a broadcast (a mask, positions),
// not a link worth searching across.
constexpr size_t kMaxJoinedReaders = 4;

bool shares_input_usefully(const Node& n) {
  return n.kind == OpKind::kMatMul || n.kind == OpKind::kGemm || n.kind == OpKind::kConv;
}

// Subprograms stop growing at this many nodes: a pre-LayerNorm transformer's
// residual stream links every layer through linear Adds (GPT-2: one
// subprogram of ~300 nodes, where each candidate costs a full re-costing and
// the search covered two of twelve layers in its budget). A few layers per
// subprogram keep every merge of one layer together.
constexpr int kMaxSubprogramNodes = 64;

struct UnionFind {
  std::vector<int> parent, size;
  explicit UnionFind(int n) : parent(n), size(n, 1) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) { return parent[x] == x ? x : parent[x] = find(parent[x]); }
  void join(int a, int b) {
    a = find(a);
    b = find(b);
    if (a == b || size[a] + size[b] > kMaxSubprogramNodes) return;
    parent[a] = b;
    size[b] += size[a];
  }
};

}  // namespace

std::vector<std::vector<NodeId>> partition_subprograms(const Graph& g) {
  UnionFind uf(g.num_nodes());
  std::vector<bool> inside(g.num_nodes());
  for (NodeId n = 0; n < g.num_nodes(); ++n) inside[n] = in_subprogram(g, g.node(n));
  auto users = g.users();
  for (ValueId v = 0; v < g.num_values(); ++v) {
    if (g.value(v).is_constant()) continue;
    // Producer and readers join one subprogram. Readers of a value made
    // outside, or read in many places, join each other only when merge rules
    // can use the shared input (MatMuls, Gemms, Convs): an attention mask read
    // by every layer's Add would otherwise glue all layers into one
    // subprogram, whose search is slow and whose cross-layer merges close
    // cycles through the Softmaxes (BERT-base: one subprogram of 12 layers).
    int first = -1;
    NodeId p = g.value(v).producer;
    bool made_inside = p >= 0 && inside[p] && users[v].size() <= kMaxJoinedReaders;
    if (made_inside) first = p;
    for (NodeId u : users[v]) {
      if (!inside[u] || (!made_inside && !shares_input_usefully(g.node(u)))) continue;
      if (first < 0) first = u;
      else uf.join(u, first);
    }
  }
  std::map<int, std::vector<NodeId>> groups;
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (inside[n]) groups[uf.find(n)].push_back(n);
  std::vector<std::vector<NodeId>> out;
  for (auto& [root, nodes] : groups) out.push_back(std::move(nodes));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a[0] < b[0]; });
  return out;
}

namespace {

// The subprogram inputs (by index) that host value `from` reaches through
// host nodes outside the subprogram, in the order they are found.
std::vector<int> inputs_reached(const Graph& host, ValueId from, const std::vector<char>& inside,
                                const std::vector<std::vector<NodeId>>& users,
                                const std::unordered_map<std::string, int>& input_index) {
  std::vector<int> reached;
  std::vector<char> seen(host.num_nodes(), 0);
  std::vector<char> hit(input_index.size(), 0);
  std::vector<ValueId> stack = {from};
  while (!stack.empty()) {
    ValueId v = stack.back();
    stack.pop_back();
    for (NodeId u : users[v]) {
      if (inside[u]) {
        // Read back inside: v came from outside, so it is a subprogram input
        // (unless it is the output itself, read inside too).
        auto it = input_index.find(host.value(v).name);
        if (it != input_index.end() && !hit[it->second]) {
          hit[it->second] = 1;
          reached.push_back(it->second);
        }
      } else if (!seen[u]) {
        seen[u] = 1;
        for (ValueId o : host.node(u).outputs) stack.push_back(o);
      }
    }
  }
  return reached;
}

Outside outside_paths(const Graph& host, const std::vector<NodeId>& nodes, const Graph& sub,
                      const std::vector<std::vector<NodeId>>& users) {
  Outside out;
  for (size_t i = 0; i < sub.inputs().size(); ++i) out.input_index[sub.value(sub.inputs()[i]).name] = static_cast<int>(i);
  for (size_t i = 0; i < sub.outputs().size(); ++i)
    out.output_index[sub.value(sub.outputs()[i]).name] = static_cast<int>(i);
  std::vector<char> inside(host.num_nodes(), 0);
  for (NodeId n : nodes) inside[n] = 1;
  for (ValueId v : sub.outputs())
    out.reaches.push_back(inputs_reached(host, *host.find_value(sub.value(v).name), inside, users, out.input_index));
  return out;
}

cost::CostOptions context_in(const Graph& host, const Graph& sub, const std::vector<char>& blocked) {
  cost::CostOptions context;
  context.part_of_larger_program = true;
  for (ValueId v : sub.inputs()) {
    std::optional<ValueId> h = host.find_value(sub.value(v).name);
    if (h && blocked[static_cast<size_t>(*h)]) context.blocked_inputs.push_back(sub.value(v).name);
  }
  context.other_parameter_bytes = std::max<int64_t>(0, host.parameter_bytes() - sub.parameter_bytes());
  return context;
}

}  // namespace

std::vector<Subprogram> subprograms_of(const Graph& g, const cost::DeviceProfile& device) {
  const std::vector<char> blocked = cost::blocked_values(g, device);
  auto users = g.users();
  std::vector<Subprogram> out;
  for (std::vector<NodeId>& nodes : partition_subprograms(g)) {
    Subprogram s;
    s.nodes = std::move(nodes);
    s.graph = g.extract(s.nodes);
    s.outside = outside_paths(g, s.nodes, s.graph, users);
    s.context = context_in(g, s.graph, blocked);
    out.push_back(std::move(s));
  }
  return out;
}

// Whether splicing candidate c (inputs and outputs named as in the
// subprogram) into the host would make the host cyclic.
bool closes_cycle(const Graph& c, const Outside& outside) {
  bool any = false;
  for (const auto& r : outside.reaches) any = any || !r.empty();
  if (!any) return false;
  size_t ni = outside.input_index.size(), no = outside.reaches.size();
  // Inputs of c that reach each value, then each output.
  std::vector<std::vector<char>> from(c.num_values());
  for (ValueId v : c.inputs()) {
    auto it = outside.input_index.find(c.value(v).name);
    if (it == outside.input_index.end()) continue;
    from[v].assign(ni, 0);
    from[v][it->second] = 1;
  }
  for (NodeId n : c.topo_order()) {
    std::vector<char> acc(ni, 0);
    for (ValueId in : c.node(n).inputs)
      if (in != kNoValue && !from[in].empty())
        for (size_t i = 0; i < ni; ++i) acc[i] |= from[in][i];
    for (ValueId o : c.node(n).outputs) from[o] = acc;
  }
  // Nodes 0..ni-1 are inputs, ni..ni+no-1 outputs; look for a cycle.
  std::vector<std::vector<int>> edges(ni + no);
  for (ValueId v : c.outputs()) {
    auto it = outside.output_index.find(c.value(v).name);
    if (it == outside.output_index.end() || from[v].empty()) continue;
    for (size_t i = 0; i < ni; ++i)
      if (from[v][i]) edges[i].push_back(static_cast<int>(ni) + it->second);
  }
  for (size_t k = 0; k < no; ++k)
    for (int i : outside.reaches[k]) edges[ni + k].push_back(i);
  std::vector<int> state(ni + no, 0);  // 0 new, 1 on the stack, 2 done
  std::function<bool(int)> dfs = [&](int x) {
    state[x] = 1;
    for (int y : edges[x])
      if (state[y] == 1 || (state[y] == 0 && dfs(y))) return true;
    state[x] = 2;
    return false;
  };
  for (size_t x = 0; x < ni + no; ++x)
    if (state[x] == 0 && dfs(static_cast<int>(x))) return true;
  return false;
}


}  // namespace tessera::mutator
