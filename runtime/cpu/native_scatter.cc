// ScatterElements and ScatterND without a reduction, for any dtype: the
// data is copied to the output, then each update is stored at the position
// its index gives. A static-cache decoder writes its new key and value into
// the KV cache this way every step.
//
// In place: the output may take over data's buffer (Kernel::in_place_input)
// where data dies here, and then only the updates are written. Every index
// is checked before anything is written, so a bad index leaves the buffer
// as it was and fails as the reference kernel does (one line, naming the
// node). Reductions (add, mul, max, min) need the dtype's arithmetic: they
// stay with the reference kernel.
#include <cstring>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/ops/op_util.h"
#include "runtime/cpu/native_kernels.h"

namespace tessera::runtime::cpu {
namespace {

// Update u (a run of `slice_bytes` at updates + u * slice_bytes) goes to
// element base[u] + sum_j index(u, j) * strides[j] of the output, with
// index(u, j) the j-th of the update's `dims.size()` indices, each into a dim
// of size dims[j] (negative counting from the end).
class ScatterKernel : public Kernel {
 public:
  int64_t data_bytes = 0, elem = 0, slice_bytes = 0, count = 0;
  DType index_dtype = DType::kI64;
  std::vector<int64_t> base;  // per update; empty: all 0 (ScatterND)
  std::vector<int64_t> dims, strides, axes;

  void run(ExecContext& ctx) override {
    const uint8_t* data = ctx.ptr[inputs[0]];
    const uint8_t* idx = ctx.ptr[inputs[1]];
    const uint8_t* upd = ctx.ptr[inputs[2]];
    uint8_t* out = ctx.ptr[outputs[0]];
    auto k = static_cast<int64_t>(dims.size());
    for (int64_t i = 0; i < count * k; ++i) {
      int64_t v = index(idx, i), dim = dims[static_cast<size_t>(i % k)];
      if (v < -dim || v >= dim)
        TESSERA_THROW(ErrorKind::kInvalidGraph, "index " << v << " is out of range for axis "
                                                         << axes[static_cast<size_t>(i % k)] << " of size " << dim);
    }
    if (out != data && data_bytes > 0) std::memcpy(out, data, static_cast<size_t>(data_bytes));
    for (int64_t u = 0; u < count; ++u) {
      int64_t at = base.empty() ? 0 : base[static_cast<size_t>(u)];
      for (int64_t j = 0; j < k; ++j) {
        int64_t v = index(idx, u * k + j);
        at += (v < 0 ? v + dims[static_cast<size_t>(j)] : v) * strides[static_cast<size_t>(j)];
      }
      std::memcpy(out + at * elem, upd + u * slice_bytes, static_cast<size_t>(slice_bytes));
    }
  }
  std::string impl() const override { return "native"; }

 private:
  int64_t index(const uint8_t* p, int64_t i) const { return read_index(p, index_dtype, i); }
};

}  // namespace

std::unique_ptr<Kernel> make_scatter_kernel(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  const std::string reduction =
      n.kind == OpKind::kScatterND ? ScatterNDAttrs::of(n).reduction : ScatterElementsAttrs::of(n).reduction;
  if (reduction != "none") return nullptr;
  const TensorType& data = g.type(n.inputs[0]);
  const TensorType& indices = g.type(n.inputs[1]);
  if (indices.dtype != DType::kI64 && indices.dtype != DType::kI32) return nullptr;
  auto k = std::make_unique<ScatterKernel>();
  k->index_dtype = indices.dtype;
  k->elem = static_cast<int64_t>(dtype_size(data.dtype));
  k->data_bytes = data.numel() * k->elem;
  std::vector<int64_t> strides = shape_strides(data.shape);
  if (n.kind == OpKind::kScatterElements) {
    int64_t axis = ops::normalize_axis(ScatterElementsAttrs::of(n).axis, data.rank());
    k->count = indices.numel();
    k->slice_bytes = k->elem;
    k->dims = {data.shape[static_cast<size_t>(axis)]};
    k->strides = {strides[static_cast<size_t>(axis)]};
    k->axes = {axis};
    // Each update's position with its axis index at 0.
    std::vector<int64_t> idx;
    k->base.resize(static_cast<size_t>(k->count));
    for (int64_t u = 0; u < k->count; ++u) {
      ops::unravel(u, indices.shape, idx);
      idx[static_cast<size_t>(axis)] = 0;
      k->base[static_cast<size_t>(u)] = ops::ravel(idx, strides);
    }
  } else if (n.kind == OpKind::kScatterND) {
    int64_t depth = indices.shape.back();
    k->count = shape_numel(Shape(indices.shape.begin(), indices.shape.end() - 1));
    k->slice_bytes = k->elem * shape_numel(Shape(data.shape.begin() + depth, data.shape.end()));
    for (int64_t j = 0; j < depth; ++j) {
      k->dims.push_back(data.shape[static_cast<size_t>(j)]);
      k->strides.push_back(strides[static_cast<size_t>(j)]);
      k->axes.push_back(j);
    }
  } else {
    return nullptr;
  }
  k->in_place_input = 0;
  k->max_threads = 1;
  return finish_node_kernel(std::move(k), n);
}

}  // namespace tessera::runtime::cpu
