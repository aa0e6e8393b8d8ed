#include "runtime/cuda/own_ops.h"

#include "graph/error.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/kernels.h"
#include "runtime/reference_kernel.h"

namespace tessera::runtime::cuda {
namespace {

class EwOp : public DeviceOp {
 public:
  explicit EwOp(const EwProgram& p) : p_(p) {}
  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t*) override {
    EwInputs in;
    for (size_t k = 0; k < reads.size(); ++k) in.p[k] = ptr[reads[k]];
    launch_ew(p_, in, ptr[writes[0]], dc.stream);
    TESSERA_CUDA(cudaGetLastError());
  }
  std::string impl() const override { return "cuda:ew" + std::to_string(p_.num_instrs); }

 private:
  EwProgram p_;
};

class CopyOp : public DeviceOp {
 public:
  CopyOp(std::vector<CopyPart> parts, CopyFill fill) : parts_(std::move(parts)), fill_(fill) {}
  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t*) override {
    if (fill_.enabled) launch_fill(ptr[writes[0]], fill_.n, fill_.elem, fill_.value, dc.stream);
    for (const CopyPart& p : parts_) launch_copy(p.desc, ptr[reads[p.src]], ptr[writes[p.dst]], dc.stream);
    TESSERA_CUDA(cudaGetLastError());
  }
  std::string impl() const override { return "cuda:copy"; }

 private:
  std::vector<CopyPart> parts_;
  CopyFill fill_;
};

class ReduceOp : public DeviceOp {
 public:
  explicit ReduceOp(const ReduceDesc& d) : d_(d) {}
  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t*) override {
    launch_reduce(d_, ptr[reads[0]], ptr[writes[0]], dc.stream);
    TESSERA_CUDA(cudaGetLastError());
  }
  std::string impl() const override { return "cuda:reduce"; }

 private:
  ReduceDesc d_;
};

class GatherOp : public DeviceOp {
 public:
  explicit GatherOp(const GatherDesc& d) : d_(d) {}
  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t*) override {
    launch_gather(d_, ptr[reads[0]], ptr[reads[1]], ptr[writes[0]], dc.stream);
    TESSERA_CUDA(cudaGetLastError());
  }
  std::string impl() const override { return "cuda:gather"; }

 private:
  GatherDesc d_;
};

class LayerNormOp : public DeviceOp {
 public:
  explicit LayerNormOp(const LayerNormDesc& d) : d_(d) {}
  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t*) override {
    auto at = [&ptr](ValueId v) -> uint8_t* { return v == kNoValue ? nullptr : ptr[v]; };
    launch_layer_norm(d_, at(reads[0]), at(reads[1]), at(reads[2]), at(writes[0]), at(writes[1]), at(writes[2]),
                      dc.stream);
    TESSERA_CUDA(cudaGetLastError());
  }
  std::string impl() const override { return "cuda:layernorm"; }

 private:
  LayerNormDesc d_;
};

// Operands are staged through host buffers owned by the op.
class HostOp : public DeviceOp {
 public:
  HostOp(const Graph& g, std::unique_ptr<Kernel> k) : kernel_(std::move(k)) {
    for (ValueId v : kernel_->inputs) in_bytes_.push_back(v == kNoValue ? 0 : g.type(v).nbytes());
    for (ValueId v : kernel_->outputs) out_bytes_.push_back(g.type(v).nbytes());
    for (int64_t b : in_bytes_) in_host_.emplace_back(static_cast<size_t>(b));
    for (int64_t b : out_bytes_) out_host_.emplace_back(static_cast<size_t>(b));
  }
  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t*) override {
    size_t slots = ptr.size();
    ExecContext ctx;
    ctx.ptr.assign(slots, nullptr);
    for (size_t i = 0; i < reads.size(); ++i) {
      if (reads[i] == kNoValue || in_bytes_[i] == 0) continue;
      TESSERA_CUDA(cudaMemcpyAsync(in_host_[i].data(), ptr[reads[i]], static_cast<size_t>(in_bytes_[i]),
                                   cudaMemcpyDeviceToHost, dc.stream));
    }
    TESSERA_CUDA(cudaStreamSynchronize(dc.stream));
    for (size_t i = 0; i < reads.size(); ++i)
      if (reads[i] != kNoValue) ctx.ptr[reads[i]] = in_host_[i].data();
    for (size_t i = 0; i < writes.size(); ++i) ctx.ptr[writes[i]] = out_host_[i].data();
    kernel_->run(ctx);
    for (size_t i = 0; i < writes.size(); ++i)
      if (out_bytes_[i] > 0)
        TESSERA_CUDA(cudaMemcpyAsync(ptr[writes[i]], out_host_[i].data(), static_cast<size_t>(out_bytes_[i]),
                                     cudaMemcpyHostToDevice, dc.stream));
    // The staging buffers are reused by the next run: wait for the copies.
    TESSERA_CUDA(cudaStreamSynchronize(dc.stream));
  }
  std::string impl() const override { return "reference(host)"; }
  bool on_host() const override { return true; }

 private:
  std::unique_ptr<Kernel> kernel_;
  std::vector<int64_t> in_bytes_, out_bytes_;
  std::vector<std::vector<uint8_t>> in_host_, out_host_;
};

}  // namespace

std::unique_ptr<DeviceOp> make_ew_op(const EwLowering& l, ValueId out) {
  auto op = std::make_unique<EwOp>(l.program);
  op->reads = l.inputs;
  op->writes = {out};
  op->in_place_read = 0;
  return op;
}

std::unique_ptr<DeviceOp> make_copy_op(std::vector<CopyPart> parts, CopyFill fill, std::vector<ValueId> reads,
                                       std::vector<ValueId> writes) {
  auto op = std::make_unique<CopyOp>(std::move(parts), fill);
  op->reads = std::move(reads);
  op->writes = std::move(writes);
  return op;
}

std::unique_ptr<DeviceOp> make_reduce_op(const ReduceDesc& d, ValueId in, ValueId out) {
  auto op = std::make_unique<ReduceOp>(d);
  op->reads = {in};
  op->writes = {out};
  return op;
}

std::unique_ptr<DeviceOp> make_gather_op(const GatherDesc& d, ValueId data, ValueId indices, ValueId out) {
  auto op = std::make_unique<GatherOp>(d);
  op->reads = {data, indices};
  op->writes = {out};
  return op;
}

std::unique_ptr<DeviceOp> make_layer_norm_op(const LayerNormDesc& d, ValueId x, ValueId scale, ValueId bias,
                                             const std::vector<ValueId>& outputs) {
  auto op = std::make_unique<LayerNormOp>(d);
  op->reads = {x, scale, bias};
  op->writes = {outputs[0], outputs.size() > 1 ? outputs[1] : kNoValue, outputs.size() > 2 ? outputs[2] : kNoValue};
  return op;
}

std::unique_ptr<DeviceOp> make_host_op(const Graph& g, NodeId node) {
  std::unique_ptr<Kernel> k = make_reference_kernel(g, node);
  auto op = std::make_unique<HostOp>(g, std::move(k));
  op->reads = g.node(node).inputs;
  op->writes = g.node(node).outputs;
  return op;
}

}  // namespace tessera::runtime::cuda
