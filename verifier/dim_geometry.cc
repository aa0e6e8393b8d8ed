#include "verifier/dim_geometry.h"

#include <algorithm>

namespace tessera::verifier {

std::vector<Place> factor_places(const DimMap& m, const Piece& p) {
  std::vector<Place> places(m.factors.size());
  for (size_t d = 0; d < p.dims.size(); ++d) {
    const DimExpr& e = p.dims[d];
    if (e.form != DimForm::kAffine) continue;
    for (size_t t = 0; t < e.terms.size(); ++t) places[static_cast<size_t>(e.terms[t].factor)] = {static_cast<int>(d), t};
  }
  return places;
}

bool all_affine(const Piece& p) {
  auto affine = [](const DimExpr& e) { return e.form == DimForm::kAffine; };
  if (!std::all_of(p.dims.begin(), p.dims.end(), affine)) return false;
  for (const Read& r : p.reads)
    if (!std::all_of(r.dims.begin(), r.dims.end(), affine)) return false;
  return true;
}

namespace {

// The positional factor a dim names alone, or -1.
int lone_positional(const DimExpr& e) {
  return e.form == DimForm::kPositional && e.terms.size() == 1 ? e.terms[0].factor : -1;
}

}  // namespace

std::optional<std::vector<FlatRun>> flat_runs(const Node& n, const DimMap& m, const Piece& p, const Shape& in,
                                              const Shape& out) {
  std::vector<FlatRun> runs;
  auto run_of = [&](int f) -> FlatRun& {
    for (FlatRun& r : runs)
      if (r.factor == f) return r;
    runs.push_back({f, {}, {}});
    return runs.back();
  };
  bool view = op_def(n.kind).is_view && m.copies && p.reads.size() == 1 && p.reads[0].input == 0;
  for (size_t j = 0; j < p.dims.size(); ++j) {
    if (p.dims[j].form == DimForm::kAffine) continue;
    int f = lone_positional(p.dims[j]);
    if (!view || f < 0) return std::nullopt;
    run_of(f).out_dims.push_back(j);
  }
  for (const Read& r : p.reads)
    for (size_t d = 0; d < r.dims.size(); ++d) {
      if (r.dims[d].form == DimForm::kAffine) continue;
      int f = lone_positional(r.dims[d]);
      if (!view || f < 0) return std::nullopt;
      run_of(f).in_dims.push_back(d);
    }
  for (const FlatRun& r : runs) {
    int64_t a = 1, b = 1;
    for (size_t d : r.in_dims) a *= in.at(d);
    for (size_t j : r.out_dims) b *= out.at(j);
    if (r.in_dims.empty() || r.out_dims.empty() || a != b || a != m.factors[static_cast<size_t>(r.factor)].size)
      return std::nullopt;
  }
  return runs;
}

}  // namespace tessera::verifier
