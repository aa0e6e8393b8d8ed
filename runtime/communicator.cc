#include "runtime/communicator.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <thread>

#include "graph/attr_views.h"
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
  const CollectiveAttrs attrs = CollectiveAttrs::of(n);
  std::string axis_name = attrs.mesh_axis;
  int axis = -1;
  for (size_t a = 0; a < mesh.axes().size(); ++a)
    if (mesh.axes()[a].name == axis_name) axis = static_cast<int>(a);
  if (axis < 0)
    throw Error(ErrorKind::kUsage,
                "mesh axis '" + axis_name + "' is not an axis of the communicator's mesh " + mesh.str(), where);
  int64_t size = mesh.axes()[static_cast<size_t>(axis)].size;
  if (attrs.group_size != size)
    throw Error(ErrorKind::kUsage,
                "group_size " + std::to_string(attrs.group_size) + " is not the size of mesh axis '" +
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
    sig += std::string(op_name(n.kind)) + " over " + CollectiveAttrs::of(n).mesh_axis;
    // A halo exchange's bands may be uneven: the ranks agree on the halo table, not on their shapes.
    if (n.kind == OpKind::kHaloExchange) {
      const HaloExchangeAttrs halo = HaloExchangeAttrs::of(n);
      for (const auto& [a, values] : {std::pair{"before", &halo.before}, std::pair{"after", &halo.after}}) {
        sig += std::string(" ") + a + "=";
        for (int64_t v : *values) sig += std::to_string(v) + ",";
      }
    } else {
      sig += " of " + type_str(g.type(n.inputs[0]));
    }
    if (AxisCollectiveAttrs::covers(n.kind)) sig += " axis=" + std::to_string(AxisCollectiveAttrs::of(n).axis);
    if (n.kind == OpKind::kHaloExchange) sig += " axis=" + std::to_string(HaloExchangeAttrs::of(n).axis);
    if (n.kind == OpKind::kAllToAll) {
      const AllToAllAttrs a2a = AllToAllAttrs::of(n);
      sig += " split_axis=" + std::to_string(a2a.split_axis) + " concat_axis=" + std::to_string(a2a.concat_axis);
    }
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

bool is_sum(Exchange::Kind k) { return k == Exchange::Kind::kAllReduceSum || k == Exchange::Kind::kReduceScatterSum; }

int64_t sum_elem_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF64: case DType::kI64: return 8;
    default: TESSERA_THROW(ErrorKind::kUnsupported, "a sum over ranks of " << dtype_name(dtype) << " tensors");
  }
}

// Bytes of x.in and of x.out on a group of `group` ranks.
int64_t in_bytes(const Exchange& x, int64_t group) {
  switch (x.kind) {
    case Exchange::Kind::kAllReduceSum: return x.count * sum_elem_size(x.dtype);
    case Exchange::Kind::kReduceScatterSum: return x.count * sum_elem_size(x.dtype) * group;
    case Exchange::Kind::kAllGather: return x.count;
    case Exchange::Kind::kAllToAll: return x.count * group;
    case Exchange::Kind::kHalo: return 2 * x.count;
  }
  return 0;
}
int64_t out_bytes(const Exchange& x, int64_t group) {
  if (x.kind == Exchange::Kind::kHalo) return x.recv_prev + x.recv_next;
  return is_sum(x.kind) ? x.count * sum_elem_size(x.dtype) : x.count * group;
}

bool same_exchange(const Exchange& a, const Exchange& b) {
  return a.kind == b.kind && a.axis == b.axis && a.count == b.count && (!is_sum(a.kind) || a.dtype == b.dtype);
}

bool overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  auto p = reinterpret_cast<uintptr_t>(a), q = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && p < q + static_cast<uintptr_t>(b_bytes) && q < p + static_cast<uintptr_t>(a_bytes);
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

std::string Exchange::str() const {
  static const char* const kNames[] = {"AllReduce", "ReduceScatter", "AllGather", "AllToAll", "HaloExchange"};
  return std::string(kNames[static_cast<int>(kind)]) + " of " + std::to_string(count) +
         (is_sum(kind) ? std::string(" ") + dtype_name(dtype) : std::string(" bytes")) + " over axis " +
         std::to_string(axis);
}

void Communicator::exchange(const Exchange& x) {
  switch (x.kind) {
    case Exchange::Kind::kAllReduceSum: return all_reduce_sum(x.axis, x.dtype, x.in, x.out, x.count);
    case Exchange::Kind::kReduceScatterSum: return reduce_scatter_sum(x.axis, x.dtype, x.in, x.out, x.count);
    case Exchange::Kind::kAllGather: return all_gather(x.axis, x.in, x.out, x.count);
    case Exchange::Kind::kAllToAll: return all_to_all(x.axis, x.in, x.out, x.count);
    case Exchange::Kind::kHalo: return halo_exchange(x);
  }
}

// The world's k-th collective. `posted` changes under mu_ (waiters sleep on
// cv_); the rest is read and written without it.
struct InProcessWorld::Slot {
  explicit Slot(int64_t ranks) : in(static_cast<size_t>(ranks)), copies(static_cast<size_t>(ranks)) {}
  // For reuse as another collective (a plan makes thousands a second).
  void reset() {
    first_rank = -1;
    for (auto& p : in) p.store(nullptr);
    for (auto& c : copies) c = {};
    posted = read = reading = released = 0;
    abandoned = false;
  }
  uint64_t seq = 0;
  Exchange first;  // the first post, which every other must match
  int64_t first_rank = -1;
  std::vector<std::atomic<const void*>> in;  // per rank: the input it posted, or its copy
  std::vector<std::vector<uint8_t>> copies;  // per rank: the copy `in` points to, if any
  std::atomic<int64_t> posted{0};    // ranks that posted
  std::atomic<int64_t> read{0};      // ranks done reading
  std::atomic<int64_t> reading{0};   // ranks reading now
  std::atomic<int64_t> released{0};  // ranks done with the slot; the last erases it
  bool abandoned = false;  // a rank stopped waiting for its posts (the world failed)
};

class InProcessWorld::Rank : public Communicator {
 public:
  Rank(InProcessWorld& world, int64_t rank) : world_(world), rank_(rank) {
    for (size_t a = 0; a < world.mesh_.axes().size(); ++a) {
      groups_.push_back(world.mesh_.group(rank, static_cast<int>(a)));
      index_.push_back(group_index(static_cast<int>(a)));
    }
  }
  int64_t rank() const override { return rank_; }
  const DeviceMesh& mesh() const override { return world_.mesh_; }
  std::string name() const override { return "in-process"; }

  void all_reduce_sum(int axis, DType dtype, const void* in, void* out, int64_t count) override {
    blocking({Exchange::Kind::kAllReduceSum, axis, dtype, in, out, count});
  }
  void reduce_scatter_sum(int axis, DType dtype, const void* in, void* out, int64_t count) override {
    blocking({Exchange::Kind::kReduceScatterSum, axis, dtype, in, out, count});
  }
  void all_gather(int axis, const void* in, void* out, int64_t bytes) override {
    blocking({Exchange::Kind::kAllGather, axis, DType::kU8, in, out, bytes});
  }
  void all_to_all(int axis, const void* in, void* out, int64_t bytes) override {
    blocking({Exchange::Kind::kAllToAll, axis, DType::kU8, in, out, bytes});
  }
  void halo_exchange(const Exchange& x) override { blocking(x); }

  // Posts a copy of x.in, so that nothing this rank does (or fails to do)
  // after start() returns can change or free what its peers read.
  int64_t start(const Exchange& x) override {
    Slot& s = world_.post(rank_, x, in_bytes(x, group_size(x.axis)), /*copy=*/true);
    int64_t id = next_request_++;
    pending_.emplace(id, Pending{&s, x});
    return id;
  }

  void wait(int64_t request) override {
    auto it = pending_.find(request);
    TESSERA_CHECK(it != pending_.end(), "wait on request " << request << ", which is not pending");
    Pending p = it->second;
    pending_.erase(it);
    world_.await_posts(rank_, *p.slot);
    read(*p.slot, p.x, p.x.out);  // this rank posted a copy: `out` is nobody else's
    world_.release(*p.slot);
  }

  void reset() {
    pending_.clear();
    next_request_ = 0;
  }

 private:
  struct Pending {
    Slot* slot;
    Exchange x;
  };

  int64_t group_size(int axis) const { return world_.mesh_.axes()[static_cast<size_t>(axis)].size; }

  // Posts x.in in place; everything that can throw happens before posting
  // or while waiting for the posts, when no peer reads it yet.
  void blocking(const Exchange& x) {
    int64_t group = group_size(x.axis), in_b = in_bytes(x, group), out_b = out_bytes(x, group);
    Slot& s = world_.post(rank_, x, in_b, /*copy=*/false);
    world_.await_posts(rank_, s);
    // `out` may be `in`, which peers are reading: then compute aside.
    bool aside = overlaps(x.in, in_b, x.out, out_b);
    std::vector<uint8_t> result(aside ? static_cast<size_t>(out_b) : 0);
    read(s, x, aside ? result.data() : x.out);
    keep_or_copy(s, x.in, in_b);
    world_.release(s);
    if (aside) std::memcpy(x.out, result.data(), result.size());
  }

  // This rank's result of slot s into `dest`, from its group's posts.
  void read(Slot& s, const Exchange& x, void* dest) {
    const std::vector<int64_t>& group = groups_[static_cast<size_t>(x.axis)];
    int64_t me = index_[static_cast<size_t>(x.axis)];
    auto* d = static_cast<uint8_t*>(dest);
    s.reading.fetch_add(1);  // before loading the pointers: keep_or_copy waits for it
    auto at = [&](size_t k) { return static_cast<const uint8_t*>(s.in[static_cast<size_t>(group[k])].load()); };
    if (x.kind == Exchange::Kind::kHalo) {
      // The end of the previous rank's last edge block, the start of the next one's first.
      if (x.recv_prev > 0) std::memcpy(d, at(static_cast<size_t>(me - 1)) + 2 * x.count - x.recv_prev, static_cast<size_t>(x.recv_prev));
      if (x.recv_next > 0) std::memcpy(d + x.recv_prev, at(static_cast<size_t>(me + 1)), static_cast<size_t>(x.recv_next));
    } else if (is_sum(x.kind)) {
      int64_t e = sum_elem_size(x.dtype);
      int64_t offset = x.kind == Exchange::Kind::kReduceScatterSum ? me * x.count * e : 0;
      if (x.count > 0) std::memset(d, 0, static_cast<size_t>(x.count * e));
      for (size_t k = 0; k < group.size(); ++k) accumulate(x.dtype, d, at(k) + offset, x.count);
    } else {
      int64_t from = x.kind == Exchange::Kind::kAllToAll ? me * x.count : 0;
      for (size_t k = 0; k < group.size() && x.count > 0; ++k)
        std::memcpy(d + k * x.count, at(k) + from, static_cast<size_t>(x.count));
    }
    s.read.fetch_add(1);
    s.reading.fetch_sub(1);
  }

  // A blocking collective returns with its input free for the caller: once
  // every peer has read it, or, when one has not yet (it completes a
  // collective it started later, or is not scheduled), with a copy left in
  // the slot for it. No rank waits for a peer's read, so ranks that wait on
  // their collectives in different orders never wait for each other.
  void keep_or_copy(Slot& s, const void* in, int64_t bytes) {
    const auto n = static_cast<int64_t>(world_.ranks_.size());
    for (int i = 0; i < world_.spins_ && s.read.load() < n; ++i) spin_pause();
    if (s.read.load() == n) return;
    std::vector<uint8_t>& copy = s.copies[static_cast<size_t>(rank_)];
    const auto* p = static_cast<const uint8_t*>(in);
    copy.assign(p, p + bytes);
    s.in[static_cast<size_t>(rank_)].store(copy.data());
    // Readers that loaded the old pointer are reading now: a memcpy or a sum.
    while (s.reading.load() > 0) std::this_thread::yield();
  }

  InProcessWorld& world_;
  int64_t rank_;
  std::vector<std::vector<int64_t>> groups_;  // per mesh axis: this rank's group
  std::vector<int64_t> index_;                // per mesh axis: its position there
  std::map<int64_t, Pending> pending_;  // started, not waited on
  int64_t next_request_ = 0;
};

InProcessWorld::InProcessWorld(DeviceMesh mesh) : mesh_(std::move(mesh)) {
  int64_t n = mesh_.num_devices();
  spins_ = n <= static_cast<int64_t>(std::thread::hardware_concurrency()) ? 4096 : 0;
  next_.assign(static_cast<size_t>(n), 0);
  for (int64_t r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

InProcessWorld::~InProcessWorld() = default;

Communicator* InProcessWorld::communicator(int64_t rank) {
  if (rank < 0 || rank >= static_cast<int64_t>(ranks_.size()))
    TESSERA_THROW(ErrorKind::kUsage, "rank " << rank << " is outside mesh " << mesh_.str());
  return ranks_[rank].get();
}

void InProcessWorld::SpinLock::lock() {
  for (int i = 0; flag_.exchange(true, std::memory_order_acquire); ++i) {
    while (flag_.load(std::memory_order_relaxed)) {
      if (++i < 1024) spin_pause();
      else std::this_thread::yield();  // the holder may need this core
    }
  }
}

void InProcessWorld::throw_aborted(int64_t rank) {
  int64_t f = failed_.load();  // failed_why_ and failed_kind_ were written before it
  std::string why = f == rank ? failed_why_ : "rank " + std::to_string(f) + " failed: " + failed_why_;
  throw Error(failed_kind_, "rank " + std::to_string(rank) + " stopped in a collective: " + why);
}

void InProcessWorld::fail_locked(int64_t rank, ErrorKind kind, const std::string& why) {
  if (failed_ >= 0) return;  // the first failure is the one reported
  failed_kind_ = kind;
  failed_why_ = why;
  failed_ = rank;
  cv_.notify_all();
}

void InProcessWorld::abort(int64_t rank, ErrorKind kind, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_locked(rank, kind, why);
}

void InProcessWorld::fail(int64_t rank, ErrorKind kind, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    fail_locked(rank, kind, why);
  }
  throw_aborted(rank);
}

InProcessWorld::Slot& InProcessWorld::post(int64_t rank, const Exchange& x, int64_t bytes, bool copy) {
  std::vector<uint8_t> mine;
  if (copy && bytes > 0) mine.assign(static_cast<const uint8_t*>(x.in), static_cast<const uint8_t*>(x.in) + bytes);
  const auto n = static_cast<int64_t>(ranks_.size());
  std::unique_lock<SpinLock> lock(slots_mu_);
  if (failed_ < 0 && left_ >= 0) {
    int64_t left = left_;
    lock.unlock();
    fail(left, ErrorKind::kInvalidGraph,
         "its program ended while rank " + std::to_string(rank) +
             " entered a collective (the ranks' programs make different collectives)");
  }
  uint64_t seq = next_[static_cast<size_t>(rank)];
  std::unique_ptr<Slot>& slot = slots_[seq];
  if (!slot) {
    if (spare_.empty()) {
      slot = std::make_unique<Slot>(n);
    } else {
      slot = std::move(spare_.back());
      spare_.pop_back();
    }
    slot->seq = seq;
    slot->first = x;
    slot->first_rank = rank;
  } else if (!same_exchange(slot->first, x)) {
    std::string why = "its collective " + std::to_string(seq + 1) + " is " + x.str() + " and rank " +
                      std::to_string(slot->first_rank) + "'s is " + slot->first.str() +
                      " (the ranks' programs make different collectives)";
    lock.unlock();
    fail(rank, ErrorKind::kInvalidGraph, why);
  }
  // After a failure no slot fills up any more: a rank that gave up waiting
  // for it may have left with its input posted in place.
  if (failed_ >= 0 || slot->abandoned) {
    lock.unlock();
    std::lock_guard<std::mutex> failed(mu_);
    throw_aborted(rank);
  }
  ++next_[static_cast<size_t>(rank)];
  Slot& s = *slot;
  auto r = static_cast<size_t>(rank);
  if (copy) s.copies[r] = std::move(mine);
  s.in[r].store(copy ? s.copies[r].data() : x.in);
  bool full = s.posted.fetch_add(1) + 1 == n;
  lock.unlock();
  // A waiter counts itself in sleepers_ before it checks `posted` and
  // sleeps (both seq_cst): either it sees this post or this sees it.
  if (full && sleepers_.load() > 0) {
    std::lock_guard<std::mutex> wake(mu_);
    cv_.notify_all();
  }
  return s;
}

void InProcessWorld::await_posts(int64_t rank, Slot& s) {
  const auto n = static_cast<int64_t>(ranks_.size());
  // Spin a little before sleeping when every rank has a core: the peers of
  // a collective usually arrive within microseconds, and a wake-up through
  // the condition variable costs more than that. Measured on 2 cores, the
  // tiny transformer's plans as threads, --repeat 50 medians: tp=2 (5
  // collectives a run) 0.11-0.14 ms sleeping, 0.06-0.07 ms spinning 4096
  // pauses first; tp=4 (4 ranks on 2 cores) 0.31 ms sleeping, 1.15 ms
  // spinning, as a spinning rank holds the core its peer needs.
  for (int i = 0; i < spins_ && s.posted.load() < n && failed_.load() < 0; ++i) spin_pause();
  if (s.posted.load() == n) return;  // every rank posted: reading is safe even if one failed since
  {
    std::unique_lock<std::mutex> lock(mu_);
    ++sleepers_;
    cv_.wait(lock, [&] { return s.posted.load() == n || failed_ >= 0; });
    --sleepers_;
  }
  std::unique_lock<SpinLock> lock(slots_mu_);
  if (s.posted.load() == n) return;
  s.abandoned = true;
  lock.unlock();
  std::lock_guard<std::mutex> failed(mu_);
  throw_aborted(rank);
}

void InProcessWorld::release(Slot& s) {
  if (s.released.fetch_add(1) + 1 < static_cast<int64_t>(ranks_.size())) return;
  std::lock_guard<SpinLock> lock(slots_mu_);
  auto it = slots_.find(s.seq);
  it->second->reset();
  spare_.push_back(std::move(it->second));
  slots_.erase(it);
}

void InProcessWorld::leave(int64_t rank) {
  bool waited_for = false;
  {
    std::lock_guard<SpinLock> lock(slots_mu_);
    if (left_ < 0) left_ = rank;
    for (const auto& [seq, s] : slots_) waited_for = waited_for || s->posted.load() < static_cast<int64_t>(ranks_.size());
  }
  if (waited_for)
    abort(rank, ErrorKind::kInvalidGraph,
          "its program ended while other ranks wait in a collective (the ranks' programs make different "
          "collectives)");
}

void InProcessWorld::run(const std::function<void(int64_t rank)>& body) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::lock_guard<SpinLock> slots(slots_mu_);
    slots_.clear();
    next_.assign(ranks_.size(), 0);
    for (auto& r : ranks_) r->reset();
    left_ = -1;
    failed_ = -1;
    failed_why_.clear();
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
