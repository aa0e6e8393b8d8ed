#include "runtime/communicator.h"

#include <cstring>
#include <exception>
#include <thread>

#include "graph/error.h"

namespace tessera::runtime {

int collective_axis(const Node& n, const Communicator* comm) {
  ErrorContext where{"", n.name, op_name(n.kind)};
  if (!comm)
    throw Error(ErrorKind::kUsage,
                "a collective needs the ranks of its mesh: compile the plan with a communicator (run a mesh plan "
                "folder with `tessera run PLAN_DIR`)",
                where);
  const DeviceMesh& mesh = comm->mesh();
  std::string axis_name = n.attrs.s("mesh_axis");
  int axis = -1;
  for (size_t a = 0; a < mesh.axes().size(); ++a)
    if (mesh.axes()[a].name == axis_name) axis = static_cast<int>(a);
  if (axis < 0)
    throw Error(ErrorKind::kUsage,
                "mesh axis '" + axis_name + "' is not an axis of the communicator's mesh " + mesh.str(), where);
  int64_t size = mesh.axes()[static_cast<size_t>(axis)].size;
  if (n.attrs.i("group_size") != size)
    throw Error(ErrorKind::kUsage,
                "group_size " + std::to_string(n.attrs.i("group_size")) + " is not the size of mesh axis '" +
                    axis_name + "' (" + std::to_string(size) + ") of " + mesh.str(),
                where);
  return axis;
}

void check_collectives(const Graph& g, const Communicator* comm) {
  for (NodeId n = 0; n < g.num_nodes(); ++n)
    if (op_def(g.node(n).kind).is_collective()) collective_axis(g.node(n), comm);
}

std::string collective_signature(const Graph& g) {
  std::string sig;
  for (NodeId id : g.topo_order()) {
    const Node& n = g.node(id);
    if (!op_def(n.kind).is_collective()) continue;
    sig += std::string(op_name(n.kind)) + " over " + n.attrs.s("mesh_axis") + " of " + type_str(g.type(n.inputs[0]));
    for (const char* a : {"axis", "split_axis", "concat_axis"})
      if (n.attrs.has(a)) sig += std::string(" ") + a + "=" + std::to_string(n.attrs.i(a));
    sig += "\n";
  }
  return sig;
}

std::string signature_difference(const std::string& mine, const std::string& theirs) {
  if (mine == theirs) return "";
  auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    size_t at = 0;
    for (size_t nl; (nl = s.find('\n', at)) != std::string::npos; at = nl + 1) out.push_back(s.substr(at, nl - at));
    return out;
  };
  std::vector<std::string> a = lines(mine), b = lines(theirs);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto at = [](const std::vector<std::string>& v, size_t k) { return k < v.size() ? "'" + v[k] + "'" : "no collective"; };
  return "collective " + std::to_string(i + 1) + ": " + at(a, i) + " against " + at(b, i);
}

namespace {

inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

size_t sum_elem_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF64: case DType::kI64: return 8;
    default: TESSERA_THROW(ErrorKind::kUnsupported, "a sum over ranks of " << dtype_name(dtype) << " tensors");
  }
}

template <class T>
void add_into(void* acc, const void* x, int64_t count) {
  T* a = static_cast<T*>(acc);
  const T* p = static_cast<const T*>(x);
  for (int64_t i = 0; i < count; ++i) a[i] += p[i];
}

void accumulate(DType dtype, void* acc, const void* x, int64_t count) {
  switch (dtype) {
    case DType::kF32: return add_into<float>(acc, x, count);
    case DType::kF64: return add_into<double>(acc, x, count);
    case DType::kI32: return add_into<int32_t>(acc, x, count);
    default: return add_into<int64_t>(acc, x, count);
  }
}

}  // namespace

class InProcessWorld::Rank : public Communicator {
 public:
  Rank(InProcessWorld& world, int64_t rank) : world_(world), rank_(rank) {}
  int64_t rank() const override { return rank_; }
  const DeviceMesh& mesh() const override { return world_.mesh_; }
  std::string name() const override { return "in-process"; }

  void all_reduce_sum(int axis, DType dtype, const void* in, void* out, int64_t count) override {
    sum_block(axis, dtype, in, out, count, /*scatter=*/false);
  }

  void reduce_scatter_sum(int axis, DType dtype, const void* in, void* out, int64_t count) override {
    sum_block(axis, dtype, in, out, count, /*scatter=*/true);
  }

  void all_gather(int axis, const void* in, void* out, int64_t bytes) override {
    std::vector<int64_t> group = world_.mesh_.group(rank_, axis);
    publish(in);
    for (size_t k = 0; k < group.size(); ++k)
      std::memcpy(static_cast<uint8_t*>(out) + k * bytes, world_.posted_[group[k]], static_cast<size_t>(bytes));
    world_.barrier(rank_);
  }

  void all_to_all(int axis, const void* in, void* out, int64_t bytes) override {
    std::vector<int64_t> group = world_.mesh_.group(rank_, axis);
    int64_t me = group_index(axis);
    // `out` may be `in`: receive into a local buffer, copy out after the
    // peers are done reading.
    std::vector<uint8_t> got(static_cast<size_t>(bytes) * group.size());
    publish(in);
    for (size_t k = 0; k < group.size(); ++k)
      std::memcpy(got.data() + k * bytes, static_cast<const uint8_t*>(world_.posted_[group[k]]) + me * bytes,
                  static_cast<size_t>(bytes));
    world_.barrier(rank_);
    if (!got.empty()) std::memcpy(out, got.data(), got.size());
  }

 private:
  // Posts `in` and waits until every rank has.
  void publish(const void* in) {
    world_.posted_[rank_] = in;
    world_.barrier(rank_);
  }

  // All-reduce (the whole buffer) or reduce-scatter (this rank's block of
  // the sum). Everything that can throw happens before publishing, so a
  // rank never leaves a collective while its peers read its buffer.
  void sum_block(int axis, DType dtype, const void* in, void* out, int64_t count, bool scatter) {
    size_t e = sum_elem_size(dtype);
    std::vector<int64_t> group = world_.mesh_.group(rank_, axis);
    int64_t offset = scatter ? group_index(axis) * count * static_cast<int64_t>(e) : 0;
    // Accumulate locally: `out` may alias this rank's posted input, which
    // peers are still reading. Summed in group order, so every rank's sum is
    // bitwise the same.
    std::vector<uint8_t> acc(static_cast<size_t>(count) * e, 0);
    publish(in);
    for (int64_t r : group) accumulate(dtype, acc.data(), static_cast<const uint8_t*>(world_.posted_[r]) + offset, count);
    world_.barrier(rank_);
    if (!acc.empty()) std::memcpy(out, acc.data(), acc.size());
  }

  InProcessWorld& world_;
  int64_t rank_;
};

InProcessWorld::InProcessWorld(DeviceMesh mesh) : mesh_(std::move(mesh)) {
  int64_t n = mesh_.num_devices();
  spins_ = n <= static_cast<int64_t>(std::thread::hardware_concurrency()) ? 4096 : 0;
  posted_.assign(static_cast<size_t>(n), nullptr);
  for (int64_t r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

InProcessWorld::~InProcessWorld() = default;

Communicator* InProcessWorld::communicator(int64_t rank) {
  if (rank < 0 || rank >= static_cast<int64_t>(ranks_.size()))
    TESSERA_THROW(ErrorKind::kUsage, "rank " << rank << " is outside mesh " << mesh_.str());
  return ranks_[rank].get();
}

void InProcessWorld::throw_aborted(int64_t rank) {
  std::string why = failed_ == rank ? failed_why_ : "rank " + std::to_string(failed_) + " failed: " + failed_why_;
  throw Error(failed_kind_, "rank " + std::to_string(rank) + " stopped in a collective: " + why);
}

void InProcessWorld::fail_locked(int64_t rank, ErrorKind kind, const std::string& why) {
  if (failed_ >= 0) return;  // the first failure is the one reported
  failed_ = rank;
  failed_kind_ = kind;
  failed_why_ = why;
  cv_.notify_all();
}

void InProcessWorld::abort(int64_t rank, ErrorKind kind, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_locked(rank, kind, why);
}

void InProcessWorld::barrier(int64_t rank) {
  std::unique_lock<std::mutex> lock(mu_);
  if (failed_ < 0 && left_ >= 0)
    fail_locked(left_, ErrorKind::kInvalidGraph,
                "its program ended while rank " + std::to_string(rank) +
                    " entered a collective (the ranks' programs make different collectives)");
  if (failed_ >= 0) throw_aborted(rank);
  uint64_t gen = generation_;
  if (++waiting_ == static_cast<int64_t>(ranks_.size())) {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  // Spin a little before sleeping when every rank has a core: the peers of
  // a collective usually arrive within microseconds, and a wake-up through
  // the condition variable costs more than that. Measured on 2 cores, the
  // tiny transformer's plans as threads, --repeat 50 medians: tp=2 (5
  // collectives a run) 0.11-0.14 ms sleeping, 0.06-0.07 ms spinning 4096
  // pauses first; tp=4 (4 ranks on 2 cores) 0.31 ms sleeping, 1.15 ms
  // spinning, as a spinning rank holds the core its peer needs.
  lock.unlock();
  for (int i = 0; i < spins_ && generation_.load() == gen && failed_.load() < 0; ++i) spin_pause();
  if (generation_.load() != gen) return;
  lock.lock();
  cv_.wait(lock, [&] { return generation_ != gen || failed_ >= 0; });
  if (generation_ == gen) throw_aborted(rank);
}

void InProcessWorld::leave(int64_t rank) {
  std::lock_guard<std::mutex> lock(mu_);
  if (left_ < 0) left_ = rank;
  if (waiting_ > 0)
    fail_locked(rank, ErrorKind::kInvalidGraph,
                "its program ended while other ranks wait in a collective (the ranks' programs make different "
                "collectives)");
}

void InProcessWorld::run(const std::function<void(int64_t rank)>& body) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_ = 0;
    left_ = -1;
    failed_ = -1;
    failed_why_.clear();
    ++generation_;
  }
  int64_t n = static_cast<int64_t>(ranks_.size());
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
        leave(r);
      } catch (const Error& e) {
        errors[r] = std::current_exception();
        abort(r, e.kind(), e.what());
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        abort(r, ErrorKind::kInternal, e.what());
      } catch (...) {
        errors[r] = std::current_exception();
        abort(r, ErrorKind::kInternal, "unknown exception");
      }
    });
  for (std::thread& t : threads) t.join();
  if (failed_ < 0) return;
  try {
    std::rethrow_exception(errors[static_cast<size_t>(failed_)] ? errors[static_cast<size_t>(failed_)]
                                                                : std::make_exception_ptr(Error(failed_kind_, failed_why_)));
  } catch (const Error& e) {
    throw Error(e.kind(), "rank " + std::to_string(failed_) + ": " + e.what());
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kInternal, "rank " + std::to_string(failed_) + ": " + e.what());
  }
}

}  // namespace tessera::runtime
