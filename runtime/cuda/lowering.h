// Host-side lowering of graph nodes to what the CUDA backend launches: the
// descriptors of our own kernels (device_desc.h), the GEMM batching of
// cuBLASLt calls, and the geometry of cuDNN convolutions and poolings. Plain
// C++ with no CUDA dependency, so it is built and unit-tested everywhere;
// each function returns nullopt where the node has no device form (the plan
// compiler then runs it on the host with the reference kernel).
#pragma once

#include <optional>
#include <vector>

#include "graph/graph.h"
#include "runtime/cuda/device_desc.h"
#include "runtime/fusion.h"

namespace tessera::runtime::cuda {

std::optional<Elem> elem_of(DType dtype);  // nullopt for f64

// ---- Element-wise programs ----

struct EwLowering {
  EwProgram program;
  std::vector<ValueId> inputs;  // program input k reads inputs[k]
};

// Builds one program over the output type `out`; inputs broadcast to it.
class EwBuilder {
 public:
  EwBuilder(const Graph& g, const TensorType& out);
  // Register of value v, read with numpy broadcasting, or through `view`
  // (the same bytes seen with another shape, e.g. a [C] bias as [1,C,1,1]).
  int input(ValueId v, const std::optional<Shape>& view = std::nullopt);
  // The same for a value the backend added (not in the graph) of type t.
  int input(ValueId v, const TensorType& t, const std::optional<Shape>& view = std::nullopt);
  int emit(EwCode code, int a, int b = 0, int c = 0, float alpha = 0, float beta = 0);
  // Appends the node with its operands in `args`; the result register, or -1
  // when the node has no device form.
  int node(const Node& n, const std::vector<int>& args);
  // The program whose result is register `result`; nullopt if anything
  // failed or a capacity limit was hit.
  std::optional<EwLowering> finish(int result);

 private:
  const Graph& g_;
  TensorType out_;
  EwLowering l_;
  std::vector<std::pair<ValueId, Shape>> seen_;
  std::vector<int> seen_reg_;
  bool ok_ = true;
};

// The program of a whole fusion group whose root is element-wise (or
// BatchNormalization); nullopt when some link has no device form.
std::optional<EwLowering> lower_elementwise_group(const Graph& g, const FusedGroup& grp);

// The post-op chain of a Conv/MatMul/Gemm group applied to the root's raw
// result `raw` (same type as the root's output), with a per-channel bias
// (a [C] vector over dim 1) added first when bias != kNoValue.
std::optional<EwLowering> lower_epilogue(const Graph& g, const FusedGroup& grp, ValueId raw, ValueId bias);

// ---- Data movement as strided copies ----

struct CopyPart {
  size_t src = 0, dst = 0;  // positions in the op's reads / writes
  CopyDesc desc;
};

// A movement op whose dim map copies through strided reads (graph/dim_map.h):
// one part per piece, src and dst the node's input and output slots
// (Transpose, Slice, Expand: one; Concat: one per input; Split: one per
// output), offsets and strides as the map gives them. nullopt for other
// kinds, and where the map has no strided form or the rank exceeds kMaxRank.
std::optional<std::vector<CopyPart>> lower_strided_copy(const Graph& g, const Node& n);

struct PadLowering {
  CopyDesc copy;     // the input into the interior of the output
  float value = 0;   // what the rest of the output holds
};

std::optional<CopyDesc> lower_tile(const Graph& g, const Node& n);
std::optional<PadLowering> lower_pad(const Graph& g, const Node& n);  // mode "constant" only
// Copies value `from` (numpy-broadcast) into a buffer of type `to`.
std::optional<CopyDesc> broadcast_copy(const TensorType& from, const TensorType& to);

// ---- Collectives (the CUDA backend runs them over NCCL) ----

// What a collective node becomes around NCCL's call, as the CPU kernel does
// it (cpu/collective_kernels.h): a pack of the input's blocks along the
// op's axis before a reduce-scatter or all-to-all, an unpack after an
// all-gather or all-to-all (the geometry of cpu::block_permutation), and
// f16/bf16 sums widened to f32 and narrowed back, so that they accumulate
// in f32 as on the CPU.
struct CollectiveLowering {
  std::optional<CopyDesc> pack, unpack;
  bool widen = false;
  // As NCCL counts: elements of a sum's result (the received block of a
  // reduce-scatter), bytes of a move (the sent block of an all-gather, one
  // peer's block of an all-to-all).
  int64_t count = 0;
};
// nullopt for a node that is not a collective, a rank over kMaxRank, or a
// sum of a dtype NCCL does not sum (f64 sums are NCCL's own).
std::optional<CollectiveLowering> lower_collective(const Graph& g, const Node& n);

// A HaloExchange on the device: the edge rows x sends are packed into one
// buffer (the rows for the previous rank, then those for the next, each as
// [outer, rows, inner] of x seen as [outer, x's rows, inner] along the op's
// axis), NCCL's send/recv with both neighbours run in one group into a
// buffer of the rows received (from the previous, then from the next, in
// the same form), and the output is assembled from them and x. Counts are
// bytes (NCCL's ncclUint8); a rank's send_prev is its previous rank's
// recv_next, so both sides agree on the form without talking.
struct HaloLowering {
  std::vector<CopyPart> pack;    // read 0: x; write 0: the send buffer
  std::vector<CopyPart> unpack;  // read 0: x, read 1: the receive buffer; write 0: the output
  int64_t send_elems = 0, recv_elems = 0;  // elements of x's type in each buffer
  int64_t send_prev = 0, send_next = 0, recv_prev = 0, recv_next = 0;  // bytes
};
// nullopt for a node that is not a HaloExchange or of rank over kMaxRank.
std::optional<HaloLowering> lower_halo(const Graph& g, const Node& n);

// ---- Reductions, gather, normalizations ----

std::optional<ReduceDesc> lower_reduce(const Graph& g, const Node& n);  // Reduce*, GlobalAverage/MaxPool
std::optional<GatherDesc> lower_gather(const Graph& g, const Node& n);
std::optional<LayerNormDesc> lower_layer_norm(const Graph& g, const Node& n);

struct SoftmaxGeometry {
  int64_t outer = 1, axis = 1, inner = 1;  // as cuDNN's N, C, H (W = 1), mode CHANNEL
  bool log = false;
};
std::optional<SoftmaxGeometry> lower_softmax(const Graph& g, const Node& n);

// ---- cuBLASLt GEMM batching ----

// Row-major C[b] = alpha * op(A[b]) op(B[b]) + beta * C[b]. The output batch
// is covered by calls (one per entry of off_*), each a strided batch of
// `batch` products with element strides stride_* (0: the operand broadcasts).
struct GemmPlan {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;  // A stored [k,m] / B stored [n,k]
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  std::vector<int64_t> off_a, off_b, off_c;
  float alpha = 1, beta = 0;
};

// numpy matmul of row-major shapes a and b (1-D promotion, batch broadcast).
GemmPlan plan_matmul(const Shape& a, const Shape& b);
// ONNX Gemm (2-D); beta applies to C, which the kernel first broadcasts into
// the output (beta = 0 when there is no C).
GemmPlan plan_gemm(const Graph& g, const Node& n);
// The plan run naively on the host (f32): the check of the batching.
void gemm_on_host(const GemmPlan& p, const float* a, const float* b, float* c);

// ---- cuDNN convolution and pooling geometry ----

struct WindowGeometry {
  int spatial = 0;                 // 1, 2 or 3 as in the graph
  int64_t n = 0, c = 0, k = 0, group = 1;   // k: output channels (conv)
  std::vector<int64_t> in, kernel, out, strides, dilations, pad_begin, pad_end;
  bool symmetric() const { return pad_begin == pad_end; }
  // cuDNN wants at least 2 spatial dims: 1-D windows gain a trailing 1.
  std::vector<int> cudnn_dims(const std::vector<int64_t>& spatial_dims, int64_t d0, int64_t d1) const;
  std::vector<int> cudnn_vec(const std::vector<int64_t>& v, int fill) const;
};

std::optional<WindowGeometry> conv_geometry(const Graph& g, const Node& n);
// MaxPool/AveragePool with unit dilations and floor-mode output sizes (a
// ceil-mode pool qualifies when ceil and floor agree).
std::optional<WindowGeometry> pool_geometry(const Graph& g, const Node& n);
// ONNX output size of one window dimension (floor mode), as shape inference.
int64_t window_out_size(int64_t in, int64_t k, int64_t stride, int64_t pb, int64_t pe, int64_t dilation);

// ---- Host evaluation of the descriptors (the CPU tests' view of a kernel) ----

void ew_on_host(const EwProgram& p, const std::vector<const void*>& in, void* out);
void copy_on_host(const CopyDesc& d, const void* src, void* dst);
void reduce_on_host(const ReduceDesc& d, const void* in, void* out);
void gather_on_host(const GatherDesc& d, const void* data, const void* indices, void* out);

}  // namespace tessera::runtime::cuda
