#include "runtime/communicator.h"

#include <cstring>

#include "graph/error.h"

namespace tessera::runtime {

class InProcessWorld::Rank : public Communicator {
 public:
  Rank(InProcessWorld& world, int64_t rank) : world_(world), rank_(rank) {}
  int64_t rank() const override { return rank_; }
  const DeviceMesh& mesh() const override { return world_.mesh_; }

  void all_reduce_sum(int axis, DType dtype, const void* in, void* out, int64_t count) override {
    std::vector<int64_t> group = publish(axis, in);
    switch (dtype) {
      case DType::kF32: sum<float>(group, out, count); break;
      case DType::kF64: sum<double>(group, out, count); break;
      case DType::kI64: sum<int64_t>(group, out, count); break;
      case DType::kI32: sum<int32_t>(group, out, count); break;
      default: TESSERA_THROW(ErrorKind::kUnsupported, "all-reduce of " << dtype_name(dtype) << " tensors");
    }
    world_.barrier();
  }

  void all_gather(int axis, const void* in, void* out, int64_t bytes) override {
    std::vector<int64_t> group = publish(axis, in);
    for (size_t k = 0; k < group.size(); ++k)
      std::memcpy(static_cast<uint8_t*>(out) + k * bytes, world_.posted_[group[k]], bytes);
    world_.barrier();
  }

  void all_to_all(int axis, const void* in, void* out, int64_t bytes) override {
    std::vector<int64_t> group = publish(axis, in);
    size_t me = 0;
    for (size_t k = 0; k < group.size(); ++k)
      if (group[k] == rank_) me = k;
    for (size_t k = 0; k < group.size(); ++k)
      std::memcpy(static_cast<uint8_t*>(out) + k * bytes,
                  static_cast<const uint8_t*>(world_.posted_[group[k]]) + me * bytes, bytes);
    world_.barrier();
  }

 private:
  // Posts `in`, waits until every rank has, and returns this rank's group.
  std::vector<int64_t> publish(int axis, const void* in) {
    world_.posted_[rank_] = in;
    world_.barrier();
    return world_.mesh_.group(rank_, axis);
  }

  template <class T>
  void sum(const std::vector<int64_t>& group, void* out, int64_t count) {
    // Accumulate in a local buffer: `out` may alias this rank's posted input,
    // which peers are still reading.
    std::vector<T> acc(static_cast<size_t>(count), T{});
    for (int64_t r : group) {
      const T* p = static_cast<const T*>(world_.posted_[r]);
      for (int64_t i = 0; i < count; ++i) acc[i] += p[i];
    }
    world_.barrier();
    std::memcpy(out, acc.data(), static_cast<size_t>(count) * sizeof(T));
  }

  InProcessWorld& world_;
  int64_t rank_;
};

InProcessWorld::InProcessWorld(DeviceMesh mesh) : mesh_(std::move(mesh)) {
  int64_t n = mesh_.num_devices();
  posted_.assign(static_cast<size_t>(n), nullptr);
  for (int64_t r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

InProcessWorld::~InProcessWorld() = default;

Communicator* InProcessWorld::communicator(int64_t rank) {
  if (rank < 0 || rank >= static_cast<int64_t>(ranks_.size()))
    TESSERA_THROW(ErrorKind::kUsage, "rank " << rank << " is outside mesh " << mesh_.str());
  return ranks_[rank].get();
}

void InProcessWorld::barrier() {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t gen = generation_;
  if (++waiting_ == static_cast<int64_t>(ranks_.size())) {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen; });
}

}  // namespace tessera::runtime
