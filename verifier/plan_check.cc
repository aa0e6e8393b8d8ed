#include "verifier/plan_check.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "graph/dim_map.h"
#include "graph/error.h"
#include "graph/interpreter.h"
#include "verifier/input_ranges.h"
#include "verifier/random.h"

namespace tessera::verifier {

std::string EndToEndReport::summary() const {
  std::ostringstream os;
  os << (passed ? "passed" : "FAILED") << ": " << trials << " random input set" << (trials == 1 ? "" : "s");
  if (given > 0) os << " and " << given << " given";
  if (!integer_inputs.empty()) os << " (integer inputs: " << integer_inputs << ")";
  os << ", tolerance atol " << atol << " + rtol " << rtol << " + " << scale_rtol << " of the output's largest value";
  if (!tolerance_rule.empty()) os << " (" << tolerance_rule << ")";
  os << ", max abs error " << max_abs_error;
  if (!detail.empty()) os << "; " << detail;
  return os.str();
}

namespace {

// The unit roundoff of a float type (half its machine epsilon); 0 for others.
double unit_roundoff(DType t) {
  switch (t) {
    case DType::kBF16: return std::ldexp(1.0, -8);
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kF32: return std::ldexp(1.0, -24);
    case DType::kF64: return std::ldexp(1.0, -53);
    default: return 0;
  }
}

// The product of a node's contracted factors (1 for element-wise nodes).
int64_t reduction_length(const Graph& g, const Node& n) {
  int64_t k = 1;
  for (const Factor& f : dim_map(g, n).factors)
    if (f.kind != FactorKind::kPass) k *= std::max<int64_t>(f.size, 1);
  return k;
}

}  // namespace

Tolerance end_to_end_tolerance(const Graph& original, const EndToEndOptions& o) {
  Tolerance t{o.rtol, o.atol, o.scale_rtol, ""};
  if (!o.from_precision) return t;
  double u = 0;
  DType narrowest = DType::kF32;
  for (ValueId v = 0; v < original.num_values(); ++v) {
    DType d = original.type(v).dtype;
    if (unit_roundoff(d) > u) {
      u = unit_roundoff(d);
      narrowest = d;
    }
  }
  if (u == 0) return t;
  int64_t k = 1;
  for (NodeId n = 0; n < original.num_nodes(); ++n) k = std::max(k, reduction_length(original, original.node(n)));
  double eps = u * std::sqrt(static_cast<double>(k)) / 2;
  t.rtol = std::max(t.rtol, eps);
  t.atol = std::max(t.atol, eps);
  t.scale_rtol = std::max(t.scale_rtol, 4 * u);
  if (t.rtol == o.rtol && t.atol == o.atol && t.scale_rtol == o.scale_rtol) return t;
  std::ostringstream os;
  os << "from " << dtype_name(narrowest) << ", u = 2^" << std::ilogb(u) << ", longest reduction K = " << k
     << ": eps = u sqrt(K) / 2 = " << eps << ", scale 4 u";
  t.rule = os.str();
  return t;
}

EndToEndReport check_end_to_end(const Program& original, const Program& candidate, const EndToEndOptions& options) {
  EndToEndOptions o = options;
  Tolerance tol = end_to_end_tolerance(original.graph(), options);
  o.rtol = tol.rtol;
  o.atol = tol.atol;
  o.scale_rtol = tol.scale_rtol;
  if (original.input_types() != candidate.input_types())
    TESSERA_THROW(ErrorKind::kUsage, "the candidate's inputs do not match the original's");
  EndToEndReport r;
  r.trials = o.trials;
  r.rtol = o.rtol;
  r.atol = o.atol;
  r.scale_rtol = o.scale_rtol;
  r.tolerance_rule = tol.rule;
  if (original.output_types() != candidate.output_types()) {
    r.detail = "output types differ";
    return r;
  }
  std::vector<IntRange> ranges = integer_input_ranges(original.graph(), o.input_ranges);
  r.integer_inputs = describe_ranges(original.graph(), ranges);
  std::vector<std::pair<int64_t, int64_t>> bounds;
  for (const IntRange& b : ranges) bounds.emplace_back(b.lo, b.hi);
  r.given = static_cast<int>(o.given_inputs.size());
  SplitMix rng(o.seed);
  const int sets = o.trials + r.given;
  std::vector<std::vector<RefTensor<float>>> ins;
  for (int t = 0; t < sets; ++t) {
    std::vector<RefTensor<float>> in;
    if (t < o.trials) {
      in = random_inputs<float>(original.input_types(), rng, &bounds);
    } else {
      const std::vector<Tensor>& set = o.given_inputs[static_cast<size_t>(t - o.trials)];
      if (set.size() != original.input_types().size())
        TESSERA_THROW(ErrorKind::kUsage, "a given input set has " << set.size() << " tensors for "
                                                                  << original.input_types().size() << " inputs");
      for (size_t i = 0; i < set.size(); ++i) {
        if (set[i].type() != original.input_types()[i])
          TESSERA_THROW(ErrorKind::kUsage, "given input " << i << " is " << type_str(set[i].type()) << ", the model's is "
                                                          << type_str(original.input_types()[i]));
        in.push_back(to_ref<float>(set[i]));
      }
    }
    ins.push_back(std::move(in));
  }
  // Every set at once, step by step: each weight is converted once for all
  // of them (and once for the ranks that hold it alike), where running the
  // sets one after another converted it once per set and program.
  std::string item = std::to_string(sets) + (sets == 1 ? " set" : " sets");
  auto steps = [&](const char* which) -> StepFn {
    if (!o.progress) return {};
    return [&o, item, which](int64_t done, int64_t total) {
      o.progress({"checking", item + ", " + which, done, total, false});
    };
  };
  // All sets at once where they fit the memory limit (each holds its own
  // activations and inputs: a 7B decoder's KV caches on every rank), else
  // one after another.
  auto run_all = [&](const Program& p, const char* which) {
    try {
      return p.run_sets<float>(ins, steps(which));
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kResource || ins.size() < 2) throw;
    }
    std::vector<GlobalOutputs<float>> each;
    for (const std::vector<RefTensor<float>>& in : ins) each.push_back(std::move(p.run_sets<float>({in}, steps(which)).at(0)));
    return each;
  };
  std::vector<GlobalOutputs<float>> as = run_all(original, "original");
  std::vector<GlobalOutputs<float>> bs = run_all(candidate, "plan");
  for (int t = 0; t < sets; ++t) {
    const GlobalOutputs<float>& a = as[static_cast<size_t>(t)];
    const GlobalOutputs<float>& b = bs[static_cast<size_t>(t)];
    for (size_t j = 0; j < a.values.size(); ++j) {
      const RefTensor<float>& x = a.values[j];
      const RefTensor<float>& y = b.values[j];
      double scale = 0;
      for (int64_t k = 0; k < x.numel(); ++k) {
        double u = x.is_num() ? x.num[k] : static_cast<double>(x.ints[k]);
        if (std::isfinite(u)) scale = std::max(scale, std::fabs(u));
      }
      for (int64_t k = 0; k < x.numel(); ++k) {
        double u = x.is_num() ? x.num[k] : static_cast<double>(x.ints[k]);
        double w = y.is_num() ? y.num[k] : static_cast<double>(y.ints[k]);
        double err = std::fabs(u - w);
        bool nan_mismatch = std::isnan(u) != std::isnan(w);
        if (!std::isnan(err)) r.max_abs_error = std::max(r.max_abs_error, err);
        bool bad = nan_mismatch || (!std::isnan(err) && err > o.atol + o.rtol * std::fabs(u) + o.scale_rtol * scale) ||
                   b.replica_mismatch[j][k];
        if (bad && r.mismatches++ == 0) {
          std::ostringstream os;
          os << "output " << j << " flat index " << k << ": original " << u << ", candidate " << w
             << (b.replica_mismatch[j][k] ? " (replicas disagree)" : "");
          r.detail = os.str();
        }
      }
    }
  }
  r.passed = r.mismatches == 0;
  if (!r.passed) r.detail = std::to_string(r.mismatches) + " positions out of tolerance, first at " + r.detail;
  return r;
}

}  // namespace tessera::verifier
