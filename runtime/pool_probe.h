// How the CPU backend's OpenMP pool answers a parallel region that starts
// after a stretch of one-thread work: its idle threads spin for a while
// after each region, then sleep, and a region that finds them asleep waits
// for them to wake. The cost model prices that (cost::DeviceProfile::
// spin_window_s, wake_overhead_s); the host calibration measures it here,
// in the pool the kernels run in, under the wait policy the environment
// gives libgomp (OMP_WAIT_POLICY, GOMP_SPINCOUNT; read once, before main).
//
// Measured on a 2-vCPU Zen 4 guest, a region after a gap of one-thread
// work: libgomp's default spin, 0.6-0.8 us up to about 1 ms of gap, 8 us
// beyond; GOMP_SPINCOUNT=10000, 0.6-0.8 us up to 160 us, 23-65 us beyond.
// (The runtime used to set GOMP_SPINCOUNT=10000 from the executable's
// .preinit_array. That never took effect: glibc's own initializer, which
// runs after the preinit array, resets environ to the process's initial
// environment before libgomp's constructor reads it.)
#pragma once

#include <vector>

namespace tessera::runtime {

struct PoolWakeSample {
  double gap_s = 0;     // one-thread work between two parallel regions
  double region_s = 0;  // the second region's time, median over the repeats
};

// For each gap: a parallel region on `threads` threads, the calling thread
// busy alone for the gap, then a second region, timed; `repeats` times.
std::vector<PoolWakeSample> measure_pool_wake(int threads, const std::vector<double>& gaps_s, int repeats);

}  // namespace tessera::runtime
