#include "verifier/degree.h"

#include <algorithm>
#include <cmath>

#include "graph/error.h"
#include "graph/zp.h"

namespace tessera::verifier {
namespace {

bool compares_residues(OpKind k) { return op_def(k).orders_values; }

// Pow with a constant small integer exponent is x^k over Z_p (number.h keeps
// it exact), so it stays a polynomial of k times the degree.
std::optional<int64_t> constant_small_exponent(const Graph& g, const Node& n) {
  if (n.kind != OpKind::kPow || n.inputs.size() < 2) return std::nullopt;
  const Value& e = g.value(n.inputs[1]);
  if (!e.constant || e.constant->numel() != 1) return std::nullopt;
  double v = e.constant->get_double(0);
  if (v < 0 || v > 8 || v != std::floor(v)) return std::nullopt;
  return static_cast<int64_t>(v);
}

bool integral_constant(const Tensor& t) {
  if (!is_float(t.dtype())) return true;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.get_double(i);
    if (v != std::floor(v) || std::fabs(v) > 9.0e15) return false;
  }
  return true;
}

}  // namespace

ProgramAnalysis analyze_program(const Graph& g) {
  ProgramAnalysis a;
  // deg[v] = degree of v; 0 for constants and values computed from them only.
  std::vector<int64_t> deg(static_cast<size_t>(g.num_values()), 0);
  for (ValueId v : g.inputs()) {
    deg[v] = 1;
    if (!is_float(g.type(v).dtype)) a.integer_inputs = true;
  }
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).constant && !integral_constant(*g.value(v).constant)) a.inexact_constants = true;
  for (NodeId id : g.topo_order()) {
    const Node& n = g.node(id);
    // Float attributes that scale data (Gemm alpha, LeakyRelu alpha, Pad value)
    // are constants too.
    for (const auto& [name, value] : n.attrs.map())
      if (const double* f = std::get_if<double>(&value); f && std::isfinite(*f) && *f != std::floor(*f))
        a.inexact_constants = true;
    const OpDef& def = op_def(n.kind);
    Linearity lin = def.linearity ? def.linearity(n) : Linearity{};
    int64_t out = 0;
    bool nonconst_outside_mask = false, any_input = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i] == kNoValue) continue;
      int64_t d = deg[n.inputs[i]];
      if (d > 0) any_input = true;
      if (lin.linear_in(static_cast<int>(i))) out = lin.separately ? out + d : std::max(out, d);
      else if (d > 0) nonconst_outside_mask = true;
    }
    if (auto k = constant_small_exponent(g, n)) {
      out = deg[n.inputs[0]] * *k;
    } else if (n.kind == OpKind::kDiv && nonconst_outside_mask) {
      // a / b: clearing denominators gives a polynomial of the summed degree.
      out = deg[n.inputs[0]] + deg[n.inputs[1]];
    } else if (any_input && (!lin.any() || nonconst_outside_mask)) {
      // Read as an uninterpreted function of its arguments: a fresh variable.
      out = 1;
      ++a.uninterpreted;
      if (compares_residues(n.kind)) a.order_based = true;
      std::string name = op_name(n.kind);
      if (std::find(a.nonlinear_ops.begin(), a.nonlinear_ops.end(), name) == a.nonlinear_ops.end())
        a.nonlinear_ops.push_back(name);
    }
    for (ValueId o : n.outputs) deg[o] = out;
    a.degree = std::max(a.degree, out);
  }
  for (ValueId v : g.outputs()) a.degree = std::max(a.degree, deg[v]);
  return a;
}

double trial_error_bound(const ProgramAnalysis& a, const ProgramAnalysis& b) {
  if (a.order_based || b.order_based) return 0.5;
  double terms = static_cast<double>(a.uninterpreted + b.uninterpreted + 1);
  double degree = static_cast<double>(std::max<int64_t>({a.degree, b.degree, 1}));
  return std::min(1.0, terms * degree / static_cast<double>(Zp::kP));
}

int trials_for(double per_trial, double target) {
  TESSERA_CHECK(per_trial < 1.0 && target > 0.0, "trial bound " << per_trial << " cannot reach " << target);
  if (per_trial <= 0.0) return 1;
  int n = static_cast<int>(std::ceil(std::log(target) / std::log(per_trial)));
  return std::max(n, 1);
}

}  // namespace tessera::verifier
