#include "verifier/box_check.h"

#include <algorithm>

#include "graph/error.h"
#include "verifier/index_maps.h"
#include "verifier/point_eval.h"
#include "verifier/random.h"
#include "verifier/split_points.h"

namespace tessera::verifier {
namespace {

// More boxes than this cost more in sampling than evaluating everything.
constexpr int64_t kMaxBoxes = 1 << 16;

DimSplits merge(const DimSplits& a, const DimSplits& b) {
  DimSplits out(a.size());
  for (size_t d = 0; d < a.size(); ++d) {
    std::set_union(a[d].begin(), a[d].end(), b[d].begin(), b[d].end(), std::back_inserter(out[d]));
  }
  return out;
}

void fill_box(const Box& box, const Shape& shape, std::vector<uint8_t>& mask) {
  std::vector<int64_t> strides = shape_strides(shape), idx = box.lo;
  int64_t n = box.numel();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, flat = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      int64_t ext = box.hi[d] - box.lo[d];
      flat += (box.lo[d] + rem % ext) * strides[d];
      rem /= ext;
    }
    mask[static_cast<size_t>(flat)] = 1;
  }
}

}  // namespace

std::optional<BoxCheck> box_check(const Graph& original, const Graph& candidate, int trials, uint64_t seed,
                                  int64_t budget) {
  std::optional<std::vector<DimSplits>> sa = split_points(original), sb = split_points(candidate);
  if (!sa || !sb) return std::nullopt;
  std::optional<std::vector<LinearReads>> ra = linear_reads(original), rb = linear_reads(candidate);
  if (!ra || !rb) return std::nullopt;
  struct OutputBoxes {
    const LinearReads* reads_a = nullptr;
    const LinearReads* reads_b = nullptr;
    Shape shape;
    std::vector<Box> boxes;
    std::vector<std::vector<std::vector<int64_t>>> samples;
    std::vector<std::vector<uint8_t>> differs;  // per box, per sample
  };
  std::vector<OutputBoxes> outs;
  int64_t total_boxes = 0, positions = 0;
  for (size_t j = 0; j < original.outputs().size(); ++j) {
    OutputBoxes o;
    o.shape = original.type(original.outputs()[j]).shape;
    o.reads_a = &(*ra)[static_cast<size_t>(original.outputs()[j])];
    o.reads_b = &(*rb)[static_cast<size_t>(candidate.outputs()[j])];
    DimSplits s = merge((*sa)[static_cast<size_t>(original.outputs()[j])],
                        (*sb)[static_cast<size_t>(candidate.outputs()[j])]);
    total_boxes += grid_box_count(o.shape, s);
    if (total_boxes > kMaxBoxes) return std::nullopt;
    o.boxes = grid_boxes(o.shape, s);
    for (const Box& b : o.boxes) {
      o.samples.push_back(box_samples(b));
      o.differs.emplace_back(o.samples.back().size(), 0);
      positions += static_cast<int64_t>(o.samples.back().size());
    }
    outs.push_back(std::move(o));
  }
  std::vector<TensorType> types;
  for (ValueId v : original.inputs()) types.push_back(original.type(v));
  SplitMix rng(seed);
  int64_t work = 0;
  try {
    for (int trial = 0; trial < trials; ++trial) {
      std::vector<RefTensor<Zp>> in = random_inputs<Zp>(types, rng);
      PointEvaluator ea(original, in, &work, budget), eb(candidate, in, &work, budget);
      for (size_t j = 0; j < outs.size(); ++j)
        for (size_t k = 0; k < outs[j].boxes.size(); ++k)
          for (size_t s = 0; s < outs[j].samples[k].size(); ++s) {
            const std::vector<int64_t>& p = outs[j].samples[k][s];
            outs[j].differs[k][s] |= ea.output_at(j, p) != eb.output_at(j, p);
          }
    }
  } catch (const WorkBudgetExceeded&) {
    return std::nullopt;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kUnsupported) return std::nullopt;  // the full path reports it
    throw;
  }
  BoxCheck result;
  result.boxes = total_boxes;
  result.positions = positions;
  for (const OutputBoxes& o : outs) {
    std::vector<uint8_t> mask(static_cast<size_t>(shape_numel(o.shape)), 0);
    for (size_t k = 0; k < o.boxes.size(); ++k) {
      const std::vector<uint8_t>& hits = o.differs[k];
      bool all = std::all_of(hits.begin(), hits.end(), [](uint8_t x) { return x != 0; });
      bool none = std::none_of(hits.begin(), hits.end(), [](uint8_t x) { return x != 0; });
      if (none) continue;
      if (!all) return std::nullopt;
      // All samples differ: decided only where the index maps cannot meet.
      std::vector<bool> moving;
      for (size_t d = 0; d < o.shape.size(); ++d) moving.push_back(o.boxes[k].hi[d] - o.boxes[k].lo[d] > 1);
      if (!single_linear_part(*o.reads_a, *o.reads_b, moving)) return std::nullopt;
      fill_box(o.boxes[k], o.shape, mask);
    }
    result.masks.push_back(std::move(mask));
  }
  return result;
}

}  // namespace tessera::verifier
