// Internal to onnx_import: Resize's attributes between ONNX and the IR's
// explicit form (graph/ops/resize.cc), both ways.
//
// Import: ONNX gives the output either by scales or by sizes (inputs that
// must be constants once folding has run), optionally for a subset of the
// axes and, from opset 18, under a keep_aspect_ratio_policy; roi matters
// only for tf_crop_and_resize. All of it becomes full-rank `sizes` (the
// output shape), `scales` (as the coordinate transform uses them) and `roi`.
//
// Export: the ONNX operands that reproduce a node exactly, and the oldest
// opset that has them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/attrs.h"
#include "graph/graph.h"
#include "onnx_import/node_importer.h"

namespace tessera::onnx_import {

Attrs resolve_resize_attrs(NodeImporter& n);

struct ResizeOnnxForm {
  std::string unsupported;      // non-empty: no ONNX form (why)
  int64_t min_opset = 13;       // the oldest opset with this form
  std::string ctm;              // coordinate_transformation_mode to write
  bool antialias = false;       // write antialias = 1 (opset 18)
  std::vector<double> roi;      // full rank, tf_crop_and_resize only
  std::vector<double> scales;   // the scales input, or empty
  std::vector<int64_t> sizes;   // the sizes input (for `axes` when set), or empty
  std::vector<int64_t> axes;    // with `policy` (opset 18), or empty
  std::string policy;           // keep_aspect_ratio_policy, or empty (stretch)
};

// The form for `n` (a Resize of input shape `in`) at `opset`; at an opset
// below min_opset, `unsupported` says what is missing.
ResizeOnnxForm resize_onnx_form(const Node& n, const Shape& in, int64_t opset);

}  // namespace tessera::onnx_import
