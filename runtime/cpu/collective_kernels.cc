#include "runtime/cpu/collective_kernels.h"

#include <optional>

#include "graph/error.h"
#include "graph/ops/op_util.h"
#include "runtime/cpu/strided_copy.h"

namespace tessera::runtime::cpu {
namespace {

bool summable(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16 || t == DType::kI32 ||
         t == DType::kI64;
}
bool is_16bit_float(DType t) { return t == DType::kF16 || t == DType::kBF16; }

void widen(DType t, const uint8_t* in, float* out, int64_t n) {
  const auto* p = reinterpret_cast<const uint16_t*>(in);
  if (t == DType::kF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(p[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(p[i]);
  }
}

void narrow(DType t, const float* in, uint8_t* out, int64_t n) {
  auto* p = reinterpret_cast<uint16_t*>(out);
  if (t == DType::kF16) {
    for (int64_t i = 0; i < n; ++i) p[i] = float_to_half(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(in[i]);
  }
}

// The scratch of a collective, one region after another (offsets in bytes).
struct Scratch {
  int64_t total = 0;
  int64_t take(int64_t bytes) {
    int64_t at = total;
    total += (bytes + 63) / 64 * 64;
    return at;
  }
};

class CollectiveKernel : public Kernel {
 public:
  OpKind kind = OpKind::kAllReduce;
  int axis = 0;
  DType dtype = DType::kF32;
  int64_t in_elems = 0, out_elems = 0;
  int64_t block_bytes = 0;  // all-gather: the input; all-to-all: one chunk
  std::optional<StridedCopy> pack, unpack;
  int64_t pack_at = -1, recv_at = -1, wide_in_at = -1, wide_out_at = -1;
  Scratch scratch;

  int64_t scratch_bytes() const override { return scratch.total; }
  std::string impl() const override { return "collective"; }

  void run(ExecContext& ctx) override {
    TESSERA_CHECK(ctx.communicator != nullptr, "collective kernel run without a communicator");
    Communicator& comm = *ctx.communicator;
    const uint8_t* in = ctx.ptr[inputs[0]];
    uint8_t* out = ctx.ptr[outputs[0]];
    if (in_elems == 0) return;  // the same on every rank: nobody exchanges
    const uint8_t* src = in;
    if (pack) {
      pack->run(ctx.scratch + pack_at, in);
      src = ctx.scratch + pack_at;
    }
    switch (kind) {
      case OpKind::kAllReduce:
      case OpKind::kReduceScatter: sum(comm, src, out, ctx.scratch); return;
      case OpKind::kAllGather:
      case OpKind::kAllToAll: {
        uint8_t* recv = unpack ? ctx.scratch + recv_at : out;
        if (kind == OpKind::kAllGather) comm.all_gather(axis, src, recv, block_bytes);
        else comm.all_to_all(axis, src, recv, block_bytes);
        if (unpack) unpack->run(out, recv);
        return;
      }
      default: TESSERA_CHECK(false, "collective kernel built for " << op_name(kind));
    }
  }

 private:
  void sum(Communicator& comm, const uint8_t* src, uint8_t* out, uint8_t* scr) const {
    bool all = kind == OpKind::kAllReduce;
    if (!is_16bit_float(dtype)) {
      if (all) comm.all_reduce_sum(axis, dtype, src, out, out_elems);
      else comm.reduce_scatter_sum(axis, dtype, src, out, out_elems);
      return;
    }
    auto* wide_in = reinterpret_cast<float*>(scr + wide_in_at);
    auto* wide_out = reinterpret_cast<float*>(scr + wide_out_at);
    widen(dtype, src, wide_in, in_elems);
    if (all) comm.all_reduce_sum(axis, DType::kF32, wide_in, wide_out, out_elems);
    else comm.reduce_scatter_sum(axis, DType::kF32, wide_in, wide_out, out_elems);
    narrow(dtype, wide_out, out, out_elems);
  }
};

}  // namespace

std::unique_ptr<Kernel> make_collective_kernel(const Graph& g, NodeId id, const Communicator* comm) {
  const Node& n = g.node(id);
  auto k = std::make_unique<CollectiveKernel>();
  k->kind = n.kind;
  k->axis = collective_axis(n, comm);
  const TensorType& x = g.type(n.inputs[0]);
  const TensorType& y = g.type(n.outputs[0]);
  int64_t group = n.attrs.i("group_size");
  int64_t elem = static_cast<int64_t>(dtype_size(x.dtype));
  k->dtype = x.dtype;
  k->in_elems = x.numel();
  k->out_elems = y.numel();
  auto axis_attr = [&](const char* name) { return ops::normalize_axis(n.attrs.i(name), x.rank()); };
  switch (n.kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
      if (!summable(x.dtype))
        throw Error(ErrorKind::kUnsupported,
                    std::string("a sum over ranks of ") + dtype_name(x.dtype) +
                        " tensors (f32, f64, f16, bf16, i32 and i64 are summed)",
                    {"", n.name, op_name(n.kind)});
      if (n.kind == OpKind::kReduceScatter && !blocks_are_contiguous(x.shape, axis_attr("axis")))
        k->pack = block_permutation(x.shape, axis_attr("axis"), group, elem, /*to_blocks=*/true);
      break;
    case OpKind::kAllGather:
      k->block_bytes = x.nbytes();
      if (!blocks_are_contiguous(y.shape, axis_attr("axis")))
        k->unpack = block_permutation(y.shape, axis_attr("axis"), group, elem, /*to_blocks=*/false);
      break;
    case OpKind::kAllToAll:
      k->block_bytes = x.nbytes() / group;
      if (!blocks_are_contiguous(x.shape, axis_attr("split_axis")))
        k->pack = block_permutation(x.shape, axis_attr("split_axis"), group, elem, /*to_blocks=*/true);
      if (!blocks_are_contiguous(y.shape, axis_attr("concat_axis")))
        k->unpack = block_permutation(y.shape, axis_attr("concat_axis"), group, elem, /*to_blocks=*/false);
      break;
    default: return nullptr;
  }
  if (k->pack) k->pack_at = k->scratch.take(x.nbytes());
  if (k->unpack) k->recv_at = k->scratch.take(y.nbytes());
  if (is_16bit_float(x.dtype) && (n.kind == OpKind::kAllReduce || n.kind == OpKind::kReduceScatter)) {
    k->wide_in_at = k->scratch.take(x.numel() * 4);
    k->wide_out_at = k->scratch.take(y.numel() * 4);
  }
  k->inputs = {n.inputs[0]};
  k->outputs = {n.outputs[0]};
  k->node = n.name;
  k->op = op_name(n.kind);
  return k;
}

}  // namespace tessera::runtime::cpu
