#include "verifier/multilinear.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "graph/error.h"
#include "graph/zp.h"
#include "verifier/box_check.h"
#include "verifier/boxes.h"
#include "verifier/degree.h"
#include "verifier/integer_cut.h"
#include "verifier/point_eval.h"
#include "verifier/random.h"
#include "verifier/shared_eval.h"

namespace tessera::verifier {
namespace {

void require_same_inputs(const Program& a, const Program& b) {
  const auto& x = a.input_types();
  const auto& y = b.input_types();
  if (x.size() != y.size())
    TESSERA_THROW(ErrorKind::kUsage, "the programs take different numbers of inputs: " << x.size() << " and " << y.size());
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != y[i])
      TESSERA_THROW(ErrorKind::kUsage, "input " << i << " is " << type_str(x[i]) << " in the original and "
                                                << type_str(y[i]) << " in the candidate");
}

Box whole(const Shape& s) { return Box{std::vector<int64_t>(s.size(), 0), s}; }

// Outputs whose count or types differ cannot be compared by value.
bool structural_mismatch(const Program& a, const Program& b, Verdict& v) {
  const auto& x = a.output_types();
  const auto& y = b.output_types();
  std::ostringstream why;
  if (x.size() != y.size()) why << "the programs have " << x.size() << " and " << y.size() << " outputs";
  for (size_t j = 0; j < std::min(x.size(), y.size()); ++j)
    if (x[j] != y[j]) {
      if (why.tellp() > 0) why << "; ";
      why << "output " << j << " is " << type_str(x[j]) << " vs " << type_str(y[j]);
      v.differing.push_back({static_cast<int>(j), {whole(x[j].shape)}});
    }
  if (why.tellp() == 0) return false;
  v.kind = Verdict::kDiffers;
  v.method = Method::kStructural;
  v.error_bound = 0.0;
  v.reason = why.str();
  return true;
}

template <class T>
bool differs_at(const RefTensor<T>& a, const RefTensor<T>& b, size_t k) {
  return a.is_num() ? !(a.num[k] == b.num[k]) : a.ints[k] != b.ints[k];
}

GlobalOutputs<Zp> plain_outputs(std::vector<RefTensor<Zp>> values) {
  GlobalOutputs<Zp> g;
  for (const RefTensor<Zp>& v : values) g.replica_mismatch.emplace_back(static_cast<size_t>(v.numel()), 0);
  g.values = std::move(values);
  return g;
}

bool float_differs(double a, double b, const CheckOptions& o) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) != std::isnan(b);
  if (a == b) return false;
  return std::fabs(a - b) > o.atol + o.rtol * std::max(std::fabs(a), std::fabs(b));
}

// Runs both programs in double on random inputs; marks positions whose values
// differ beyond the tolerance.
std::vector<std::vector<uint8_t>> float_difference(const Program& a, const Program& b, const CheckOptions& o) {
  std::vector<std::vector<uint8_t>> masks;
  for (const TensorType& t : a.output_types()) masks.emplace_back(static_cast<size_t>(t.numel()), 0);
  SplitMix rng(o.seed ^ 0xf10a7);
  for (int trial = 0; trial < o.float_trials; ++trial) {
    std::vector<RefTensor<double>> in = random_inputs<double>(a.input_types(), rng);
    GlobalOutputs<double> ra = a.run<double>(in), rb = b.run<double>(in);
    for (size_t j = 0; j < masks.size(); ++j) {
      const RefTensor<double>& x = ra.values[j];
      const RefTensor<double>& y = rb.values[j];
      for (size_t k = 0; k < masks[j].size(); ++k) {
        bool d = x.is_num() ? float_differs(x.num[k], y.num[k], o) : x.ints[k] != y.ints[k];
        masks[j][k] |= d || rb.replica_mismatch[j][k] || ra.replica_mismatch[j][k];
      }
    }
  }
  return masks;
}

bool box_hits(const Box& box, const Shape& shape, const std::vector<uint8_t>& mask) {
  std::vector<int64_t> strides = shape_strides(shape), idx = box.lo;
  int64_t n = box.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, flat = 0;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      int64_t ext = box.hi[d] - box.lo[d];
      flat += (box.lo[d] + rem % ext) * strides[d];
      rem /= ext;
    }
    if (mask[static_cast<size_t>(flat)]) return true;
  }
  return false;
}

std::string assumptions(const ProgramAnalysis& a, const ProgramAnalysis& b) {
  std::vector<std::string> ops = a.nonlinear_ops;
  for (const std::string& s : b.nonlinear_ops)
    if (std::find(ops.begin(), ops.end(), s) == ops.end()) ops.push_back(s);
  std::ostringstream os;
  if (!ops.empty()) {
    os << "assumes ";
    for (size_t i = 0; i < ops.size(); ++i) os << (i ? ", " : "") << ops[i];
    os << " are deterministic functions of their inputs (uninterpreted over Z_p)";
  }
  if (a.order_based || b.order_based) os << (ops.empty() ? "" : "; ") << "residue comparisons bound each trial by 1/2";
  if (a.inexact_constants || b.inexact_constants)
    os << (os.tellp() > 0 ? "; " : "") << "non-integral constants read as random residues";
  return os.str();
}

// Below this many multiply-adds a whole evaluation takes about 0.15 ms (the
// full BERT check runs ~67M in 150 ms) and sampling has nothing to win. The
// sampled path gets half the whole evaluation's work as its budget: its cost
// per multiply-add is about the kernels' (BERT: ~35M in 71 ms), and giving
// up past the budget wastes at most that half.
constexpr int64_t kSmallWork = int64_t{1} << 16;

std::optional<BoxCheck> sampled_check(const Program& a, const Program& b, int trials, const CheckOptions& o) {
  using E = CheckOptions::Evaluation;
  if (o.evaluation == E::kFull || a.sharded() || b.sharded() || !pair_evaluable(a.graph()) ||
      !pair_evaluable(b.graph()))
    return std::nullopt;
  int64_t full = (full_evaluation_work(a.graph()) + full_evaluation_work(b.graph())) * trials;
  if (o.evaluation == E::kBoxes) return box_check(a.graph(), b.graph(), trials, o.seed, INT64_MAX);
  if (full < kSmallWork) return std::nullopt;
  return box_check(a.graph(), b.graph(), trials, o.seed, full / 2);
}

// Evaluates every output position; returns a verdict when the programs
// cannot be evaluated over Z_p.
std::optional<Verdict> full_masks(const Program& original, const Program& candidate, Verdict v, const CheckOptions& o,
                                  std::vector<std::vector<uint8_t>>& masks) {
  for (const TensorType& t : original.output_types()) masks.emplace_back(static_cast<size_t>(t.numel()), 0);
  SplitMix rng(o.seed);
  // Single graphs share the work both compute (shared_eval.h).
  bool shared = !original.sharded() && !candidate.sharded() && pair_evaluable(original.graph()) &&
                pair_evaluable(candidate.graph());
  for (int trial = 0; trial < v.trials; ++trial) {
    std::vector<RefTensor<Zp>> in = random_inputs<Zp>(original.input_types(), rng);
    GlobalOutputs<Zp> ra, rb;
    try {
      if (shared) {
        PairOutputs pair = evaluate_pair_zp(original.graph(), candidate.graph(), in);
        ra = plain_outputs(std::move(pair.original));
        rb = plain_outputs(std::move(pair.candidate));
      } else {
        ra = original.run<Zp>(in);
        rb = candidate.run<Zp>(in);
      }
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kUnsupported) throw;
      // An op without a Z_p kernel: nothing can be concluded by this test.
      v.kind = Verdict::kUnknown;
      v.reason = std::string("cannot evaluate over Z_p: ") + e.what();
      return v;
    }
    for (size_t j = 0; j < masks.size(); ++j)
      for (size_t k = 0; k < masks[j].size(); ++k)
        masks[j][k] |= differs_at(ra.values[j], rb.values[j], k) || ra.replica_mismatch[j][k] ||
                       rb.replica_mismatch[j][k];
  }
  return std::nullopt;
}

}  // namespace

Verdict check_equivalence(const Program& original, const Program& candidate, const CheckOptions& o) {
  require_same_inputs(original, candidate);
  Verdict v;
  if (structural_mismatch(original, candidate, v)) return v;
  if (!original.sharded() && !candidate.sharded()) {
    // Integer inputs read the same way by both: test the float parts, where
    // the test can conclude (integer_cut.h).
    std::string why;
    if (std::optional<IntegerCut> cut = cut_integer_inputs(original.graph(), candidate.graph(), &why)) {
      Verdict r = check_equivalence(Program(cut->original), Program(cut->candidate), o);
      if (r.equivalent()) {
        r.reason = "the integer inputs are read only through the same " + cut->detail +
                   " in both, tested as free inputs" + (r.reason.empty() ? "" : "; " + r.reason);
        return r;
      }
    }
  }

  ProgramAnalysis a = analyze_program(original.graph()), b = analyze_program(candidate.graph());
  double per_trial = trial_error_bound(a, b);
  v.trials = std::min(trials_for(per_trial, o.target_error), o.max_trials);
  v.degree = std::max(a.degree, b.degree);
  v.error_bound = std::pow(per_trial, v.trials);

  const std::vector<TensorType>& outs = original.output_types();
  std::vector<std::vector<uint8_t>> masks;
  std::optional<BoxCheck> fast = sampled_check(original, candidate, v.trials, o);
  if (fast) {
    masks = std::move(fast->masks);
    v.sampled_boxes = fast->boxes;
  } else if (std::optional<Verdict> unknown = full_masks(original, candidate, v, o, masks)) {
    return *unknown;
  }
  for (size_t j = 0; j < masks.size(); ++j) {
    std::vector<Box> boxes = boxes_from_mask(outs[j].shape, masks[j]);
    if (!boxes.empty()) v.differing.push_back({static_cast<int>(j), std::move(boxes)});
  }
  bool polynomial = a.polynomial() && b.polynomial();
  v.method = polynomial ? Method::kMultilinear : Method::kUninterpreted;
  v.reason = assumptions(a, b);

  if (v.differing.empty()) {
    if (a.integer_inputs || b.integer_inputs) {
      v.kind = Verdict::kUnknown;
      v.reason = "integer inputs were tested at random values only (Z_p cannot range over indices)" +
                 (v.reason.empty() ? "" : "; " + v.reason);
    } else {
      v.kind = Verdict::kEquivalent;
    }
    return v;
  }
  if (polynomial) {
    v.kind = Verdict::kDiffers;
    v.error_bound = 0.0;  // a Z_p difference of integer polynomials is a real difference
    return v;
  }
  // The Z_p difference may be a real identity the uninterpreted reading
  // cannot see: keep the verdict only where floats confirm every box.
  std::vector<std::vector<uint8_t>> fmask = float_difference(original, candidate, o);
  size_t confirmed = 0, total = 0;
  for (const OutputRegion& r : v.differing)
    for (const Box& box : r.boxes) {
      ++total;
      confirmed += box_hits(box, outs[r.output].shape, fmask[r.output]);
    }
  v.method = Method::kFloatTest;
  v.error_bound = o.rtol;
  std::ostringstream why;
  if (confirmed == total) {
    v.kind = Verdict::kDiffers;
    why << "Z_p differences confirmed in floating point (rtol " << o.rtol << ") in all " << total << " boxes";
  } else {
    v.kind = Verdict::kUnknown;
    why << "Z_p readings differ but floats agree within rtol " << o.rtol << " in " << (total - confirmed) << " of "
        << total << " boxes: a non-linear op sees different arguments in the two programs, so the "
           "uninterpreted-function reading decides nothing there";
  }
  if (!v.reason.empty()) why << "; " << v.reason;
  v.reason = why.str();
  return v;
}

}  // namespace tessera::verifier
