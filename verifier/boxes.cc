#include "verifier/boxes.h"

#include <algorithm>
#include <sstream>

#include "graph/error.h"

namespace tessera::verifier {

int64_t Box::numel() const {
  int64_t n = 1;
  for (size_t d = 0; d < lo.size(); ++d) n *= hi[d] - lo[d];
  return n;
}

bool Box::contains(const std::vector<int64_t>& idx) const {
  if (idx.size() != lo.size()) return false;
  for (size_t d = 0; d < lo.size(); ++d)
    if (idx[d] < lo[d] || idx[d] >= hi[d]) return false;
  return true;
}

std::string Box::str() const {
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < lo.size(); ++d) os << (d ? ", " : "") << lo[d] << ":" << hi[d];
  os << "]";
  return os.str();
}

const char* method_name(Method m) {
  switch (m) {
    case Method::kMultilinear: return "multilinear";
    case Method::kUninterpreted: return "multilinear+uninterpreted";
    case Method::kFloatTest: return "float-test";
    case Method::kStructural: return "structural";
  }
  return "?";
}

const char* verdict_kind_name(Verdict::Kind k) {
  switch (k) {
    case Verdict::kEquivalent: return "equivalent";
    case Verdict::kDiffers: return "differs";
    case Verdict::kUnknown: return "unknown";
  }
  return "?";
}

std::string Verdict::summary() const {
  std::ostringstream os;
  os << verdict_kind_name(kind) << " (" << method_name(method) << ", " << trials << " trial"
     << (trials == 1 ? "" : "s");
  if (method == Method::kFloatTest) os << ", tolerance " << error_bound << ")";
  else if (kind == kEquivalent) os << ", error bound " << error_bound << ")";
  else os << ")";
  size_t boxes = 0;
  for (const OutputRegion& r : differing) boxes += r.boxes.size();
  if (boxes)
    os << ", " << boxes << (kind == kUnknown ? " suspect" : " differing") << " box" << (boxes == 1 ? "" : "es");
  if (!reason.empty()) os << ": " << reason;
  return os.str();
}

namespace {

// Boxes over dims [d, rank) of the sub-array starting at `offset`.
std::vector<Box> build(const Shape& shape, const std::vector<int64_t>& strides, const std::vector<uint8_t>& mask,
                       size_t d, int64_t offset) {
  if (d == shape.size()) {
    if (mask[static_cast<size_t>(offset)]) return {Box{}};
    return {};
  }
  std::vector<Box> out;
  std::vector<Box> run;  // sub-boxes of the current run of equal slices
  int64_t run_start = 0;
  auto flush = [&](int64_t end) {
    for (const Box& b : run) {
      Box box;
      box.lo.push_back(run_start);
      box.hi.push_back(end);
      box.lo.insert(box.lo.end(), b.lo.begin(), b.lo.end());
      box.hi.insert(box.hi.end(), b.hi.begin(), b.hi.end());
      out.push_back(std::move(box));
    }
  };
  for (int64_t i = 0; i < shape[d]; ++i) {
    std::vector<Box> sub = build(shape, strides, mask, d + 1, offset + i * strides[d]);
    if (i == 0 || sub != run) {
      flush(i);
      run = std::move(sub);
      run_start = i;
    }
  }
  flush(shape[d]);
  return out;
}

}  // namespace

std::vector<Box> boxes_from_mask(const Shape& shape, const std::vector<uint8_t>& mask) {
  TESSERA_CHECK(static_cast<int64_t>(mask.size()) == shape_numel(shape), "mask size does not match shape");
  if (std::find(mask.begin(), mask.end(), uint8_t{1}) == mask.end()) return {};
  return build(shape, shape_strides(shape), mask, 0, 0);
}

}  // namespace tessera::verifier
