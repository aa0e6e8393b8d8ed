#include <algorithm>
#include <sstream>

#include "graph/error.h"
#include "mutator/rules/rule.h"

namespace tessera::mutator {

NodeId RuleContext::sole_user(ValueId v) const {
  if (is_graph_output(v) || users[v].size() != 1) return -1;
  return users[v][0];
}

bool RuleContext::is_graph_output(ValueId v) const {
  for (ValueId o : g.outputs())
    if (o == v) return true;
  return false;
}

const std::vector<Rule>& all_rules() {
  // Merges first: they remove whole kernels, the biggest wins; then layout
  // clean-ups (which often only pay off after a merge or a fold); algebra.
  static const std::vector<Rule> rules = [] {
    std::vector<Rule> r;
    register_merge_rules(r);
    register_layout_rules(r);
    register_algebra_rules(r);
    register_scale_rules(r);
    register_winograd_rules(r);
    // Enumerated mutants last: a rule rewrite that does the same is cheaper
    // to verify (proof or one small test), and ties go to the earlier rule.
    register_pet_rules(r);
    return r;
  }();
  return rules;
}

std::string covering_obligation(const Rule& rule, const Mutation& m) {
  if (!rule.covered_by) return kNoObligation;
  std::string ob = rule.covered_by(m);
  TESSERA_CHECK(ob.empty() || std::find(rule.obligations.begin(), rule.obligations.end(), ob) != rule.obligations.end(),
                "rule " << rule.name << " names obligation " << ob << ", which is not one of its own");
  return ob;
}

std::string check_text(const Rule& rule) {
  if (rule.obligations.empty()) return "[per instance: " + rule.per_instance + "]";
  std::string s = "[proof: ";
  for (size_t i = 0; i < rule.obligations.size(); ++i) s += (i ? ", " : "") + rule.obligations[i];
  if (!rule.covered_by) s += "; every instance tested: " + rule.per_instance;
  return s + "]";
}

std::string rule_names_list() {
  std::ostringstream os;
  for (size_t i = 0; i < all_rules().size(); ++i) os << (i ? ", " : "") << all_rules()[i].name;
  return os.str();
}

const Rule& find_rule(const std::string& name) {
  for (const Rule& r : all_rules())
    if (r.name == name) return r;
  TESSERA_THROW(ErrorKind::kUsage, "unknown rule '" << name << "'; valid rules: " << rule_names_list());
}

std::vector<Mutation> propose(const Rule& rule, const RuleContext& ctx, NodeId root, int64_t ways) {
  if (rule.mesh_fn) return rule.mesh_fn(ctx, root, ways);
  TESSERA_CHECK(rule.fn != nullptr, "rule " << rule.name << " has no function");
  return rule.fn(ctx, root);
}

bool is_constant(const Graph& g, ValueId v) { return v != kNoValue && g.value(v).is_constant(); }

bool same_tensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::equal(a.data(), a.data() + a.nbytes(), b.data()));
}

bool same_operand(const Graph& before, ValueId bv, const Graph& replacement, ValueId rv) {
  if (bv == kNoValue || rv == kNoValue) return bv == rv;
  if (before.value(bv).is_constant() || replacement.value(rv).is_constant())
    return before.value(bv).is_constant() && replacement.value(rv).is_constant() &&
           same_tensor(*before.value(bv).constant, *replacement.value(rv).constant);
  const auto& bi = before.inputs();
  const auto& ri = replacement.inputs();
  auto b = std::find(bi.begin(), bi.end(), bv) - bi.begin(), r = std::find(ri.begin(), ri.end(), rv) - ri.begin();
  return b == r && b < static_cast<long>(bi.size()) && r < static_cast<long>(ri.size());
}

namespace {

// A constant of `type` that `fill` writes from `sources`: made when read
// (Tensor::made) where one of them is a view (a mapped weight: a rule
// merging Llama-2-7B's projections must not hold 9 GB of joined copies of
// its weights), made now otherwise.
Tensor made_from(const std::vector<Tensor>& sources, DType dtype, Shape shape, TensorStorage::Fill fill) {
  for (const Tensor& s : sources)
    if (s.is_view()) return Tensor::made(dtype, std::move(shape), std::move(fill));
  Tensor out(dtype, std::move(shape));
  fill(out.mutable_data());
  return out;
}

}  // namespace

Tensor concat_tensors(const std::vector<Tensor>& parts, int64_t axis) {
  TESSERA_CHECK(!parts.empty(), "concat of nothing");
  Shape shape = parts[0].shape();
  int64_t total = 0;
  for (const Tensor& p : parts) total += p.shape()[axis];
  shape[axis] = total;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  auto elem = static_cast<int64_t>(dtype_size(parts[0].dtype()));
  return made_from(parts, parts[0].dtype(), shape, [parts, outer, inner, total, elem, axis](uint8_t* dst) {
    int64_t out_row = total * inner * elem;
    int64_t offset = 0;
    for (const Tensor& p : parts) {
      int64_t row = p.shape()[axis] * inner * elem;
      p.read_once([&](const uint8_t* src) {
        for (int64_t o = 0; o < outer; ++o) std::copy(src + o * row, src + (o + 1) * row, dst + o * out_row + offset);
      });
      offset += row;
    }
  });
}

Tensor slice_last_axis(const Tensor& t, int64_t begin, int64_t count) {
  Shape shape = t.shape();
  int64_t n = shape.back();
  TESSERA_CHECK(begin >= 0 && count >= 0 && begin + count <= n, "slice out of range");
  shape.back() = count;
  auto elem = static_cast<int64_t>(dtype_size(t.dtype()));
  int64_t rows = n == 0 ? 0 : t.numel() / n;
  return made_from({t}, t.dtype(), shape, [t, rows, n, begin, count, elem](uint8_t* dst) {
    t.read_once([&](const uint8_t* src) {
      for (int64_t r = 0; r < rows; ++r)
        std::copy(src + (r * n + begin) * elem, src + (r * n + begin + count) * elem, dst + r * count * elem);
    });
  });
}

Tensor transpose_2d(const Tensor& t) {
  int64_t rows = t.shape()[0], cols = t.shape()[1];
  Tensor out(t.dtype(), {cols, rows});
  size_t elem = dtype_size(t.dtype());
  uint8_t* dst = out.mutable_data();
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      std::copy(t.data() + (i * cols + j) * elem, t.data() + (i * cols + j + 1) * elem, dst + (j * rows + i) * elem);
  return out;
}

}  // namespace tessera::mutator
