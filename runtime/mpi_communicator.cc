#include "runtime/mpi_communicator.h"

// The C API only (Open MPI and MPICH otherwise pull in their C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <vector>

#include "graph/error.h"

namespace tessera::runtime {
namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  TESSERA_THROW(ErrorKind::kInternal, what << " failed: " << std::string(text, static_cast<size_t>(len)));
}

int mpi_count(int64_t n, const char* what) {
  if (n > INT_MAX)
    TESSERA_THROW(ErrorKind::kResource, what << " of " << n << " elements is over MPI's int count (" << INT_MAX << ")");
  return static_cast<int>(n);
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    default: TESSERA_THROW(ErrorKind::kUnsupported, "a sum over ranks of " << dtype_name(dtype) << " tensors");
  }
}

}  // namespace

bool MpiSession::launched() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) return true;
  }
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

MpiSession& MpiSession::get() {
  static MpiSession session;
  return session;
}

MpiSession::MpiSession() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    owns_ = true;
  }
  // A failed collective returns its error (to throw) instead of ending the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int r = 0, s = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  rank_ = r;
  size_ = s;
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    int lr = 0, ls = 1;
    MPI_Comm_rank(node, &lr);
    MPI_Comm_size(node, &ls);
    local_rank_ = lr;
    local_size_ = ls;
    MPI_Comm_free(&node);
  }
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

MpiSession::Failure MpiSession::first_failure(bool failed, int code, const std::string& message) const {
  int mine = failed ? static_cast<int>(rank_) : INT_MAX, lowest = INT_MAX;
  check_mpi(MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  Failure f;
  if (lowest == INT_MAX) return f;
  f.rank = lowest;
  int head[2] = {code, static_cast<int>(message.size())};
  check_mpi(MPI_Bcast(head, 2, MPI_INT, lowest, MPI_COMM_WORLD), "MPI_Bcast");
  f.code = head[0];
  int len = head[1];
  f.message = lowest == rank_ ? message : std::string(static_cast<size_t>(len), '\0');
  if (len > 0) check_mpi(MPI_Bcast(f.message.data(), len, MPI_CHAR, lowest, MPI_COMM_WORLD), "MPI_Bcast");
  return f;
}

void MpiSession::broadcast(void* data, int64_t bytes) const {
  check_mpi(MPI_Bcast(data, mpi_count(bytes, "a broadcast"), MPI_BYTE, 0, MPI_COMM_WORLD), "MPI_Bcast");
}

void MpiSession::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; if it did, still end here
}

struct MpiCommunicator::Comms {
  std::vector<MPI_Comm> axis;  // per mesh axis: this rank's group along it
  // Started collectives, oldest first: (request id, MPI's request, which
  // MPI_REQUEST_NULL once an MPI_Test completed it).
  // A halo exchange is up to four point-to-point requests; the others one.
  struct Pending {
    int64_t id;
    std::vector<MPI_Request> requests;
  };
  std::vector<Pending> pending;
  int64_t next_id = 0;
  ~Comms() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Comm& c : axis)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  }
};

MpiCommunicator::MpiCommunicator(const MpiSession& session, DeviceMesh mesh)
    : mesh_(std::move(mesh)), rank_(session.rank()), comms_(std::make_unique<Comms>()) {
  if (session.size() != mesh_.num_devices())
    TESSERA_THROW(ErrorKind::kResource, "MPI started " << session.size() << " processes but mesh " << mesh_.str()
                                                       << " has " << mesh_.num_devices() << " ranks");
  std::vector<int64_t> coords = mesh_.coords(rank_);
  for (size_t a = 0; a < mesh_.axes().size(); ++a) {
    std::vector<int64_t> others = coords;
    others[a] = 0;
    MPI_Comm c = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(mesh_.rank_of(others)), static_cast<int>(coords[a]), &c),
              "MPI_Comm_split");
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    comms_->axis.push_back(c);
  }
}

MpiCommunicator::~MpiCommunicator() = default;

void MpiCommunicator::all_reduce_sum(int axis, DType dtype, const void* in, void* out, int64_t count) {
  const void* send = in == out ? MPI_IN_PLACE : in;
  check_mpi(MPI_Allreduce(send, out, mpi_count(count, "an all-reduce"), mpi_type(dtype), MPI_SUM, comms_->axis[axis]),
            "MPI_Allreduce");
}

void MpiCommunicator::reduce_scatter_sum(int axis, DType dtype, const void* in, void* out, int64_t count) {
  check_mpi(MPI_Reduce_scatter_block(in, out, mpi_count(count, "a reduce-scatter"), mpi_type(dtype), MPI_SUM,
                                     comms_->axis[axis]),
            "MPI_Reduce_scatter_block");
}

void MpiCommunicator::all_gather(int axis, const void* in, void* out, int64_t bytes) {
  int n = mpi_count(bytes, "an all-gather");
  check_mpi(MPI_Allgather(in, n, MPI_BYTE, out, n, MPI_BYTE, comms_->axis[axis]), "MPI_Allgather");
}

void MpiCommunicator::all_to_all(int axis, const void* in, void* out, int64_t bytes) {
  int n = mpi_count(bytes, "an all-to-all");
  check_mpi(MPI_Alltoall(in, n, MPI_BYTE, out, n, MPI_BYTE, comms_->axis[axis]), "MPI_Alltoall");
}

namespace {

// The neighbour exchange as point-to-point requests on the axis's group
// (ranks numbered by their coordinate there), tag 0: every rank posts its
// halo exchanges in the same order, and MPI keeps the order of messages
// between two ranks on one communicator.
std::vector<MPI_Request> post_halo(const Exchange& x, MPI_Comm comm, int64_t me) {
  std::vector<MPI_Request> reqs;
  const auto* in = static_cast<const uint8_t*>(x.in);
  auto* out = static_cast<uint8_t*>(x.out);
  int prev = static_cast<int>(me - 1), next = static_cast<int>(me + 1);
  // Each call writes its request before it is kept (an argument list would
  // leave the order of the write and the copy unspecified).
  auto recv = [&](uint8_t* at, int64_t bytes, int peer) {
    if (bytes <= 0) return;
    MPI_Request r = MPI_REQUEST_NULL;
    check_mpi(MPI_Irecv(at, mpi_count(bytes, "a halo"), MPI_BYTE, peer, 0, comm, &r), "MPI_Irecv");
    reqs.push_back(r);
  };
  auto send = [&](const uint8_t* at, int64_t bytes, int peer) {
    if (bytes <= 0) return;
    MPI_Request r = MPI_REQUEST_NULL;
    check_mpi(MPI_Isend(at, mpi_count(bytes, "a halo"), MPI_BYTE, peer, 0, comm, &r), "MPI_Isend");
    reqs.push_back(r);
  };
  recv(out, x.recv_prev, prev);
  recv(out + x.recv_prev, x.recv_next, next);
  send(in, x.send_prev, prev);
  send(in + 2 * x.count - x.send_next, x.send_next, next);
  return reqs;
}

}  // namespace

void MpiCommunicator::halo_exchange(const Exchange& x) {
  std::vector<MPI_Request> reqs = post_halo(x, comms_->axis[static_cast<size_t>(x.axis)], group_index(x.axis));
  check_mpi(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

int64_t MpiCommunicator::start(const Exchange& x) {
  MPI_Comm comm = comms_->axis[static_cast<size_t>(x.axis)];
  MPI_Request req = MPI_REQUEST_NULL;
  if (x.kind == Exchange::Kind::kHalo) {
    comms_->pending.push_back({comms_->next_id, post_halo(x, comm, group_index(x.axis))});
    return comms_->next_id++;
  }
  switch (x.kind) {
    case Exchange::Kind::kAllReduceSum:
      check_mpi(MPI_Iallreduce(x.in == x.out ? MPI_IN_PLACE : x.in, x.out, mpi_count(x.count, "an all-reduce"),
                               mpi_type(x.dtype), MPI_SUM, comm, &req),
                "MPI_Iallreduce");
      break;
    case Exchange::Kind::kReduceScatterSum:
      check_mpi(MPI_Ireduce_scatter_block(x.in, x.out, mpi_count(x.count, "a reduce-scatter"), mpi_type(x.dtype),
                                          MPI_SUM, comm, &req),
                "MPI_Ireduce_scatter_block");
      break;
    case Exchange::Kind::kAllGather: {
      int n = mpi_count(x.count, "an all-gather");
      check_mpi(MPI_Iallgather(x.in, n, MPI_BYTE, x.out, n, MPI_BYTE, comm, &req), "MPI_Iallgather");
      break;
    }
    case Exchange::Kind::kAllToAll: {
      int n = mpi_count(x.count, "an all-to-all");
      check_mpi(MPI_Ialltoall(x.in, n, MPI_BYTE, x.out, n, MPI_BYTE, comm, &req), "MPI_Ialltoall");
      break;
    }
    case Exchange::Kind::kHalo: break;  // above
  }
  comms_->pending.push_back({comms_->next_id, {req}});
  return comms_->next_id++;
}

void MpiCommunicator::wait(int64_t request) {
  auto& pending = comms_->pending;
  auto it = std::find_if(pending.begin(), pending.end(), [&](const auto& p) { return p.id == request; });
  TESSERA_CHECK(it != pending.end(), "wait on request " << request << ", which is not pending");
  std::vector<MPI_Request> reqs = std::move(it->requests);
  pending.erase(it);
  check_mpi(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

void MpiCommunicator::progress() {
  // One test drives Open MPI's progress engine, which advances every
  // outstanding collective; the oldest is the one a wait needs first.
  for (auto& p : comms_->pending)
    for (MPI_Request& req : p.requests) {
      if (req == MPI_REQUEST_NULL) continue;
      int done = 0;
      check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      return;
    }
}

}  // namespace tessera::runtime
