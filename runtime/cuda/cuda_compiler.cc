// The CUDA backend's plan compiler and its device program. The graph's
// fusion groups become device ops (cuBLASLt/cuDNN calls and our kernels, with
// the element-wise tail of a Conv/MatMul/Gemm fused into one epilogue
// kernel); values live in one device arena placed by the liveness planner
// (memory_planner.h); the generic plan sees a single host kernel that copies
// inputs down, runs the program, and copies outputs up. The first run is
// eager (it loads modules and lets libraries initialize); the second is
// captured into a CUDA graph that every later run replays.
#include <algorithm>

#include "graph/attr_views.h"
#include "graph/error.h"
#include "runtime/communicator.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/library_ops.h"
#include "runtime/cuda/own_ops.h"
#include "runtime/fusion.h"
#include "runtime/memory_planner.h"
#ifdef TESSERA_WITH_NCCL
#include "runtime/cuda/nccl_device.h"
#endif

namespace tessera::runtime {
namespace cuda {
namespace {

constexpr int64_t kDeviceAlignment = 256;  // cuBLASLt/cuDNN want 16; 256 is what cudaMalloc gives
constexpr size_t kLtWorkspace = size_t{32} << 20;

struct Handles {
  DeviceContext dc;
  Handles(bool allow_tf32) {
    dc.allow_tf32 = allow_tf32;
    TESSERA_CUDA(cudaStreamCreateWithFlags(&dc.stream, cudaStreamNonBlocking));
    TESSERA_CUBLAS(cublasLtCreate(&dc.lt));
    TESSERA_CUDNN(cudnnCreate(&dc.dnn));
    TESSERA_CUDNN(cudnnSetStream(dc.dnn, dc.stream));
    TESSERA_CUDA(cudaMalloc(&dc.lt_workspace, kLtWorkspace));
    dc.lt_workspace_bytes = kLtWorkspace;
  }
  ~Handles() {
    cudaFree(dc.lt_workspace);
    cudnnDestroy(dc.dnn);
    cublasLtDestroy(dc.lt);
    cudaStreamDestroy(dc.stream);
  }
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;
};

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(int64_t bytes) { TESSERA_CUDA(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)))); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

enum class Home : uint8_t { kNone, kInput, kConstant, kArena, kAlias };

// The whole device program, run by the generic plan as one kernel.
class DeviceProgram : public Kernel {
 public:
  DeviceProgram(const Graph& g, const RunOptions& opt)
      : g_(g), comm_(opt.communicator), handles_(std::make_unique<Handles>(opt.allow_tf32)) {
    for (ValueId v = 0; v < g.num_values(); ++v) types_.push_back(g.type(v));
    home_.assign(types_.size(), Home::kNone);
    alias_of_.assign(types_.size(), kNoValue);
    for (ValueId v : g.inputs()) home_[v] = Home::kInput;
    for (ValueId v = 0; v < g.num_values(); ++v)
      if (g.value(v).constant) home_[v] = Home::kConstant;
    for (const FusedGroup& grp : form_groups(g, g.topo_order(), opt.fuse)) add_group(grp);
    layout();
  }

  void run(ExecContext& ctx) override;
  std::string impl() const override { return graph_exec_ ? "cuda:graph" : "cuda"; }
  int64_t weight_bytes() const override { return constant_bytes_; }
  int64_t device_arena_bytes() const { return arena_bytes_; }

 private:
  ValueId new_value(const TensorType& t) {
    types_.push_back(t);
    home_.push_back(Home::kNone);
    alias_of_.push_back(kNoValue);
    return static_cast<ValueId>(types_.size() - 1);
  }
  ValueId root(ValueId v) const {
    while (home_[v] == Home::kAlias) v = alias_of_[v];
    return v;
  }
  void push(std::unique_ptr<DeviceOp> op, const Node& n, const std::string& label) {
    op->node = n.name;
    op->op = label;
    if (!op->capturable()) capturable_ = false;
    ops_.push_back(std::move(op));
  }

  void add_group(const FusedGroup& grp);
  bool add_root_with_epilogue(const FusedGroup& grp);
  bool add_single(NodeId id);
  void add_collective(NodeId id);
  void add_halo(NodeId id);
  void layout();
  void launch_all();

  const Graph& g_;
  const Communicator* comm_;  // NCCL's (compile_cuda checks) when the graph has collectives
  std::unique_ptr<Handles> handles_;
  std::vector<TensorType> types_;
  std::vector<Home> home_;
  std::vector<ValueId> alias_of_;
  std::vector<std::unique_ptr<DeviceOp>> ops_;
  bool capturable_ = true;

  std::vector<uint8_t*> ptr_;
  std::vector<std::unique_ptr<DeviceBuffer>> owned_;
  std::unique_ptr<DeviceBuffer> arena_;
  std::vector<int64_t> workspace_offset_;
  std::vector<std::pair<ValueId, ValueId>> uploads_;  // (graph input value, position in this kernel's inputs)
  int64_t constant_bytes_ = 0, arena_bytes_ = 0, runs_ = 0;
  cudaGraphExec_t graph_exec_ = nullptr;

 public:
  ~DeviceProgram() override {
    if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  }
};

void DeviceProgram::add_group(const FusedGroup& grp) {
  const Node& root = g_.node(grp.root);
  if (op_def(root.kind).is_collective()) {
    if (root.kind == OpKind::kHaloExchange) add_halo(grp.root);
    else add_collective(grp.root);
    for (const PostOp& p : grp.post) add_group(FusedGroup{p.node, {}});
    return;
  }
  if (grp.post.empty() && op_def(root.kind).is_view) {
    home_[root.outputs[0]] = Home::kAlias;
    alias_of_[root.outputs[0]] = root.inputs[0];
    return;
  }
  OpKind k = root.kind;
  if (k == OpKind::kConv || k == OpKind::kMatMul || k == OpKind::kGemm) {
    if (add_root_with_epilogue(grp)) return;
  } else if (auto l = lower_elementwise_group(g_, grp)) {
    push(make_ew_op(*l, grp.output(g_)), root, grp.label(g_));
    return;
  }
  // No fused form: every node on its own.
  if (!grp.post.empty()) {
    add_group(FusedGroup{grp.root, {}});
    for (const PostOp& p : grp.post) add_group(FusedGroup{p.node, {}});
    return;
  }
  if (!add_single(grp.root)) push(make_host_op(g_, grp.root), root, op_name(k));
}

bool DeviceProgram::add_root_with_epilogue(const FusedGroup& grp) {
  const Node& n = g_.node(grp.root);
  const DeviceContext& dc = handles_->dc;
  ValueId out = n.outputs[0];
  DType dtype = types_[out].dtype;
  ValueId bias = n.kind == OpKind::kConv && n.inputs.size() > 2 ? n.inputs[2] : kNoValue;
  bool epilogue = !grp.post.empty() || bias != kNoValue;
  std::optional<EwLowering> tail;
  ValueId raw = out;
  if (epilogue) {
    raw = new_value(types_[out]);
    tail = lower_epilogue(g_, grp, raw, bias);
    if (!tail) return false;
  }
  std::vector<std::unique_ptr<DeviceOp>> ops;
  try {
    if (n.kind == OpKind::kConv) {
      auto w = conv_geometry(g_, n);
      if (!w) return false;
      ValueId x = n.inputs[0];
      if (!w->symmetric()) {
        // cuDNN pads symmetrically: pad explicitly, then convolve unpadded.
        Shape padded = types_[x].shape;
        for (int i = 0; i < w->spatial; ++i) {
          padded[2 + i] += w->pad_begin[i] + w->pad_end[i];
          w->in[i] = padded[2 + i];
        }
        ValueId xp = new_value({types_[x].dtype, padded});
        auto copy = broadcast_copy(types_[x], types_[x]);
        auto ps = shape_strides(padded);
        std::copy(ps.begin(), ps.end(), copy->dst_strides);
        for (int i = 0; i < w->spatial; ++i) copy->dst_offset += w->pad_begin[i] * ps[2 + i];
        CopyFill fill{true, shape_numel(padded), *elem_of(types_[x].dtype), 0.0f};
        ops.push_back(make_copy_op({{0, 0, *copy}}, fill, {x}, {xp}));
        std::fill(w->pad_begin.begin(), w->pad_begin.end(), 0);
        std::fill(w->pad_end.begin(), w->pad_end.end(), 0);
        x = xp;
      }
      ops.push_back(make_conv_op(dc, *w, dtype, x, n.inputs[1], raw));
    } else {
      bool gemm = n.kind == OpKind::kGemm;
      GemmPlan p = gemm ? plan_gemm(g_, n) : plan_matmul(types_[n.inputs[0]].shape, types_[n.inputs[1]].shape);
      if (gemm && p.beta != 0.0f) {
        auto c = broadcast_copy(types_[n.inputs[2]], types_[out]);
        if (!c) return false;
        ops.push_back(make_copy_op({{0, 0, *c}}, {}, {n.inputs[2]}, {raw}));
      }
      ops.push_back(make_matmul_op(dc, p, dtype, n.inputs[0], n.inputs[1], raw));
      // Beta reads the output it accumulates into.
      if (gemm && p.beta != 0.0f) ops.back()->reads.push_back(raw);
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kUnsupported) throw;
    return false;
  }
  for (auto& op : ops) push(std::move(op), n, op_name(n.kind));
  if (tail) push(make_ew_op(*tail, grp.output(g_)), n, grp.label(g_) + (bias != kNoValue ? "+bias" : ""));
  return true;
}

bool DeviceProgram::add_single(NodeId id) {
  const Node& n = g_.node(id);
  std::string label = op_name(n.kind);
  auto single_copy = [&](const std::optional<CopyDesc>& c) {
    if (!c) return false;
    push(make_copy_op({{0, 0, *c}}, {}, {n.inputs[0]}, {n.outputs[0]}), n, label);
    return true;
  };
  if (auto parts = lower_strided_copy(g_, n)) {
    push(make_copy_op(std::move(*parts), {}, n.inputs, n.outputs), n, label);
    return true;
  }
  switch (n.kind) {
    case OpKind::kTile: return single_copy(lower_tile(g_, n));
    case OpKind::kPad: {
      auto p = lower_pad(g_, n);
      if (!p) return false;
      CopyFill fill{true, types_[n.outputs[0]].numel(), *elem_of(types_[n.outputs[0]].dtype), p->value};
      push(make_copy_op({{0, 0, p->copy}}, fill, {n.inputs[0]}, {n.outputs[0]}), n, label);
      return true;
    }
    case OpKind::kGather: {
      auto d = lower_gather(g_, n);
      if (!d) return false;
      push(make_gather_op(*d, n.inputs[0], n.inputs[1], n.outputs[0]), n, label);
      return true;
    }
    case OpKind::kLayerNormalization: {
      auto d = lower_layer_norm(g_, n);
      if (!d) return false;
      ValueId bias = n.inputs.size() > 2 ? n.inputs[2] : kNoValue;
      push(make_layer_norm_op(*d, n.inputs[0], n.inputs[1], bias, n.outputs), n, label);
      return true;
    }
    case OpKind::kSoftmax:
    case OpKind::kLogSoftmax: {
      auto s = lower_softmax(g_, n);
      if (!s) return false;
      push(make_softmax_op(*s, types_[n.inputs[0]].dtype, n.inputs[0], n.outputs[0]), n, label);
      return true;
    }
    case OpKind::kMaxPool:
    case OpKind::kAveragePool: {
      auto w = pool_geometry(g_, n);
      if (!w) return false;
      bool max = n.kind == OpKind::kMaxPool;
      bool include = !max && AveragePoolAttrs::of(n).count_include_pad != 0;
      push(make_pool_op(handles_->dc, *w, types_[n.inputs[0]].dtype, max, include, n.inputs[0], n.outputs[0]), n,
           label);
      return true;
    }
    default: break;
  }
  if (auto d = lower_reduce(g_, n)) {
    push(make_reduce_op(*d, n.inputs[0], n.outputs[0]), n, label);
    return true;
  }
  return false;
}

#ifdef TESSERA_WITH_NCCL
// The NCCL communicator collective node `n` runs on; `lowered`: whether its
// lowering (lower_collective, lower_halo) found an NCCL form, else an
// Error naming `what` has none.
const NcclCommunicator& nccl_for(const Communicator* comm, const Node& n, bool lowered, const char* what) {
  const auto* nccl = dynamic_cast<const NcclCommunicator*>(comm);
  TESSERA_CHECK(nccl != nullptr, "compile_cuda let a collective through without an NCCL communicator");
  if (!lowered)
    throw Error(ErrorKind::kUnsupported, std::string("no NCCL form for this ") + what, {"", n.name, op_name(n.kind)});
  return *nccl;
}
#endif

// pack? -> widen? -> NCCL -> narrow? -> unpack? (lower_collective), the
// steps between over values of the program's own.
void DeviceProgram::add_collective(NodeId id) {
  const Node& n = g_.node(id);
  std::string label = op_name(n.kind);
#ifdef TESSERA_WITH_NCCL
  std::optional<CollectiveLowering> l = lower_collective(g_, n);
  const NcclCommunicator& nccl = nccl_for(comm_, n, l.has_value(), "collective");
  const TensorType& x = types_[n.inputs[0]];
  const TensorType& y = types_[n.outputs[0]];
  auto flat = [](DType t, int64_t numel) { return TensorType{t, {numel}}; };
  auto cast = [&](ValueId from, const TensorType& from_t, ValueId to, const TensorType& to_t, const char* step) {
    EwBuilder b(g_, to_t);
    auto ew = b.finish(b.emit(EwCode::kCopy, b.input(from, from_t)));
    if (!ew) throw Error(ErrorKind::kUnsupported, std::string("no device ") + step, {"", n.name, label});
    push(make_ew_op(*ew, to), n, label + ":" + step);
  };
  ValueId src = n.inputs[0];
  TensorType src_t = x;
  if (l->pack) {
    ValueId p = new_value(flat(x.dtype, x.numel()));
    push(make_copy_op({{0, 0, *l->pack}}, {}, {src}, {p}), n, label + ":pack");
    src = p;
    src_t = types_[p];
  }
  if (l->widen) {
    ValueId w = new_value(flat(DType::kF32, x.numel()));
    cast(src, flat(x.dtype, x.numel()), w, types_[w], "widen");
    src = w;
    src_t = types_[w];
  }
  bool after = l->widen || l->unpack;
  ValueId dst = after ? new_value(flat(l->widen ? DType::kF32 : y.dtype, y.numel())) : n.outputs[0];
  ncclDataType_t type = ncclUint8;
  if (n.kind == OpKind::kAllReduce || n.kind == OpKind::kReduceScatter)
    nccl_type(l->widen ? DType::kF32 : x.dtype, type);
  push(make_nccl_op(n.kind, nccl, collective_axis(n, comm_), type, static_cast<size_t>(l->count), src, dst), n, label);
  if (l->widen) cast(dst, types_[dst], n.outputs[0], y, "narrow");
  if (l->unpack) push(make_copy_op({{0, 0, *l->unpack}}, {}, {dst}, {n.outputs[0]}), n, label + ":unpack");
#else
  throw Error(ErrorKind::kUsage, "this build has no NCCL for the CUDA backend's collectives", {"", n.name, label});
#endif
}

// pack -> NCCL send/recv with both neighbours in one group -> unpack
// (lower_halo): the edge rows and the received rows in buffers of the
// program's own.
void DeviceProgram::add_halo(NodeId id) {
  const Node& n = g_.node(id);
  std::string label = op_name(n.kind);
#ifdef TESSERA_WITH_NCCL
  std::optional<HaloLowering> l = lower_halo(g_, n);
  const NcclCommunicator& nccl = nccl_for(comm_, n, l.has_value(), "HaloExchange");
  DType t = types_[n.inputs[0]].dtype;
  ValueId send = l->send_elems > 0 ? new_value({t, {l->send_elems}}) : kNoValue;
  ValueId recv = l->recv_elems > 0 ? new_value({t, {l->recv_elems}}) : kNoValue;
  if (send != kNoValue) push(make_copy_op(l->pack, {}, {n.inputs[0]}, {send}), n, label + ":pack");
  push(make_nccl_halo_op(nccl, collective_axis(n, comm_), l->send_prev, l->send_next, l->recv_prev, l->recv_next,
                         send, recv),
       n, label);
  std::vector<CopyPart> unpack = l->unpack;
  std::vector<ValueId> reads = {n.inputs[0]};
  if (recv != kNoValue) reads.push_back(recv);
  push(make_copy_op(std::move(unpack), {}, reads, {n.outputs[0]}), n, label + ":unpack");
#else
  throw Error(ErrorKind::kUsage, "this build has no NCCL for the CUDA backend's collectives", {"", n.name, label});
#endif
}

void DeviceProgram::layout() {
  const size_t nv = types_.size();
  const int32_t nk = static_cast<int32_t>(ops_.size());
  std::vector<int32_t> first(nv, -1), last(nv, -1);
  std::vector<bool> needed(nv, false);
  for (int32_t k = 0; k < nk; ++k) {
    for (ValueId v : ops_[k]->writes) {
      if (v == kNoValue) continue;
      if (home_[v] == Home::kNone) home_[v] = Home::kArena;
      if (first[v] < 0) first[v] = k;
    }
    for (ValueId v : ops_[k]->reads)
      if (v != kNoValue) {
        last[root(v)] = std::max(last[root(v)], k);
        needed[root(v)] = true;
      }
  }
  for (ValueId v : g_.outputs()) {
    ValueId r = root(v);
    TESSERA_CHECK(home_[r] != Home::kNone, "graph output " << g_.value(v).name << " is never computed");
    needed[r] = true;
    last[r] = nk;  // read back after the last op (so never written over in place)
  }
  for (size_t v = 0; v < nv; ++v)
    if (home_[v] == Home::kArena) last[v] = std::max(last[v], first[v]);

  // The arena (memory_planner.h layout_arena, as the host plan's): in-place,
  // an element-wise result takes over its first operand's buffer when that
  // operand dies at this op.
  std::vector<ArenaValue> values(nv);
  for (size_t v = 0; v < nv; ++v) values[v] = {types_[v].nbytes(), first[v], last[v], home_[v] == Home::kArena};
  std::vector<InPlaceCandidate> in_place;
  for (int32_t k = 0; k < nk; ++k) {
    const DeviceOp& op = *ops_[k];
    if (op.in_place_read < 0 || op.writes.empty()) continue;
    ValueId in = op.reads[static_cast<size_t>(op.in_place_read)];
    if (in != kNoValue) in_place.push_back({k, op.writes[0], root(in)});
  }
  std::vector<BufferRequest> workspaces;
  std::vector<int32_t> workspace_op;
  for (int32_t k = 0; k < nk; ++k)
    if (int64_t ws = ops_[k]->workspace_bytes(); ws > 0) {
      workspaces.push_back({ws, k, k});
      workspace_op.push_back(k);
    }
  ArenaLayout layout = layout_arena(values, in_place, workspaces, kDeviceAlignment);
  arena_bytes_ = layout.arena_bytes;
  arena_ = std::make_unique<DeviceBuffer>(arena_bytes_);
  auto* base = static_cast<uint8_t*>(arena_->p);
  ptr_.assign(nv, nullptr);
  workspace_offset_.assign(static_cast<size_t>(nk), -1);
  for (size_t i = 0; i < workspace_op.size(); ++i)
    workspace_offset_[static_cast<size_t>(workspace_op[i])] = layout.scratch_offset[i];
  for (size_t v = 0; v < nv; ++v)
    if (layout.offset[v] >= 0) ptr_[v] = base + layout.offset[v];
  for (size_t v = 0; v < nv; ++v) {
    if (!needed[v] || (home_[v] != Home::kInput && home_[v] != Home::kConstant)) continue;
    owned_.push_back(std::make_unique<DeviceBuffer>(types_[v].nbytes()));
    ptr_[v] = static_cast<uint8_t*>(owned_.back()->p);
    if (home_[v] == Home::kConstant) {
      const Tensor& t = *g_.value(static_cast<ValueId>(v)).constant;
      if (t.nbytes() > 0) TESSERA_CUDA(cudaMemcpy(ptr_[v], t.data(), static_cast<size_t>(t.nbytes()), cudaMemcpyHostToDevice));
      constant_bytes_ += t.nbytes();
    } else {
      inputs.push_back(static_cast<ValueId>(v));
    }
  }
  for (size_t v = 0; v < nv; ++v)
    if (home_[v] == Home::kAlias) ptr_[v] = ptr_[root(static_cast<ValueId>(v))];
  std::vector<ValueId> graph_inputs = g_.inputs();
  for (ValueId v : g_.outputs())
    if (!g_.value(v).constant && std::find(graph_inputs.begin(), graph_inputs.end(), v) == graph_inputs.end() &&
        std::find(outputs.begin(), outputs.end(), v) == outputs.end())
      outputs.push_back(v);
}

void DeviceProgram::launch_all() {
  const DeviceContext& dc = handles_->dc;
  auto* base = static_cast<uint8_t*>(arena_->p);
  for (size_t k = 0; k < ops_.size(); ++k) {
    DeviceOp& op = *ops_[k];
    try {
      op.launch(dc, ptr_, workspace_offset_[k] >= 0 ? base + workspace_offset_[k] : nullptr);
    } catch (const Error& e) {
      throw e.with_context({"", op.node, op.op});
    }
  }
}

void DeviceProgram::run(ExecContext& ctx) {
  cudaStream_t s = handles_->dc.stream;
  for (ValueId v : inputs)
    if (int64_t b = types_[v].nbytes(); b > 0)
      TESSERA_CUDA(cudaMemcpyAsync(ptr_[v], ctx.ptr[v], static_cast<size_t>(b), cudaMemcpyHostToDevice, s));
  if (graph_exec_) {
    TESSERA_CUDA(cudaGraphLaunch(graph_exec_, s));
  } else if (runs_ >= 1 && capturable_) {
    cudaGraph_t graph = nullptr;
    TESSERA_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    try {
      launch_all();
    } catch (...) {
      cudaStreamEndCapture(s, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    TESSERA_CUDA(cudaStreamEndCapture(s, &graph));
    cudaError_t e = cudaGraphInstantiate(&graph_exec_, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      // Replay is an optimization: keep running eagerly.
      graph_exec_ = nullptr;
      capturable_ = false;
      cudaGetLastError();
      launch_all();
    } else {
      TESSERA_CUDA(cudaGraphLaunch(graph_exec_, s));
    }
  } else {
    launch_all();
  }
  for (ValueId v : outputs)
    if (int64_t b = types_[v].nbytes(); b > 0)
      TESSERA_CUDA(cudaMemcpyAsync(ctx.ptr[v], ptr_[root(v)], static_cast<size_t>(b), cudaMemcpyDeviceToHost, s));
  TESSERA_CUDA(cudaStreamSynchronize(s));
  ++runs_;
}

}  // namespace
}  // namespace cuda

std::string cuda_unavailable_reason() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorString(e);
  }
  if (count == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  return "";
}

void compile_cuda(const Graph& g, const RunOptions& options, PlanSpec& spec) {
  if (std::string why = cuda_unavailable_reason(); !why.empty())
    TESSERA_THROW(ErrorKind::kUsage, "cannot run on the CUDA backend: " << why);
  // Collectives run over NCCL on the program's stream (check_collectives
  // has checked their axes against the communicator).
  for (NodeId n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (!op_def(node.kind).is_collective()) continue;
#ifdef TESSERA_WITH_NCCL
    const auto* nccl = dynamic_cast<const cuda::NcclCommunicator*>(options.communicator);
    if (!nccl)
      throw Error(ErrorKind::kUsage,
                  "the CUDA backend runs collectives over NCCL, and this plan's communicator is '" +
                      options.communicator->name() + "'",
                  {"", node.name, op_name(node.kind)});
    TESSERA_CUDA(cudaSetDevice(nccl->device()));  // the plan's buffers on the rank's device
    break;
#else
    throw Error(ErrorKind::kUsage, "this build has no NCCL for the CUDA backend's collectives",
                {"", node.name, op_name(node.kind)});
#endif
  }
  bind_graph_values(g, spec);
  auto program = std::make_unique<cuda::DeviceProgram>(g, options);
  program->node = g.name;
  program->op = "CudaProgram";
  for (ValueId v : program->outputs) {
    spec.values[v].kind = PlanValue::Kind::kIntermediate;
    spec.values[v].bytes = g.type(v).nbytes();
  }
  spec.outputs = g.outputs();
  if (!program->outputs.empty()) spec.kernels.push_back(std::move(program));
}

}  // namespace tessera::runtime
