#include "cost/flops.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace tessera {

namespace {

int64_t product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

// Resize runs one axis at a time (graph/ops/resize.cc): a resized axis costs
// a multiply-add per tap for every element of its pass's output. Taps: 2
// (linear) or 4 (cubic), stretched by 1/scale when antialiasing a
// downscale; nearest only copies.
int64_t resize_flops(const Shape& in, const Node& n) {
  const std::string& mode = n.attrs.s("mode");
  if (mode == "nearest") return 0;
  double support = mode == "cubic" ? 2.0 : 1.0;
  bool antialias = n.attrs.i("antialias") != 0;
  const std::vector<double>& scales = n.attrs.floats("scales");
  const std::vector<int64_t>& sizes = n.attrs.ints("sizes");
  Shape cur = in;
  int64_t flops = 0;
  for (size_t a = 0; a < in.size(); ++a) {
    if (scales[a] == 1.0 && sizes[a] == in[a]) continue;
    double stretch = antialias ? std::min(scales[a], 1.0) : 1.0;
    int64_t taps = 2 * static_cast<int64_t>(std::ceil(support / stretch));
    cur[a] = sizes[a];
    flops += 2 * taps * product(cur);
  }
  return flops;
}

}  // namespace

int64_t node_flops(const Graph& g, const Node& n) {
  const OpDef& def = op_def(n.kind);
  auto in = [&](size_t i) -> const TensorType& { return g.type(n.inputs[i]); };
  const TensorType& out = g.type(n.outputs[0]);
  bool has_bias = n.inputs.size() > 2 && n.inputs[2] != kNoValue;
  switch (n.kind) {
    case OpKind::kMatMul: {
      const Shape& a = in(0).shape;
      int64_t k = a.empty() ? 1 : a.back();
      return 2 * out.numel() * k;
    }
    case OpKind::kGemm: {
      const Shape& a = in(0).shape;
      int64_t k = n.attrs.i("transA") ? a[0] : a[1];
      return 2 * out.numel() * k + (has_bias ? out.numel() : 0);
    }
    case OpKind::kConv: {
      // Each output element is a dot product over (C_in / group) * prod(kernel).
      const Shape& w = in(1).shape;
      return 2 * out.numel() * product(w, 1) + (has_bias ? out.numel() : 0);
    }
    case OpKind::kConvTranspose: {
      // Each input element scatters into (C_out / group) * prod(kernel) outputs.
      const Shape& w = in(1).shape;
      return 2 * in(0).numel() * product(w, 1) + (has_bias ? out.numel() : 0);
    }
    case OpKind::kMaxPool:
    case OpKind::kAveragePool:
      return out.numel() * product(n.attrs.ints("kernel_shape"));
    case OpKind::kReduceL2:
    case OpKind::kReduceSumSquare:
      return 2 * in(0).numel();
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax:
      return 5 * in(0).numel();  // max, subtract, exp, sum, divide
    case OpKind::kLayerNormalization:
      return 8 * in(0).numel();  // mean, centre, square, sum, rsqrt, scale, shift
    case OpKind::kBatchNormalization:
      return 2 * in(0).numel();  // folded into one multiply-add per element
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
      return in(0).numel();
    case OpKind::kResize:
      return resize_flops(in(0).shape, n);
    default:
      break;
  }
  // Element-wise: the op table's arithmetic row (graph/op.h), a
  // transcendental counted as one operation, as vector libraries issue it.
  if (def.elementwise()) {
    Arithmetic a = op_arithmetic(g, n);
    return static_cast<int64_t>(static_cast<double>(out.numel()) * (a.ops + a.transcendentals));
  }
  // The rest of the reduce family (ops.def) and the global pools: one
  // operation per element read.
  if (def.family == OpFamily::kReduce || n.kind == OpKind::kGlobalAveragePool || n.kind == OpKind::kGlobalMaxPool)
    return in(0).numel();
  return 0;  // data movement
}

int64_t graph_flops(const Graph& g) {
  int64_t total = 0;
  for (NodeId n = 0; n < g.num_nodes(); ++n) total += node_flops(g, g.node(n));
  return total;
}

}  // namespace tessera
