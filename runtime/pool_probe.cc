#include "runtime/pool_probe.h"
#include "runtime/thread_scope.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

namespace tessera::runtime {

namespace {

double probe_clock_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Each thread writes its own slot, a cache line apart: the region does
// almost nothing, so its time is the pool's fork and join.
void probe_region(int threads, std::vector<double>& slots) {
#pragma omp parallel num_threads(std::max(threads, 1))
  slots[static_cast<size_t>(omp_get_thread_num()) * 16] += 1.0;
}

}  // namespace

std::vector<PoolWakeSample> measure_pool_wake(int threads, const std::vector<double>& gaps_s, int repeats) {
  std::vector<double> slots(static_cast<size_t>(std::max(threads, 1)) * 16, 0.0);
  std::vector<PoolWakeSample> out;
  PinnedTeam pinned(threads);  // as a run binds its team
  for (double gap : gaps_s) {
    std::vector<double> times;
    for (int r = 0; r < std::max(repeats, 1); ++r) {
      probe_region(threads, slots);
      for (double start = probe_clock_s(); probe_clock_s() - start < gap;) {
      }
      double before = probe_clock_s();
      probe_region(threads, slots);
      times.push_back(probe_clock_s() - before);
    }
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    out.push_back({gap, times[times.size() / 2]});
  }
  return out;
}

}  // namespace tessera::runtime
