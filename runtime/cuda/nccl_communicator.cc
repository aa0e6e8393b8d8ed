#include <cstring>

#include "graph/error.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/nccl_device.h"
#include "runtime/cuda/nccl_library.h"

namespace tessera::runtime {
namespace cuda {

void throw_nccl(ncclResult_t r, const char* call) {
  TESSERA_THROW(ErrorKind::kInternal, call << " failed: " << nccl().GetErrorString(r));
}

bool nccl_type(DType dtype, ncclDataType_t& out) {
  switch (dtype) {
    case DType::kF32: out = ncclFloat32; return true;
    case DType::kF64: out = ncclFloat64; return true;
    case DType::kF16: out = ncclFloat16; return true;
    case DType::kBF16: out = ncclBfloat16; return true;
    case DType::kI32: out = ncclInt32; return true;
    case DType::kI64: out = ncclInt64; return true;
    case DType::kI8: out = ncclInt8; return true;
    case DType::kU8: case DType::kBool: out = ncclUint8; return true;
  }
  return false;
}

void enqueue_collective(OpKind kind, const NcclCommunicator& comm, int axis, ncclDataType_t type, size_t count,
                        const void* in, void* out, cudaStream_t stream) {
  ncclComm_t c = comm.comm(axis);
  switch (kind) {
    case OpKind::kAllReduce: TESSERA_NCCL(nccl().AllReduce(in, out, count, type, ncclSum, c, stream)); return;
    case OpKind::kReduceScatter: TESSERA_NCCL(nccl().ReduceScatter(in, out, count, type, ncclSum, c, stream)); return;
    case OpKind::kAllGather: TESSERA_NCCL(nccl().AllGather(in, out, count, type, c, stream)); return;
    case OpKind::kAllToAll: {
      const NcclLibrary& lib = nccl();
      if (lib.AlltoAll) {
        TESSERA_NCCL(lib.AlltoAll(in, out, count, type, c, stream));
        return;
      }
      // Before 2.28 NCCL's all-to-all is its documented send/recv group.
      int n = 0;
      TESSERA_NCCL(lib.CommCount(c, &n));
      TESSERA_CHECK(type == ncclUint8, "all-to-all blocks are counted in bytes");
      TESSERA_NCCL(lib.GroupStart());
      for (int peer = 0; peer < n; ++peer) {
        TESSERA_NCCL(lib.Send(static_cast<const uint8_t*>(in) + peer * count, count, type, peer, c, stream));
        TESSERA_NCCL(lib.Recv(static_cast<uint8_t*>(out) + peer * count, count, type, peer, c, stream));
      }
      TESSERA_NCCL(lib.GroupEnd());
      return;
    }
    default: TESSERA_CHECK(false, "NCCL collective for " << op_name(kind));
  }
}

namespace {

class NcclOp : public DeviceOp {
 public:
  NcclOp(OpKind kind, const NcclCommunicator& comm, int axis, ncclDataType_t type, size_t count)
      : kind_(kind), comm_(comm), axis_(axis), type_(type), count_(count) {}
  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t*) override {
    enqueue_collective(kind_, comm_, axis_, type_, count_, ptr[reads[0]], ptr[writes[0]], dc.stream);
  }
  std::string impl() const override { return "nccl"; }
  // NCCL's calls can be captured in CUDA graphs, but that is not tested
  // here yet: a program with collectives launches eagerly.
  bool capturable() const override { return false; }

 private:
  OpKind kind_;
  const NcclCommunicator& comm_;
  int axis_;
  ncclDataType_t type_;
  size_t count_;
};

// Grouped send/recv with the axis neighbours, on the program's stream.
class NcclHaloOp : public DeviceOp {
 public:
  NcclHaloOp(const NcclCommunicator& comm, int axis, int64_t sp, int64_t sn, int64_t rp, int64_t rn)
      : comm_(comm), axis_(axis), send_prev_(sp), send_next_(sn), recv_prev_(rp), recv_next_(rn) {}
  void launch(const DeviceContext& dc, const std::vector<uint8_t*>& ptr, uint8_t*) override {
    uint8_t* send = reads.empty() ? nullptr : ptr[reads[0]];
    uint8_t* recv = writes.empty() ? nullptr : ptr[writes[0]];
    int64_t me = comm_.group_index(axis_);
    ncclComm_t c = comm_.comm(axis_);
    const NcclLibrary& lib = nccl();
    auto n = [](int64_t b) { return static_cast<size_t>(b); };
    TESSERA_NCCL(lib.GroupStart());
    if (send_prev_ > 0) TESSERA_NCCL(lib.Send(send, n(send_prev_), ncclUint8, static_cast<int>(me - 1), c, dc.stream));
    if (recv_prev_ > 0) TESSERA_NCCL(lib.Recv(recv, n(recv_prev_), ncclUint8, static_cast<int>(me - 1), c, dc.stream));
    if (send_next_ > 0)
      TESSERA_NCCL(lib.Send(send + send_prev_, n(send_next_), ncclUint8, static_cast<int>(me + 1), c, dc.stream));
    if (recv_next_ > 0)
      TESSERA_NCCL(lib.Recv(recv + recv_prev_, n(recv_next_), ncclUint8, static_cast<int>(me + 1), c, dc.stream));
    TESSERA_NCCL(lib.GroupEnd());
  }
  std::string impl() const override { return "nccl"; }
  bool capturable() const override { return false; }  // as NcclOp

 private:
  const NcclCommunicator& comm_;
  int axis_;
  int64_t send_prev_, send_next_, recv_prev_, recv_next_;
};

}  // namespace

std::unique_ptr<DeviceOp> make_nccl_halo_op(const NcclCommunicator& comm, int axis, int64_t send_prev,
                                            int64_t send_next, int64_t recv_prev, int64_t recv_next, ValueId send,
                                            ValueId recv) {
  auto op = std::make_unique<NcclHaloOp>(comm, axis, send_prev, send_next, recv_prev, recv_next);
  if (send != kNoValue) op->reads = {send};
  if (recv != kNoValue) op->writes = {recv};
  return op;
}

std::unique_ptr<DeviceOp> make_nccl_op(OpKind kind, const NcclCommunicator& comm, int axis, ncclDataType_t type,
                                       size_t count, ValueId in, ValueId out) {
  auto op = std::make_unique<NcclOp>(kind, comm, axis, type, count);
  op->reads = {in};
  op->writes = {out};
  return op;
}

NcclCommunicator::NcclCommunicator(DeviceMesh mesh, int64_t rank, int device, const NcclId& id)
    : mesh_(std::move(mesh)), rank_(rank), device_(device) {
  TESSERA_CUDA(cudaSetDevice(device_));
  ncclUniqueId uid;
  static_assert(sizeof uid.internal == sizeof id.bytes);
  std::memcpy(uid.internal, id.bytes.data(), sizeof uid.internal);
  TESSERA_NCCL(nccl().CommInitRank(&world_, static_cast<int>(mesh_.num_devices()), uid, static_cast<int>(rank_)));
  // One split per axis, in the same order on every rank (ncclCommSplit is
  // collective over the parent).
  std::vector<int64_t> coords = mesh_.coords(rank_);
  for (size_t a = 0; a < mesh_.axes().size(); ++a) {
    std::vector<int64_t> others = coords;
    others[a] = 0;
    ncclComm_t c = nullptr;
    TESSERA_NCCL(nccl().CommSplit(world_, static_cast<int>(mesh_.rank_of(others)), static_cast<int>(coords[a]), &c, nullptr));
    axis_.push_back(c);
  }
  TESSERA_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (staging_) cudaFree(staging_);
  if (stream_) cudaStreamDestroy(stream_);
  for (ncclComm_t c : axis_) nccl().CommDestroy(c);
  if (world_) nccl().CommDestroy(world_);
}

uint8_t* NcclCommunicator::staging(int64_t bytes) {
  if (bytes > staging_bytes_) {
    if (staging_) TESSERA_CUDA(cudaFree(staging_));
    staging_ = nullptr;
    TESSERA_CUDA(cudaMalloc(&staging_, static_cast<size_t>(bytes)));
    staging_bytes_ = bytes;
  }
  return static_cast<uint8_t*>(staging_);
}

namespace {

// Copies `in_bytes` down, runs the collective into `out_bytes`, copies up.
template <class F>
void staged(NcclCommunicator& c, uint8_t* buf, const void* in, int64_t in_bytes, void* out, int64_t out_bytes,
            cudaStream_t s, F&& collective) {
  uint8_t* din = buf;
  uint8_t* dout = buf + (in_bytes + 255) / 256 * 256;
  TESSERA_CUDA(cudaMemcpyAsync(din, in, static_cast<size_t>(in_bytes), cudaMemcpyHostToDevice, s));
  collective(din, dout);
  TESSERA_CUDA(cudaMemcpyAsync(out, dout, static_cast<size_t>(out_bytes), cudaMemcpyDeviceToHost, s));
  TESSERA_CUDA(cudaStreamSynchronize(s));
}

int64_t staged_bytes(int64_t in_bytes, int64_t out_bytes) { return (in_bytes + 255) / 256 * 256 + out_bytes; }

ncclDataType_t sum_type(DType dtype) {
  ncclDataType_t t;
  if (dtype != DType::kF32 && dtype != DType::kF64 && dtype != DType::kI32 && dtype != DType::kI64)
    TESSERA_THROW(ErrorKind::kUnsupported, "a sum over ranks of " << dtype_name(dtype) << " tensors");
  nccl_type(dtype, t);
  return t;
}

}  // namespace

void NcclCommunicator::all_reduce_sum(int axis, DType dtype, const void* in, void* out, int64_t count) {
  ncclDataType_t t = sum_type(dtype);
  int64_t b = count * static_cast<int64_t>(dtype_size(dtype));
  TESSERA_CUDA(cudaSetDevice(device_));
  staged(*this, staging(staged_bytes(b, b)), in, b, out, b, stream_, [&](uint8_t* din, uint8_t* dout) {
    enqueue_collective(OpKind::kAllReduce, *this, axis, t, static_cast<size_t>(count), din, dout, stream_);
  });
}

void NcclCommunicator::reduce_scatter_sum(int axis, DType dtype, const void* in, void* out, int64_t count) {
  ncclDataType_t t = sum_type(dtype);
  int64_t n = mesh_.axes()[static_cast<size_t>(axis)].size;
  int64_t b = count * static_cast<int64_t>(dtype_size(dtype));
  TESSERA_CUDA(cudaSetDevice(device_));
  staged(*this, staging(staged_bytes(n * b, b)), in, n * b, out, b, stream_, [&](uint8_t* din, uint8_t* dout) {
    enqueue_collective(OpKind::kReduceScatter, *this, axis, t, static_cast<size_t>(count), din, dout, stream_);
  });
}

void NcclCommunicator::all_gather(int axis, const void* in, void* out, int64_t bytes) {
  int64_t n = mesh_.axes()[static_cast<size_t>(axis)].size;
  TESSERA_CUDA(cudaSetDevice(device_));
  staged(*this, staging(staged_bytes(bytes, n * bytes)), in, bytes, out, n * bytes, stream_,
         [&](uint8_t* din, uint8_t* dout) {
           enqueue_collective(OpKind::kAllGather, *this, axis, ncclUint8, static_cast<size_t>(bytes), din, dout, stream_);
         });
}

void NcclCommunicator::all_to_all(int axis, const void* in, void* out, int64_t bytes) {
  int64_t n = mesh_.axes()[static_cast<size_t>(axis)].size;
  TESSERA_CUDA(cudaSetDevice(device_));
  staged(*this, staging(staged_bytes(n * bytes, n * bytes)), in, n * bytes, out, n * bytes, stream_,
         [&](uint8_t* din, uint8_t* dout) {
           enqueue_collective(OpKind::kAllToAll, *this, axis, ncclUint8, static_cast<size_t>(bytes), din, dout, stream_);
         });
}

// NCCL's send/recv in one group: the edge blocks down, each neighbour's
// share sent and received, the received rows up.
void NcclCommunicator::halo_exchange(const Exchange& x) {
  TESSERA_CUDA(cudaSetDevice(device_));
  int64_t out_bytes = x.recv_prev + x.recv_next;
  int64_t me = group_index(x.axis);
  ncclComm_t c = comm(x.axis);
  staged(*this, staging(staged_bytes(2 * x.count, out_bytes)), x.in, 2 * x.count, x.out, out_bytes, stream_,
         [&](uint8_t* din, uint8_t* dout) {
           const NcclLibrary& lib = nccl();
           TESSERA_NCCL(lib.GroupStart());
           if (x.send_prev > 0) TESSERA_NCCL(lib.Send(din, static_cast<size_t>(x.send_prev), ncclUint8, static_cast<int>(me - 1), c, stream_));
           if (x.recv_prev > 0) TESSERA_NCCL(lib.Recv(dout, static_cast<size_t>(x.recv_prev), ncclUint8, static_cast<int>(me - 1), c, stream_));
           if (x.send_next > 0)
             TESSERA_NCCL(lib.Send(din + 2 * x.count - x.send_next, static_cast<size_t>(x.send_next), ncclUint8,
                                   static_cast<int>(me + 1), c, stream_));
           if (x.recv_next > 0)
             TESSERA_NCCL(lib.Recv(dout + x.recv_prev, static_cast<size_t>(x.recv_next), ncclUint8, static_cast<int>(me + 1), c, stream_));
           TESSERA_NCCL(lib.GroupEnd());
         });
}

}  // namespace cuda

std::string nccl_unavailable_reason() {
  int count = cuda_device_count();
  if (count == 0) return "no CUDA device (NCCL needs one per rank)";
  std::string why;
  if (!cuda::nccl_library(&why)) return why;
  return "";
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

NcclId nccl_unique_id() {
  ncclUniqueId uid;
  TESSERA_NCCL(cuda::nccl().GetUniqueId(&uid));
  NcclId id;
  std::memcpy(id.bytes.data(), uid.internal, sizeof uid.internal);
  return id;
}

std::unique_ptr<Communicator> make_nccl_communicator(const DeviceMesh& mesh, int64_t rank, int device,
                                                     const NcclId& id) {
  return std::make_unique<cuda::NcclCommunicator>(mesh, rank, device, id);
}

}  // namespace tessera::runtime
