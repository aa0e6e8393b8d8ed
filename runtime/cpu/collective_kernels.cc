#include "runtime/cpu/collective_kernels.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "graph/ops/op_util.h"
#include "runtime/cpu/half_convert.h"
#include "runtime/cpu/strided_copy.h"

namespace tessera::runtime::cpu {
namespace {

bool summable(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16 || t == DType::kI32 ||
         t == DType::kI64;
}
bool is_16bit_float(DType t) { return is_float16(t); }

// Sums over ranks run in f32 (half_convert.h: exact widening, one rounding
// back per element).
void widen(DType t, const uint8_t* in, float* out, int64_t n) { widen_to_f32(t, in, out, n); }
void narrow(DType t, const float* in, uint8_t* out, int64_t n) { narrow_from_f32(t, in, out, n); }

// The scratch of a collective, one region after another (offsets in bytes).
struct Scratch {
  int64_t total = 0;
  int64_t take(int64_t bytes) {
    int64_t at = total;
    total += (bytes + 63) / 64 * 64;
    return at;
  }
};

// Waits for the exchange `request` started, if any, and forgets it: whether
// there was one (the kernel then unpacks what arrived).
bool wait_started(std::optional<int64_t>& request, ExecContext& ctx) {
  if (!request) return false;
  int64_t r = *request;
  request.reset();
  ctx.communicator->wait(r);
  return true;
}

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

  bool splits() const override { return true; }
  void run(ExecContext& ctx) override {
    if (std::optional<Exchange> x = prepare(ctx)) {
      ctx.communicator->exchange(*x);
      complete(ctx);
    }
  }
  void start(ExecContext& ctx) override {
    request_.reset();
    std::optional<Exchange> x = prepare(ctx);
    request_ = x ? std::optional<int64_t>(ctx.communicator->start(*x)) : std::nullopt;
  }
  void finish(ExecContext& ctx) override {
    if (wait_started(request_, ctx)) complete(ctx);
  }

 private:
  // Packs and widens the input into scratch: the exchange of the flat
  // blocks, or nothing when there are none (the same on every rank).
  std::optional<Exchange> prepare(ExecContext& ctx) const {
    TESSERA_CHECK(ctx.communicator != nullptr, "collective kernel run without a communicator");
    if (in_elems == 0) return std::nullopt;
    const uint8_t* src = ctx.ptr[inputs[0]];
    uint8_t* out = ctx.ptr[outputs[0]];
    if (pack) {
      pack->run(ctx.scratch + pack_at, src);
      src = ctx.scratch + pack_at;
    }
    Exchange x;
    x.axis = axis;
    switch (kind) {
      case OpKind::kAllReduce:
      case OpKind::kReduceScatter:
        x.kind = kind == OpKind::kAllReduce ? Exchange::Kind::kAllReduceSum : Exchange::Kind::kReduceScatterSum;
        x.count = out_elems;
        x.dtype = dtype;
        x.in = src;
        x.out = out;
        if (is_16bit_float(dtype)) {
          auto* wide_in = reinterpret_cast<float*>(ctx.scratch + wide_in_at);
          widen(dtype, src, wide_in, in_elems);
          x.dtype = DType::kF32;
          x.in = wide_in;
          x.out = ctx.scratch + wide_out_at;
        }
        return x;
      case OpKind::kAllGather:
      case OpKind::kAllToAll:
        x.kind = kind == OpKind::kAllGather ? Exchange::Kind::kAllGather : Exchange::Kind::kAllToAll;
        x.count = block_bytes;
        x.in = src;
        x.out = unpack ? ctx.scratch + recv_at : out;
        return x;
      default: TESSERA_CHECK(false, "collective kernel built for " << op_name(kind));
    }
    return std::nullopt;
  }

  // Narrows or unpacks the exchange's result into the output.
  void complete(ExecContext& ctx) const {
    uint8_t* out = ctx.ptr[outputs[0]];
    if ((kind == OpKind::kAllReduce || kind == OpKind::kReduceScatter) && is_16bit_float(dtype))
      narrow(dtype, reinterpret_cast<const float*>(ctx.scratch + wide_out_at), out, out_elems);
    if (unpack) unpack->run(out, ctx.scratch + recv_at);
  }

  std::optional<int64_t> request_;  // started, not finished (a plan runs once at a time)
};

// HaloExchange along `axis` of x [outer, rows, inner]: packs its first and
// last `edge` rows (the group's deepest halo, so that every rank posts the
// same bytes) row-major with the row outermost, so that a neighbour's k
// rows are k * outer * inner contiguous bytes; exchanges; and writes out
// [outer, before + rows + after, inner] from the received rows and x.
class HaloKernel : public Kernel {
 public:
  int axis = 0;
  int64_t outer = 1, rows = 0, row_bytes = 0;  // row_bytes: one row of every outer index (outer * inner * elem)
  int64_t inner_bytes = 0;                     // one row of one outer index
  int64_t edge = 0, before = 0, after = 0, send_prev = 0, send_next = 0;  // rows
  int64_t pack_at = 0, recv_at = 0;
  // The overlapped lowering (halo_overlap.h): start() writes x into its rows
  // of the output and zeros the halo rows, so that a window op can read the
  // output before the halo arrives; finish() writes the halo rows only.
  bool own_rows_at_start = false;
  Scratch scratch;

  int64_t scratch_bytes() const override { return scratch.total; }
  std::string impl() const override { return "collective"; }
  bool splits() const override { return true; }
  void run(ExecContext& ctx) override {
    ctx.communicator->exchange(prepare(ctx));
    complete(ctx);
  }
  void start(ExecContext& ctx) override { request_ = ctx.communicator->start(prepare(ctx)); }
  void finish(ExecContext& ctx) override {
    if (wait_started(request_, ctx)) complete(ctx);
  }

 private:
  // Rows [from, from + count) of x, row-major with the row outermost, at dst.
  void pack_rows(const uint8_t* x, int64_t from, int64_t count, uint8_t* dst) const {
    for (int64_t r = 0; r < count; ++r)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(dst + (r * outer + o) * inner_bytes, x + (o * rows + from + r) * inner_bytes,
                    static_cast<size_t>(inner_bytes));
  }
  Exchange prepare(ExecContext& ctx) const {
    TESSERA_CHECK(ctx.communicator != nullptr, "collective kernel run without a communicator");
    const uint8_t* x = ctx.ptr[inputs[0]];
    uint8_t* packed = ctx.scratch + pack_at;
    int64_t m = std::min(edge, rows), block = edge * row_bytes;
    if (own_rows_at_start) place_own_rows(x, ctx.ptr[outputs[0]]);
    pack_rows(x, 0, m, packed);
    pack_rows(x, rows - m, m, packed + 2 * block - m * row_bytes);
    Exchange e;
    e.kind = Exchange::Kind::kHalo;
    e.axis = axis;
    e.in = packed;
    e.out = ctx.scratch + recv_at;
    e.count = block;
    e.send_prev = send_prev * row_bytes;
    e.send_next = send_next * row_bytes;
    e.recv_prev = before * row_bytes;
    e.recv_next = after * row_bytes;
    return e;
  }
  // x's rows into theirs of `out`, the halo rows zeroed.
  void place_own_rows(const uint8_t* x, uint8_t* out) const {
    int64_t out_rows = before + rows + after;
    for (int64_t o = 0; o < outer; ++o) {
      uint8_t* dst = out + o * out_rows * inner_bytes;
      std::memset(dst, 0, static_cast<size_t>(before * inner_bytes));
      std::memcpy(dst + before * inner_bytes, x + o * rows * inner_bytes, static_cast<size_t>(rows * inner_bytes));
      std::memset(dst + (before + rows) * inner_bytes, 0, static_cast<size_t>(after * inner_bytes));
    }
  }
  void complete(ExecContext& ctx) const {
    const uint8_t* x = ctx.ptr[inputs[0]];
    const uint8_t* recv = ctx.scratch + recv_at;
    uint8_t* out = ctx.ptr[outputs[0]];
    int64_t out_rows = before + rows + after;
    for (int64_t o = 0; o < outer; ++o) {
      uint8_t* dst = out + o * out_rows * inner_bytes;
      for (int64_t r = 0; r < before; ++r)
        std::memcpy(dst + r * inner_bytes, recv + (r * outer + o) * inner_bytes, static_cast<size_t>(inner_bytes));
      if (!own_rows_at_start)
        std::memcpy(dst + before * inner_bytes, x + o * rows * inner_bytes, static_cast<size_t>(rows * inner_bytes));
      for (int64_t r = 0; r < after; ++r)
        std::memcpy(dst + (before + rows + r) * inner_bytes, recv + (before + r) * row_bytes + o * inner_bytes,
                    static_cast<size_t>(inner_bytes));
    }
  }
  std::optional<int64_t> request_;
};

std::unique_ptr<Kernel> make_halo_kernel(const Graph& g, const Node& n, const Communicator* comm,
                                         bool own_rows_at_start) {
  auto k = std::make_unique<HaloKernel>();
  k->own_rows_at_start = own_rows_at_start;
  k->axis = collective_axis(n, comm);
  const TensorType& x = g.type(n.inputs[0]);
  const HaloExchangeAttrs halo = HaloExchangeAttrs::of(n);
  int64_t dim = ops::normalize_axis(halo.axis, x.rank());
  int64_t inner = 1;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d < dim) k->outer *= x.shape[d];
    if (d > dim) inner *= x.shape[d];
  }
  k->rows = x.shape[dim];
  k->inner_bytes = inner * static_cast<int64_t>(dtype_size(x.dtype));
  k->row_bytes = k->outer * k->inner_bytes;
  const auto &before = halo.before, &after = halo.after;
  auto me = static_cast<size_t>(halo.coordinate);
  k->before = before[me];
  k->after = after[me];
  k->send_prev = me > 0 ? after[me - 1] : 0;
  k->send_next = me + 1 < before.size() ? before[me + 1] : 0;
  for (size_t r = 0; r < before.size(); ++r) k->edge = std::max({k->edge, before[r], after[r]});
  k->pack_at = k->scratch.take(2 * k->edge * k->row_bytes);
  k->recv_at = k->scratch.take((k->before + k->after) * k->row_bytes);
  k->inputs = {n.inputs[0]};
  k->outputs = {n.outputs[0]};
  k->node = n.name;
  k->op = op_name(n.kind);
  return k;
}

}  // namespace

std::unique_ptr<Kernel> make_collective_kernel(const Graph& g, NodeId id, const Communicator* comm,
                                               bool halo_own_rows_at_start) {
  const Node& n = g.node(id);
  if (n.kind == OpKind::kHaloExchange) return make_halo_kernel(g, n, comm, halo_own_rows_at_start);
  auto k = std::make_unique<CollectiveKernel>();
  k->kind = n.kind;
  k->axis = collective_axis(n, comm);
  const TensorType& x = g.type(n.inputs[0]);
  const TensorType& y = g.type(n.outputs[0]);
  int64_t group = CollectiveAttrs::of(n).group_size;
  int64_t elem = static_cast<int64_t>(dtype_size(x.dtype));
  k->dtype = x.dtype;
  k->in_elems = x.numel();
  k->out_elems = y.numel();
  auto axis_attr = [&](int64_t a) { return ops::normalize_axis(a, x.rank()); };
  switch (n.kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
      if (!summable(x.dtype))
        throw Error(ErrorKind::kUnsupported,
                    std::string("a sum over ranks of ") + dtype_name(x.dtype) +
                        " tensors (f32, f64, f16, bf16, i32 and i64 are summed)",
                    {"", n.name, op_name(n.kind)});
      if (n.kind == OpKind::kReduceScatter && !blocks_are_contiguous(x.shape, axis_attr(AxisCollectiveAttrs::of(n).axis)))
        k->pack = block_permutation(x.shape, axis_attr(AxisCollectiveAttrs::of(n).axis), group, elem,
                                    /*to_blocks=*/true);
      break;
    case OpKind::kAllGather:
      k->block_bytes = x.nbytes();
      if (!blocks_are_contiguous(y.shape, axis_attr(AxisCollectiveAttrs::of(n).axis)))
        k->unpack = block_permutation(y.shape, axis_attr(AxisCollectiveAttrs::of(n).axis), group, elem,
                                      /*to_blocks=*/false);
      break;
    case OpKind::kAllToAll:
      k->block_bytes = x.nbytes() / group;
      if (!blocks_are_contiguous(x.shape, axis_attr(AllToAllAttrs::of(n).split_axis)))
        k->pack = block_permutation(x.shape, axis_attr(AllToAllAttrs::of(n).split_axis), group, elem,
                                    /*to_blocks=*/true);
      if (!blocks_are_contiguous(y.shape, axis_attr(AllToAllAttrs::of(n).concat_axis)))
        k->unpack = block_permutation(y.shape, axis_attr(AllToAllAttrs::of(n).concat_axis), group, elem,
                                      /*to_blocks=*/false);
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
